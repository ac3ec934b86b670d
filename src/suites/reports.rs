//! The human and CI views of a finished suite run: `report.md` (each metric with its standard
//! error and, over several seeds, mean ± std; per-subject results; harness errors),
//! `junit.xml` (one test case per item and seed) and `report.html` ([`super::html`]). All are
//! made from the same records as `results.json` by [`write_views`]: by a subscriber of the
//! run's events, and by `repairbench report`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::report::junit::{self, Case, CaseOutcome};
use crate::report::markdown::{robustness_table, table};
use crate::report::{write_text_atomic, FinalWriter, ReportError, Reporter, RunRecords, Tally};

use super::metrics::{aggregate_run, Aggregate};
use super::record::SampleRecord;
use super::robust::FamilyRobustness;
use super::SuiteKind;

/// The metric a suite is judged by: pass@1, acc or exact_match, whichever it has, else its
/// first `exact_match_*` metric, else its first metric.
pub fn primary_metric<'a>(names: impl Iterator<Item = &'a String> + Clone) -> Option<String> {
    let known = ["pass@1", "acc", "exact_match"];
    known
        .iter()
        .find(|k| names.clone().any(|n| n == *k))
        .map(|k| (*k).to_owned())
        .or_else(|| names.clone().find(|n| n.starts_with("exact_match_")).cloned())
        .or_else(|| names.clone().find(|n| n.as_str() != "harness_errors").cloned())
}

/// The label and success of a record for events and reports: its first metric's value.
pub fn outcome_label(record: &SampleRecord) -> (String, bool) {
    let primary =
        ["pass@1", "acc", "exact_match"].iter().find_map(|m| record.scores.get(*m).map(|v| (*m, *v)));
    match primary {
        Some((metric, value)) => (format!("{metric} {value}"), value > 0.0),
        None => ("done".into(), true),
    }
}

/// Items right and wrong by their first metric, and the same in words for a suite of `kind`.
pub fn count_outcomes(kind: SuiteKind, records: &BTreeMap<String, SampleRecord>) -> Tally {
    let mut counts = BTreeMap::new();
    // Variants are counted in `robustness`, not as items.
    let records: BTreeMap<&String, &SampleRecord> =
        records.iter().filter(|(_, r)| r.variant.is_none()).collect();
    for record in records.values() {
        let (_, success) = outcome_label(record);
        *counts.entry(if success { "right" } else { "wrong" }.to_owned()).or_default() += 1;
    }
    let right = counts.get("right").copied().unwrap_or(0);
    let words = match kind {
        SuiteKind::Code => format!("{right} of {} program(s) passed their tests", records.len()),
        _ => format!("{right} of {} answer(s) right", records.len()),
    };
    Tally { counts, words }
}

/// `report.md`.
pub fn markdown(
    suite: &str,
    seeds: &[u64],
    aggregate: &Aggregate,
    robustness: &BTreeMap<String, FamilyRobustness>,
) -> String {
    let mut out = format!("## repairbench eval {suite} (seeds {seeds:?})\n\n");
    let rows: Vec<Vec<String>> = aggregate
        .metrics
        .iter()
        .map(|(name, m)| {
            let spread = m
                .across_seeds
                .as_ref()
                .map(|s| format!("{:.4} ± {:.4}", s.mean, s.std))
                .unwrap_or_else(|| "–".into());
            vec![name.clone(), format!("{:.4}", m.value), format!("{:.4}", m.stderr), m.n.to_string(), spread]
        })
        .collect();
    out.push_str(&table(&["metric", "value", "stderr", "n", "across seeds (mean ± std)"], &rows));
    if let Some(first) = aggregate.metrics.keys().find(|k| k.as_str() != "harness_errors") {
        let rows: Vec<Vec<String>> = aggregate
            .groups
            .iter()
            .filter_map(|(group, metrics)| {
                metrics.get(first).map(|m| vec![group.clone(), format!("{:.4}", m.value), m.n.to_string()])
            })
            .collect();
        if !rows.is_empty() {
            out.push_str(&format!("\n{first} per subject:\n\n"));
            out.push_str(&table(&["subject", first, "n"], &rows));
        }
    }
    if !robustness.is_empty() {
        out.push_str(&robustness_markdown(robustness));
    }
    if let Some(errors) = aggregate.metrics.get("harness_errors").filter(|m| m.sum > 0.0) {
        out.push_str(&format!(
            "\n**{} item(s) hit harness errors** and are left out of the metrics; a rerun retries them.\n",
            errors.sum
        ));
    }
    out
}

