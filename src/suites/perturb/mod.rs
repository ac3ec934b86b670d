//! Perturbations: seeded variants of an item that should not change its answer (options in
//! another order, the few-shot examples reordered, the same prompt with a fresh sampling seed).
//!
//! A variant acts on the item before anything is rendered: the options are reordered as whole
//! options, so the gold follows its content and each option's letter is the one of its new
//! place. Everything a variant does comes from (family, variant index, `--perturb-seed`,
//! document id), never from the run's sampling seed, so every model sees byte-identical
//! variants. A variant's record keeps the original's key with `@FAMILY#INDEX` added, so the
//! originals of a perturbed run pair with a plain run's records.

mod code;
mod format;

use serde::{Deserialize, Serialize};

use super::config::Suite;
use super::def::SuiteKind;
use super::prompt::{Doc, Shown};
pub use crate::perturb::text::TextEdit;
use crate::rng::permutation;
use crate::stats::robustness::rotation;
pub use code::CodeEdit;
pub use format::PromptFormat;

/// What the families produce; bumped whenever one of them produces something else for the same
/// inputs, so resume recomputes the variants and `compare` refuses to pair across versions.
pub const VERSION: u32 = 1;

/// One kind of perturbation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// The same prompt with a fresh sampling seed: the noise floor other drops are read against.
    Identity,
    /// Every rotation of the options (n − 1 variants for n options).
    OptionsCircular,
    /// `N` seeded permutations of the options.
    OptionsPermute(usize),
    /// The same few-shot examples in seeded orders.
    FewshotOrder,
    /// Seeded edits of the suite's prose fields (`[perturb] text`).
    Text(TextEdit),
    /// `K` prompt formats other than the suite's own, each the same for every document.
    Format(usize),
    /// Seeded edits of a code task's function (`[perturb.code]`), its tests following.
    Code(CodeEdit),
}

impl Family {
    /// The family's name in records, keys and `robustness.<name>`.
    pub fn name(self) -> &'static str {
        match self {
            Family::Identity => IDENTITY,
            Family::OptionsCircular => "options.circular",
            Family::OptionsPermute(_) => "options.permute",
            Family::FewshotOrder => "fewshot.order",
            Family::Text(TextEdit::Typo) => "text.typo",
            Family::Text(TextEdit::Case) => "text.case",
            Family::Text(TextEdit::Space) => "text.space",
            Family::Format(_) => "format",
            Family::Code(CodeEdit::Rename) => "code.rename",
            Family::Code(CodeEdit::Docstring) => "code.docstring",
            Family::Code(CodeEdit::Format) => "code.format",
        }
    }

    /// As written on the command line (`options.permute:3`).
    pub fn spec(self) -> String {
        match self {
            Family::OptionsPermute(n) | Family::Format(n) => format!("{}:{n}", self.name()),
            _ => self.name().to_owned(),
        }
    }

    /// Whether its variants depend on `--perturb-seed` (rotations and identity do not).
    fn seeded(self) -> bool {
        matches!(
            self,
            Family::OptionsPermute(_)
                | Family::FewshotOrder
                | Family::Text(_)
                | Family::Format(_)
                | Family::Code(_)
        )
    }

    /// Whether it moves options (and so gets the option metrics).
    pub fn moves_options(self) -> bool {
        matches!(self, Family::OptionsCircular | Family::OptionsPermute(_))
    }
}

/// The name of [`Family::Identity`], whose drop every other family's is read beside.
pub const IDENTITY: &str = "identity";

/// The families `--perturb` knows, for messages.
pub const FAMILIES: &str = "identity, options.circular, options.permute:N, format:K, fewshot.order, text.typo, text.case, text.space, code.rename, code.docstring, code.format";

/// One family as written (`options.permute:3`).
pub fn parse_family(text: &str) -> Result<Family, String> {
    let (name, count) = match text.split_once(':') {
        Some((name, count)) => (name, Some(count)),
        None => (text, None),
    };
    let family = match (name, count) {
        ("identity", None) => Family::Identity,
        ("options.circular", None) => Family::OptionsCircular,
        ("fewshot.order", None) => Family::FewshotOrder,
        ("text.typo", None) => Family::Text(TextEdit::Typo),
        ("text.case", None) => Family::Text(TextEdit::Case),
        ("text.space", None) => Family::Text(TextEdit::Space),
        ("code.rename", None) => Family::Code(CodeEdit::Rename),
        ("code.docstring", None) => Family::Code(CodeEdit::Docstring),
        ("code.format", None) => Family::Code(CodeEdit::Format),
        ("options.permute", Some(n)) => match n.parse::<usize>() {
            Ok(n) if n >= 1 => Family::OptionsPermute(n),
            _ => return Err(format!("`{text}`: expected options.permute:N with N a count of 1 or more")),
        },
        ("options.permute", None) => {
            return Err(format!("`{text}`: say how many permutations, options.permute:N"))
        }
        ("format", Some(k)) => match k.parse::<usize>() {
            Ok(k) if k >= 1 => Family::Format(k),
            _ => return Err(format!("`{text}`: expected format:K with K a count of 1 or more")),
        },
        ("format", None) => return Err(format!("`{text}`: say how many formats, format:K")),
        _ => return Err(format!("unknown perturbation `{text}` (known: {FAMILIES})")),
    };
    Ok(family)
}

