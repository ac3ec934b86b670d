//! A probe run's human and CI views, made from its records: `report.md` (each statistic's
//! separation, and `guided`'s paired gains), `junit.xml` (one case per statistic and part,
//! failing where the target separates from the control, and per `guided` gain, failing where
//! it is significant) and `report.html` (the same, with each statistic's
//! distributions on both sets and every item).

use std::collections::BTreeMap;
use std::path::Path;

use super::record::ProbeRecord;
use super::run::{guided_gains, separations, GuidedGain, Separation};
use super::Side;
use crate::kernel::store::StoredRecord;
use crate::report::html::{self, Cell, Column, Markup, Row, Table};
use crate::report::junit::{self, Case, CaseOutcome};
use crate::report::markdown::table;
use crate::report::{svg, write_text_atomic, ReportError};

/// Every statistic a method gives, in the order the item table shows them.
const STATISTICS: [&str; 10] = [
    "min_k",
    "min_k_plus_plus",
    "mean_logprob",
    "path_match",
    "rouge_l",
    "ts_exact",
    "ts_rouge_l",
    "guided_rouge_l",
    "general_rouge_l",
    "guided_gain",
];

/// The view files, in the order [`write_views`] writes them.
pub const VIEWS: [&str; 3] = ["report.md", "junit.xml", "report.html"];

fn interval(s: &Separation) -> String {
    format!("{:.3} [{:.3}, {:.3}]", s.auroc, s.auroc_ci95[0], s.auroc_ci95[1])
}

/// `report.md`.
pub fn markdown(method: &str, records: &BTreeMap<String, ProbeRecord>, found: &[Separation]) -> String {
    let mut out = format!("## repairbench probe contamination ({method})\n\n");
    out.push_str(
        "AUROC is the chance that a target item scores higher (looks more familiar to the model) \
         than a control item; 0.5 means the statistic cannot tell them apart. Evidence, not proof: \
         the sets may also differ in topic, style or length.\n\n",
    );
    let rows: Vec<Vec<String>> = found
        .iter()
        .map(|s| {
            vec![
                s.statistic.clone(),
                s.part.clone(),
                format!("{:.4} ± {:.4} (n={})", s.target.mean, s.target.stderr, s.target.n),
                format!("{:.4} ± {:.4} (n={})", s.control.mean, s.control.stderr, s.control.n),
                interval(s),
                s.reading().to_owned(),
            ]
        })
        .collect();
    out.push_str(&table(&["statistic", "part", "target", "control", "AUROC [95%]", "reading"], &rows));
    let gains = guided_gains(records);
    if !gains.is_empty() {
        out.push_str(
            "\n`guided`: ROUGE-L against the true second halves under the prompt naming the dataset and \
             under the general one, with a one-sided paired bootstrap of the gain:\n\n",
        );
        let rows: Vec<Vec<String>> = gains
            .iter()
            .map(|g| {
                vec![
                    g.side.as_str().to_owned(),
                    g.part.clone(),
                    format!("{:.4}", g.guided_rouge_l),
                    format!("{:.4}", g.general_rouge_l),
                    format!("{:.4} [{:.4}, {:.4}]", g.gain, g.gain_ci95[0], g.gain_ci95[1]),
                    format!("{:.4}", g.p_above),
                    g.n.to_string(),
                    g.reading().to_owned(),
                ]
            })
            .collect();
        out.push_str(&table(
            &["set", "part", "guided", "general", "gain [95%]", "p (gain ≤ 0)", "n", "reading"],
            &rows,
        ));
    }
    let errors: Vec<&ProbeRecord> = records.values().filter(|r| r.error.is_some()).collect();
    if !errors.is_empty() {
        out.push_str(&format!("\n**{} text(s) could not be scored** and are left out:\n\n", errors.len()));
        for r in errors {
            out.push_str(&format!(
                "- {} {} {}: {}\n",
                r.side.as_str(),
                r.part,
                r.id,
                r.error.as_deref().unwrap_or("")
            ));
        }
    }
    out
}

/// `junit.xml`: a case fails where its interval lies above 0.5, so that a CI job can flag a
/// benchmark the model looks familiar with.
pub fn junit(method: &str, records: &BTreeMap<String, ProbeRecord>, found: &[Separation]) -> String {
    let mut cases: Vec<Case> = found
        .iter()
        .map(|s| Case {
            classname: "repairbench.probe.contamination".into(),
            name: format!("{} {}", s.statistic, s.part),
            time_s: 0.0,
            outcome: if s.auroc_ci95[0] > 0.5 {
                CaseOutcome::Failed {
                    kind: "separated".into(),
                    message: format!("AUROC {}: {}", interval(s), s.reading()),
                }
            } else {
                CaseOutcome::Passed
            },
            output: None,
        })
        .collect();
    cases.extend(guided_gains(records).iter().map(|g: &GuidedGain| Case {
        classname: "repairbench.probe.contamination".into(),
        name: format!("guided_gain {} {}", g.side.as_str(), g.part),
        time_s: 0.0,
        outcome: if g.p_above < 0.05 {
            CaseOutcome::Failed {
                kind: "guided".into(),
                message: format!("gain {:.4}, p {:.4}: {}", g.gain, g.p_above, g.reading()),
            }
        } else {
            CaseOutcome::Passed
        },
        output: None,
    }));
    cases.extend(records.values().filter(|r| r.error.is_some()).map(|r| Case {
        classname: "repairbench.probe.contamination".into(),
        name: r.key(),
        time_s: 0.0,
        outcome: CaseOutcome::Error { kind: "unscored".into(), message: r.error.clone().unwrap_or_default() },
        output: None,
    }));
    junit::render(&format!("repairbench probe contamination {method}"), &[], &cases)
}

