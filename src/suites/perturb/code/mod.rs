//! The code families (HumanEval, MBPP): the task's function renamed, its docstring's prose
//! edited, its code in another whitespace style. They act on the row's fields as the suite
//! file's `[perturb.code]` names them, so the prompt, the reference solution and the tests
//! change together; every edit is made on a parse tree and kept only when the edited code
//! parses to the same structure, and `eval --canonical` checks the meaning by running the
//! reference solutions.

mod format;
mod python;

use std::collections::BTreeSet;
use std::ops::Range;

use serde_json::Value;

use super::super::def::CodeFieldsDef;
use super::super::prompt::Doc;
use crate::perturb::text::{self, TextEdit};
use crate::rng::SplitMix64;
use format::Spacing;
use python::{Edit, Source, BUILTINS, KEYWORDS};

/// Which code edit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeEdit {
    /// The function and its parameters and local variables renamed.
    Rename,
    /// Typos and changed case in the docstring's prose (and the task's description).
    Docstring,
    /// Indentation unit, operator and comma spacing, blank lines between definitions.
    Format,
}

/// `doc` with `edit` made under `key`; `None` when it cannot be made (code that does not parse,
/// no function to rename, nothing the edit would change).
pub fn perturb(edit: CodeEdit, fields: &CodeFieldsDef, doc: &Doc, key: u64) -> Option<Doc> {
    let mut rng = SplitMix64::new(key);
    let mut row = Row::read(fields, doc)?;
    match edit {
        CodeEdit::Rename => rename(&mut row, fields, doc, &mut rng)?,
        CodeEdit::Docstring => docstring(&mut row, &mut rng)?,
        CodeEdit::Format => reformat(&mut row, &mut rng)?,
    }
    let mut out = doc.clone();
    row.write(fields, &mut out);
    (out.row.fields != doc.row.fields).then_some(out)
}

/// The code-bearing fields of a row, as text.
struct Row {
    /// `[perturb.code] function`: joined, the source defining the function.
    function: Vec<String>,
    /// `callers`: each a list of snippets (one for a text field).
    callers: Vec<Vec<String>>,
    description: Vec<String>,
    /// The function's new name, for the entry-point field.
    renamed: Option<String>,
}

impl Row {
    fn read(fields: &CodeFieldsDef, doc: &Doc) -> Option<Self> {
        let text = |f: &String| doc.row.fields.get(f).and_then(Value::as_str).map(str::to_owned);
        let snippets = |f: &String| match doc.row.fields.get(f)? {
            Value::String(s) => Some(vec![s.clone()]),
            Value::Array(items) => items.iter().map(|v| v.as_str().map(str::to_owned)).collect(),
            _ => None,
        };
        Some(Self {
            function: fields.function.iter().map(text).collect::<Option<_>>()?,
            callers: fields.callers.iter().map(snippets).collect::<Option<_>>()?,
            description: fields.description.iter().map(text).collect::<Option<_>>()?,
            renamed: None,
        })
    }

    fn write(self, fields: &CodeFieldsDef, doc: &mut Doc) {
        let row = &mut doc.row.fields;
        for (f, text) in fields.function.iter().zip(self.function) {
            row.insert(f.clone(), Value::String(text));
        }
        for (f, snippets) in fields.callers.iter().zip(self.callers) {
            let value = match row.get(f) {
                Some(Value::Array(_)) => Value::Array(snippets.into_iter().map(Value::String).collect()),
                _ => Value::String(snippets.concat()),
            };
            row.insert(f.clone(), value);
        }
        for (f, text) in fields.description.iter().zip(self.description) {
            row.insert(f.clone(), Value::String(text));
        }
        if let (Some(f), Some(name)) = (&fields.entry_point, self.renamed) {
            row.insert(f.clone(), Value::String(name));
        }
    }
}