/// A run's perturbations: which families, the seed of their variants, and how many variants
/// the families without a count of their own make.
#[derive(Debug, Clone, PartialEq)]
pub struct PerturbSpec {
    pub families: Vec<Family>,
    pub seed: u64,
    pub variants: usize,
}

impl PerturbSpec {
    /// As recorded in the configuration and manifest: what `compare` checks.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "families": self.families.iter().map(|f| f.spec()).collect::<Vec<_>>(),
            "seed": self.seed,
            "variants": self.variants,
            "version": VERSION,
        })
    }

    /// Why `family` cannot be run on `suite` with `shots` examples, if it cannot.
    pub fn refusal(family: Family, suite: &Suite, shots: usize) -> Option<String> {
        if matches!(family, Family::Text(_)) && prose_fields(suite).is_empty() {
            return Some(format!(
                "{} edits prose, and the suite file names no prose fields ([perturb] text)",
                family.spec()
            ));
        }
        if matches!(family, Family::Format(_)) && suite.def.prompt.format.is_none() {
            return Some(format!(
                "{} varies the prompt's format, and the suite file declares none ([prompt.format])",
                family.spec()
            ));
        }
        if matches!(family, Family::Code(_)) && code_fields(suite).is_none() {
            return Some(format!(
                "{} edits a task's code, and the suite file does not say where it is ([perturb.code])",
                family.spec()
            ));
        }
        if family.moves_options() && suite.kind() != SuiteKind::MultipleChoice {
            return Some(format!("{} moves options, and this suite has none", family.spec()));
        }
        if family == Family::FewshotOrder && shots < 2 {
            return Some(format!("fewshot.order needs two or more few-shot examples; the run has {shots}"));
        }
        None
    }

    /// The variants of an item with `options` options (multiple choice), family by family.
    pub fn variants_of(&self, options: usize) -> Vec<Variant> {
        let mut out = Vec::new();
        for &family in &self.families {
            let count = match family {
                Family::OptionsCircular => options.saturating_sub(1),
                Family::OptionsPermute(n) | Family::Format(n) => n,
                Family::Identity | Family::FewshotOrder | Family::Text(_) | Family::Code(_) => self.variants,
            };
            out.extend((1..=count).map(|index| Variant { family, index, seed: self.seed }));
        }
        out
    }
}

/// One variant: a family, its index (from 1; the original is index 0 and has no variant), and
/// the run's `--perturb-seed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    pub family: Family,
    pub index: usize,
    pub seed: u64,
}

impl Variant {
    /// What its fingerprint carries: everything its output depends on.
    pub fn fingerprint(&self) -> serde_json::Value {
        serde_json::json!({
            "family": self.family.name(),
            "index": self.index,
            "seed": self.family.seeded().then_some(self.seed),
            "version": VERSION,
        })
    }

    fn key(&self, what: &[u8], doc_id: &str) -> u64 {
        crate::perturb::variant_seed(self.family.name(), what, self.index, self.seed, doc_id)
    }

    /// The options shown, as indices into the original presented order; `None` when this
    /// family leaves the options alone.
    pub fn option_order(&self, doc_id: &str, options: usize) -> Option<Vec<usize>> {
        match self.family {
            Family::OptionsCircular => Some(rotation(options, self.index % options.max(1))),
            Family::OptionsPermute(_) => Some(permutation(options, self.key(b"options", doc_id))),
            _ => None,
        }
    }

    /// The few-shot examples in the order shown, as indices into the original order.
    pub fn fewshot_order(&self, doc_id: &str, examples: usize) -> Option<Vec<usize>> {
        (self.family == Family::FewshotOrder).then(|| permutation(examples, self.key(b"fewshot", doc_id)))
    }

    /// `doc` with the family's edits made to its prose fields or its code; `None` when this
    /// family edits no row. A code edit that cannot be made leaves the row as it was (the
    /// variant is then not `applied`).
    pub fn edited(&self, suite: &Suite, doc: &Doc) -> Option<Doc> {
        if let Family::Code(edit) = self.family {
            let fields = code_fields(suite)?;
            return Some(
                code::perturb(edit, fields, doc, self.key(b"code", &doc.id)).unwrap_or_else(|| doc.clone()),
            );
        }
        let Family::Text(edit) = self.family else { return None };
        let mut edited = doc.clone();
        for field in prose_fields(suite) {
            if let Some(serde_json::Value::String(text)) = edited.row.fields.get_mut(field) {
                *text = crate::perturb::text::apply(edit, text, self.key(field.as_bytes(), &doc.id));
            }
        }
        Some(edited)
    }

