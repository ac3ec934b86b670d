//! The `index.html` of each run folder (see [`crate::report::index`]): the main job's, and
//! those of `swe grade`, `swe run` and `eval`. This is where the run's parts become texts.

use std::path::Path;

use super::main_job::HarnessCheck;
use crate::model::ModelInfo;
use crate::repair::GradeReport;
use crate::report::index::{CheckLine, IndexPart, RunIndex};
use crate::report::ReportError;
use crate::suites::EvalSummary;

/// The model: its name, where it came from, its hash and what ran it.
pub fn model_facts(info: &ModelInfo) -> Vec<(String, String)> {
    let backend = match &info.served {
        Some(served) => format!("served (OpenAI-compatible API): {served}"),
        None => format!("local engine (candle, {} weights)", info.quantization),
    };
    vec![
        ("model".into(), info.name.clone().unwrap_or_else(|| info.architecture.clone())),
        ("model source".into(), info.source.clone()),
        ("model sha256".into(), info.sha256.clone()),
        ("backend".into(), backend),
    ]
}

/// The machine: CPU (with the features our kernels use) and its threads.
pub fn machine_facts() -> Vec<(String, String)> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    vec![
        ("CPU".into(), crate::model::kernels::cpu_description()),
        ("threads".into(), threads.to_string()),
        (
            "repairbench".into(),
            format!("{} ({})", env!("CARGO_PKG_VERSION"), crate::kernel::fingerprint::BUILD_COMMIT),
        ),
    ]
}

/// The harness check's line, as the console prints it.
pub fn check_line(check: &HarnessCheck) -> CheckLine {
    let link =
        |segments: &[&str], label: &str| (segments.iter().map(|s| s.to_string()).collect(), label.to_owned());
    let links = vec![
        link(&["harness-check", "issues", "gold", "report.html"], "the issues with their gold patches"),
        link(&["harness-check", "issues", "unpatched", "report.html"], "the issues with no patch"),
        link(&["harness-check", "issues", "validation.json"], "each issue's judgement (validation.json)"),
        link(&["harness-check", "humaneval-canonical", "report.html"], "HumanEval's canonical solutions"),
    ];
    CheckLine { ok: check.ok(), line: check.summary(), failures: check.failures(), links }
}

/// Code repair's part: the resolved share and its Wilson interval, and the part's reports.
pub fn repair_part(report: &GradeReport, folder: &str) -> IndexPart {
    let s = &report.summary;
    let (low, high) = crate::stats::wilson_95(s.resolved, s.total);
    IndexPart {
        id: "repair".into(),
        title: "Code repair".into(),
        headline: format!("{} of {} resolved ({:.1}%)", s.resolved, s.total, 100.0 * s.resolved_rate),
        note: format!("95% interval {:.1}–{:.1}%", 100.0 * low, 100.0 * high),
        links: links(folder),
    }
}

/// A suite's part: its primary metric with the standard error.
pub fn suite_part(summary: &EvalSummary, folder: &str) -> IndexPart {
    let primary = crate::suites::reports::primary_metric(summary.metrics.keys());
    let (headline, note) =
        match primary.as_ref().and_then(|name| summary.metrics.get(name).map(|m| (name, m))) {
            Some((name, m)) => {
                (format!("{name} {:.4}", m.value), format!("± {:.4} standard error, n = {}", m.stderr, m.n))
            }
            None => ("no metric".into(), String::new()),
        };
    IndexPart {
        id: format!("suite-{}", summary.suite),
        title: summary.suite.clone(),
        headline,
        note,
        links: links(folder),
    }
}

/// The views every part writes, in `folder` (empty: the run folder itself).
fn links(folder: &str) -> Vec<(Vec<String>, String)> {
    ["report.html", "report.md", "junit.xml"]
        .iter()
        .map(|file| {
            let segments = match folder {
                "" => vec![file.to_string()],
                folder => vec![folder.to_owned(), file.to_string()],
            };
            (segments.clone(), segments.join("/"))
        })
        .collect()
}

/// Writes the index of a run folder with one part (`swe grade`, `swe run`, `eval`).
pub fn write_single(
    out: &Path,
    title: &str,
    facts: Vec<(String, String)>,
    configuration: &serde_json::Value,
    part: IndexPart,
) -> Result<(), ReportError> {
    let index = RunIndex {
        title: title.into(),
        facts: [facts, machine_facts()].concat(),
        configuration: serde_json::to_string_pretty(configuration).unwrap_or_default(),
        check: None,
        parts: vec![part],
    };
    crate::report::index::write_index(out, &index)
}
