//! The human and CI views of a finished grading run: `report.md` (headline with its interval,
//! verdicts, infrastructure errors, slowest instances), `junit.xml` (one test case per
//! instance) and `report.html` ([`super::html`]). All are made from the same records as
//! `report.json`, by [`write_views`]: when a run finishes, and by `repairbench report`. Also
//! the run's `manifest.json`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::grade::Verdict;
use crate::report::junit::{self, Case, CaseOutcome};
use crate::report::markdown::{percent, robustness_table, table};
use crate::report::{write_text_atomic, ReportError};

use serde::{Deserialize, Serialize};

use super::{GradePlan, InstanceResult};
use crate::report::{self, RunRecords};
use crate::stats::perturbed::FamilyRobustness;
use crate::tasks::{repos, PredictionSource, Skipped, SweTask};

/// The view files, in the order [`write_views`] writes them.
pub const VIEWS: [&str; 3] = ["report.md", "junit.xml", "report.html"];

/// Writes `report.md`, `junit.xml` and `report.html` of `report` into `out` (where its logs are).
pub fn write_views(report: &GradeReport, out: &Path) -> Result<(), ReportError> {
    write_text_atomic(&out.join(VIEWS[0]), &markdown(report))?;
    write_text_atomic(&out.join(VIEWS[1]), &junit(report, out))?;
    write_text_atomic(&out.join(VIEWS[2]), &super::html::html(report, out))
}

/// `report.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GradeReport {
    /// Over the dataset's own instances; a perturbed run's variants count in `robustness` only.
    pub summary: Summary,
    pub instances: Vec<InstanceResult>,
    pub skipped: Vec<Skipped>,
    /// How `resolved` holds up under each perturbation family (`--perturb`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub robustness: BTreeMap<String, FamilyRobustness>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Summary {
    pub total: usize,
    pub resolved: usize,
    /// resolved / total graded instances.
    pub resolved_rate: f64,
    /// Instances per verdict (every verdict listed, zeros included).
    pub verdicts: BTreeMap<String, usize>,
    pub apply_methods: BTreeMap<String, usize>,
    pub skipped: usize,
    /// Of `skipped`, the records left out because the input was wrong (the run exits non-zero).
    #[serde(default)]
    pub invalid_input: usize,
    pub flaky_tests: usize,
}

impl GradeReport {
    /// The report of a finished run; instances that ended in `error` are listed as skipped too.
    pub fn from_run(run: &RunRecords<InstanceResult>) -> Self {
        let mut skipped = run.skipped.clone();
        for result in run.records.values().filter(|r| r.verdict == Verdict::Error) {
            skipped.push(Skipped::new(
                result.instance_id.clone(),
                Some(result.instance_id.clone()),
                result.detail.clone().unwrap_or_else(|| "error".into()),
            ));
        }
        Self::new(run.records.values().cloned().collect(), skipped)
    }

    pub fn new(instances: Vec<InstanceResult>, skipped: Vec<Skipped>) -> Self {
        let robustness = super::perturb::robustness(&instances);
        let originals: Vec<&InstanceResult> = instances
            .iter()
            .filter(|r| r.perturbation.as_ref().is_none_or(|p| p.variant.is_none()))
            .collect();
        let mut summary = Summary {
            total: originals.len(),
            skipped: skipped.len(),
            invalid_input: skipped.iter().filter(|s| s.invalid_input).count(),
            ..Summary::default()
        };
        for verdict in Verdict::ALL {
            summary.verdicts.insert(verdict.as_str().into(), 0);
        }
        for result in &originals {
            *summary.verdicts.entry(result.verdict.as_str().into()).or_default() += 1;
            if let Some(method) = result.apply_method {
                *summary.apply_methods.entry(method.as_str().into()).or_default() += 1;
            }
            summary.resolved += usize::from(result.resolved);
            summary.flaky_tests += result.flaky_tests.len();
        }
        summary.resolved_rate =
            if originals.is_empty() { 0.0 } else { summary.resolved as f64 / originals.len() as f64 };
        Self { summary, instances, skipped, robustness }
    }
}

/// `report.md`.
pub fn markdown(report: &GradeReport) -> String {
    let summary = &report.summary;
    let (lo, hi) = crate::stats::wilson_95(summary.resolved, summary.total);
    let mut out = format!(
        "## repairbench swe grade: {}/{} resolved ({}, 95% CI {}–{})\n\n",
        summary.resolved,
        summary.total,
        percent(summary.resolved_rate),
        percent(lo),
        percent(hi)
    );
    let verdicts: Vec<Vec<String>> = summary
        .verdicts
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(verdict, n)| vec![verdict.clone(), n.to_string()])
        .collect();
    out.push_str(&table(&["verdict", "instances"], &verdicts));
    if !report.robustness.is_empty() {
        out.push_str(&robustness_table(&report.robustness));
    }
    let infrastructure: Vec<&InstanceResult> =
        report.instances.iter().filter(|r| matches!(r.verdict, Verdict::Error | Verdict::EnvError)).collect();
    if !infrastructure.is_empty() {
        out.push_str(&format!(
            "\n**{} instance(s) ended in infrastructure errors** (not the model's fault; a rerun retries them):\n\n",
            infrastructure.len()
        ));
        let rows: Vec<Vec<String>> = infrastructure
            .iter()
            .map(|r| {
                let detail = r.detail.as_deref().unwrap_or("").lines().next().unwrap_or("").to_owned();
                vec![r.instance_id.clone(), r.verdict.as_str().to_owned(), detail]
            })
            .collect();
        out.push_str(&table(&["instance", "verdict", "detail"], &rows));
    }
    let mut slowest: Vec<&InstanceResult> = report.instances.iter().collect();
    slowest.sort_by(|a, b| b.timings.total_s.total_cmp(&a.timings.total_s));
    let rows: Vec<Vec<String>> = slowest
        .iter()
        .take(5)
        .map(|r| {
            vec![r.instance_id.clone(), r.verdict.as_str().to_owned(), format!("{:.1} s", r.timings.total_s)]
        })
        .collect();
    if !rows.is_empty() {
        out.push_str("\nSlowest instances:\n\n");
        out.push_str(&table(&["instance", "verdict", "time"], &rows));
    }
    if summary.skipped > 0 {
        out.push_str(&format!("\n{} input record(s) skipped (see report.json).\n", summary.skipped));
    }
    out
}

