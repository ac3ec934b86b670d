//! `report.html` of a grading run: the resolved count with its 95% Wilson interval, the
//! verdicts as bars, and a table of instances in which each row opens onto the model patch as
//! a coloured diff, the FAIL_TO_PASS/PASS_TO_PASS outcomes, CI jobs and links to the logs.
//! Patches and test ids are the model's and the repository's text: they only ever pass through
//! the escaping builders of [`crate::report::html`].

use std::path::{Component, Path};

use crate::grade::{SuccessFailure, Verdict};
use crate::report::html::{
    clip, diff, facts, list, page, relative_link, robustness_table, section, stat, stats, tag, text_tag,
    Cell, Column, Markup, Row, Table,
};
use crate::report::markdown::percent;
use crate::report::svg::{self, Bar};

use super::{GradeReport, InstanceResult};

/// The most of one patch shown inline; the rest is in its file.
const PATCH_SHOWN: usize = 200 * 1024;
/// The most patch text one page embeds, so a run of thousands of instances stays openable.
const PAGE_PATCHES: usize = 16 * 1024 * 1024;
/// Test ids listed per outcome list before the rest is counted.
const TESTS_LISTED: usize = 200;

/// The page for `report`, whose logs are under `out_dir`.
pub fn html(report: &GradeReport, out_dir: &Path) -> String {
    let s = &report.summary;
    let (lo, hi) = crate::stats::wilson_95(s.resolved, s.total);
    let infrastructure =
        s.verdicts.get("error").copied().unwrap_or(0) + s.verdicts.get("env_error").copied().unwrap_or(0);
    let mut cards = vec![
        stat(
            "resolved",
            "resolved",
            Markup::text(&format!("{}/{}", s.resolved, s.total)),
            "instances graded",
        ),
        stat("rate", "resolved rate", Markup::text(&percent(s.resolved_rate)), ""),
        stat("ci", "95% interval", Markup::text(&format!("{}–{}", percent(lo), percent(hi))), "Wilson score"),
        stat(
            "infrastructure",
            "infrastructure errors",
            Markup::text(&infrastructure.to_string()),
            "not the model's fault; a rerun retries them",
        ),
    ];
    if s.flaky_tests > 0 {
        cards.push(stat(
            "flaky",
            "flaky tests",
            Markup::text(&s.flaky_tests.to_string()),
            "passed on a rerun",
        ));
    }
    if s.skipped > 0 {
        cards.push(stat("skipped", "skipped inputs", Markup::text(&s.skipped.to_string()), "see below"));
    }
    let mut body = stats(cards);

    // In the order of Verdict::ALL: resolved first, infrastructure last.
    let verdict_bars: Vec<Bar> = Verdict::ALL
        .iter()
        .filter_map(|v| s.verdicts.get_key_value(v.as_str()).filter(|(_, n)| **n > 0))
        .map(|(verdict, n)| Bar {
            label: verdict.clone(),
            value: *n as f64,
            note: format!("{n} ({})", percent(*n as f64 / s.total.max(1) as f64)),
            class: format!("v-{verdict}"),
            whisker: None,
        })
        .collect();
    if !verdict_bars.is_empty() {
        body.push(section("verdicts", "Verdicts", svg::bars("instances per verdict", &verdict_bars, 0.0)));
    }

    let mut budget = PAGE_PATCHES;
    let rows: Vec<Row> = report.instances.iter().map(|r| instance_row(r, out_dir, &mut budget)).collect();
    let table = Table {
        id: "instances",
        columns: vec![
            Column { title: "instance", numeric: false },
            Column { title: "verdict", numeric: false },
            Column { title: "runner", numeric: false },
            Column { title: "FAIL_TO_PASS", numeric: true },
            Column { title: "PASS_TO_PASS", numeric: true },
            Column { title: "time", numeric: true },
        ],
        rows,
        filter_column: Some(1),
    };
    body.push(section("instances-section", "Instances", table.render()));
    if !report.robustness.is_empty() {
        body.push(section("robustness", "Robustness", robustness_table(&report.robustness)));
    }

    if !report.skipped.is_empty() {
        let lines: Vec<String> = report
            .skipped
            .iter()
            .map(|k| {
                let id = k.instance_id.as_deref().map(|i| format!(" ({i})")).unwrap_or_default();
                format!("{}{id}: {}", k.location, k.reason)
            })
            .collect();
        body.push(section("skipped-section", "Skipped inputs", list(&lines, "plain")));
    }
    let models: Vec<&str> = {
        let mut m: Vec<&str> =
            report.instances.iter().filter_map(|r| r.model_name_or_path.as_deref()).collect();
        m.sort();
        m.dedup();
        m
    };
    let subtitle = format!(
        "{} instance(s){}",
        s.total,
        if models.is_empty() { String::new() } else { format!(" · model {}", models.join(", ")) }
    );
    page("repairbench swe grade", &subtitle, body)
}

