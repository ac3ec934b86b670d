//! `report.html` of a suite run: the headline metric(s) with their standard errors, per-subject
//! bars (MMLU-like suites), the spread across seeds, the pass@k curve of code suites, and a
//! sortable, filterable table of items, each opening onto its outputs, options and prompt.
//! Prompts and model output are text from the data and the model: they reach the page only
//! through the escaping builders of [`crate::report::html`].

use std::collections::BTreeMap;

use crate::report::html::{
    clip, facts, page, pre, robustness_table, section, stat, stats, tag, text_tag, Cell, Column, Markup, Row,
    Table,
};
use crate::report::svg::{self, Bar};

use super::metrics::{Aggregate, MetricResult};
use super::record::SampleRecord;
use super::reports::primary_metric;
use super::robust::{is_right, FamilyRobustness};

/// The most item detail one page embeds (bytes of markup), so a full MMLU run stays a page a
/// browser opens quickly; later items show their facts and point to samples.jsonl.
const PAGE_DETAILS: usize = 6 * 1024 * 1024;
/// The most of one output, and of the end of a prompt, shown.
const OUTPUT_SHOWN: usize = 4000;
const PROMPT_TAIL: usize = 1500;

/// The page for a run of `suite` over `seeds` and the documents `doc_ids` (in data order).
pub fn html(
    suite: &str,
    seeds: &[u64],
    aggregate: &Aggregate,
    robustness: &BTreeMap<String, FamilyRobustness>,
    records: &BTreeMap<String, SampleRecord>,
    doc_ids: &[String],
) -> String {
    let primary = primary_metric(aggregate.metrics.keys());
    let mut headline: Vec<&String> = primary.iter().collect();
    headline.extend(
        pass_at_k(aggregate).into_iter().map(|(_, name)| name).filter(|n| Some(*n) != primary.as_ref()),
    );
    let mut cards: Vec<Markup> = headline
        .iter()
        .filter_map(|name| aggregate.metrics.get(*name).map(|m| metric_card(name, m)))
        .collect();
    if let Some(errors) = aggregate.metrics.get("harness_errors").filter(|m| m.sum > 0.0) {
        cards.push(stat(
            "harness-errors",
            "harness errors",
            Markup::text(&format!("{}", errors.sum)),
            "items left out of the metrics; a rerun retries them",
        ));
    }
    let mut body = stats(cards);
    body.push(section("metrics", "Metrics", metrics_table(aggregate).render()));
    if let Some(primary) = &primary {
        if let Some(groups) = group_bars(aggregate, primary) {
            body.push(section("subjects", &format!("{primary} per subject"), groups));
        }
    }
    if seeds.len() >= 2 {
        let mut spread = Markup::empty();
        for name in &headline {
            let Some(m) = aggregate.metrics.get(*name) else { continue };
            let Some(across) = &m.across_seeds else { continue };
            let points: Vec<(String, f64)> =
                seeds.iter().zip(&m.per_seed).map(|(s, v)| (format!("seed {s}"), *v)).collect();
            spread.push(text_tag(
                "h3",
                &[],
                &format!("{name}: {:.4} ± {:.4} (mean ± std)", across.mean, across.std),
            ));
            spread.push(svg::seed_dots(&format!("{name} per seed"), &points, across.mean, across.std));
        }
        if !spread.is_empty() {
            body.push(section("seeds", "Across seeds", spread));
        }
    }
    let ks = pass_at_k(aggregate);
    if !ks.is_empty() {
        let points: Vec<(String, f64)> =
            ks.iter().map(|(k, name)| (format!("k={k}"), aggregate.metrics[*name].value)).collect();
        body.push(section("pass-at-k", "pass@k", svg::curve("pass@k for each k", &points, "pass@k")));
    }
    if !robustness.is_empty() {
        body.push(section("robustness", "Robustness", robustness_view(robustness)));
    }
    body.push(section(
        "items-section",
        "Items",
        items_table(records, seeds, doc_ids, primary.as_deref()).render(),
    ));
    if let (false, Some(primary)) = (robustness.is_empty(), &primary) {
        let mut budget = PAGE_DETAILS / 2;
        body.push(section(
            "variants-section",
            "Variants",
            variants_table(records, primary, &mut budget).render(),
        ));
    }
    let subtitle = format!("{} item(s) × {} seed(s) {seeds:?}", doc_ids.len(), seeds.len());
    page(&format!("repairbench eval {suite}"), &subtitle, body)
}