/// Makes `edits` (ranges of the fields joined) in `fields`; `None` when one crosses from a
/// field into the next. An insertion where one field ends and the next begins goes to the
/// next (it starts a line there).
fn split(fields: &[String], edits: &[Edit]) -> Option<Vec<String>> {
    let mut starts = Vec::with_capacity(fields.len());
    let mut at = 0;
    for f in fields {
        starts.push(at);
        at += f.len();
    }
    let mut per_field: Vec<Vec<Edit>> = vec![Vec::new(); fields.len()];
    for e in edits {
        let i = (0..fields.len())
            .rev()
            .find(|&i| starts[i] <= e.range.start && e.range.end <= starts[i] + fields[i].len())?;
        per_field[i]
            .push(Edit { range: e.range.start - starts[i]..e.range.end - starts[i], text: e.text.clone() });
    }
    Some(fields.iter().zip(per_field).map(|(f, e)| python::apply(f, &e)).collect())
}

/// The function source after `edits`, kept only when it parses to the same tree (with the
/// same tokens when `same_tokens`).
fn edited_function(
    function: &[String],
    src: &Source,
    edits: &[Edit],
    same_tokens: bool,
) -> Option<Vec<String>> {
    let out = split(function, edits)?;
    let after = Source::parse(out.concat())?;
    let tokens =
        |s: &Source| s.code_tokens().into_iter().map(|(r, _, _)| s.text[r].to_owned()).collect::<Vec<_>>();
    let same = after.shape(false) == src.shape(false) && (!same_tokens || tokens(&after) == tokens(src));
    same.then_some(out)
}

/// Renames the function, then its parameters and locals that appear nowhere else, to fresh
/// names; the callers and the entry-point field follow, and so does `name(` in the docstring.
fn rename(row: &mut Row, fields: &CodeFieldsDef, doc: &Doc, rng: &mut SplitMix64) -> Option<()> {
    let src = Source::parse(row.function.concat())?;
    let callers: Vec<Vec<Source>> = row
        .callers
        .iter()
        .map(|snippets| snippets.iter().map(|s| Source::parse(s.as_str())).collect::<Option<Vec<_>>>())
        .collect::<Option<_>>()?;
    let called: BTreeSet<String> = callers.iter().flatten().flat_map(Source::identifiers).collect();
    let name = match &fields.entry_point {
        Some(f) => doc.field_text(f)?,
        None => src.top_functions().into_iter().find(|f| called.contains(f))?,
    };
    let function = src.function(&name)?;
    // A name seen outside the function (or as a keyword argument) may mean something there.
    let inside: Range<usize> = function.byte_range();
    let mut outside: BTreeSet<String> = called.clone();
    for n in src.nodes(src.root()) {
        if n.kind() == "identifier" && !(inside.start <= n.start_byte() && n.end_byte() <= inside.end) {
            outside.insert(src.text_of(n).to_owned());
        }
    }
    outside.extend(src.keyword_names());
    outside.extend(callers.iter().flatten().flat_map(Source::keyword_names));
    let mut taken: BTreeSet<String> = src.identifiers().into_iter().chain(called).collect();
    taken.extend(BUILTINS.iter().chain(KEYWORDS).map(|s| s.to_string()));

    let mut edits = Vec::new();
    let new_name = fresh_name(&name, "f", rng, &mut taken)?;
    let renamed = |refs: Option<&Vec<Range<usize>>>, new: &str| -> Vec<Edit> {
        refs.into_iter().flatten().map(|range| Edit { range: range.clone(), text: new.to_owned() }).collect()
    };
    edits.extend(renamed(src.references(src.root().byte_range()).get(&name), &new_name));
    let in_function = src.references(inside.clone());
    for local in src.locals(function) {
        if local == name || outside.contains(&local) || BUILTINS.contains(&local.as_str()) {
            continue;
        }
        let Some(new) = fresh_name(&local, "v", rng, &mut taken) else { continue };
        edits.extend(renamed(in_function.get(&local), &new));
    }
    if let Some(docstring) = src.docstring(function) {
        for content in src.string_contents(docstring) {
            for at in calls_in(&src.text[content.clone()], &name) {
                let start = content.start + at;
                edits.push(Edit { range: start..start + name.len(), text: new_name.clone() });
            }
        }
    }
    row.function = edited_function(&row.function, &src, &edits, false)?;
    for (snippets, sources) in row.callers.iter_mut().zip(&callers) {
        for (snippet, caller) in snippets.iter_mut().zip(sources) {
            let edits = renamed(caller.references(caller.root().byte_range()).get(&name), &new_name);
            let out = python::apply(snippet, &edits);
            (Source::parse(out.as_str())?.shape(false) == caller.shape(false)).then_some(())?;
            *snippet = out;
        }
    }
    row.renamed = Some(new_name);
    Some(())
}

