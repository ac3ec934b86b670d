//! From a set's source to the texts a probe scores: plain texts as given, a suite's items
//! with their gold answers, a SWE dataset's problem statements and the lines its gold patches
//! add.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Deserialize;

use super::{Method, ProbeError, SetSource, Side};
use crate::report::Skipped;

/// One text to score, or one prompt to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeItem {
    pub side: Side,
    pub id: String,
    /// Which text of the item (`text`, `problem_statement`, `patch`, `path`): each part is
    /// compared with the same part of the other set.
    pub part: String,
    /// The text scored (`mink`) or what the prompt is made of (the generation methods).
    pub text: String,
    pub expected: Expected,
}

/// What a generation probe's answer is scored against.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Expected {
    /// Nothing: the text itself is scored.
    Nothing,
    /// The files the gold patch touches (`path-guess`).
    Paths(Vec<String>),
    /// The rest of the gold patch (`patch-prefix`).
    Rest(String),
    /// The masked option's text (`ts-guess`).
    Option(String),
    /// The item's second half, and how the guided prompt names its dataset and split
    /// (`guided`).
    SecondHalf { dataset: String, split: String, rest: String },
}

/// What `ts-guess` needs, in its error.
const MULTIPLE_CHOICE: &str =
    "multiple-choice suites whose prompt lists the options (the MMLU layout): give both sets with --suite and --control-suite";

/// A texts file's line.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TextLine {
    id: serde_json::Value,
    text: String,
}

/// The items `method` probes in one set, in source order (at most `limit` source records),
/// and the input records that could not be used. A texts file with a bad line is an error
/// naming the line; the generation methods take SWE tasks only.
pub fn load_set(
    source: &SetSource,
    side: Side,
    limit: Option<usize>,
    method: Method,
) -> Result<(Vec<ProbeItem>, Vec<Skipped>), ProbeError> {
    if method == Method::Guided {
        let (texts, skipped) = load_set(source, side, limit, Method::MinK { k: super::DEFAULT_MIN_K })?;
        let dataset = dataset_name(source)?;
        let items = texts
            .into_iter()
            .filter_map(|item| {
                let (first, rest) = super::generate::split_halves(&item.text)?;
                let (dataset, split) = (dataset.clone(), "test".to_owned());
                Some(ProbeItem {
                    text: first,
                    expected: Expected::SecondHalf { dataset, split, rest },
                    ..item
                })
            })
            .collect();
        return Ok((items, skipped));
    }
    let limit = limit.unwrap_or(usize::MAX);
    let item = |id: &str, part: &str, text: String, expected: Expected| ProbeItem {
        side,
        id: id.to_owned(),
        part: part.into(),
        text,
        expected,
    };
    let needs = |what| ProbeError::Needs {
        method: method.label(),
        what,
        side: side.as_str(),
        source_name: source.describe(),
    };
    let tasks = match (source, method) {
        (SetSource::Suite { suite, data }, Method::TsGuess) => {
            let suite = crate::suites::load_suite(suite)?;
            if suite.kind() != crate::suites::SuiteKind::MultipleChoice {
                return Err(needs(MULTIPLE_CHOICE));
            }
            let (docs, _, _) = crate::suites::engine::test_docs(&suite, data.as_deref())?;
            let mut items = Vec::new();
            for doc in docs.iter().take(limit) {
                let (prompt, option) = crate::suites::prompt::masked_wrong_option(&suite, doc)?
                    .ok_or_else(|| needs(MULTIPLE_CHOICE))?;
                let question = super::generate::masked_question(&prompt);
                items.push(item(&doc.id, "option", question, Expected::Option(option)));
            }
            return Ok((items, Vec::new()));
        }
        (_, Method::TsGuess) => return Err(needs(MULTIPLE_CHOICE)),
        (SetSource::Dataset(path), _) => crate::tasks::load_tasks(path)?,
        (_, Method::PathGuess | Method::PatchPrefix) => {
            return Err(needs("SWE tasks: give both sets with --dataset and --control-dataset"))
        }
        (SetSource::Texts(path), _) => {
            let items = read_texts(path)?;
            let items = items.into_iter().take(limit);
            return Ok((
                items.map(|(id, text)| item(&id, "text", text, Expected::Nothing)).collect(),
                Vec::new(),
            ));
        }
        (SetSource::Suite { suite, data }, _) => {
            let suite = crate::suites::load_suite(suite)?;
            let (docs, _, _) = crate::suites::engine::test_docs(&suite, data.as_deref())?;
            let mut items = Vec::new();
            for doc in docs.iter().take(limit) {
                let text = crate::suites::prompt::item_with_answer(&suite, doc)?;
                items.push(item(&doc.id, "text", text, Expected::Nothing));
            }
            return Ok((items, Vec::new()));
        }
    };
    let mut items = Vec::new();
    for task in tasks.tasks.iter().take(limit) {
        let id = task.instance_id.as_str();
        match method {
            Method::MinK { .. } => {
                if !task.problem_statement.trim().is_empty() {
                    items.push(item(
                        id,
                        "problem_statement",
                        task.problem_statement.clone(),
                        Expected::Nothing,
                    ));
                }
                let added = added_lines(&task.patch);
                if !added.trim().is_empty() {
                    items.push(item(id, "patch", added, Expected::Nothing));
                }
            }
            Method::PathGuess => {
                let files = crate::patch::diff::files_touched(&task.patch);
                if !task.problem_statement.trim().is_empty() && !files.is_empty() {
                    let prompt = super::generate::path_question(&task.repo, &task.problem_statement);
                    items.push(item(id, "path", prompt, Expected::Paths(files)));
                }
            }
            Method::TsGuess | Method::Guided => unreachable!("read above"),
            Method::PatchPrefix => {
                if let Some((prefix, rest)) = super::generate::split_patch(&task.patch) {
                    items.push(item(id, "patch", prefix, Expected::Rest(rest)));
                }
            }
        }
    }
    Ok((items, tasks.skipped))
}

