//! Perturbations of repair tasks (`--perturb` on `swe infer`, `run`, `grade` and `validate`):
//! seeded variants of a task that must not change whether a patch resolves it.
//!
//! - `statement.typo` and `statement.case` edit the problem statement's prose. Besides what
//!   every prose edit leaves alone (numbers, paths, code between backticks, tracebacks), a
//!   statement's code is kept: indented and console lines, quoted text, and any word that reads
//!   as a name in code (`QuerySet`, `DEBUG`, `save(`, `.filter`).
//! - `context.order` shows the retrieved files in a seeded order; which files are shown and
//!   where one is cut stay as they were.
//!
//! A variant is a task of its own, keyed `ID@FAMILY#N`, with everything grading reads (the
//! repository, commits, patches, tests, environment) byte for byte its original's; only the
//! prompt differs. Its edits come from (family, index, `--perturb-seed`, instance id), so every
//! model is asked the same variants.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::InstanceResult;
use crate::digest::{stable_hash, Sha256Pieces};
use crate::patch::diff::{self, HunkLine};
use crate::perturb::{self, text, text::TextEdit};
use crate::stats::perturbed::{family_figures, FamilyRobustness, Observed, ObservedItem};
use crate::tasks::{safe_name, Prediction, SweTask, TaskVariant};

/// What the families produce; bumped whenever one produces something else for the same
/// inputs, so resume recomputes the variants.
pub const VERSION: u32 = 1;

/// One kind of task perturbation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweFamily {
    /// Typos (`Typo`) or case changes (`Case`) in the statement's prose.
    Statement(TextEdit),
    /// The retrieved files shown in a seeded order.
    ContextOrder,
}

impl SweFamily {
    pub fn name(self) -> &'static str {
        match self {
            SweFamily::Statement(TextEdit::Typo) => "statement.typo",
            SweFamily::Statement(TextEdit::Case) => "statement.case",
            SweFamily::Statement(TextEdit::Space) => "statement.space",
            SweFamily::ContextOrder => "context.order",
        }
    }
}

/// The families `--perturb` knows on `swe` commands, for messages.
pub const FAMILIES: &str = "statement.typo, statement.case, context.order";

/// One family as written on the command line.
pub fn parse_family(text: &str) -> Result<SweFamily, String> {
    match text {
        "statement.typo" => Ok(SweFamily::Statement(TextEdit::Typo)),
        "statement.case" => Ok(SweFamily::Statement(TextEdit::Case)),
        "context.order" => Ok(SweFamily::ContextOrder),
        _ => Err(format!("unknown perturbation of a repair task `{text}` (known: {FAMILIES})")),
    }
}

/// A run's task perturbations: the families, the seed of their variants, variants per family.
#[derive(Debug, Clone, PartialEq)]
pub struct SwePerturbSpec {
    pub families: Vec<SweFamily>,
    pub seed: u64,
    pub variants: usize,
}

impl SwePerturbSpec {
    /// The flags that say this spec on the command line (a cluster worker's).
    pub fn flags(&self) -> Vec<String> {
        let families: Vec<&str> = self.families.iter().map(|f| f.name()).collect();
        vec![
            "--perturb".into(),
            families.join(","),
            "--perturb-seed".into(),
            self.seed.to_string(),
            "--variants".into(),
            self.variants.to_string(),
        ]
    }

    /// As recorded in the manifest.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "families": self.families.iter().map(|f| f.name()).collect::<Vec<_>>(),
            "seed": self.seed,
            "variants": self.variants,
            "version": VERSION,
        })
    }
}