/// A row per family (the figures `results.json` holds), then per option family the recall by
/// the letter the gold stood at, as bars.
fn robustness_view(robustness: &BTreeMap<String, FamilyRobustness>) -> Markup {
    let mut out = robustness_table(robustness);
    for (family, r) in robustness {
        if let Some(f) = &r.formats {
            let bars: Vec<(String, f64, String)> = f
                .per_format
                .iter()
                .enumerate()
                .map(|(i, &value)| {
                    (if i == 0 { "own".into() } else { format!("#{i}") }, value, format!("{value:.3}"))
                })
                .collect();
            let heading = format!(
                "{family}: spread {:.4} [{:.4}, {:.4}]",
                f.spread, f.spread_ci95[0], f.spread_ci95[1]
            );
            out.push(titled_bars(&heading, &format!("{family}: {} per format", r.metric), bars));
        }
        let Some(o) = &r.options else { continue };
        let bars: Vec<(String, f64, String)> = o
            .recall_by_position
            .iter()
            .zip(o.selection_rate.iter())
            .filter_map(|(recall, (letter, chosen))| {
                recall.map(|value| (letter.clone(), value, format!("recall {value:.3}, chosen {chosen:.3}")))
            })
            .collect();
        let heading = format!(
            "{family}: recall by the gold's letter (RStd {:.4}); PriDe-debiased accuracy {:.4}",
            o.rstd, o.pride_accuracy
        );
        out.push(titled_bars(&heading, &format!("{family}: recall by gold position"), bars));
    }
    out
}

/// A heading over bars on a 0–1 scale, each `(label, value, note)`.
fn titled_bars(heading: &str, title: &str, bars: Vec<(String, f64, String)>) -> Markup {
    let bars: Vec<Bar> = bars
        .into_iter()
        .map(|(label, value, note)| Bar { label, value, note, class: String::new(), whisker: None })
        .collect();
    let mut out = text_tag("h3", &[], heading);
    out.push(svg::bars(title, &bars, 1.0));
    out
}

/// Every variant beside its original's score, with how it flipped (the filter).
fn variants_table(records: &BTreeMap<String, SampleRecord>, primary: &str, budget: &mut usize) -> Table {
    let mut rows = Vec::new();
    for (key, record) in records {
        let Some(variant) = &record.variant else { continue };
        let Some(original) = records.get(&SampleRecord::key_of(record.seed, &record.doc_id)) else {
            continue;
        };
        let flip = match (is_right(original, primary), is_right(record, primary)) {
            (true, false) => "right → wrong",
            (false, true) => "wrong → right",
            _ => "unchanged",
        };
        rows.push(Row {
            id: key.clone(),
            cells: vec![
                Cell::text(&record.doc_id),
                Cell::number(record.seed.to_string(), record.seed as f64),
                Cell::text(format!("{}#{}", variant.family, variant.index)),
                Cell::text(flip),
                Cell::text(answer(original, Some(primary))),
                Cell::text(answer(record, Some(primary))),
            ],
            detail: Some(item_detail(record, budget)),
        });
    }
    Table {
        id: "variants",
        columns: vec![
            Column { title: "document", numeric: false },
            Column { title: "seed", numeric: true },
            Column { title: "variant", numeric: false },
            Column { title: "flip", numeric: false },
            Column { title: "original answer", numeric: false },
            Column { title: "variant answer", numeric: false },
        ],
        rows,
        filter_column: Some(3),
    }
}

/// `(k, name)` of every `pass@k` metric, by k.
fn pass_at_k(aggregate: &Aggregate) -> Vec<(u64, &String)> {
    let mut ks: Vec<(u64, &String)> = aggregate
        .metrics
        .keys()
        .filter_map(|name| name.strip_prefix("pass@").and_then(|k| k.parse().ok()).map(|k| (k, name)))
        .collect();
    ks.sort();
    ks
}

fn metric_card(name: &str, m: &MetricResult) -> Markup {
    let mut note = format!("± {:.4} stderr · n = {}", m.stderr, m.n);
    if let Some(across) = &m.across_seeds {
        note.push_str(&format!(" · seeds {:.4} ± {:.4}", across.mean, across.std));
        if let Some([lo, hi]) = across.ci95 {
            note.push_str(&format!(", 95% [{lo:.4}, {hi:.4}]"));
        }
    }
    stat(&format!("metric-{name}"), name, Markup::text(&format!("{:.4}", m.value)), &note)
}

