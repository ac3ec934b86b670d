//! Self-contained HTML report pages: one file with its styles and script inline, charts as
//! inline SVG ([`super::svg`]), and no request to any other place, so a report opens from a CI
//! artifact or a mail attachment exactly as it was written.
//!
//! Everything a run produced (patches, test ids, model output) is hostile text. It reaches a
//! page only through [`Markup::text`] or an escaped attribute value of [`tag`]; links go through
//! [`relative_link`], which percent-encodes every path segment. A Content-Security-Policy with
//! the hash of our one script backs this up: even markup that slipped through could not run
//! script or fetch anything.

use std::collections::BTreeMap;

use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::stats::perturbed::FamilyRobustness;

/// HTML that is safe to place in a page: escaped text, or markup made by this module's
/// builders and the SVG writer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Markup(String);

impl Markup {
    pub fn empty() -> Self {
        Self::default()
    }

    /// `text` escaped, so none of it can become markup.
    pub fn text(text: &str) -> Self {
        Self(escape(text))
    }

    /// Markup made by the builders of `crate::report`; never text from a run.
    pub(in crate::report) fn trusted(html: String) -> Self {
        Self(html)
    }

    pub fn push(&mut self, more: Markup) {
        self.0.push_str(&more.0);
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<Markup> for Markup {
    fn from_iter<I: IntoIterator<Item = Markup>>(iter: I) -> Self {
        let mut out = Markup::empty();
        for m in iter {
            out.push(m);
        }
        out
    }
}

/// Text escaped for HTML text and quoted attribute values. Control characters other than tab
/// and newlines are dropped: HTML has no use for them and some confuse parsers.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// `<name attrs...>body</name>`. Names come from our code; values are escaped. Links are made
/// by [`relative_link`] only, and no event-handler or style attribute is ever written.
pub fn tag(name: &'static str, attrs: &[(&'static str, &str)], body: Markup) -> Markup {
    let mut html = format!("<{name}");
    for (key, value) in attrs {
        debug_assert!(!matches!(*key, "href" | "src" | "style") && !key.starts_with("on"), "{key}");
        html.push_str(&format!(" {key}=\"{}\"", escape(value)));
    }
    html.push('>');
    html.push_str(body.as_str());
    html.push_str(&format!("</{name}>"));
    Markup(html)
}

/// A tag holding plain text.
pub fn text_tag(name: &'static str, attrs: &[(&'static str, &str)], text: &str) -> Markup {
    tag(name, attrs, Markup::text(text))
}

/// A link to a file beside the report, given as path segments; each segment is
/// percent-encoded, so no segment can become a scheme (`javascript:`), a query or a parent.
pub fn relative_link(segments: &[&str], label: &str) -> Markup {
    // "." and ".." survive encoding and would climb out of the report's folder.
    if segments.iter().any(|s| matches!(*s, "" | "." | "..")) {
        return Markup::text(label);
    }
    let href: Vec<String> = segments.iter().map(|s| crate::http::encode_segment(s)).collect();
    Markup(format!("<a href=\"{}\">{}</a>", escape(&href.join("/")), escape(label)))
}

/// A section with a heading.
pub fn section(id: &str, title: &str, body: Markup) -> Markup {
    let mut inner = text_tag("h2", &[], title);
    inner.push(body);
    tag("section", &[("id", id)], inner)
}

/// One headline number: a label, the value, and a note under it (an interval, a count).
pub fn stat(id: &str, label: &str, value: Markup, note: &str) -> Markup {
    let mut inner = text_tag("div", &[("class", "label")], label);
    inner.push(tag("div", &[("class", "value"), ("id", id)], value));
    if !note.is_empty() {
        inner.push(text_tag("div", &[("class", "note"), ("id", &format!("{id}-note"))], note));
    }
    tag("div", &[("class", "stat")], inner)
}

/// A row of [`stat`]s.
pub fn stats(cards: Vec<Markup>) -> Markup {
    tag("div", &[("class", "stats")], cards.into_iter().collect())
}

/// A bulleted list of plain texts.
pub fn list(items: &[String], class: &'static str) -> Markup {
    let items: Markup = items.iter().map(|i| text_tag("li", &[], i)).collect();
    tag("ul", &[("class", class)], items)
}