/// `tasks` followed by every variant of each, family by family.
pub fn expand(tasks: Vec<SweTask>, spec: &SwePerturbSpec) -> Vec<SweTask> {
    let mut variants = Vec::new();
    for task in &tasks {
        for &family in &spec.families {
            for index in 1..=spec.variants {
                variants.push(variant(task, family, index, spec.seed));
            }
        }
    }
    // A variant's log folder must not be an original's (`a@x#1` and a task named `a_x_1`).
    let folders: std::collections::HashSet<String> =
        tasks.iter().map(|t| safe_name(&t.instance_id)).collect();
    let mut out = tasks;
    out.extend(variants.into_iter().filter(|v| !folders.contains(&safe_name(&v.instance_id))));
    out
}

/// Variant `index` of `family` of `task`.
pub fn variant(task: &SweTask, family: SweFamily, index: usize, seed: u64) -> SweTask {
    let key = |what: &[u8]| perturb::variant_seed(family.name(), what, index, seed, &task.instance_id);
    let mut out = task.clone();
    out.instance_id = format!("{}{}", task.instance_id, perturb::key_suffix(family.name(), index));
    let mut context_order = None;
    match family {
        SweFamily::Statement(edit) => {
            out.problem_statement = edit_statement(edit, &task.problem_statement, key(b"statement"));
        }
        SweFamily::ContextOrder => context_order = Some(key(b"files")),
    }
    out.variant = Some(TaskVariant {
        original: task.instance_id.clone(),
        family: family.name().to_owned(),
        index,
        statement_edited: out.problem_statement != task.problem_statement,
        context_order,
    });
    out
}

/// `statement` with `edit` made to its prose under `seed`.
pub fn edit_statement(edit: TextEdit, statement: &str, seed: u64) -> String {
    text::apply_outside(edit, statement, seed, &code_in_prose(statement))
}

/// The parts of an issue's text that are code although not marked as such: indented lines
/// (Markdown code), console lines (`>>>`, `$ `), quoted text on one line, and words that read
/// as names in code.
fn code_in_prose(text: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if line.starts_with("    ")
            || line.starts_with('\t')
            || trimmed.starts_with(">>>")
            || trimmed.starts_with("$ ")
        {
            out.push(offset..offset + line.len());
        } else {
            out.extend(quoted(line).into_iter().map(|r| r.start + offset..r.end + offset));
        }
        offset += line.len();
    }
    let mut start = 0;
    for token in text.split_inclusive(char::is_whitespace) {
        let end = start + token.trim_end().len();
        if reads_as_code(&text[start..end]) {
            out.push(start..end);
        }
        start += token.len();
    }
    out
}

/// Double-quoted spans of `line`, and single-quoted ones whose quotes open and close a word
/// (so an apostrophe, as in "don't", opens nothing).
fn quoted(line: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let bytes = line.as_bytes();
    let mut open: Option<(u8, usize)> = None;
    for (i, &b) in bytes.iter().enumerate() {
        let before = i.checked_sub(1).map(|j| bytes[j]);
        let after = bytes.get(i + 1).copied();
        let starts_word = before.is_none_or(|c| c.is_ascii_whitespace() || b"([{".contains(&c));
        let ends_word = after.is_none_or(|c| c.is_ascii_whitespace() || b".,;:!?)]}".contains(&c));
        match (open, b) {
            (None, b'"') => open = Some((b, i)),
            (None, b'\'') if starts_word => open = Some((b, i)),
            (Some((b'"', at)), b'"') | (Some((b'\'', at)), b'\'') if b == b'"' || ends_word => {
                out.push(at..i + 1);
                open = None;
            }
            _ => {}
        }
    }
    out
}

/// Whether a whitespace-separated token reads as a name in code: a capital after its first
/// letter (`QuerySet`), two or more capitals and no lower case (`DEBUG`), letters right before
/// `(`, or a leading `.` (`.filter`).
fn reads_as_code(token: &str) -> bool {
    let letters: String = token.chars().filter(char::is_ascii_alphabetic).collect();
    let inner_capital = letters.chars().skip(1).any(|c| c.is_ascii_uppercase());
    let all_capitals = letters.len() >= 2 && letters.chars().all(|c| c.is_ascii_uppercase());
    let call = token.as_bytes().windows(2).any(|w| w[0].is_ascii_alphanumeric() && w[1] == b'(');
    inner_capital || all_capitals || call || token.trim_start_matches(['(', '"', '\'']).starts_with('.')
}

