//! From rows to what the model sees: document ids, few-shot examples chosen without any
//! global random state, multiple-choice options (shuffled per question when asked), and the
//! assembled prompt.

use crate::digest::stable_hash;
use minijinja::Value;

use crate::rng::permutation;

use super::config::Suite;
use super::data::Row;
use super::def::{Sampler, SuiteKind};
use super::perturb::PromptFormat;
use super::SuiteError;

/// A row with its id.
#[derive(Debug, Clone)]
pub struct Doc {
    pub id: String,
    pub row: Row,
}

impl Doc {
    pub fn err(&self, message: impl Into<String>) -> SuiteError {
        SuiteError::DataRow { path: self.row.path.clone(), line: self.row.line, message: message.into() }
    }

    /// The row's value of `field` as text (strings unquoted).
    pub fn field_text(&self, field: &str) -> Option<String> {
        self.row.fields.get(field).map(|v| match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    }
}

/// The template context of a row: its fields at top level and the whole row as `doc`.
pub fn row_context(row: &Row) -> serde_json::Map<String, serde_json::Value> {
    let mut ctx = row.fields.clone();
    ctx.insert("doc".into(), serde_json::Value::Object(row.fields.clone()));
    ctx
}

fn to_value(ctx: serde_json::Map<String, serde_json::Value>) -> Value {
    json_to_value(serde_json::Value::Object(ctx))
}

/// A JSON value as a template value.
pub fn json_to_value(v: serde_json::Value) -> Value {
    use serde_json::Value as J;
    match v {
        J::Null => Value::from(()),
        J::Bool(b) => Value::from(b),
        J::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => Value::from(i),
            (_, Some(u), _) => Value::from(u),
            (_, _, Some(f)) => Value::from(f),
            _ => Value::from(n.to_string()),
        },
        J::String(s) => Value::from(s),
        J::Array(items) => Value::from(items.into_iter().map(json_to_value).collect::<Vec<_>>()),
        J::Object(map) => Value::from(
            map.into_iter()
                .map(|(k, v)| (k, json_to_value(v)))
                .collect::<std::collections::BTreeMap<String, Value>>(),
        ),
    }
}

/// Gives each row its id (the `data.id` expression, else its position); ids must be unique.
pub fn make_docs(suite: &Suite, rows: Vec<Row>) -> Result<Vec<Doc>, SuiteError> {
    let mut seen = std::collections::HashMap::new();
    let mut docs = Vec::with_capacity(rows.len());
    for row in rows {
        let id = if suite.templates.has_expression("id") {
            let v = suite.templates.eval("id", &to_value(row_context(&row))).map_err(|e| {
                SuiteError::DataRow { path: row.path.clone(), line: row.line, message: e.to_string() }
            })?;
            v.as_str().map_or_else(|| v.to_string(), str::to_string)
        } else {
            row.index.to_string()
        };
        if let Some(first) = seen.insert(id.clone(), row.line) {
            return Err(SuiteError::DataRow {
                path: row.path.clone(),
                line: row.line,
                message: format!("duplicate id `{id}` (first at line {first})"),
            });
        }
        docs.push(Doc { id, row });
    }
    Ok(docs)
}

/// A multiple-choice row ready to score.
#[derive(Debug, Clone, PartialEq)]
pub struct ChoiceItem {
    /// The options in presented order.
    pub choices: Vec<String>,
    pub gold: usize,
    /// What is scored for each option (without the target delimiter).
    pub continuations: Vec<String>,
}

/// Options, gold and continuations of `doc` under `seed`. With `shuffle`, the order comes
/// from a hash of the row's content (its question) and the seed.
pub fn choice_item(suite: &Suite, doc: &Doc, seed: u64) -> Result<ChoiceItem, SuiteError> {
    choice_item_shown(suite, doc, seed, None)
}

