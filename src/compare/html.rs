//! A comparison as a self-contained page (`compare --html`): the headline (base, new, delta
//! with its interval against zero, p, verdict) and the flipped items side by side, with how
//! each run ended them (SWE verdicts, suite scores).

use crate::report::html::{
    facts, list, page, section, stat, stats, text_tag, Cell, Column, Markup, Row, Table,
};
use crate::report::svg;

use super::render::format_p;
use super::{Comparison, Verdict};

/// The page for `c`.
pub fn html(c: &Comparison) -> String {
    let [lo, hi] = c.ci95;
    let verdict_class = match c.verdict {
        Verdict::Regression => "regression",
        Verdict::Improvement => "improvement",
        Verdict::NoSignificantChange => "",
    };
    let cards = vec![
        stat("base", "base", Markup::text(&format!("{:.4}", c.base)), &c.base_dir.display().to_string()),
        stat("new", "new", Markup::text(&format!("{:.4}", c.new)), &c.new_dir.display().to_string()),
        stat("delta", "delta", Markup::text(&format!("{:+.4}", c.delta)), "new − base"),
        stat("ci", "95% interval", Markup::text(&format!("[{lo:+.4}, {hi:+.4}]")), "of the delta"),
        stat("p", "p", Markup::text(&format_p(c.p_value)), c.test.as_str()),
        stat(
            "verdict",
            "verdict",
            text_tag("span", &[("class", verdict_class)], c.verdict.as_str()),
            &format!("alpha {}, min delta {}", c.alpha, c.min_delta),
        ),
    ];
    let mut body = stats(cards);
    let mut numbers = svg::interval(
        &format!("delta of {} with its 95% interval", c.metric),
        c.delta,
        lo,
        hi,
        verdict_class,
    );
    let units = if c.n_units == c.n_pairs { String::new() } else { format!(" over {} items", c.n_units) };
    numbers.push(facts(&[
        ("metric", c.metric.clone()),
        ("test", format!("{}, {} pairs{units}", c.test.as_str(), c.n_pairs)),
        ("regressed", c.regressions.len().to_string()),
        ("improved", c.improvements.len().to_string()),
    ]));
    body.push(section("delta-section", "Delta", numbers));

    let rows: Vec<Row> = c
        .pairs
        .iter()
        .filter(|p| p.new != p.base)
        .map(|p| {
            let (change, class) =
                if p.new < p.base { ("regression", "regression") } else { ("improvement", "improvement") };
            Row {
                id: p.id.clone(),
                cells: vec![
                    Cell::text(&p.id),
                    Cell::text(change).class(class),
                    Cell::text(&p.base_label),
                    Cell::text(&p.new_label),
                    Cell::number(format!("{:+}", p.new - p.base), p.new - p.base),
                ],
                detail: None,
            }
        })
        .collect();
    let flipped = Table {
        id: "flipped",
        columns: vec![
            Column { title: "item", numeric: false },
            Column { title: "change", numeric: false },
            Column { title: "base", numeric: false },
            Column { title: "new", numeric: false },
            Column { title: "delta", numeric: true },
        ],
        rows,
        filter_column: Some(1),
    };
    body.push(section("flipped-section", "Flipped items", flipped.render()));

    let mut rest = Markup::empty();
    for (label, ids) in [("Only in base", &c.only_in_base), ("Only in new", &c.only_in_new)] {
        if !ids.is_empty() {
            rest.push(text_tag("h3", &[], &format!("{label} ({})", ids.len())));
            rest.push(list(ids, "tests"));
        }
    }
    if !c.excluded.is_empty() {
        let lines: Vec<String> = c.excluded.iter().map(super::render::excluded_line).collect();
        rest.push(text_tag("h3", &[], &format!("Left out, not scored in both runs ({})", lines.len())));
        rest.push(list(&lines, "tests"));
    }
    if !c.drift.is_empty() {
        let lines: Vec<String> = c.drift.iter().map(|d| d.to_string()).collect();
        rest.push(text_tag("h3", &[], "Settings differ (compared with --allow-drift)"));
        rest.push(list(&lines, "plain"));
    }
    if !c.notes.is_empty() {
        rest.push(text_tag("h3", &[], "Notes"));
        rest.push(list(&c.notes, "plain"));
    }
    if !rest.is_empty() {
        body.push(section("unpaired", "Not compared", rest));
    }
    let subtitle = format!("{} · {} vs {}", c.kind, c.base_dir.display(), c.new_dir.display());
    page(&format!("repairbench compare: {}", c.verdict.as_str()), &subtitle, body)
}
