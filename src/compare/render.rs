//! A comparison for people (a terminal summary, a Markdown note for a merge request) and for
//! CI (JUnit XML with one test case per paired item, failing where the item regressed).

use std::fmt::Write as _;

use super::load::format_value;
use super::{Comparison, Verdict};

/// Ids listed in full before the rest is counted.
const LISTED: usize = 20;

pub(super) fn format_p(p: f64) -> String {
    if p != 0.0 && p < 1e-4 {
        format!("{p:.2e}")
    } else {
        format!("{p:.4}")
    }
}

/// The first [`LISTED`] ids, each through `show`, then how many more.
fn id_list(ids: &[String], show: impl Fn(&str) -> String) -> String {
    let mut text = ids.iter().take(LISTED).map(|id| show(id)).collect::<Vec<_>>().join(", ");
    if ids.len() > LISTED {
        write!(text, " and {} more", ids.len() - LISTED).unwrap();
    }
    text
}

pub(super) fn excluded_line(e: &super::Excluded) -> String {
    let side = |run: &str, why: &Option<String>| why.as_ref().map(|w| format!("{run}: {w}"));
    let reasons: Vec<String> = [side("base", &e.base), side("new", &e.new)].into_iter().flatten().collect();
    format!("{} ({})", e.id, reasons.join("; "))
}

/// A few lines for the terminal.
pub fn summary_text(c: &Comparison) -> String {
    let mut out = String::new();
    let [lo, hi] = c.ci95;
    writeln!(
        out,
        "{}: base {:.4}, new {:.4}, delta {:+.4} (95% CI {lo:+.4} to {hi:+.4})",
        c.metric, c.base, c.new, c.delta
    )
    .unwrap();
    let units = if c.n_units == c.n_pairs { String::new() } else { format!(" over {} items", c.n_units) };
    writeln!(out, "p = {} ({}, {} pairs{units})", format_p(c.p_value), c.test.as_str(), c.n_pairs).unwrap();
    writeln!(out, "verdict: {} (alpha {}, min delta {})", c.verdict.as_str(), c.alpha, c.min_delta).unwrap();
    let plain = |id: &str| id.to_owned();
    for (label, ids) in [
        ("regressed", &c.regressions),
        ("improved", &c.improvements),
        ("only in base", &c.only_in_base),
        ("only in new", &c.only_in_new),
    ] {
        if !ids.is_empty() {
            writeln!(out, "{label} ({}): {}", ids.len(), id_list(ids, plain)).unwrap();
        }
    }
    if !c.excluded.is_empty() {
        let lines: Vec<String> = c.excluded.iter().map(excluded_line).collect();
        writeln!(out, "left out ({}): {}", lines.len(), id_list(&lines, plain)).unwrap();
    }
    for d in &c.drift {
        writeln!(out, "drift (allowed): {d}").unwrap();
    }
    for note in &c.notes {
        writeln!(out, "note: {note}").unwrap();
    }
    out
}

/// A short Markdown note: the numbers, the verdict and the flipped items.
pub fn markdown(c: &Comparison) -> String {
    let code = |id: &str| format!("`{}`", id.replace('`', "'"));
    let mut out = String::new();
    let headline = match c.verdict {
        Verdict::Regression => "regression",
        Verdict::Improvement => "improvement",
        Verdict::NoSignificantChange => "no significant change",
    };
    writeln!(out, "### repairbench compare: {headline}\n").unwrap();
    writeln!(out, "| metric | base | new | delta | 95% CI | p | test | pairs |").unwrap();
    writeln!(out, "|---|---:|---:|---:|---|---:|---|---:|").unwrap();
    let [lo, hi] = c.ci95;
    writeln!(
        out,
        "| {} | {:.4} | {:.4} | {:+.4} | [{lo:+.4}, {hi:+.4}] | {} | {} | {} |\n",
        code(&c.metric),
        c.base,
        c.new,
        c.delta,
        format_p(c.p_value),
        c.test.as_str(),
        c.n_pairs
    )
    .unwrap();
    writeln!(
        out,
        "**Verdict: `{}`** (alpha {}, min delta {}; base {}, new {})\n",
        c.verdict.as_str(),
        c.alpha,
        c.min_delta,
        code(&c.base_dir.display().to_string()),
        code(&c.new_dir.display().to_string())
    )
    .unwrap();
    for (label, ids) in [
        ("Regressions", &c.regressions),
        ("Improvements", &c.improvements),
        ("Only in base", &c.only_in_base),
        ("Only in new", &c.only_in_new),
    ] {
        if !ids.is_empty() {
            writeln!(out, "- **{label} ({}):** {}", ids.len(), id_list(ids, code)).unwrap();
        }
    }
    if !c.excluded.is_empty() {
        let ids: Vec<String> = c.excluded.iter().map(|e| e.id.clone()).collect();
        writeln!(out, "- **Left out, not scored in both runs ({}):** {}", ids.len(), id_list(&ids, code))
            .unwrap();
    }
    if !c.drift.is_empty() {
        writeln!(out, "\n**Settings differ (compared with --allow-drift):**\n").unwrap();
        for d in &c.drift {
            writeln!(out, "- {}", code(&d.to_string())).unwrap();
        }
    }
    out
}

/// JUnit XML: one test case per paired item, failing for the items that regressed, so a CI
/// server shows each regression as a failed test. The comparison's numbers are properties.
pub fn junit(c: &Comparison) -> String {
    use crate::report::junit::{self, Case, CaseOutcome};
    let properties = [
        ("verdict", c.verdict.as_str().to_owned()),
        ("base", format_value(c.base)),
        ("new", format_value(c.new)),
        ("delta", c.delta.to_string()),
        ("ci95", format!("{} {}", c.ci95[0], c.ci95[1])),
        ("p_value", c.p_value.to_string()),
        ("test", c.test.as_str().to_owned()),
    ];
    let cases: Vec<Case> = c
        .pairs
        .iter()
        .map(|pair| Case {
            classname: c.metric.clone(),
            name: pair.id.clone(),
            time_s: 0.0,
            outcome: if pair.new < pair.base {
                CaseOutcome::Failed {
                    kind: "regression".into(),
                    message: format!("regressed: base {}, new {}", pair.base_label, pair.new_label),
                }
            } else {
                CaseOutcome::Passed
            },
            output: None,
        })
        .collect();
    junit::render(&format!("repairbench compare {}", c.metric), &properties, &cases)
}