/// `report.md`'s robustness part: a row per family, then recall by gold position and the
/// selection rate per letter for the option families.
fn robustness_markdown(robustness: &BTreeMap<String, FamilyRobustness>) -> String {
    let mut out = robustness_table(robustness);
    for (family, r) in robustness {
        if let Some(f) = &r.formats {
            let means: Vec<String> = f.per_format.iter().map(|m| format!("{m:.4}")).collect();
            out.push_str(&format!(
                "\n{family}: spread {:.4} [{:.4}, {:.4}] across the suite's own format and {} others ({})\n",
                f.spread,
                f.spread_ci95[0],
                f.spread_ci95[1],
                f.per_format.len() - 1,
                means.join(", ")
            ));
        }
        let Some(o) = &r.options else { continue };
        let letters: Vec<String> = o.selection_rate.keys().cloned().collect();
        let recall: Vec<String> =
            o.recall_by_position.iter().map(|x| x.map_or("–".into(), |v| format!("{v:.4}"))).collect();
        let chosen: Vec<String> = o.selection_rate.values().map(|v| format!("{v:.4}")).collect();
        let header: Vec<&str> = std::iter::once("").chain(letters.iter().map(String::as_str)).collect();
        out.push_str(&format!(
            "\n{family}: RStd {:.4}; PriDe-debiased accuracy {:.4} (prior from {} document(s))\n\n",
            o.rstd, o.pride_accuracy, o.pride_estimation_items
        ));
        let rows = vec![
            std::iter::once("recall when the gold is here".to_owned()).chain(recall).collect(),
            std::iter::once("chosen here".to_owned()).chain(chosen).collect(),
        ];
        out.push_str(&table(&header, &rows));
    }
    out
}

/// `junit.xml`: an item passes when its first metric is positive (the originals; variants are
/// judged in `robustness`).
pub fn junit(suite: &str, records: &BTreeMap<String, SampleRecord>) -> String {
    let cases: Vec<Case> = records
        .iter()
        .filter(|(_, record)| record.variant.is_none())
        .map(|(key, record)| {
            let (label, success) = outcome_label(record);
            let outcome = if success {
                CaseOutcome::Passed
            } else {
                let answer = record.extracted.values().next().cloned().flatten().unwrap_or_default();
                CaseOutcome::Failed {
                    kind: label,
                    message: format!("answer {answer:?}, target {}", record.target),
                }
            };
            let output =
                (!success).then(|| record.outputs.first().map(|o| junit::tail(&o.text, 40))).flatten();
            Case {
                classname: format!("repairbench.eval.{suite}"),
                name: key.clone(),
                time_s: 0.0,
                outcome,
                output,
            }
        })
        .collect();
    junit::render(&format!("repairbench eval {suite}"), &[], &cases)
}

/// The view files, in the order [`write_views`] writes them.
pub const VIEWS: [&str; 3] = ["report.md", "junit.xml", "report.html"];

/// Writes `report.md`, `junit.xml` and `report.html` into `out` for the run of `suite` over
/// `seeds` and `doc_ids` (in data order) that left `records`.
pub fn write_views(
    out: &Path,
    suite: &str,
    seeds: &[u64],
    doc_ids: &[String],
    records: &BTreeMap<String, SampleRecord>,
) -> Result<(), ReportError> {
    let aggregate = aggregate_run(records, seeds, doc_ids);
    let robustness = super::robust::robustness(records, seeds, doc_ids);
    write_text_atomic(&out.join(VIEWS[0]), &markdown(suite, seeds, &aggregate, &robustness))?;
    write_text_atomic(&out.join(VIEWS[1]), &junit(suite, records))?;
    write_text_atomic(
        &out.join(VIEWS[2]),
        &super::html::html(suite, seeds, &aggregate, &robustness, records, doc_ids),
    )
}

/// The subscriber writing the views ([`write_views`]) into `out` when the run finishes.
pub fn report_files<'a>(
    out: &'a Path,
    suite: &'a str,
    seeds: &'a [u64],
    doc_ids: &'a [String],
) -> impl Reporter<SampleRecord> + 'a {
    FinalWriter::new(move |run: &RunRecords<SampleRecord>| {
        write_views(out, suite, seeds, doc_ids, &run.records)
    })
}