/// Whole options moved to the places `order` gives (`order[i]`: the option shown at `i`), the
/// gold with its content.
fn reorder(choices: Vec<String>, gold: usize, order: &[usize]) -> (Vec<String>, usize) {
    let shown: Vec<String> = order.iter().map(|&i| choices[i].clone()).collect();
    let gold = order.iter().position(|&i| i == gold).expect("a permutation contains every index");
    (shown, gold)
}

/// [`choice_item`] with the presented options then shown in `order` (a perturbation's), before
/// the continuations are rendered, so each option's letter is the one of its new place.
pub fn choice_item_shown(
    suite: &Suite,
    doc: &Doc,
    seed: u64,
    order: Option<&[usize]>,
) -> Result<ChoiceItem, SuiteError> {
    let def = suite.def.choices.as_ref().expect("checked at load: multiple choice has [choices]").get_ref();
    let ctx = to_value(row_context(&doc.row));
    let list = suite.templates.eval("choices", &ctx).map_err(|e| doc.err(e.to_string()))?;
    let mut choices = Vec::new();
    for v in list
        .try_iter()
        .map_err(|_| doc.err(format!("choices expression `{}` is not a list", def.list.get_ref())))?
    {
        choices.push(v.as_str().map_or_else(|| v.to_string(), str::to_string));
    }
    if choices.len() < 2 {
        return Err(doc.err(format!("needs at least two choices, got {}", choices.len())));
    }
    let gold_value = suite.templates.eval("gold", &ctx).map_err(|e| doc.err(e.to_string()))?;
    let gold = if suite.templates.has_expression("labels") {
        let labels: Vec<String> = suite
            .templates
            .eval("labels", &ctx)
            .map_err(|e| doc.err(e.to_string()))?
            .try_iter()
            .map_err(|_| doc.err("labels expression is not a list"))?
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
            .collect();
        let key = gold_value.as_str().map_or_else(|| gold_value.to_string(), str::to_string);
        labels
            .iter()
            .position(|l| *l == key)
            .ok_or_else(|| doc.err(format!("gold label `{key}` is not among {labels:?}")))?
    } else if let Some(i) = gold_value.as_usize() {
        i
    } else if let Some(i) = gold_value.as_str().and_then(|s| s.trim().parse::<usize>().ok()) {
        i
    } else if let Some(s) = gold_value.as_str() {
        choices
            .iter()
            .position(|c| c == s)
            .ok_or_else(|| doc.err(format!("gold `{s}` is not one of the choices")))?
    } else {
        return Err(doc.err(format!("gold evaluated to {gold_value}, expected an index or a label")));
    };
    if gold >= choices.len() {
        return Err(doc.err(format!("gold index {gold} is out of range for {} choices", choices.len())));
    }
    let (choices, gold) = if def.shuffle {
        let row_json = serde_json::to_string(&doc.row.fields).expect("a JSON map serializes");
        let order =
            permutation(choices.len(), stable_hash(&[b"shuffle", &seed.to_le_bytes(), row_json.as_bytes()]));
        reorder(choices, gold, &order)
    } else {
        (choices, gold)
    };
    let (choices, gold) = match order {
        Some(order) if order.len() == choices.len() => reorder(choices, gold, order),
        Some(order) => {
            return Err(doc.err(format!("an option order of {} for {} options", order.len(), choices.len())))
        }
        None => (choices, gold),
    };
    let mut continuations = Vec::with_capacity(choices.len());
    for (i, choice) in choices.iter().enumerate() {
        if suite.templates.has("continuation") {
            let mut c = row_context(&doc.row);
            c.insert("choice".into(), choice.clone().into());
            c.insert("index".into(), i.into());
            c.insert("letter".into(), super::template::LETTERS[i.min(25)].into());
            continuations.push(
                suite.templates.render("continuation", &to_value(c)).map_err(|e| doc.err(e.to_string()))?,
            );
        } else {
            continuations.push(choice.clone());
        }
    }
    Ok(ChoiceItem { choices, gold, continuations })
}

