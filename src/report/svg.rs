//! A small SVG writer for the report pages' charts: horizontal bars, per-seed dots with their
//! mean ± std, a curve over a few x values, and an interval against zero. Each returns inline
//! SVG [`Markup`]; colours come from the page's style through classes, and every label is
//! escaped, since labels are run data (subjects, verdicts, seeds).

use std::fmt::Write as _;

use super::html::{escape, Markup};

/// A coordinate, finite and short.
fn n(x: f64) -> String {
    format!("{:.1}", if x.is_finite() { x } else { 0.0 })
}

/// Width in pixels that a label of `text` needs, roughly, at the page's 12px font.
fn label_width(text: &str) -> f64 {
    text.chars().count() as f64 * 6.8
}

fn open(width: f64, height: f64, title: &str, class: &str) -> String {
    format!(
        "<svg class=\"{class}\" viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"{t}\"><title>{t}</title>",
        w = n(width),
        h = n(height),
        t = escape(title),
    )
}

fn text(out: &mut String, x: f64, y: f64, anchor: &str, class: &str, label: &str) {
    write!(
        out,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"{anchor}\" class=\"{class}\">{}</text>",
        n(x),
        n(y),
        escape(label)
    )
    .unwrap();
}

fn line(out: &mut String, (x1, y1): (f64, f64), (x2, y2): (f64, f64), class: &str) {
    write!(
        out,
        "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" class=\"{class}\"/>",
        n(x1),
        n(y1),
        n(x2),
        n(y2)
    )
    .unwrap();
}

/// One bar: its label, length, the text written after it, a class for its colour, and an
/// optional interval drawn over it.
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub note: String,
    pub class: String,
    pub whisker: Option<(f64, f64)>,
}

/// Horizontal bars on a scale from 0 to `max` (the largest value when `max` is not positive).
pub fn bars(title: &str, bars: &[Bar], max: f64) -> Markup {
    const ROW: f64 = 22.0;
    const PLOT: f64 = 380.0;
    let max = if max > 0.0 { max } else { bars.iter().map(|b| b.value).fold(0.0, f64::max).max(1e-9) };
    let label_w = bars.iter().map(|b| label_width(&b.label)).fold(40.0, f64::max).min(280.0) + 10.0;
    let note_w = bars.iter().map(|b| label_width(&b.note)).fold(0.0, f64::max) + 16.0;
    let height = ROW * bars.len() as f64 + 8.0;
    let mut out = open(label_w + PLOT + note_w, height, title, "chart bars");
    let x = |v: f64| label_w + PLOT * (v / max).clamp(0.0, 1.0);
    line(&mut out, (label_w, 2.0), (label_w, height - 4.0), "axis");
    for (i, bar) in bars.iter().enumerate() {
        let top = 4.0 + ROW * i as f64;
        text(&mut out, label_w - 8.0, top + 14.0, "end", "", &bar.label);
        write!(
            out,
            "<rect class=\"bar {}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>{}</title></rect>",
            escape(&bar.class),
            n(label_w),
            n(top + 3.0),
            n(x(bar.value) - label_w),
            n(ROW - 8.0),
            escape(&format!("{}: {}", bar.label, bar.note))
        )
        .unwrap();
        let mut end = x(bar.value);
        if let Some((lo, hi)) = bar.whisker {
            let mid = top + ROW / 2.0 - 1.0;
            line(&mut out, (x(lo), mid), (x(hi), mid), "whisker");
            line(&mut out, (x(lo), mid - 4.0), (x(lo), mid + 4.0), "whisker");
            line(&mut out, (x(hi), mid - 4.0), (x(hi), mid + 4.0), "whisker");
            end = end.max(x(hi));
        }
        text(&mut out, end + 6.0, top + 14.0, "start", "muted", &bar.note);
    }
    out.push_str("</svg>");
    Markup::trusted(out)
}

/// A vertical scale for `values`, padded, as (low, high).
fn span(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) =
        values.filter(|v| v.is_finite()).fold((f64::MAX, f64::MIN), |(l, h), v| (l.min(v), h.max(v)));
    if lo > hi {
        return (0.0, 1.0);
    }
    let pad = ((hi - lo) * 0.15).max(1e-3);
    (lo - pad, hi + pad)
}