fn metrics_table(aggregate: &Aggregate) -> Table {
    let rows = aggregate
        .metrics
        .iter()
        .map(|(name, m)| {
            let (spread, ci) = match &m.across_seeds {
                Some(s) => (
                    Cell::number(format!("{:.4} ± {:.4}", s.mean, s.std), s.std),
                    Cell::text(s.ci95.map_or("–".into(), |[lo, hi]| format!("[{lo:.4}, {hi:.4}]"))),
                ),
                None => (Cell::number("–", 0.0), Cell::text("–")),
            };
            Row {
                id: name.clone(),
                cells: vec![
                    Cell::text(name),
                    Cell::number(format!("{:.4}", m.value), m.value),
                    Cell::number(format!("{:.4}", m.stderr), m.stderr),
                    Cell::number(m.n.to_string(), m.n as f64),
                    spread,
                    ci,
                ],
                detail: None,
            }
        })
        .collect();
    Table {
        id: "metric-table",
        columns: vec![
            Column { title: "metric", numeric: false },
            Column { title: "value", numeric: true },
            Column { title: "stderr", numeric: true },
            Column { title: "n", numeric: true },
            Column { title: "across seeds (mean ± std)", numeric: true },
            Column { title: "95% across seeds", numeric: false },
        ],
        rows,
        filter_column: None,
    }
}

/// Bars of `metric` per group, best first, each with ± one standard error.
fn group_bars(aggregate: &Aggregate, metric: &str) -> Option<Markup> {
    let mut groups: Vec<(&String, &MetricResult)> =
        aggregate.groups.iter().filter_map(|(g, metrics)| metrics.get(metric).map(|m| (g, m))).collect();
    if groups.is_empty() {
        return None;
    }
    groups.sort_by(|a, b| b.1.value.total_cmp(&a.1.value).then(a.0.cmp(b.0)));
    let bars: Vec<Bar> = groups
        .iter()
        .map(|(group, m)| Bar {
            label: (*group).clone(),
            value: m.value,
            note: format!("{:.3} ± {:.3} (n={})", m.value, m.stderr, m.n),
            class: String::new(),
            whisker: Some((m.value - m.stderr, m.value + m.stderr)),
        })
        .collect();
    let unit_scale = groups.iter().all(|(_, m)| m.value <= 1.0);
    Some(svg::bars(&format!("{metric} per subject"), &bars, if unit_scale { 1.0 } else { 0.0 }))
}

/// What the model answered, for the table: the option or answer the primary metric judged, or
/// how a code item's programs ended.
fn answer(record: &SampleRecord, primary: Option<&str>) -> String {
    let statuses: Vec<String> =
        record.outputs.iter().filter_map(|o| o.status).map(|s| format!("{s:?}").to_lowercase()).collect();
    if !statuses.is_empty() {
        let passed = statuses.iter().filter(|s| *s == "passed").count();
        return if statuses.len() == 1 {
            statuses[0].clone()
        } else {
            format!("{passed}/{} passed", statuses.len())
        };
    }
    let extracted =
        primary.and_then(|p| record.extracted.get(p)).or_else(|| record.extracted.values().next());
    match extracted {
        Some(Some(answer)) => option_text(record, answer),
        Some(None) => "(none)".into(),
        None => "–".into(),
    }
}

/// A multiple-choice index with its option's text; any other answer as it is.
fn option_text(record: &SampleRecord, answer: &str) -> String {
    match answer.parse::<usize>().ok().and_then(|i| record.choices.get(i).map(|c| (i, c))) {
        Some((i, choice)) => clip(&format!("{i}: {}", choice.continuation.trim()), 80).0,
        None => answer.to_owned(),
    }
}

fn target_text(record: &SampleRecord) -> String {
    match &record.target {
        serde_json::Value::Null => "–".into(),
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => option_text(record, &n.to_string()),
        other => other.to_string(),
    }
}

