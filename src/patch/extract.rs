//! Turning a model's answer into a unified diff. Knows nothing about models: it reads text.
//!
//! Tried in order: `<patch>` tags; ```diff / ```patch fences; a bare diff in the text;
//! search/replace blocks; whole-file rewrites in fenced code under a file name. The last two
//! are turned into a diff against the base files with `similar`.

use serde::{Deserialize, Serialize};

use super::diff;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExtractMethod {
    PatchTags,
    DiffFence,
    BareDiff,
    SearchReplace,
    WholeFile,
    /// Nothing usable: the prediction is an empty patch.
    None,
}

impl ExtractMethod {
    /// Where in the answer the diff was found, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Self::PatchTags => "between <patch> tags",
            Self::DiffFence => "in a diff code fence",
            Self::BareDiff => "as a bare diff",
            Self::SearchReplace => "as search/replace blocks",
            Self::WholeFile => "as whole rewritten files",
            Self::None => "none",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extracted {
    pub patch: String,
    pub method: ExtractMethod,
}

/// Extracts a patch from `output`; `read_file` gives a base file's text by repository path;
/// `shown_files` are the files the prompt showed (a nameless rewrite is matched against them).
pub fn extract_patch(
    output: &str,
    read_file: &dyn Fn(&str) -> Option<String>,
    shown_files: &[String],
) -> Extracted {
    let found = |patch: String, method| Extracted { patch, method };
    if let Some(inner) = between_tags(output) {
        let inner = strip_fences(&inner);
        if !diff::parse(&inner).is_empty() {
            return found(ensure_newline(inner), ExtractMethod::PatchTags);
        }
    }
    let fenced: Vec<String> = fences(output)
        .into_iter()
        .filter(|f| matches!(f.lang.as_str(), "diff" | "patch" | "udiff"))
        .map(|f| f.body)
        .collect();
    if !fenced.is_empty() {
        let joined = fenced.join("\n");
        if !diff::parse(&joined).is_empty() {
            return found(ensure_newline(joined), ExtractMethod::DiffFence);
        }
    }
    if !diff::parse(output).is_empty() {
        let start = output.find("diff --git").or_else(|| output.find("--- ")).unwrap_or(0);
        return found(ensure_newline(output[start..].to_owned()), ExtractMethod::BareDiff);
    }
    if let Some(patch) = search_replace(output, read_file) {
        return found(patch, ExtractMethod::SearchReplace);
    }
    if let Some(patch) = whole_files(output, read_file, shown_files) {
        return found(patch, ExtractMethod::WholeFile);
    }
    found(String::new(), ExtractMethod::None)
}

fn ensure_newline(mut text: String) -> String {
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

fn between_tags(output: &str) -> Option<String> {
    let start = output.find("<patch>")? + "<patch>".len();
    let rest = &output[start..];
    let end = rest.find("</patch>").unwrap_or(rest.len());
    Some(rest[..end].trim_matches('\n').to_owned())
}

fn strip_fences(text: &str) -> String {
    text.lines().filter(|l| !l.trim_start().starts_with("```")).collect::<Vec<_>>().join("\n")
}

struct Fence {
    lang: String,
    /// Words after the language on the opening line (some models put the file name there).
    info: String,
    body: String,
    /// The last non-empty line before the fence.
    before: String,
    /// Whether a closing fence was found (an unclosed one is cut-off output).
    closed: bool,
}

fn fences(output: &str) -> Vec<Fence> {
    let lines: Vec<&str> = output.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            let mut words = info.split_whitespace();
            let lang = words.next().unwrap_or("").to_lowercase();
            let info = words.collect::<Vec<_>>().join(" ");
            let before =
                lines[..i].iter().rev().find(|l| !l.trim().is_empty()).map_or("", |l| l.trim()).to_owned();
            let start = i + 1;
            let mut end = start;
            while end < lines.len() && !lines[end].trim_start().starts_with("```") {
                end += 1;
            }
            let mut body = lines[start..end].join("\n");
            body.push('\n');
            out.push(Fence { lang, info, body, before, closed: end < lines.len() });
            i = end + 1;
        } else {
            i += 1;
        }
    }
    out
}