/// What is wrong with `variant` as a variant of `original`, one line each: grading must read
/// the same task, and a statement edit may change only the letters of words it is allowed to
/// edit, case or order but not length.
pub fn variant_problems(original: &SweTask, variant: &SweTask) -> Vec<String> {
    let mut problems = Vec::new();
    let graded = |task: &SweTask| {
        let mut task = task.clone();
        task.instance_id.clear();
        task.problem_statement.clear();
        task.variant = None;
        task
    };
    if graded(original) != graded(variant) {
        problems.push("what grading reads differs from the original's".to_owned());
    }
    let (before, after) = (original.problem_statement.as_bytes(), variant.problem_statement.as_bytes());
    if before.len() != after.len() {
        problems.push(format!("the statement's length changed ({} → {} bytes)", before.len(), after.len()));
        return problems;
    }
    let editable = text::words(&original.problem_statement, &code_in_prose(&original.problem_statement));
    let outside: Vec<usize> = (0..before.len())
        .filter(|&i| before[i] != after[i] && !editable.iter().any(|w| w.contains(&i)))
        .collect();
    if let Some(&first) = outside.first() {
        let line = before[..first].iter().filter(|&&b| b == b'\n').count() + 1;
        problems.push(format!(
            "the statement changed outside its prose: {} byte(s), the first on line {line}",
            outside.len()
        ));
    }
    let edited = before != after;
    if variant.variant.as_ref().is_some_and(|v| v.statement_edited != edited) {
        problems.push("the variant's record of whether its statement changed is wrong".to_owned());
    }
    problems
}

/// What a result in a perturbed run keeps for `robustness` in `report.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerturbedResult {
    /// Which variant this is; `None` for an original.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<VariantOf>,
    /// The prompt the prediction was made from, when its line says (`swe infer` writes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_sha256: Option<String>,
    /// sha256 of the lines the patch removes and adds, file by file, so one fix made with
    /// other context lines or hunk positions reads as the same answer; `None` for an empty
    /// patch, which answers nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_sha256: Option<String>,
}

/// A variant result's original and what it changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantOf {
    pub original: String,
    pub family: String,
    pub index: usize,
    /// Whether the prompt differed from the original's (an order may come out as it was).
    pub applied: bool,
}

/// A variant's prediction line says which variant it answers and what its prompt showed
/// (`variant` in the line).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PredictionVariant {
    #[serde(flatten)]
    pub of: VariantOf,
    /// The files in the order the prompt showed them.
    pub files_shown: Vec<String>,
}

/// What `prediction` for `task` keeps for robustness. Whether a variant applied is what its
/// prediction line says (`swe infer` knows the order it showed), else whether its statement
/// changed.
pub fn perturbed_result(task: &SweTask, prediction: &Prediction) -> PerturbedResult {
    let said = prediction
        .extra
        .get("variant")
        .and_then(|v| serde_json::from_value::<PredictionVariant>(v.clone()).ok())
        .map(|v| v.of.applied);
    let variant = task.variant.as_ref().map(|v| VariantOf {
        original: v.original.clone(),
        family: v.family.clone(),
        index: v.index,
        applied: said.unwrap_or(v.statement_edited),
    });
    let mut changes = Sha256Pieces::new();
    for file in diff::parse(prediction.patch()) {
        changes.framed(format!("{:?} {:?}", file.old_path, file.new_path));
        for line in file.hunks.iter().flat_map(|h| &h.lines) {
            match line {
                HunkLine::Remove(text) => changes.framed(format!("-{text}")),
                HunkLine::Add(text) => changes.framed(format!("+{text}")),
                HunkLine::Context(_) => continue,
            };
        }
    }
    PerturbedResult {
        variant,
        prompt_sha256: prediction.extra.get("prompt_sha256").and_then(|p| p.as_str()).map(str::to_owned),
        change_sha256: (!prediction.patch().trim().is_empty()).then(|| changes.hex_prefix(32)),
    }
}