/// Chooses the few-shot examples for `doc` from `pool` (never the doc itself).
pub fn fewshot_examples<'p>(suite: &Suite, pool: &'p [Doc], doc: &Doc, k: usize, seed: u64) -> Vec<&'p Doc> {
    if k == 0 {
        return Vec::new();
    }
    let same = suite.def.fewshot.same.as_deref();
    let want = same.and_then(|f| doc.field_text(f));
    let candidates =
        pool.iter().filter(|c| c.id != doc.id || c.row.path != doc.row.path).filter(|c| match same {
            Some(f) => c.field_text(f) == want,
            None => true,
        });
    match suite.def.fewshot.sampler {
        Sampler::First => candidates.take(k).collect(),
        Sampler::Seeded => {
            let mut ranked: Vec<(u64, &Doc)> = candidates
                .map(|c| {
                    (stable_hash(&[b"fewshot", &seed.to_le_bytes(), doc.id.as_bytes(), c.id.as_bytes()]), c)
                })
                .collect();
            ranked.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.id.cmp(&b.1.id)));
            ranked.into_iter().take(k).map(|(_, c)| c).collect()
        }
    }
}

/// How a perturbation shows an item besides its row: the few-shot examples' order (`order[i]`
/// is the example shown `i`-th) and the prompt's format.
#[derive(Debug, Clone, Default)]
pub struct Shown {
    pub fewshot_order: Option<Vec<usize>>,
    pub format: Option<PromptFormat>,
}

/// Renders the question of `doc` (with its multiple-choice variables when there are any, and
/// the prompt's format when the suite declares one).
fn render_text(
    suite: &Suite,
    doc: &Doc,
    item: Option<&ChoiceItem>,
    template: &str,
    format: Option<&PromptFormat>,
) -> Result<String, SuiteError> {
    let mut ctx = row_context(&doc.row);
    if let Some(item) = item {
        ctx.insert("choices".into(), item.choices.clone().into());
        ctx.insert("gold".into(), item.gold.into());
    }
    if let Some(own) = &suite.def.prompt.format {
        let format = format.cloned().unwrap_or_else(|| PromptFormat::of(own.get_ref()));
        ctx.insert("format".into(), format.context());
    }
    suite.templates.render(template, &to_value(ctx)).map_err(|e| doc.err(e.to_string()))
}

/// The full prompt for `doc`: description, few-shot examples with answers, then the question.
pub fn build_prompt(
    suite: &Suite,
    pool: &[Doc],
    doc: &Doc,
    item: Option<&ChoiceItem>,
    k: usize,
    seed: u64,
) -> Result<String, SuiteError> {
    build_prompt_shown(suite, pool, doc, item, k, seed, &Shown::default())
}

/// [`build_prompt`] as a perturbation shows it (see [`Shown`]).
pub fn build_prompt_shown(
    suite: &Suite,
    pool: &[Doc],
    doc: &Doc,
    item: Option<&ChoiceItem>,
    k: usize,
    seed: u64,
    shown: &Shown,
) -> Result<String, SuiteError> {
    let p = &suite.def.prompt;
    let format = shown.format.as_ref();
    let mut out = String::new();
    if suite.templates.has("description") {
        out.push_str(&render_text(suite, doc, item, "description", format)?);
    }
    let mut examples = fewshot_examples(suite, pool, doc, k, seed);
    if let Some(order) = &shown.fewshot_order {
        examples = order.iter().map(|&i| examples[i]).collect();
    }
    for example in examples {
        let ex_item = match suite.kind() {
            SuiteKind::MultipleChoice => Some(choice_item(suite, example, seed)?),
            _ => None,
        };
        out.push_str(&render_text(suite, example, ex_item.as_ref(), "text", format)?);
        out.push_str(&p.target_delimiter);
        if suite.templates.has("target") {
            out.push_str(&render_text(suite, example, ex_item.as_ref(), "target", format)?);
        } else if let Some(it) = &ex_item {
            out.push_str(&it.continuations[it.gold]);
        }
        out.push_str(&p.fewshot_separator);
    }
    out.push_str(&render_text(suite, doc, item, "text", format)?);
    Ok(out)
}

