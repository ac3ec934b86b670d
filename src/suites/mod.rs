//! Standard benchmarks (HumanEval, MBPP, GSM8K, MMLU, HellaSwag, ARC, GPQA) defined in
//! `harness/suites/` and driven through the same inference core.
//!
//! A suite file declares its data, prompt, few-shot choice, how the model is asked (generate
//! or score choices), how answers are read and which metrics follow; [`engine::evaluate`]
//! runs any of them. Per-item results are appended to `samples.jsonl` as items finish, so an
//! interrupted run resumes where it stopped.

pub mod code;
pub mod config;
pub mod data;
pub mod def;
pub mod engine;
pub mod extract;
pub mod html;
mod items;
pub mod metrics;
pub mod perturb;
pub mod prompt;
pub mod record;
pub mod remote;
pub mod reports;
pub mod robust;
pub mod source;
pub mod template;

use std::path::PathBuf;

pub use code::{
    code_scores, program_env, sandbox_runner, CodeRunner, Program, ProgramStatus, SandboxCodeRunner,
};
pub use config::Suite;
pub use def::SuiteKind;
pub use engine::{evaluate, evaluate_with, humaneval_slice, EvalOptions, EvalSummary};
pub use metrics::MetricResult;
pub use record::SampleRecord;
pub use remote::ClusterEval;

#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    #[error("{path}:{line}:{column}: {message}")]
    SuiteFile { path: PathBuf, line: usize, column: usize, message: String },
    #[error("{0}: unknown data format (expected .jsonl, .json, optionally .gz, .parquet or .csv)")]
    DataFormat(PathBuf),
    #[error("{path}:{line}: {message}")]
    DataRow { path: PathBuf, line: usize, message: String },
    #[error("{path}:{line}: {message}")]
    SamplesFile { path: PathBuf, line: usize, message: String },
    #[error("cannot read or write {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot fetch the suite's data")]
    Source(#[from] crate::model::source::SourceError),
    #[error("suite `{suite}`: the dataset {repo} at revision {revision} could not be fetched; without the hub, pass --data DIR holding {layout}")]
    HubData {
        suite: String,
        repo: String,
        revision: String,
        layout: String,
        #[source]
        source: Box<crate::model::source::SourceError>,
    },
    #[error("suite `{suite}` reads {repo}, a gated dataset: accept its terms on the hub with your account and set HF_TOKEN to one of its access tokens, or pass --data DIR holding {layout}")]
    Gated { suite: String, repo: String, layout: String },
    #[error("unknown suite `{name}` (known: {known})")]
    UnknownSuite { name: String, known: String },
    #[error("suite `{suite}` needs {what}")]
    Needs { suite: String, what: &'static str },
    #[error("the model failed on item {doc_id}")]
    Model {
        doc_id: String,
        #[source]
        source: Box<crate::model::ModelError>,
    },
    #[error("program execution ({op}) failed: {message}")]
    Execution { op: &'static str, message: String },
    #[error("writing results")]
    Report(#[source] crate::report::ReportError),
    #[error("on the cluster")]
    Executor(#[source] crate::executor::ExecutorError),
    #[error("{what}")]
    Remote { what: String },
    #[error("suite `{suite}`: {message}")]
    Perturb { suite: String, message: String },
    #[error("{count} items got no record from the cluster (first: {first}); the records that came back are kept: rerun to send the rest")]
    Unfinished { count: usize, first: String },
}

/// The shipped suite files, inside the binary, so an installed binary needs no source tree.
pub const SHIPPED: &[(&str, &str)] = &[
    ("arc_challenge", include_str!("../../harness/suites/arc_challenge.toml")),
    ("arc_easy", include_str!("../../harness/suites/arc_easy.toml")),
    ("gpqa", include_str!("../../harness/suites/gpqa.toml")),
    ("gsm8k", include_str!("../../harness/suites/gsm8k.toml")),
    ("hellaswag", include_str!("../../harness/suites/hellaswag.toml")),
    ("humaneval", include_str!("../../harness/suites/humaneval.toml")),
    ("humaneval_sampled", include_str!("../../harness/suites/humaneval_sampled.toml")),
    ("mbpp", include_str!("../../harness/suites/mbpp.toml")),
    ("mmlu", include_str!("../../harness/suites/mmlu.toml")),
];

/// Directory holding the suite files: `$REPAIRBENCH_HARNESS/suites`, else the source tree's.
/// Suites are read from it only when `REPAIRBENCH_HARNESS` is set; otherwise the shipped
/// copies inside the binary are used (see [`load_suite`]).
pub fn suites_dir() -> PathBuf {
    match crate::env::get_os(crate::env::HARNESS_DIR) {
        Some(dir) => PathBuf::from(dir).join("suites"),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("harness").join("suites"),
    }
}

/// Loads a suite by name (`humaneval`): from `$REPAIRBENCH_HARNESS/suites` when that is set,
/// else the copy shipped inside the binary; or from a path to a `.toml` file.
pub fn load_suite(name_or_path: &str) -> Result<Suite, SuiteError> {
    let as_path = std::path::Path::new(name_or_path);
    if name_or_path.ends_with(".toml") || as_path.is_file() {
        return Suite::load(as_path);
    }
    let known: Vec<String> = if crate::env::get_os(crate::env::HARNESS_DIR).is_some() {
        let dir = suites_dir();
        let path = dir.join(format!("{name_or_path}.toml"));
        if path.is_file() {
            return Suite::load(&path);
        }
        let mut known: Vec<String> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter_map(|e| e.file_name().to_str()?.strip_suffix(".toml").map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        known.sort();
        known
    } else {
        if let Some((name, text)) = SHIPPED.iter().find(|(name, _)| *name == name_or_path) {
            // Named as in the source tree, so messages point at the file a user would edit.
            return Suite::parse(&suites_dir().join(format!("{name}.toml")), text.to_string());
        }
        SHIPPED.iter().map(|(name, _)| name.to_string()).collect()
    };
    Err(SuiteError::UnknownSuite { name: name_or_path.to_string(), known: known.join(", ") })
}