fn items_table(
    records: &BTreeMap<String, SampleRecord>,
    seeds: &[u64],
    doc_ids: &[String],
    primary: Option<&str>,
) -> Table {
    let mut budget = PAGE_DETAILS;
    let mut rows = Vec::new();
    for &seed in seeds {
        for id in doc_ids {
            let Some(record) = records.get(&SampleRecord::key_of(seed, id)) else { continue };
            let score = primary.and_then(|p| record.scores.get(p)).copied();
            rows.push(Row {
                id: SampleRecord::key_of(seed, id),
                cells: vec![
                    Cell::text(id),
                    Cell::number(seed.to_string(), seed as f64),
                    match score {
                        Some(v) => Cell::number(format!("{v}"), v).class(if v > 0.0 {
                            "v-resolved"
                        } else {
                            "v-unresolved"
                        }),
                        None => Cell::number("–", -1.0),
                    },
                    Cell::text(answer(record, primary)),
                    Cell::text(target_text(record)),
                ],
                detail: Some(item_detail(record, &mut budget)),
            });
        }
    }
    Table {
        id: "items",
        columns: vec![
            Column { title: "document", numeric: false },
            Column { title: "seed", numeric: true },
            Column { title: "score", numeric: true },
            Column { title: "answer", numeric: false },
            Column { title: "target", numeric: false },
        ],
        rows,
        filter_column: Some(2),
    }
}

fn item_detail(record: &SampleRecord, budget: &mut usize) -> Markup {
    let scores: Vec<String> = record.scores.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let mut known = vec![("scores", scores.join(", "))];
    if let Some(group) = &record.group {
        known.insert(0, ("subject", group.clone()));
    }
    for (by, answer) in &record.extracted {
        known.push(("answer", format!("{by}: {}", answer.as_deref().unwrap_or("(none)"))));
    }
    known.push(("prompt sha256", record.prompt_sha256.clone()));
    if let Some(v) = &record.variant {
        let mut shown =
            format!("{}#{}{}", v.family, v.index, if v.applied { "" } else { " (same as the original)" });
        if let Some(order) = &v.option_order {
            shown.push_str(&format!(", options shown in original order {order:?}"));
        }
        if let Some(order) = &v.fewshot_order {
            shown.push_str(&format!(", examples shown in original order {order:?}"));
        }
        known.push(("variant", shown));
    }
    let mut out = facts(&known);
    if *budget == 0 {
        out.push(text_tag(
            "p",
            &[("class", "empty")],
            "outputs not shown here (page size); see samples.jsonl",
        ));
        return out;
    }
    for (i, output) in record.outputs.iter().enumerate() {
        let mut how = Vec::new();
        if let Some(finish) = output.finish {
            how.push(format!("finish {finish:?}").to_lowercase());
        }
        if let Some(status) = output.status {
            how.push(format!("{status:?}").to_lowercase());
        }
        out.push(text_tag("h3", &[], &format!("Output {} {}", i + 1, how.join(", "))));
        let (shown, cut) = clip(&output.text, OUTPUT_SHOWN);
        out.push(pre(&if cut { format!("{shown}\n…") } else { shown }));
    }
    if !record.choices.is_empty() {
        out.push(text_tag("h3", &[], "Options"));
        let rows: Markup = record
            .choices
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let gold = record.target.as_u64() == Some(i as u64);
                let mut cells = text_tag("td", &[], &format!("{i}{}", if gold { " (target)" } else { "" }));
                cells.push(text_tag("td", &[], &clip(c.continuation.trim(), 300).0));
                cells.push(text_tag("td", &[], &format!("log-likelihood {:.4}", c.loglikelihood)));
                cells.push(text_tag(
                    "td",
                    &[],
                    &format!("{} tokens{}", c.tokens, if c.is_greedy { ", greedy" } else { "" }),
                ));
                tag("tr", &[], cells)
            })
            .collect();
        out.push(tag("table", &[("class", "choices")], rows));
    }
    let start = record.prompt.len().saturating_sub(PROMPT_TAIL);
    let start = (start..=record.prompt.len()).find(|i| record.prompt.is_char_boundary(*i)).unwrap_or(0);
    let tail = &record.prompt[start..];
    let mut folded = text_tag(
        "summary",
        &[],
        &if start > 0 {
            format!("prompt (its last {} characters)", tail.chars().count())
        } else {
            "prompt".into()
        },
    );
    folded.push(pre(tail));
    out.push(tag("details", &[], folded));
    // The whole detail counts against the page's budget: markup weighs as much as text here.
    *budget = budget.saturating_sub(out.as_str().len());
    out
}