/// A file name at the start or end of a line like `File: a/b.py`, `### a/b.py`, `a/b.py:`.
fn file_name_in(line: &str) -> Option<String> {
    let cleaned = line
        .trim()
        .trim_start_matches(['#', '*', '`', ' '])
        .trim_end_matches(['*', '`', ':', ' '])
        .trim_start_matches("File:")
        .trim_start_matches("file:")
        .trim_start_matches("Path:")
        .trim();
    let candidate = cleaned.split_whitespace().last()?.trim_matches('`');
    (candidate.contains('.') && !candidate.contains("://"))
        .then(|| candidate.trim_start_matches("./").to_owned())
}

/// Unified diff of one file's change, with a git header.
pub fn file_diff(path: &str, old: &str, new: &str) -> String {
    if old == new {
        return String::new();
    }
    let body = similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string();
    format!("diff --git a/{path} b/{path}\n{body}")
}

fn search_replace(output: &str, read_file: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let lines: Vec<&str> = output.lines().collect();
    // Edited contents per file, in first-seen order.
    let mut edited: Vec<(String, String, String)> = Vec::new();
    let mut current_file: Option<String> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        if line.starts_with("<<<<<<<") && line.contains("SEARCH") {
            let search_start = i + 1;
            let Some(divider) = (search_start..lines.len()).find(|&k| lines[k].trim() == "=======") else {
                break;
            };
            let Some(end) =
                (divider + 1..lines.len()).find(|&k| lines[k].trim_start().starts_with(">>>>>>>"))
            else {
                break;
            };
            let search: String = lines[search_start..divider].iter().map(|l| format!("{l}\n")).collect();
            let replace: String = lines[divider + 1..end].iter().map(|l| format!("{l}\n")).collect();
            i = end + 1;
            let Some(path) = current_file.clone() else { continue };
            let slot = match edited.iter().position(|(p, _, _)| *p == path) {
                Some(slot) => slot,
                None => {
                    let Some(base) = read_file(&path) else { continue };
                    edited.push((path.clone(), base.clone(), base));
                    edited.len() - 1
                }
            };
            let text = &mut edited[slot].2;
            if search.trim().is_empty() {
                text.push_str(&replace);
            } else if let Some(pos) = text.find(&search) {
                text.replace_range(pos..pos + search.len(), &replace);
            }
            continue;
        }
        if !line.is_empty() && !line.starts_with("```") {
            if let Some(name) = file_name_in(line) {
                current_file = Some(name);
            }
        }
        i += 1;
    }
    let patch: String = edited.iter().map(|(path, old, new)| file_diff(path, old, new)).collect();
    (!patch.is_empty()).then_some(patch)
}

/// A rewrite at least this similar (by lines) to a shown file is taken as that file's new text.
const REWRITE_MIN_RATIO: f32 = 0.6;

