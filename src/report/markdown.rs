//! Small Markdown pieces for run summaries (a merge-request note, a CI job summary).

use std::collections::BTreeMap;

use crate::stats::perturbed::FamilyRobustness;

/// A table; `|` and newlines inside cells are escaped so a cell never breaks the row.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let cell = |text: &str| text.replace('|', "\\|").replace(['\n', '\r'], " ");
    let mut out = format!("| {} |\n|{}\n", headers.join(" | "), "---|".repeat(headers.len()));
    for row in rows {
        out.push_str(&format!("| {} |\n", row.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | ")));
    }
    out
}

/// `0.4567` as `45.7%`.
pub fn percent(value: f64) -> String {
    format!("{:.1}%", value * 100.0)
}

/// The robustness table of `report.md`: a row per perturbation family, its variants against
/// the originals.
pub fn robustness_table(robustness: &BTreeMap<String, FamilyRobustness>) -> String {
    let rows: Vec<Vec<String>> = robustness.iter().map(|(family, r)| r.cells(family)).collect();
    let mut out = String::from("\nRobustness (each family's variants against the originals):\n\n");
    out.push_str(&table(&FamilyRobustness::COLUMNS, &rows));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_cannot_break_the_table() {
        let t = table(&["id", "why"], &[vec!["a|b".into(), "two\nlines".into()]]);
        assert_eq!(t, "| id | why |\n|---|---|\n| a\\|b | two lines |\n");
        assert_eq!(percent(0.4567), "45.7%");
    }
}