/// `report.html`.
pub fn page(method: &str, records: &BTreeMap<String, ProbeRecord>, found: &[Separation]) -> String {
    let mut body = Markup::empty();
    for s in found {
        let values = |side: Side| -> Vec<f64> {
            records
                .values()
                .filter(|r| r.side == side && r.part == s.part)
                .filter_map(|r| r.values.get(&s.statistic).copied())
                .collect()
        };
        let mut section = html::stats(vec![
            html::stat(
                &format!("auroc-{}-{}", s.statistic, s.part),
                "AUROC",
                Markup::text(&format!("{:.3}", s.auroc)),
                &format!("95% [{:.3}, {:.3}]: {}", s.auroc_ci95[0], s.auroc_ci95[1], s.reading()),
            ),
            html::stat(
                &format!("target-{}-{}", s.statistic, s.part),
                "target mean",
                Markup::text(&format!("{:.4}", s.target.mean)),
                &format!("± {:.4}, n={}", s.target.stderr, s.target.n),
            ),
            html::stat(
                &format!("control-{}-{}", s.statistic, s.part),
                "control mean",
                Markup::text(&format!("{:.4}", s.control.mean)),
                &format!("± {:.4}, n={}", s.control.stderr, s.control.n),
            ),
        ]);
        section.push(svg::strips(
            &format!("{} of {}: target and control", s.statistic, s.part),
            &[
                ("target".into(), "target".into(), values(Side::Target)),
                ("control".into(), "control".into(), values(Side::Control)),
            ],
        ));
        body.push(html::section(
            &format!("{}-{}", s.statistic, s.part),
            &format!("{} ({})", s.statistic, s.part),
            section,
        ));
    }
    for g in guided_gains(records) {
        let id = format!("guided-{}-{}", g.side.as_str(), g.part);
        let cards = html::stats(vec![
            html::stat(
                &format!("{id}-gain"),
                "gain in ROUGE-L",
                Markup::text(&format!("{:.4}", g.gain)),
                &format!(
                    "95% [{:.4}, {:.4}], p {:.4}: {}",
                    g.gain_ci95[0],
                    g.gain_ci95[1],
                    g.p_above,
                    g.reading()
                ),
            ),
            html::stat(
                &format!("{id}-guided"),
                "guided",
                Markup::text(&format!("{:.4}", g.guided_rouge_l)),
                "",
            ),
            html::stat(
                &format!("{id}-general"),
                "general",
                Markup::text(&format!("{:.4}", g.general_rouge_l)),
                "",
            ),
        ]);
        body.push(html::section(
            &id,
            &format!("guided, {} set ({}, n={})", g.side.as_str(), g.part, g.n),
            cards,
        ));
    }
    let statistics: Vec<&'static str> =
        STATISTICS.into_iter().filter(|s| records.values().any(|r| r.values.contains_key(*s))).collect();
    let mut columns = vec![
        Column { title: "set", numeric: false },
        Column { title: "part", numeric: false },
        Column { title: "id", numeric: false },
        Column { title: "tokens", numeric: true },
    ];
    columns.extend(statistics.iter().map(|s| Column { title: s, numeric: true }));
    let rows = records
        .values()
        .map(|r| {
            let mut cells = vec![
                Cell::text(r.side.as_str()),
                Cell::text(&r.part),
                Cell::text(&r.id),
                Cell::number(r.tokens.to_string(), r.tokens as f64),
            ];
            for s in &statistics {
                cells.push(match r.values.get(*s) {
                    Some(v) => Cell::number(format!("{v:.4}"), *v),
                    None => Cell::text(r.error.as_deref().map_or("–", |_| "error")),
                });
            }
            let lowest: Vec<String> =
                r.lowest.iter().map(|t| format!("{:?} {:.3}", t.text, t.logprob)).collect();
            let mut detail =
                html::facts(&[("text sha256", r.text_sha256.clone()), ("characters", r.chars.to_string())]);
            if let Some(error) = &r.error {
                detail.push(html::pre(error));
            }
            for (prompt, answer) in &r.answers {
                detail.push(html::text_tag("p", &[], &format!("the model's answer ({prompt}):")));
                detail.push(html::pre(answer));
            }
            if !lowest.is_empty() {
                detail.push(html::text_tag("p", &[], "least likely tokens:"));
                detail.push(html::list(&lowest, "tokens"));
            }
            Row { id: r.key(), cells, detail: Some(detail) }
        })
        .collect();
    let items = Table { id: "items", columns, rows, filter_column: Some(0) };
    body.push(html::section("items-section", "Items", items.render()));
    html::page(&format!("repairbench probe contamination ({method})"), "target against control", body)
}

/// Writes `report.md`, `junit.xml` and `report.html` into `out` from `records`.
pub fn write_views(
    out: &Path,
    method: &str,
    records: &BTreeMap<String, ProbeRecord>,
) -> Result<(), ReportError> {
    let found = separations(records);
    write_text_atomic(&out.join(VIEWS[0]), &markdown(method, records, &found))?;
    write_text_atomic(&out.join(VIEWS[1]), &junit(method, records, &found))?;
    write_text_atomic(&out.join(VIEWS[2]), &page(method, records, &found))
}
