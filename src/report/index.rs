//! `index.html`: the one page of a run folder. It says what ran (the model, the
//! configuration, the machine), whether the harness proved itself, and each part's headline
//! figure with a link to that part's own report. It knows no domain: the run hands it texts.

use std::path::Path;

use super::html::{self, facts, list, page, pre, relative_link, section, stat, stats, Markup};
use super::ReportError;

/// What the page shows.
#[derive(Debug, Clone, Default)]
pub struct RunIndex {
    pub title: String,
    /// The model (name, sha256, backend) and the machine (CPU, threads), as (label, text).
    pub facts: Vec<(String, String)>,
    /// The run's configuration as written (TOML or JSON).
    pub configuration: String,
    pub check: Option<CheckLine>,
    pub parts: Vec<IndexPart>,
}

/// The harness check's verdict line and what failed it.
#[derive(Debug, Clone)]
pub struct CheckLine {
    pub ok: bool,
    pub line: String,
    pub failures: Vec<String>,
    /// The controls' own reports, by path segments relative to the run folder.
    pub links: Vec<(Vec<String>, String)>,
}

/// One part of a run (code repair, a suite) and its headline figure.
#[derive(Debug, Clone)]
pub struct IndexPart {
    pub id: String,
    pub title: String,
    pub headline: String,
    /// Under the figure: its interval, its count.
    pub note: String,
    /// Links to the part's own reports, by path segments relative to the run folder.
    pub links: Vec<(Vec<String>, String)>,
}

/// Writes `out/index.html`.
pub fn write_index(out: &Path, index: &RunIndex) -> Result<(), ReportError> {
    super::write_text_atomic(&out.join("index.html"), &render(index))
}

pub fn render(index: &RunIndex) -> String {
    let mut body = Markup::empty();
    if let Some(check) = &index.check {
        let (class, verdict) = match check.ok {
            true => ("check ok", "OK"),
            false => ("check failed", "FAILED"),
        };
        let mut inner = html::text_tag(
            "p",
            &[("class", class), ("id", "check-line")],
            &format!("{verdict}: {}", check.line),
        );
        if !check.ok {
            inner.push(list(&check.failures, "failures"));
            inner.push(html::text_tag(
                "p",
                &[],
                "The harness is broken here, so the model's figures below do not measure the model.",
            ));
        }
        inner.push(link_list(&check.links));
        body.push(section("harness-check", "Harness check", inner));
    }
    let cards: Vec<Markup> = index
        .parts
        .iter()
        .map(|p| stat(&format!("{}-headline", p.id), &p.title, Markup::text(&p.headline), &p.note))
        .collect();
    body.push(stats(cards));
    for part in &index.parts {
        body.push(section(&part.id, &part.title, link_list(&part.links)));
    }
    let pairs: Vec<(&str, String)> = index.facts.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    body.push(section("run", "Model and machine", facts(&pairs)));
    body.push(section("configuration", "Configuration", pre(&index.configuration)));
    page(&index.title, "one page per run: what ran, whether the harness held, and where each report is", body)
}

fn link_list(links: &[(Vec<String>, String)]) -> Markup {
    let items: Markup = links
        .iter()
        .map(|(segments, label)| {
            let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
            html::tag("li", &[], relative_link(&segments, label))
        })
        .collect();
    html::tag("ul", &[("class", "links")], items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_escapes_run_text_and_links_stay_inside_the_folder() {
        let index = RunIndex {
            title: "repairbench run".into(),
            facts: vec![("model".into(), "<script>x</script>".into())],
            configuration: "a = 1".into(),
            check: Some(CheckLine {
                ok: false,
                line: "gold 0/1".into(),
                failures: vec!["i: <b>".into()],
                links: Vec::new(),
            }),
            parts: vec![IndexPart {
                id: "repair".into(),
                title: "Code repair".into(),
                headline: "0 of 1".into(),
                note: String::new(),
                links: vec![
                    (vec!["repair".into(), "report.html".into()], "report".into()),
                    (vec!["..".into(), "etc".into()], "escape".into()),
                ],
            }],
        };
        let page = render(&index);
        assert!(!page.contains("<script>x") && page.contains("&lt;script&gt;x"), "{page}");
        assert!(page.contains("href=\"repair/report.html\""), "{page}");
        assert!(!page.contains("href=\"../etc\""), "{page}");
        assert!(page.contains("FAILED: gold 0/1") && page.contains("i: &lt;b&gt;"), "{page}");
    }
}