/// `junit.xml`: resolved passes; a graded wrong patch fails with its verdict; an
/// infrastructure verdict is an error. Each carries the tail of its test output.
pub fn junit(report: &GradeReport, out_dir: &Path) -> String {
    let cases: Vec<Case> = report
        .instances
        .iter()
        .map(|r| {
            let message = r.detail.clone().unwrap_or_else(|| {
                let failing: Vec<&String> = r
                    .tests_status
                    .fail_to_pass
                    .failure
                    .iter()
                    .chain(&r.tests_status.pass_to_pass.failure)
                    .collect();
                format!("failing: {}", failing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "))
            });
            let kind = r.verdict.as_str().to_owned();
            let outcome = match r.verdict {
                Verdict::Resolved => CaseOutcome::Passed,
                Verdict::Error | Verdict::EnvError => CaseOutcome::Error { kind, message },
                _ => CaseOutcome::Failed { kind, message },
            };
            let log = std::fs::read_to_string(out_dir.join(&r.log_dir).join("test_output.txt")).ok();
            let output = match outcome {
                CaseOutcome::Passed => None,
                _ => log.map(|l| junit::tail(&l, 40)),
            };
            Case {
                classname: "repairbench.swe".into(),
                name: r.instance_id.clone(),
                time_s: r.timings.total_s,
                outcome,
                output,
            }
        })
        .collect();
    junit::render("repairbench swe grade", &[], &cases)
}

/// Writes `manifest.json`: every setting of the grading run, the inputs' hashes and the tools.
pub(super) fn write_manifest(plan: &GradePlan, tasks: &[SweTask]) -> Result<(), report::ReportError> {
    let predictions = match &plan.predictions {
        PredictionSource::Gold => serde_json::json!({"builtin": "gold"}),
        PredictionSource::Empty => serde_json::json!({"builtin": "empty"}),
        PredictionSource::File(path) => {
            serde_json::json!({"path": path, "sha256": sha256_file(path)})
        }
    };
    // A perturbed run's variants are counted by `perturb`, not as the dataset's instances.
    let tasks: Vec<&SweTask> = tasks.iter().filter(|t| t.variant.is_none()).collect();
    let mut manifest = serde_json::json!({
        "command": "swe grade",
        "repairbench_version": env!("CARGO_PKG_VERSION"),
        "started_unix_s": unix_now(),
        "dataset": {
            "path": plan.dataset,
            "sha256": sha256_file(&plan.dataset),
            "instances": tasks.len(),
            "bundles": tasks.iter().filter_map(|t| t.bundle.as_ref().map(|b| (t.instance_id.clone(), sha256_file(b)))).collect::<BTreeMap<_, _>>(),
        },
        "predictions": predictions,
        "repos": plan.repos,
        "url_template": plan.url_template.clone().unwrap_or_else(|| repos::DEFAULT_URL_TEMPLATE.into()),
        "settings": {
            "image": plan.settings.image,
            "image_id": plan.settings.image_id,
            "timeout_s": plan.settings.timeout.as_secs_f64(),
            "workers": plan.settings.workers,
            "flaky_reruns": plan.settings.flaky_reruns,
            "limits": plan.settings.limits,
            "junit_family": "xunit1",
        },
        "tools": {"git": git_version(), "libgit2": format!("{:?}", git2::Version::get().libgit2_version())},
        "host": {"os": std::env::consts::OS, "arch": std::env::consts::ARCH},
    });
    // Only a perturbed run says so, so that a plain run's manifest stays as it was.
    if let Some(spec) = &plan.perturb {
        manifest["perturb"] = spec.to_json();
    }
    for (key, value) in &plan.extra_manifest {
        manifest[key] = value.clone();
    }
    report::write_json_atomic(&plan.out.join("manifest.json"), &manifest)
}

/// Sets `key` of `out/manifest.json` to `value` (what is known only at the end of a run).
pub(super) fn add_to_manifest(
    out: &Path,
    key: &str,
    value: &serde_json::Value,
) -> Result<(), report::ReportError> {
    let path = out.join("manifest.json");
    let mut manifest: serde_json::Value =
        std::fs::read(&path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
    manifest[key] = value.clone();
    report::write_json_atomic(&path, &manifest)
}

fn sha256_file(path: &Path) -> Option<String> {
    crate::digest::sha256_file(path).ok()
}

fn git_version() -> Option<String> {
    let out = std::process::Command::new("git").arg("--version").output().ok()?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}