    /// The prompt format this variant shows; the same for every document of the run.
    pub fn format(&self, suite: &Suite) -> Option<PromptFormat> {
        let Family::Format(_) = self.family else { return None };
        let own = suite.def.prompt.format.as_ref()?;
        Some(PromptFormat::variant(own.get_ref(), self.index, self.key(b"format", "")))
    }

    /// Mixed into the item's sampling seed: identity's whole point.
    pub fn sampling_salt(&self, doc_id: &str) -> Option<u64> {
        (self.family == Family::Identity).then(|| self.key(b"sampling", doc_id))
    }
}

/// Where the code families find a row's function: the suite file's `[perturb.code]`.
fn code_fields(suite: &Suite) -> Option<&super::def::CodeFieldsDef> {
    suite.def.perturb.as_ref().and_then(|p| p.get_ref().code.as_ref())
}

/// The fields the text families edit: the suite file's `[perturb] text`.
fn prose_fields(suite: &Suite) -> &[String] {
    suite.def.perturb.as_ref().map_or(&[], |p| &p.get_ref().text)
}

/// Which variant a record is, in `samples.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VariantRecord {
    pub family: String,
    pub index: usize,
    /// Whether the variant differs from the original at all (a permutation can come out as the
    /// original order; one few-shot example has one order).
    pub applied: bool,
    /// The options shown, as indices into the original's order.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub option_order: Option<Vec<usize>>,
    /// The few-shot examples shown, as indices into the original's order.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub fewshot_order: Option<Vec<usize>>,
    /// The prompt format shown (`format:K`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub format: Option<PromptFormat>,
}

impl VariantRecord {
    /// `row_edited`: whether the variant's edits changed the row.
    pub fn new(variant: &Variant, shown: &Shown, option_order: Option<Vec<usize>>, row_edited: bool) -> Self {
        let fewshot_order = shown.fewshot_order.clone();
        let format = shown.format.clone();
        let moved = |order: &Option<Vec<usize>>| {
            order.as_ref().is_some_and(|o| o.iter().enumerate().any(|(i, &j)| i != j))
        };
        let applied = match variant.family {
            Family::Identity => true,
            Family::OptionsCircular | Family::OptionsPermute(_) => moved(&option_order),
            Family::FewshotOrder => moved(&fewshot_order),
            Family::Text(_) | Family::Code(_) => row_edited,
            Family::Format(_) => format.is_some(),
        };
        Self {
            family: variant.family.name().to_owned(),
            index: variant.index,
            applied,
            option_order,
            fewshot_order,
            format,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_parse_and_name_themselves() {
        for text in [
            "identity",
            "options.circular",
            "options.permute:3",
            "fewshot.order",
            "text.typo",
            "text.case",
            "text.space",
            "code.rename",
            "code.docstring",
            "code.format",
        ] {
            assert_eq!(parse_family(text).unwrap().spec(), text);
        }
        for bad in ["options.permute", "options.permute:0", "options.permute:x", "text.nope", "identity:2"] {
            let err = parse_family(bad).unwrap_err();
            assert!(err.contains(bad), "{err}");
        }
    }

    #[test]
    fn variants_count_per_family() {
        let spec = PerturbSpec {
            families: vec![Family::OptionsCircular, Family::OptionsPermute(2), Family::Identity],
            seed: 7,
            variants: 3,
        };
        let v = spec.variants_of(4);
        let count = |f: Family| v.iter().filter(|x| x.family == f).count();
        assert_eq!(count(Family::OptionsCircular), 3);
        assert_eq!(count(Family::OptionsPermute(2)), 2);
        assert_eq!(count(Family::Identity), 3);
        assert!(v.iter().all(|x| x.index >= 1));
    }

    /// Variant outputs are part of a run's results: these must never change without a
    /// [`VERSION`] bump.
    #[test]
    fn variant_orders_are_pinned() {
        let permute = Variant { family: Family::OptionsPermute(2), index: 1, seed: 0 };
        assert_eq!(permute.option_order("q1", 4), Some(vec![3, 2, 0, 1]));
        let circular = Variant { family: Family::OptionsCircular, index: 1, seed: 0 };
        assert_eq!(circular.option_order("q1", 4), Some(vec![1, 2, 3, 0]));
        let fewshot = Variant { family: Family::FewshotOrder, index: 2, seed: 7 };
        assert_eq!(fewshot.fewshot_order("q1", 5), Some(vec![4, 0, 3, 1, 2]));
        assert_eq!(fewshot.option_order("q1", 4), None);
        // The seed matters for seeded families only.
        let other = Variant { seed: 8, ..permute };
        assert_ne!(other.option_order("q1", 10), permute.option_order("q1", 10));
        assert_eq!(Variant { seed: 8, ..circular }.fingerprint(), circular.fingerprint());
    }
}