/// `x/y` successes, sorted by their rate (no tests at all sorts first).
fn outcome_cell(outcome: &SuccessFailure) -> Cell {
    let total = outcome.success.len() + outcome.failure.len();
    let rate = if total == 0 { -1.0 } else { outcome.success.len() as f64 / total as f64 };
    Cell::number(format!("{}/{total}", outcome.success.len()), rate)
}

fn instance_row(r: &InstanceResult, out_dir: &Path, budget: &mut usize) -> Row {
    let verdict = r.verdict.as_str();
    Row {
        id: r.instance_id.clone(),
        cells: vec![
            Cell::text(&r.instance_id),
            Cell::text(verdict).class(format!("v-{verdict}")),
            Cell::text(r.runner.map_or("–", |k| k.as_str())),
            outcome_cell(&r.tests_status.fail_to_pass),
            outcome_cell(&r.tests_status.pass_to_pass),
            Cell::number(format!("{:.1} s", r.timings.total_s), r.timings.total_s),
        ],
        detail: Some(detail(r, out_dir, budget)),
    }
}

/// `log_dir` as path segments, when it names a folder inside the output folder (report.json
/// is read back by `repairbench report`, so it is not trusted to).
fn log_segments(log_dir: &str) -> Option<Vec<&str>> {
    let path = Path::new(log_dir);
    if !path.components().all(|c| matches!(c, Component::Normal(_))) {
        return None;
    }
    let segments: Vec<&str> = log_dir.split('/').filter(|s| !s.is_empty()).collect();
    (!segments.is_empty()).then_some(segments)
}

fn detail(r: &InstanceResult, out_dir: &Path, budget: &mut usize) -> Markup {
    let mut out = Markup::empty();
    if let Some(why) = &r.detail {
        out.push(text_tag("p", &[("class", "why")], why));
    }
    let mut known: Vec<(&str, String)> = Vec::new();
    if let Some(reason) = &r.reason {
        known.push(("reason", reason.clone()));
    }
    known.push(("resolution", format!("{:?}", r.resolution).to_uppercase()));
    let applied = match (r.patch_applied, r.apply_method) {
        (false, _) => "no".to_owned(),
        (true, Some(method)) => format!("yes, by {}", method.as_str()),
        (true, None) => "yes".to_owned(),
    };
    known.push(("patch applied", applied));
    if let Some(exit) = &r.test_exit {
        known.push(("test command", exit.clone()));
    }
    if let Some(source) = r.status_source {
        let name = serde_json::to_value(source).ok().and_then(|v| v.as_str().map(str::to_owned));
        known.push(("statuses from", name.unwrap_or_default()));
    }
    known.push((
        "time",
        format!(
            "{:.1} s (prepare {:.1}, environment {:.1}, tests {:.1}, reruns {:.1})",
            r.timings.total_s,
            r.timings.prepare_s,
            r.timings.environment_s,
            r.timings.tests_s,
            r.timings.reruns_s
        ),
    ));
    out.push(facts(&known));
    out.push(outcomes("FAIL_TO_PASS", &r.tests_status.fail_to_pass));
    out.push(outcomes("PASS_TO_PASS", &r.tests_status.pass_to_pass));
    if !r.flaky_tests.is_empty() {
        out.push(text_tag("h3", &[], "Flaky (failed, then passed on a rerun)"));
        out.push(list(&r.flaky_tests, "tests"));
    }
    if !r.tampering.is_empty() {
        out.push(text_tag("h3", &[], "Test infrastructure changes put back"));
        let lines: Vec<String> = r.tampering.iter().map(|t| format!("{} ({})", t.path, t.rule)).collect();
        out.push(list(&lines, "tests"));
    }
    if !r.ci_jobs.is_empty() {
        out.push(text_tag("h3", &[], "CI jobs"));
        let rows: Markup = r
            .ci_jobs
            .iter()
            .map(|job| {
                let status = format!("{:?}", job.status).to_uppercase();
                let class = if status == "PASSED" { "v-resolved" } else { "v-unresolved" };
                let mut cells = text_tag("td", &[], &job.job);
                cells.push(text_tag("td", &[("class", class)], &status));
                cells.push(text_tag("td", &[], &job.detail));
                tag("tr", &[], cells)
            })
            .collect();
        out.push(tag("table", &[("class", "ci")], rows));
    }
    let segments = log_segments(&r.log_dir);
    if let Some(segments) = &segments {
        out.push(log_links(out_dir, segments));
    }
    out.push(text_tag("h3", &[], "Model patch"));
    let patch =
        segments.and_then(|_| std::fs::read_to_string(out_dir.join(&r.log_dir).join("model.patch")).ok());
    match patch.filter(|p| !p.trim().is_empty()) {
        None => out.push(text_tag("p", &[("class", "empty")], "no patch")),
        Some(_) if *budget == 0 => out.push(text_tag(
            "p",
            &[("class", "empty")],
            "not shown: this page already holds as much patch text as it may; see model.patch",
        )),
        Some(patch) => {
            let (shown, cut) = clip(&patch, PATCH_SHOWN.min(*budget));
            *budget -= shown.len();
            out.push(diff(&shown));
            if cut {
                out.push(text_tag(
                    "p",
                    &[("class", "empty")],
                    "cut short here; the whole patch is in model.patch",
                ));
            }
        }
    }
    out
}