/// A definition list of (term, value) texts.
pub fn facts(pairs: &[(&str, String)]) -> Markup {
    let body: Markup = pairs
        .iter()
        .map(|(k, v)| {
            let mut m = text_tag("dt", &[], k);
            m.push(text_tag("dd", &[], v));
            m
        })
        .collect();
    tag("dl", &[("class", "facts")], body)
}

/// `text` cut to its first `max` bytes (at a character boundary), with a note when cut.
pub fn clip(text: &str, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text.to_owned(), false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text[..end].to_owned(), true)
}

/// Preformatted text (a prompt, a model output).
pub fn pre(text: &str) -> Markup {
    text_tag("pre", &[("class", "text")], text)
}

/// A unified diff with each line classed: `add`, `del`, `ctx`, `hunk` or `meta`. Inside a
/// hunk the line counts of its header decide, so a removed line that starts with `--` is not
/// taken for a file header.
pub fn diff(patch: &str) -> Markup {
    let mut body = Markup::empty();
    let (mut old_left, mut new_left) = (0usize, 0usize);
    for line in patch.lines() {
        let class = if old_left > 0 || new_left > 0 {
            match line.as_bytes().first() {
                Some(b'+') => {
                    new_left = new_left.saturating_sub(1);
                    "add"
                }
                Some(b'-') => {
                    old_left = old_left.saturating_sub(1);
                    "del"
                }
                Some(b'\\') => "meta",
                _ => {
                    old_left = old_left.saturating_sub(1);
                    new_left = new_left.saturating_sub(1);
                    "ctx"
                }
            }
        } else if let Some((old, new)) = hunk_counts(line) {
            (old_left, new_left) = (old, new);
            "hunk"
        } else {
            "meta"
        };
        // Each line is a block of its own (see the style), so no newline goes between them.
        body.push(text_tag("span", &[("class", class)], line));
    }
    tag("pre", &[("class", "diff")], body)
}

/// The old and new line counts of a hunk header `@@ -a[,b] +c[,d] @@`.
fn hunk_counts(line: &str) -> Option<(usize, usize)> {
    let rest = line.strip_prefix("@@ -")?;
    let (ranges, _) = rest.split_once(" @@")?;
    let (old, new) = ranges.split_once(" +")?;
    let count = |range: &str| -> Option<usize> {
        match range.split_once(',') {
            Some((_, n)) => n.parse().ok(),
            None => range.parse::<usize>().ok().map(|_| 1),
        }
    };
    Some((count(old)?, count(new)?))
}

/// One column of a [`Table`].
pub struct Column {
    pub title: &'static str,
    /// Sorted as numbers (by each cell's sort key), else as text.
    pub numeric: bool,
}

/// One cell: its text, and the key it sorts by when that is not the text (a rate for `3/4`).
pub struct Cell {
    pub text: String,
    pub sort: Option<f64>,
    pub class: Option<String>,
}

impl Cell {
    pub fn text(text: impl Into<String>) -> Self {
        Self { text: text.into(), sort: None, class: None }
    }

    pub fn number(text: impl Into<String>, sort: f64) -> Self {
        Self { text: text.into(), sort: Some(sort), class: None }
    }

    pub fn class(mut self, class: impl Into<String>) -> Self {
        self.class = Some(class.into());
        self
    }
}

/// One row; with `detail`, a click on it shows the detail below it.
pub struct Row {
    /// Opened by `#open=ID` in the page address.
    pub id: String,
    pub cells: Vec<Cell>,
    pub detail: Option<Markup>,
}

/// A table that sorts by any column (click its header) and filters by text and, optionally,
/// by the values of one column.
pub struct Table {
    pub id: &'static str,
    pub columns: Vec<Column>,
    pub rows: Vec<Row>,
    /// The column whose distinct values fill a drop-down filter.
    pub filter_column: Option<usize>,
}