/// `robustness.<family>` of a perturbed grading run: `resolved` on the originals against their
/// variants, documents being the original instances.
/// Which variant `result` is; `None` for an original (or a result of a plain run).
pub fn variant_of(result: &InstanceResult) -> Option<&VariantOf> {
    result.perturbation.as_ref()?.variant.as_ref()
}

/// A perturbed run's variant results, by family, then by original instance id.
pub fn variants_by_family(
    instances: &[InstanceResult],
) -> BTreeMap<&str, BTreeMap<&str, Vec<&InstanceResult>>> {
    let mut out: BTreeMap<&str, BTreeMap<&str, Vec<&InstanceResult>>> = BTreeMap::new();
    for r in instances {
        if let Some(v) = variant_of(r) {
            out.entry(v.family.as_str()).or_default().entry(v.original.as_str()).or_default().push(r);
        }
    }
    out
}

pub fn robustness(instances: &[InstanceResult]) -> BTreeMap<String, FamilyRobustness> {
    let originals: BTreeMap<&str, &InstanceResult> = instances
        .iter()
        .filter(|r| r.perturbation.as_ref().is_some_and(|p| p.variant.is_none()))
        .map(|r| (r.instance_id.as_str(), r))
        .collect();
    let doc: BTreeMap<&str, usize> = originals.keys().enumerate().map(|(i, id)| (*id, i)).collect();
    let observed = |r: &InstanceResult| {
        let p = r.perturbation.as_ref();
        Observed {
            value: f64::from(u8::from(r.resolved)),
            // An empty patch answers nothing.
            answer: p.and_then(|p| p.change_sha256.as_ref()).map(|c| stable_hash(&[c.as_bytes()])),
            gold_position: usize::MAX,
            index: p.and_then(|p| p.variant.as_ref()).map_or(0, |v| v.index),
            applied: p.and_then(|p| p.variant.as_ref()).is_some_and(|v| v.applied),
            prompt_sha256: p.and_then(|p| p.prompt_sha256.clone()).unwrap_or_default(),
        }
    };
    variants_by_family(instances)
        .into_iter()
        .map(|(family, variants)| {
            let items: Vec<ObservedItem> = variants
                .into_iter()
                .filter(|(id, _)| originals.contains_key(id))
                .map(|(id, variants)| (id, variants.into_iter().map(&observed).collect::<Vec<_>>()))
                .map(|(id, mut variants)| {
                    variants.sort_by_key(|v| v.index);
                    ObservedItem { doc: doc[id], original: observed(originals[id]), variants }
                })
                .collect();
            (family.to_owned(), items)
        })
        .filter(|(_, items)| !items.is_empty())
        .map(|(family, items)| (family, family_figures(&items, "resolved", 0).0))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ISSUE: &str = "Saving a QuerySet with DEBUG enabled fails when the timezone is missing.\n\n\
        Calling `qs.update()` then Model.save() raises an error; see django/db/models/query.py line 42.\n\
        The message reads \"Cannot resolve keyword here\" and the 'strict' mode makes no difference.\n\
        \n    for obj in objects:\n        obj.save(force_insert=True)\n\n\
        >>> parse_value('Total amount')\n\
        Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\nValueError: Invalid timezone offset\n\n\
        Expected behaviour: nothing should fail and the .filter call should still work.";

    fn task(statement: &str) -> SweTask {
        serde_json::from_value(serde_json::json!({
            "repo": "acme/shop", "instance_id": "acme__shop-7", "base_commit": "abcd", "test_patch": "",
            "FAIL_TO_PASS": ["t.py::f"], "problem_statement": statement,
        }))
        .unwrap()
    }

    /// Code, names, quotes, console lines and tracebacks survive every statement edit; prose
    /// does not, and the variant passes its own check.
    #[test]
    fn statement_edits_keep_the_code_in_an_issue() {
        let original = task(ISSUE);
        for family in [SweFamily::Statement(TextEdit::Typo), SweFamily::Statement(TextEdit::Case)] {
            for seed in 0..100 {
                let v = variant(&original, family, 1, seed);
                assert_ne!(v.problem_statement, ISSUE, "{family:?} {seed}: always an edit");
                assert!(v.variant.as_ref().unwrap().statement_edited);
                for kept in [
                    "QuerySet",
                    "DEBUG",
                    "`qs.update()`",
                    "Model.save()",
                    "django/db/models/query.py",
                    "42",
                    "\"Cannot resolve keyword here\"",
                    "'strict'",
                    "    for obj in objects:\n        obj.save(force_insert=True)\n",
                    ">>> parse_value('Total amount')",
                    "ValueError: Invalid timezone offset",
                    ".filter",
                ] {
                    assert!(
                        v.problem_statement.contains(kept),
                        "{family:?} {seed}: {kept:?} in {}",
                        v.problem_statement
                    );
                }
                assert_eq!(variant_problems(&original, &v), Vec::<String>::new(), "{family:?} {seed}");
            }
        }
    }

    /// Variants are part of a run's results: these must never change without a [`VERSION`]
    /// bump.
    #[test]
    fn variants_are_pinned() {
        let original = task("Rounding the invoice total loses a cent for some amounts.");
        let typo = variant(&original, SweFamily::Statement(TextEdit::Typo), 1, 0);
        assert_eq!(typo.instance_id, "acme__shop-7@statement.typo#1");
        assert_eq!(typo.problem_statement, "Rounding the invoice total loses a cnet for some amounts.");
        let case = variant(&original, SweFamily::Statement(TextEdit::Case), 2, 0);
        assert_eq!(case.problem_statement, "Rounding the INVOICE total loses a cent for some amounts.");
        let order = variant(&original, SweFamily::ContextOrder, 1, 0);
        assert_eq!(order.problem_statement, original.problem_statement);
        let key = order.variant.as_ref().unwrap().context_order.unwrap();
        assert_eq!(crate::rng::permutation(4, key), [0, 3, 2, 1]);
    }

    #[test]
    fn the_check_finds_an_edit_outside_prose_or_a_changed_task() {
        let original = task(ISSUE);
        let mut v = variant(&original, SweFamily::Statement(TextEdit::Typo), 1, 3);
        v.problem_statement = v.problem_statement.replace("QuerySet", "Queryset");
        assert!(
            variant_problems(&original, &v)[0].contains("outside its prose"),
            "{:?}",
            variant_problems(&original, &v)
        );
        // A change inside a character (ü to ö) is found, not a panic.
        let accented = task("Die Grüße fehlen.");
        let mut v = variant(&accented, SweFamily::ContextOrder, 1, 3);
        v.problem_statement = "Die Größe fehlen.".into();
        assert!(variant_problems(&accented, &v)[0].contains("outside its prose"));
        let mut v = variant(&original, SweFamily::ContextOrder, 1, 3);
        v.test_patch = "diff".into();
        assert_eq!(variant_problems(&original, &v), ["what grading reads differs from the original's"]);
        let expanded = expand(
            vec![original],
            &SwePerturbSpec {
                families: vec![SweFamily::Statement(TextEdit::Case), SweFamily::ContextOrder],
                seed: 0,
                variants: 2,
            },
        );
        let ids: Vec<&str> = expanded.iter().map(|t| t.instance_id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "acme__shop-7",
                "acme__shop-7@statement.case#1",
                "acme__shop-7@statement.case#2",
                "acme__shop-7@context.order#1",
                "acme__shop-7@context.order#2"
            ]
        );
    }
}