/// Passing and failing tests of one kind: failures listed, passes folded away.
fn outcomes(kind: &str, outcome: &SuccessFailure) -> Markup {
    let mut out = text_tag(
        "h3",
        &[],
        &format!("{kind}: {} passed, {} failed", outcome.success.len(), outcome.failure.len()),
    );
    let capped = |ids: &[String]| -> Vec<String> {
        let mut shown: Vec<String> = ids.iter().take(TESTS_LISTED).cloned().collect();
        if ids.len() > TESTS_LISTED {
            shown.push(format!("… and {} more (see report.json)", ids.len() - TESTS_LISTED));
        }
        shown
    };
    if !outcome.failure.is_empty() {
        out.push(list(&capped(&outcome.failure), "tests fail"));
    }
    if !outcome.success.is_empty() {
        let mut folded = text_tag("summary", &[], &format!("{} passing", outcome.success.len()));
        folded.push(list(&capped(&outcome.success), "tests ok"));
        out.push(tag("details", &[], folded));
    }
    out
}

/// Links to the files of an instance's log folder (and its `ci/` jobs), relative to the page.
fn log_links(out_dir: &Path, segments: &[&str]) -> Markup {
    let dir = segments.iter().fold(out_dir.to_path_buf(), |p, s| p.join(s));
    let mut links = Markup::empty();
    for sub in [None, Some("ci")] {
        let folder = sub.map_or(dir.clone(), |s| dir.join(s));
        let Ok(entries) = std::fs::read_dir(&folder) else { continue };
        let mut names: Vec<String> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        for name in names {
            let mut path: Vec<&str> = segments.to_vec();
            path.extend(sub);
            path.push(&name);
            let label = sub.map_or(name.clone(), |s| format!("{s}/{name}"));
            links.push(relative_link(&path, &label));
        }
    }
    if links.is_empty() {
        return Markup::empty();
    }
    let mut out = text_tag("h3", &[], "Logs");
    out.push(tag("p", &[("class", "links")], links));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::RunRecords;

    #[test]
    fn logs_are_read_and_linked_only_inside_the_output_folder() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        std::fs::create_dir_all(out.join("logs/a")).unwrap();
        std::fs::write(out.join("logs/a/model.patch"), "@@ -1 +1 @@\n-a\n+b\n").unwrap();
        std::fs::write(root.path().join("model.patch"), "@@ -1 +1 @@\n-secret\n+x\n").unwrap();
        std::fs::write(out.join("report.json"), "{}").unwrap();
        let mut records = std::collections::BTreeMap::new();
        for (id, log_dir) in [("a", "logs/a"), ("b", ".."), ("c", "")] {
            let mut r = super::super::error_result(id, "why".into());
            r.log_dir = log_dir.into();
            records.insert(id.to_owned(), r);
        }
        let run = RunRecords { records, skipped: Vec::new(), counts: Default::default(), elapsed_s: 0.0 };
        let page = html(&GradeReport::from_run(&run), &out);
        assert!(page.contains("<a href=\"logs/a/model.patch\">model.patch</a>"), "{page}");
        assert!(page.contains("<span class=\"add\">+b</span>"));
        assert!(!page.contains("secret"), "nothing is read from outside the output folder");
        assert_eq!(page.matches("<h3>Logs</h3>").count(), 1, "an empty log folder is not the output folder");
        assert_eq!(page.matches(">no patch</p>").count(), 2);
    }
}