impl Table {
    pub fn render(&self) -> Markup {
        let mut controls =
            Markup::trusted("<input type=\"search\" class=\"filter\" placeholder=\"filter rows\">".into());
        if let Some(column) = self.filter_column {
            let mut values: Vec<&str> =
                self.rows.iter().filter_map(|r| r.cells.get(column)).map(|c| c.text.as_str()).collect();
            values.sort();
            values.dedup();
            let mut options =
                text_tag("option", &[("value", "")], &format!("any {}", self.columns[column].title));
            for v in values {
                options.push(text_tag("option", &[("value", v)], v));
            }
            controls.push(tag("select", &[("class", "only"), ("data-column", &column.to_string())], options));
        }
        controls.push(text_tag("span", &[("class", "count")], &format!("{} rows", self.rows.len())));
        let head: Markup = self
            .columns
            .iter()
            .map(|c| text_tag("th", &[("data-type", if c.numeric { "num" } else { "text" })], c.title))
            .collect();
        let mut body = Markup::empty();
        for row in &self.rows {
            let cells: Markup = row
                .cells
                .iter()
                .map(|cell| {
                    let sort = cell.sort.map(|s| if s.is_finite() { s.to_string() } else { "0".into() });
                    let mut attrs: Vec<(&'static str, &str)> = Vec::new();
                    if let Some(sort) = &sort {
                        attrs.push(("data-sort", sort));
                    }
                    if let Some(class) = &cell.class {
                        attrs.push(("class", class));
                    }
                    text_tag("td", &attrs, &cell.text)
                })
                .collect();
            let class = if row.detail.is_some() { "item expandable" } else { "item" };
            body.push(tag("tr", &[("class", class), ("data-id", &row.id)], cells));
            if let Some(detail) = &row.detail {
                let cell = tag("td", &[("colspan", &self.columns.len().to_string())], detail.clone());
                body.push(Markup(format!("<tr class=\"detail\" hidden>{}</tr>", cell.as_str())));
            }
        }
        let mut table = tag("thead", &[], tag("tr", &[], head));
        table.push(tag("tbody", &[], body));
        let mut wrap = tag("div", &[("class", "controls")], controls);
        wrap.push(tag("table", &[("class", "sortable")], table));
        tag("div", &[("class", "table"), ("id", self.id)], wrap)
    }
}

const STYLE: &str = include_str!("html/page.css");
const SCRIPT: &str = include_str!("html/page.js");

/// The whole page: `title` in the header, `body` in the main part, our style and script.
/// The robustness table of a report: a row per perturbation family, sortable by each figure.
pub fn robustness_table(robustness: &BTreeMap<String, FamilyRobustness>) -> Markup {
    // Numeric columns sort by the number they start with.
    let cell = |text: String, numeric: bool| {
        let lead = text.split_whitespace().next().and_then(|w| w.parse::<f64>().ok());
        match (numeric, lead) {
            (true, Some(v)) => Cell::number(text, v),
            (true, None) => Cell::number(text, 0.0),
            (false, _) => Cell::text(text),
        }
    };
    let rows = robustness
        .iter()
        .map(|(family, r)| Row {
            id: format!("family-{family}"),
            cells: r.cells(family).into_iter().enumerate().map(|(i, text)| cell(text, i >= 2)).collect(),
            detail: None,
        })
        .collect();
    let columns =
        FamilyRobustness::COLUMNS.iter().enumerate().map(|(i, &title)| Column { title, numeric: i >= 2 });
    Table { id: "robust-families", columns: columns.collect(), rows, filter_column: None }.render()
}

pub fn page(title: &str, subtitle: &str, body: Markup) -> String {
    let script_hash = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(SCRIPT.as_bytes()));
    // Nothing may be fetched or run but our own inline script; images only as data.
    let policy = format!(
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'sha256-{script_hash}'; base-uri 'none'; form-action 'none'"
    );
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{policy}\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <header><h1>{title}</h1><p class=\"subtitle\">{subtitle}</p></header>\n<main>\n{body}\n</main>\n\
         <footer>repairbench {version}</footer>\n<script>{SCRIPT}</script>\n</body>\n</html>\n",
        title = escape(title),
        subtitle = escape(subtitle),
        body = body.as_str(),
        version = env!("CARGO_PKG_VERSION"),
    )
}

#[cfg(test)]
mod tests;