/// One dot per seed, with the band of mean ± std and a line at the mean.
pub fn seed_dots(title: &str, seeds: &[(String, f64)], mean: f64, std: f64) -> Markup {
    const H: f64 = 190.0;
    const TOP: f64 = 14.0;
    const BOTTOM: f64 = 150.0;
    const LEFT: f64 = 60.0;
    const STEP: f64 = 70.0;
    let width = LEFT + STEP * seeds.len().max(1) as f64 + 140.0;
    let (lo, hi) = span(seeds.iter().map(|s| s.1).chain([mean - std, mean + std]));
    let y = |v: f64| BOTTOM - (BOTTOM - TOP) * (v - lo) / (hi - lo);
    let mut out = open(width, H, title, "chart seeds");
    let right = width - 140.0;
    write!(
        out,
        "<rect class=\"band\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>",
        n(LEFT),
        n(y(mean + std)),
        n(right - LEFT),
        n(y(mean - std) - y(mean + std))
    )
    .unwrap();
    line(&mut out, (LEFT, y(mean)), (right, y(mean)), "mean");
    text(&mut out, right + 6.0, y(mean) + 4.0, "start", "", &format!("mean {mean:.4}"));
    text(&mut out, right + 6.0, y(mean + std) + 4.0, "start", "muted", &format!("+1 std {:.4}", mean + std));
    text(&mut out, right + 6.0, y(mean - std) + 4.0, "start", "muted", &format!("−1 std {:.4}", mean - std));
    line(&mut out, (LEFT, TOP), (LEFT, BOTTOM), "axis");
    line(&mut out, (LEFT, BOTTOM), (right, BOTTOM), "axis");
    text(&mut out, LEFT - 6.0, TOP + 4.0, "end", "muted", &format!("{hi:.3}"));
    text(&mut out, LEFT - 6.0, BOTTOM, "end", "muted", &format!("{lo:.3}"));
    for (i, (label, value)) in seeds.iter().enumerate() {
        let cx = LEFT + STEP * (i as f64 + 0.5);
        write!(
            out,
            "<circle class=\"dot\" cx=\"{}\" cy=\"{}\" r=\"5\"><title>{}</title></circle>",
            n(cx),
            n(y(*value)),
            escape(&format!("{label}: {value:.4}"))
        )
        .unwrap();
        text(&mut out, cx, BOTTOM + 18.0, "middle", "", label);
        text(&mut out, cx, BOTTOM + 34.0, "middle", "muted", &format!("{value:.4}"));
    }
    out.push_str("</svg>");
    Markup::trusted(out)
}

/// One row of dots per set on a shared horizontal scale, each with a line at its mean: how
/// two or more distributions of a score overlap. A set is (label, class, values).
pub fn strips(title: &str, sets: &[(String, String, Vec<f64>)]) -> Markup {
    const ROW: f64 = 36.0;
    const PLOT: f64 = 480.0;
    let label_w = sets.iter().map(|s| label_width(&s.0)).fold(40.0, f64::max).min(200.0) + 10.0;
    let (lo, hi) = span(sets.iter().flat_map(|s| s.2.iter().copied()));
    let x = |v: f64| label_w + PLOT * (v - lo) / (hi - lo);
    let height = ROW * sets.len() as f64 + 26.0;
    let mut out = open(label_w + PLOT + 20.0, height, title, "chart strips");
    for (i, (label, class, values)) in sets.iter().enumerate() {
        let mid = 4.0 + ROW * i as f64 + ROW / 2.0;
        text(&mut out, label_w - 8.0, mid + 4.0, "end", "", label);
        line(&mut out, (label_w, mid), (label_w + PLOT, mid), "axis");
        for v in values {
            write!(
                out,
                "<circle class=\"dot {}\" cx=\"{}\" cy=\"{}\" r=\"3.5\" opacity=\"0.6\"><title>{v:.4}</title></circle>",
                escape(class),
                n(x(*v)),
                n(mid)
            )
            .unwrap();
        }
        if !values.is_empty() {
            let mean = values.iter().sum::<f64>() / values.len() as f64;
            line(&mut out, (x(mean), mid - 11.0), (x(mean), mid + 11.0), "mean");
        }
    }
    let bottom = height - 6.0;
    text(&mut out, label_w, bottom, "start", "muted", &format!("{lo:.3}"));
    text(&mut out, label_w + PLOT, bottom, "end", "muted", &format!("{hi:.3}"));
    out.push_str("</svg>");
    Markup::trusted(out)
}