/// Where `name(` starts in `text`, as a whole name.
fn calls_in(text: &str, name: &str) -> Vec<usize> {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(&format!("{name}("))
        .map(|(i, _)| i)
        .filter(|&i| !text[..i].chars().next_back().is_some_and(is_name))
        .collect()
}

/// A new name for `old`, fresh in `taken` (which gains it): its camelCase (or snake_case)
/// spelling, a typo in it, or an opaque name starting with `prefix`, whichever the seed picks
/// first that differs from `old` and is free.
fn fresh_name(old: &str, prefix: &str, rng: &mut SplitMix64, taken: &mut BTreeSet<String>) -> Option<String> {
    let first = (rng.next_u64() % 3) as usize;
    for style in (0..3).map(|i| (first + i) % 3) {
        let candidate = match style {
            0 => recase(old),
            1 => typo(old, rng),
            _ => Some(opaque(prefix, rng)),
        };
        if let Some(new) = candidate.filter(|n| n != old && !taken.contains(n) && is_identifier(n)) {
            taken.insert(new.clone());
            return Some(new);
        }
    }
    (0..8).map(|_| opaque(prefix, rng)).find(|n| !taken.contains(n)).inspect(|n| {
        taken.insert(n.clone());
    })
}

fn is_identifier(name: &str) -> bool {
    name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `sort_third` → `sortThird`, `findVolume` → `find_volume`.
fn recase(name: &str) -> Option<String> {
    if name.trim_matches('_').contains('_') {
        let mut parts = name.split('_').filter(|p| !p.is_empty());
        let mut out = parts.next()?.to_ascii_lowercase();
        for p in parts {
            let mut chars = p.chars();
            out.extend(chars.next().map(|c| c.to_ascii_uppercase()));
            out.push_str(&chars.as_str().to_ascii_lowercase());
        }
        return Some(out);
    }
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    Some(out)
}

/// Two neighbouring inner letters swapped (names of four or more letters).
fn typo(name: &str, rng: &mut SplitMix64) -> Option<String> {
    let mut bytes = name.as_bytes().to_vec();
    if bytes.len() < 4 {
        return None;
    }
    let spots: Vec<usize> = (1..bytes.len() - 2)
        .filter(|&i| {
            bytes[i] != bytes[i + 1] && bytes[i].is_ascii_alphabetic() && bytes[i + 1].is_ascii_alphabetic()
        })
        .collect();
    let i = *spots.get((rng.next_u64() % spots.len().max(1) as u64) as usize)?;
    bytes.swap(i, i + 1);
    String::from_utf8(bytes).ok()
}

/// `prefix_` and four seeded letters.
fn opaque(prefix: &str, rng: &mut SplitMix64) -> String {
    let letters: String = (0..4).map(|_| (b'a' + (rng.next_u64() % 26) as u8) as char).collect();
    format!("{prefix}_{letters}")
}

/// Typos and changed case in the prose of the function's docstring (never its examples) and
/// in the description fields.
fn docstring(row: &mut Row, rng: &mut SplitMix64) -> Option<()> {
    let edit = |text: &str, kept: &[Range<usize>], rng: &mut SplitMix64| {
        let typo = text::apply_outside(TextEdit::Typo, text, rng.next_u64(), kept);
        text::apply_outside(TextEdit::Case, &typo, rng.next_u64(), kept)
    };
    for text in &mut row.description {
        *text = edit(text, &[], rng);
    }
    if !row.function.is_empty() {
        let src = Source::parse(row.function.concat())?;
        let names = src.identifiers();
        let mut edits = Vec::new();
        let functions: Vec<_> = src.top_functions().iter().filter_map(|n| src.function(n)).collect();
        for function in functions {
            let Some(string) = src.docstring(function) else { continue };
            for content in src.string_contents(string) {
                let old = &src.text[content.clone()];
                let new = edit(old, &examples(old, &names), rng);
                if new != old {
                    edits.push(Edit { range: content, text: new });
                }
            }
        }
        row.function = edited_function(&row.function, &src, &edits, true)?;
    }
    Some(())
}

/// What a docstring's prose edits must leave alone: doctest lines and their output, lines that
/// show code (a call `name(`, `=`, an arrow, brackets), and every word that is a name in the
/// code (`n` in "Assume n > 1" is the parameter).
fn examples(text: &str, names: &BTreeSet<String>) -> Vec<Range<usize>> {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let mut at = 0;
    let mut after_prompt = false;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim();
        let prompt = trimmed.starts_with(">>>") || trimmed.starts_with("...");
        after_prompt = if trimmed.is_empty() { false } else { prompt || after_prompt };
        let call = line.match_indices('(').any(|(i, _)| line[..i].chars().next_back().is_some_and(is_name));
        let code_like = call || trimmed.contains(|c: char| "=[]{}".contains(c)) || trimmed.contains("->");
        if after_prompt || code_like {
            out.push(at..at + line.len());
        }
        at += line.len();
    }
    let mut start = None;
    for (i, c) in text.char_indices().chain(std::iter::once((text.len(), ' '))) {
        match (is_name(c), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                if names.contains(&text[s..i]) {
                    out.push(s..i);
                }
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// The code in another seeded whitespace style: a new indentation unit, operators and commas
/// spaced otherwise, and (for the function's source) other blank lines between definitions.
fn reformat(row: &mut Row, rng: &mut SplitMix64) -> Option<()> {
    let callers: Vec<Source> =
        row.callers.iter().flatten().map(|s| Source::parse(s.as_str())).collect::<Option<_>>()?;
    // The seed's spacing, unless the callers (MBPP shows its tests) are written that way already.
    let mut spacings = [Spacing::Compact, Spacing::Spacious];
    if rng.next_u64() % 2 == 1 {
        spacings.reverse();
    }
    let restyles = |s: Spacing| callers.iter().any(|c| !format::respace(c, s).is_empty());
    let spacing = spacings.into_iter().find(|&s| restyles(s)).unwrap_or(spacings[0]);
    let blank = [1usize, 3][(rng.next_u64() % 2) as usize];
    if !row.function.is_empty() {
        let src = Source::parse(row.function.concat())?;
        let unit = format::indent_unit(&src);
        let units: Vec<&str> =
            ["  ", "\t", "   ", "        "].into_iter().filter(|u| Some(*u) != unit.as_deref()).collect();
        let chosen = units[(rng.next_u64() % units.len() as u64) as usize];
        // One step at a time, each checked on the code the step before left.
        for step in 0..3 {
            let src = Source::parse(row.function.concat())?;
            let edits = match step {
                0 => format::reindent(&src, chosen)?,
                1 => format::respace(&src, spacing),
                _ => format::blank_lines(&src, blank),
            };
            row.function = edited_function(&row.function, &src, &edits, true)?;
        }
    }
    for snippets in &mut row.callers {
        for snippet in snippets.iter_mut() {
            let src = Source::parse(snippet.as_str())?;
            let out = python::apply(snippet, &format::respace(&src, spacing));
            (Source::parse(out.as_str())?.shape(true) == src.shape(true)).then_some(())?;
            *snippet = out;
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suites::data::Row;

    const PROMPT: &str = "from typing import List\n\n\ndef count_below(values: List[int], limit: int) -> int:\n    \"\"\" Count the values below the limit; count_below is strict.\n    >>> count_below([1, 5, 2], 3)\n    2\n    \"\"\"\n";
    const SOLUTION: &str =
        "    total = 0\n    for value in values:\n        if value < limit:\n            total += 1\n    return total\n";
    const TEST: &str =
        "def check(candidate):\n    assert candidate([1, 2], 2) == 1\n    assert count_below([], 0) == 0\n";

    fn humaneval_like() -> (CodeFieldsDef, Doc) {
        let fields = CodeFieldsDef {
            function: vec!["prompt".into(), "canonical_solution".into()],
            callers: vec!["test".into()],
            entry_point: Some("entry_point".into()),
            description: Vec::new(),
        };
        let row = serde_json::json!({
            "task_id": "T/1", "prompt": PROMPT, "canonical_solution": SOLUTION, "test": TEST,
            "entry_point": "count_below",
        });
        let row = Row { fields: row.as_object().unwrap().clone(), path: "t.jsonl".into(), line: 1, index: 0 };
        (fields, Doc { id: "T/1".into(), row })
    }

    fn field(doc: &Doc, name: &str) -> String {
        doc.field_text(name).unwrap()
    }

    /// Variant outputs are part of a run's results: these must never change without a
    /// `perturb::VERSION` bump.
    #[test]
    fn rename_is_pinned_and_consistent() {
        let (fields, doc) = humaneval_like();
        let out = perturb(CodeEdit::Rename, &fields, &doc, 1).unwrap();
        assert_eq!(field(&out, "entry_point"), "f_todf");
        assert_eq!(
            field(&out, "prompt"),
            "from typing import List\n\n\ndef f_todf(v_rlys: List[int], lmiit: int) -> int:\n    \"\"\" Count the values below the limit; count_below is strict.\n    >>> f_todf([1, 5, 2], 3)\n    2\n    \"\"\"\n"
        );
        assert_eq!(
            field(&out, "canonical_solution"),
            "    v_yilp = 0\n    for v_sqoi in v_rlys:\n        if v_sqoi < lmiit:\n            v_yilp += 1\n    return v_yilp\n"
        );
        assert_eq!(field(&out, "test"), TEST.replace("count_below(", "f_todf("));
        // Prose keeps the old name: only `name(` is code in a docstring.
        assert!(field(&out, "prompt").contains("count_below is strict"));
        // Another key, other names.
        let other = perturb(CodeEdit::Rename, &fields, &doc, 2).unwrap();
        assert_ne!(field(&other, "prompt"), field(&out, "prompt"));
    }

    #[test]
    fn docstring_edits_prose_only() {
        let (fields, doc) = humaneval_like();
        for key in 0..50 {
            let out = perturb(CodeEdit::Docstring, &fields, &doc, key).unwrap();
            let prompt = field(&out, "prompt");
            assert_ne!(prompt, PROMPT, "{key}");
            assert!(prompt.contains("    >>> count_below([1, 5, 2], 3)\n    2\n"), "{key}: {prompt}");
            assert!(prompt.contains("def count_below(values: List[int], limit: int) -> int:"));
            assert_eq!(field(&out, "canonical_solution"), SOLUTION);
            assert_eq!(field(&out, "test"), TEST);
        }
        let out = perturb(CodeEdit::Docstring, &fields, &doc, 1).unwrap();
        assert_eq!(
            field(&out, "prompt"),
            PROMPT.replace(
                "the values below the limit; count_below is strict",
                "THE values BELOW the limit; count_below is strcit"
            )
        );
    }

    #[test]
    fn format_changes_whitespace_only() {
        let (fields, doc) = humaneval_like();
        let before = Source::parse(format!("{PROMPT}{SOLUTION}")).unwrap();
        for key in 0..50 {
            let out = perturb(CodeEdit::Format, &fields, &doc, key).unwrap();
            assert_ne!(field(&out, "prompt"), PROMPT, "{key}");
            let after =
                Source::parse(format!("{}{}", field(&out, "prompt"), field(&out, "canonical_solution")))
                    .unwrap();
            assert_eq!(after.shape(false), before.shape(false), "{key}");
            let tokens = |s: &Source| {
                s.code_tokens().into_iter().map(|(r, _, _)| s.text[r].to_owned()).collect::<Vec<_>>()
            };
            assert_eq!(tokens(&after), tokens(&before), "{key}");
        }
        let out = perturb(CodeEdit::Format, &fields, &doc, 1).unwrap();
        assert_eq!(
            field(&out, "canonical_solution"),
            "   total=0\n   for value in values:\n      if value<limit:\n         total+=1\n   return total\n"
        );
        assert!(field(&out, "prompt").starts_with("from typing import List\n\n\n\ndef count_below("));
        let out = perturb(CodeEdit::Format, &fields, &doc, 2).unwrap();
        assert_eq!(
            field(&out, "test"),
            "def check(candidate):\n    assert candidate([1,2],2)==1\n    assert count_below([],0)==0\n"
        );
    }

    /// A row's code is semi-trusted: deep nesting and many lines are walked with loops and
    /// sorted lookups, never recursion or a parent walk per node, and still edited.
    #[test]
    fn hostile_rows_are_read_without_recursion() {
        let (fields, mut doc) = humaneval_like();
        let depth = 20_000;
        let nested = format!("    {}total{} = 0\n", "(".repeat(depth), ")".repeat(depth));
        let strings = "    s = '''a\n    b'''  # c\n".repeat(5_000);
        let solution = format!("{nested}{strings}{SOLUTION}");
        doc.row.fields.insert("canonical_solution".into(), solution.clone().into());
        for edit in [CodeEdit::Rename, CodeEdit::Docstring, CodeEdit::Format] {
            let out = perturb(edit, &fields, &doc, 1).unwrap();
            assert_ne!(out.row.fields, doc.row.fields, "{edit:?}");
        }
    }

    /// MBPP's layout: no entry-point field, the tests a list of asserts, a description.
    #[test]
    fn mbpp_layout() {
        let fields = CodeFieldsDef {
            function: vec!["code".into()],
            callers: vec!["test_list".into()],
            entry_point: None,
            description: vec!["text".into()],
        };
        let row = serde_json::json!({
            "task_id": 3, "text": "Write a function to find the largest of two numbers.",
            "code": "def helper(a):\n    return a\n\ndef bigger(a, b):\n    best = a if a > b else b\n    return helper(best)",
            "test_list": ["assert bigger(1, 2) == 2", "assert bigger(b=1, a=3) == 3"],
        });
        let row = Row { fields: row.as_object().unwrap().clone(), path: "t.jsonl".into(), line: 1, index: 0 };
        let doc = Doc { id: "3".into(), row };
        let out = perturb(CodeEdit::Rename, &fields, &doc, 5).unwrap();
        let code = field(&out, "code");
        let tests = out.row.fields["test_list"].as_array().unwrap();
        let new = Source::parse(code.as_str()).unwrap().top_functions()[1].clone();
        assert_ne!(new, "bigger");
        assert!(code.starts_with("def helper(a):\n    return a\n"), "the helper keeps its names: {code}");
        assert!(
            tests.iter().all(|t| t.as_str().unwrap().starts_with(&format!("assert {new}("))),
            "{tests:?}"
        );
        // Passed by keyword in the tests: the parameters keep their names.
        assert!(code.contains(&format!("def {new}(a, b):")), "{code}");
        let out = perturb(CodeEdit::Docstring, &fields, &doc, 5).unwrap();
        assert_ne!(field(&out, "text"), field(&doc, "text"));
        let out = perturb(CodeEdit::Format, &fields, &doc, 5).unwrap();
        assert_ne!(out.row.fields["test_list"], doc.row.fields["test_list"]);
    }
}