/// How the `guided` prompt names a set's dataset: a suite's published dataset (`cais/mmlu`) or
/// its name, else the file's or folder's name without extension.
fn dataset_name(source: &SetSource) -> Result<String, ProbeError> {
    Ok(match source {
        SetSource::Suite { suite, .. } => {
            let suite = crate::suites::load_suite(suite)?;
            let hub = suite.def.data.hub.as_ref().map(|h| h.get_ref().repo.clone());
            hub.unwrap_or_else(|| suite.def.name.clone())
        }
        SetSource::Texts(path) | SetSource::Dataset(path) => {
            let name = path.file_stem().or_else(|| path.file_name()).unwrap_or_default();
            name.to_string_lossy().into_owned()
        }
    })
}

/// `(id, text)` of every line of a texts file; ids must be unique and texts not empty.
fn read_texts(path: &Path) -> Result<Vec<(String, String)>, ProbeError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| ProbeError::Read { path: path.to_owned(), source })?;
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let err = |message: String| ProbeError::Texts { path: path.to_owned(), line: index + 1, message };
        let parsed: TextLine = serde_json::from_str(line)
            .map_err(|e| err(format!("expected {{\"id\": ..., \"text\": ...}}: {e}")))?;
        let id = match parsed.id {
            serde_json::Value::String(s) => s,
            serde_json::Value::Number(n) => n.to_string(),
            other => return Err(err(format!("`id` must be a string or a number, not {other}"))),
        };
        if parsed.text.trim().is_empty() {
            return Err(err(format!("the text of `{id}` is empty")));
        }
        if !seen.insert(id.clone()) {
            return Err(err(format!("the id `{id}` appears twice")));
        }
        out.push((id, parsed.text));
    }
    Ok(out)
}

/// The lines a unified diff adds, in order, without their `+`.
pub fn added_lines(patch: &str) -> String {
    let files = crate::patch::diff::parse(patch);
    let lines = files.iter().flat_map(|f| &f.hunks).flat_map(|h| &h.lines);
    let added: Vec<&str> = lines
        .filter_map(|l| match l {
            crate::patch::diff::HunkLine::Add(text) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    added.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_gives_its_added_lines_only() {
        let patch = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,3 @@\n-old\n+new\n context\n+++more\n";
        assert_eq!(added_lines(patch), "new\n++more");
    }

    #[test]
    fn a_bad_texts_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, "{\"id\": 1, \"text\": \"a\"}\n\n{\"id\": \"x\"}\n").unwrap();
        let err = read_texts(&path).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}:3: expected", path.display())), "{err}");
        assert!(err.contains("missing field `text`"), "{err}");
        std::fs::write(&path, "{\"id\": 1, \"text\": \"a\"}\n{\"id\": \"1\", \"text\": \"b\"}\n").unwrap();
        let err = read_texts(&path).unwrap_err().to_string();
        assert!(err.ends_with(":2: the id `1` appears twice"), "{err}");
    }
}