/// A curve through `points` (label, value in 0..1), equally spaced from left to right.
pub fn curve(title: &str, points: &[(String, f64)], y_label: &str) -> Markup {
    const H: f64 = 232.0;
    const TOP: f64 = 28.0;
    const BOTTOM: f64 = 192.0;
    const LEFT: f64 = 64.0;
    const STEP: f64 = 90.0;
    let width = LEFT + STEP * points.len().max(1) as f64 + 20.0;
    let y = |v: f64| BOTTOM - (BOTTOM - TOP) * v.clamp(0.0, 1.0);
    let x = |i: usize| LEFT + STEP * (i as f64 + 0.5);
    let mut out = open(width, H, title, "chart curve");
    for tick in [0.0, 0.25, 0.5, 0.75, 1.0] {
        line(&mut out, (LEFT, y(tick)), (width - 20.0, y(tick)), "axis");
        text(&mut out, LEFT - 6.0, y(tick) + 4.0, "end", "muted", &format!("{tick:.2}"));
    }
    text(&mut out, 8.0, 12.0, "start", "muted", y_label);
    let path: Vec<String> =
        points.iter().enumerate().map(|(i, (_, v))| format!("{},{}", n(x(i)), n(y(*v)))).collect();
    write!(out, "<polyline class=\"curve\" points=\"{}\"/>", path.join(" ")).unwrap();
    for (i, (label, value)) in points.iter().enumerate() {
        write!(
            out,
            "<circle class=\"dot\" cx=\"{}\" cy=\"{}\" r=\"4.5\"><title>{}</title></circle>",
            n(x(i)),
            n(y(*value)),
            escape(&format!("{label}: {value:.4}"))
        )
        .unwrap();
        text(&mut out, x(i), y(*value) - 9.0, "middle", "", &format!("{value:.3}"));
        text(&mut out, x(i), BOTTOM + 20.0, "middle", "", label);
    }
    out.push_str("</svg>");
    Markup::trusted(out)
}

/// An estimate with its interval on a number line that always shows zero.
pub fn interval(title: &str, estimate: f64, lo: f64, hi: f64, class: &str) -> Markup {
    const W: f64 = 560.0;
    const H: f64 = 72.0;
    const LEFT: f64 = 30.0;
    const RIGHT: f64 = 530.0;
    let (a, b) = span([lo, hi, estimate, 0.0].into_iter());
    let x = |v: f64| LEFT + (RIGHT - LEFT) * (v - a) / (b - a);
    let mut out = open(W, H, title, "chart interval");
    line(&mut out, (LEFT, 40.0), (RIGHT, 40.0), "axis");
    line(&mut out, (x(0.0), 22.0), (x(0.0), 46.0), "zero");
    text(&mut out, x(0.0), 66.0, "middle", "muted", "0");
    line(&mut out, (x(lo), 30.0), (x(hi), 30.0), "whisker");
    line(&mut out, (x(lo), 24.0), (x(lo), 36.0), "whisker");
    line(&mut out, (x(hi), 24.0), (x(hi), 36.0), "whisker");
    write!(out, "<circle class=\"dot {}\" cx=\"{}\" cy=\"30\" r=\"6\"/>", escape(class), n(x(estimate)))
        .unwrap();
    text(&mut out, x(lo), 52.0, "middle", "muted", &format!("{lo:+.4}"));
    text(&mut out, x(hi), 52.0, "middle", "muted", &format!("{hi:+.4}"));
    // The estimate above its dot, the bounds at the ends, zero under the axis.
    text(&mut out, x(estimate), 16.0, "middle", "", &format!("{estimate:+.4}"));
    out.push_str("</svg>");
    Markup::trusted(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_scale_to_the_largest_and_escape_labels() {
        let chart = bars(
            "verdicts",
            &[
                Bar {
                    label: "<b>x</b>".into(),
                    value: 4.0,
                    note: "4".into(),
                    class: "v-resolved".into(),
                    whisker: None,
                },
                Bar {
                    label: "y".into(),
                    value: 1.0,
                    note: "1".into(),
                    class: "v-error".into(),
                    whisker: None,
                },
            ],
            0.0,
        );
        let svg = chart.as_str();
        assert!(svg.contains("&lt;b&gt;x&lt;/b&gt;") && !svg.contains("<b>"), "{svg}");
        // The longest bar spans the plot (380), the other a quarter of it.
        assert!(svg.contains("width=\"380.0\"") && svg.contains("width=\"95.0\""), "{svg}");
    }

    #[test]
    fn curve_and_dots_place_values_on_their_scale() {
        let svg = curve("pass@k", &[("k=1".into(), 0.0), ("k=10".into(), 1.0)], "pass@k");
        // 0 at the bottom (y 192), 1 at the top (y 28).
        assert!(svg.as_str().contains("points=\"109.0,192.0 199.0,28.0\""), "{}", svg.as_str());
        let dots = seed_dots("acc", &[("seed 0".into(), 0.5), ("seed 1".into(), 0.7)], 0.6, 0.1414);
        assert_eq!(dots.as_str().matches("<circle").count(), 2);
        assert!(dots.as_str().contains("mean 0.6000"));
        let ci = interval("delta", -0.1, -0.2, 0.05, "regression");
        assert!(ci.as_str().contains("-0.2000") && ci.as_str().contains("+0.0500"));
    }
}