fn whole_files(
    output: &str,
    read_file: &dyn Fn(&str) -> Option<String>,
    shown_files: &[String],
) -> Option<String> {
    let mut patch = String::new();
    for fence in fences(output) {
        if !fence.closed || matches!(fence.lang.as_str(), "diff" | "patch" | "udiff") {
            // Cut-off output would truncate the file it rewrites.
            continue;
        }
        let mut body = fence.body.clone();
        let mut candidates = vec![fence.info.clone(), fence.before.clone()];
        // `# file: a/b.py` as the fence's first line.
        if let Some(first) = body.lines().next() {
            if first.trim_start().starts_with('#') && first.contains('.') {
                candidates.insert(0, first.to_owned());
            }
        }
        let named = candidates
            .iter()
            .filter_map(|c| file_name_in(c))
            .find_map(|path| read_file(&path).map(|base| (path, base)));
        // No name: the shown file the code resembles most, if it resembles one closely.
        let Some((path, base)) = named.or_else(|| {
            shown_files
                .iter()
                .filter_map(|path| read_file(path).map(|base| (path.clone(), base)))
                .map(|(path, base)| {
                    let ratio = similar::TextDiff::from_lines(&base, &body).ratio();
                    (ratio, path, base)
                })
                .filter(|(ratio, _, _)| *ratio >= REWRITE_MIN_RATIO)
                .max_by(|a, b| a.0.total_cmp(&b.0))
                .map(|(_, path, base)| (path, base))
        }) else {
            continue;
        };
        if body
            .lines()
            .next()
            .is_some_and(|first| first.trim_start().starts_with('#') && first.contains(&path))
        {
            body = body.split_once('\n').map_or(String::new(), |(_, rest)| rest.to_owned());
        }
        patch.push_str(&file_diff(&path, &base, &body));
    }
    (!patch.is_empty()).then_some(patch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(path: &str) -> Option<String> {
        match path {
            "pkg/calc.py" => {
                Some("def add(a, b):\n    return a - b\n\n\ndef neg(a):\n    return -a\n".into())
            }
            _ => None,
        }
    }

    const DIFF: &str = "diff --git a/pkg/calc.py b/pkg/calc.py\n--- a/pkg/calc.py\n+++ b/pkg/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n";

    #[test]
    fn patch_tags_win_and_fences_inside_are_dropped() {
        let output = format!("Here is the fix.\n<patch>\n```diff\n{DIFF}```\n</patch>\nDone.");
        let got = extract_patch(&output, &base, &[]);
        assert_eq!(got.method, ExtractMethod::PatchTags);
        assert_eq!(got.patch, DIFF);
    }

    #[test]
    fn diff_fence() {
        let output = format!("Explanation\n```diff\n{DIFF}```\nThanks");
        let got = extract_patch(&output, &base, &[]);
        assert_eq!(got.method, ExtractMethod::DiffFence);
        assert_eq!(got.patch, DIFF);
    }

    #[test]
    fn bare_diff_starts_at_its_header() {
        let output = format!("I changed one line:\n{DIFF}");
        let got = extract_patch(&output, &base, &[]);
        assert_eq!(got.method, ExtractMethod::BareDiff);
        assert_eq!(got.patch, DIFF);
    }

    #[test]
    fn search_replace_blocks_become_a_diff() {
        let output = "pkg/calc.py\n```python\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n```\n";
        let got = extract_patch(output, &base, &[]);
        assert_eq!(got.method, ExtractMethod::SearchReplace);
        assert!(got
            .patch
            .starts_with("diff --git a/pkg/calc.py b/pkg/calc.py\n--- a/pkg/calc.py\n+++ b/pkg/calc.py\n"));
        assert!(got.patch.contains("-    return a - b\n+    return a + b\n"), "{}", got.patch);
    }

    #[test]
    fn whole_file_rewrite_becomes_a_diff() {
        let output = "The fixed file:\n\n`pkg/calc.py`:\n```python\ndef add(a, b):\n    return a + b\n\n\ndef neg(a):\n    return -a\n```\n";
        let got = extract_patch(output, &base, &[]);
        assert_eq!(got.method, ExtractMethod::WholeFile);
        assert!(got.patch.contains("-    return a - b\n+    return a + b\n"), "{}", got.patch);
        assert!(!got.patch.contains("neg(a):\n-"), "unchanged lines stay context");
    }

    #[test]
    fn nameless_rewrite_of_a_shown_file_is_matched_but_cut_off_output_is_not() {
        let fixed = "def add(a, b):\n    return a + b\n\n\ndef neg(a):\n    return -a\n";
        let output = format!("```python\n{fixed}```\n");
        let shown = vec!["pkg/calc.py".to_string()];
        let got = extract_patch(&output, &base, &shown);
        assert_eq!(got.method, ExtractMethod::WholeFile);
        assert!(got.patch.starts_with("diff --git a/pkg/calc.py b/pkg/calc.py\n"), "{}", got.patch);
        let cut = "```python\ndef add(a, b):\n    return a + b\n";
        assert_eq!(extract_patch(cut, &base, &shown).method, ExtractMethod::None);
        assert_eq!(
            extract_patch(&output, &base, &[]).method,
            ExtractMethod::None,
            "unshown files are not guessed"
        );
    }

    #[test]
    fn code_for_an_unknown_file_or_prose_gives_nothing() {
        let output = "Try this:\n```python\nprint('hi')\n```\nmaybe in other.py";
        let got = extract_patch(output, &base, &[]);
        assert_eq!(got, Extracted { patch: String::new(), method: ExtractMethod::None });
    }
}