/// An item as its benchmark publishes it, for probes that ask whether a model has seen it: the
/// zero-shot prompt, the target delimiter, then the gold answer (a code suite's reference
/// solution, right after the prompt; a generation suite's target; a multiple-choice suite's
/// gold option).
pub fn item_with_answer(suite: &Suite, doc: &Doc) -> Result<String, SuiteError> {
    let item = match suite.kind() {
        SuiteKind::MultipleChoice => Some(choice_item(suite, doc, 0)?),
        _ => None,
    };
    let mut text = build_prompt(suite, &[], doc, item.as_ref(), 0, 0)?;
    if suite.kind() == SuiteKind::Code {
        if suite.templates.has("canonical") {
            text.push_str(&render_with(suite, doc, "canonical", &[])?);
        }
        return Ok(text);
    }
    text.push_str(&suite.def.prompt.target_delimiter);
    match &item {
        Some(item) => text.push_str(&item.continuations[item.gold]),
        None if suite.templates.has("target") => {
            text.push_str(&render_text(suite, doc, None, "target", None)?)
        }
        None => {}
    }
    Ok(text)
}

/// What stands for the masked option in [`masked_wrong_option`]'s prompt.
pub const MASK: &str = "[MASK]";

/// A multiple-choice item with one wrong option masked, for TS-Guessing: the zero-shot prompt
/// with [`MASK`] in that option's place, and the option's text. Which wrong option is masked
/// comes from the document id alone. `None` when the suite's prompt does not list its options.
pub fn masked_wrong_option(suite: &Suite, doc: &Doc) -> Result<Option<(String, String)>, SuiteError> {
    let mut item = choice_item(suite, doc, 0)?;
    let wrong: Vec<usize> = (0..item.choices.len()).filter(|&i| i != item.gold).collect();
    let pick = wrong[(stable_hash(&[b"ts-guess", doc.id.as_bytes()]) % wrong.len() as u64) as usize];
    let option = std::mem::replace(&mut item.choices[pick], MASK.to_owned());
    let prompt = build_prompt(suite, &[], doc, Some(&item), 0, 0)?;
    Ok(prompt.contains(MASK).then_some((prompt, option)))
}

/// Renders a template of the suite with the row's fields plus `extra`.
pub fn render_with(
    suite: &Suite,
    doc: &Doc,
    template: &str,
    extra: &[(&str, serde_json::Value)],
) -> Result<String, SuiteError> {
    let mut ctx = row_context(&doc.row);
    for (k, v) in extra {
        ctx.insert((*k).to_string(), v.clone());
    }
    suite.templates.render(template, &to_value(ctx)).map_err(|e| doc.err(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Option shuffles are part of a run's results: these orders must never change.
    #[test]
    fn permutations_are_pinned() {
        assert_eq!(permutation(4, 0), [2, 1, 0, 3]);
        assert_eq!(permutation(4, 1), [2, 0, 3, 1]);
        assert_eq!(permutation(10, 42), [0, 9, 5, 8, 6, 4, 7, 2, 1, 3]);
        assert_eq!(permutation(10, u64::MAX), [3, 4, 2, 7, 5, 0, 8, 1, 9, 6]);
        assert_eq!(
            permutation(26, 0xDEAD_BEEF),
            [8, 0, 3, 17, 2, 21, 23, 12, 13, 25, 10, 6, 1, 15, 16, 9, 24, 11, 18, 7, 22, 20, 14, 5, 4, 19]
        );
        let key = stable_hash(&[b"shuffle", &0u64.to_le_bytes(), b"{\"q\":1}"]);
        assert_eq!(permutation(4, key), [1, 2, 3, 0]);
    }
}
