//! The repair prompt: the issue text plus the repository files that matter, and a request for
//! a unified diff. Model-independent: it produces chat messages, nothing more.
//!
//! Files are chosen by [`Retrieval`]: `oracle` takes the files the gold patch touches (an upper
//! bound, as in SWE-bench's oracle setting); `bm25` ranks every text file of the base commit
//! against the issue text and never looks at the gold patch.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::model::ChatMessage;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Retrieval {
    Oracle,
    Bm25,
}

impl std::str::FromStr for Retrieval {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "oracle" => Ok(Self::Oracle),
            "bm25" => Ok(Self::Bm25),
            other => Err(format!("unknown retrieval `{other}` (expected `oracle` or `bm25`)")),
        }
    }
}

/// How much repository text goes into a prompt.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PromptSettings {
    pub retrieval: Retrieval,
    /// At most this many files.
    pub max_files: usize,
    /// At most this many characters of file text in all (the last file is cut).
    pub max_file_chars: usize,
}

impl Default for PromptSettings {
    fn default() -> Self {
        Self { retrieval: Retrieval::Bm25, max_files: 3, max_file_chars: 6000 }
    }
}

const SYSTEM: &str =
    "You are an expert software engineer. You fix bugs in code repositories by writing patches.";

/// The files a prompt shows, from `files` (repository path, text) in order of relevance: at
/// most `max_files`, cut to `max_file_chars` in all (the last one shown is cut), each as its
/// `[start of PATH]`…`[end of PATH]` block. Which files are kept and where one is cut depend on
/// the order of relevance only, so showing the blocks in another order changes nothing else.
pub fn shown_files(files: &[(String, String)], settings: &PromptSettings) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut budget = settings.max_file_chars;
    for (path, text) in files.iter().take(settings.max_files) {
        if budget == 0 {
            break;
        }
        let shown: String = if text.len() > budget {
            let mut cut = budget;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            format!("{}\n... (truncated)\n", &text[..cut])
        } else {
            text.clone()
        };
        budget = budget.saturating_sub(text.len());
        let mut block = format!("[start of {path}]\n{shown}");
        if !shown.ends_with('\n') {
            block.push('\n');
        }
        block.push_str(&format!("[end of {path}]\n"));
        blocks.push((path.clone(), block));
    }
    blocks
}

/// Chat messages asking for a patch that resolves `problem_statement`, showing `shown` (the
/// blocks of [`shown_files`], in the order given).
pub fn build_messages(problem_statement: &str, shown: &[(String, String)]) -> Vec<ChatMessage> {
    let code: String = shown.iter().map(|(_, block)| block.as_str()).collect();
    let user = format!(
        "You will be given an issue and some code from the repository.\n\n\
         <issue>\n{}\n</issue>\n\n<code>\n{}</code>\n\n\
         Write a patch in unified diff format that resolves the issue. Use paths relative to the \
         repository root, like this:\n\n<patch>\n--- a/path/to/file.py\n+++ b/path/to/file.py\n\
         @@ -10,3 +10,3 @@\n context line\n-old line\n+new line\n context line\n</patch>\n\n\
         Answer with the patch between <patch> and </patch>.",
        problem_statement.trim(),
        code
    );
    vec![ChatMessage::new("system", SYSTEM), ChatMessage::new("user", user)]
}

fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric() && c != '_') {
        if word.is_empty() {
            continue;
        }
        let lower = word.to_lowercase();
        // snake_case parts count on their own too: `to_cents` matches "cents".
        if lower.contains('_') {
            out.extend(lower.split('_').filter(|p| p.len() > 1).map(str::to_owned));
        }
        out.push(lower);
    }
    out
}

/// Indices of `documents` (path, text) ranked by Okapi BM25 (k1 = 1.2, b = 0.75) against
/// `query`, best first; documents sharing no term with the query are left out.
pub fn bm25_rank(query: &str, documents: &[(String, String)]) -> Vec<(usize, f64)> {
    let (k1, b) = (1.2, 0.75);
    let docs: Vec<Vec<String>> =
        documents.iter().map(|(path, text)| tokens(&format!("{path} {text}"))).collect();
    let n = docs.len() as f64;
    let average = docs.iter().map(Vec::len).sum::<usize>() as f64 / n.max(1.0);
    let mut document_frequency: HashMap<&str, usize> = HashMap::new();
    for doc in &docs {
        let mut seen: Vec<&str> = doc.iter().map(String::as_str).collect();
        seen.sort_unstable();
        seen.dedup();
        for term in seen {
            *document_frequency.entry(term).or_default() += 1;
        }
    }
    let mut query_terms = tokens(query);
    query_terms.sort();
    query_terms.dedup();
    let mut scores: Vec<(usize, f64)> = docs
        .iter()
        .enumerate()
        .map(|(index, doc)| {
            let mut counts: HashMap<&str, usize> = HashMap::new();
            for term in doc {
                *counts.entry(term).or_default() += 1;
            }
            let length = doc.len() as f64;
            let score = query_terms
                .iter()
                .filter_map(|term| {
                    let tf = *counts.get(term.as_str())? as f64;
                    let df = document_frequency[term.as_str()] as f64;
                    let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                    Some(idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * length / average.max(1.0))))
                })
                .sum::<f64>();
            (index, score)
        })
        .filter(|(_, score)| *score > 0.0)
        .collect();
    scores.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scores
}

/// Whether a repository file is worth showing a model (source or docs text, not too big).
pub fn is_candidate_file(path: &str, size: usize) -> bool {
    const EXTENSIONS: &[&str] = &[
        "py", "pyi", "rs", "go", "js", "ts", "java", "c", "h", "cc", "cpp", "hpp", "rb", "php", "cfg",
        "toml", "ini", "md", "rst", "txt",
    ];
    let extension = path.rsplit_once('.').map_or("", |(_, e)| e);
    size <= 200_000 && EXTENSIONS.contains(&extension)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(path: &str, text: &str) -> (String, String) {
        (path.to_owned(), text.to_owned())
    }

    #[test]
    fn bm25_prefers_the_file_the_issue_talks_about() {
        let docs = vec![
            doc("README.md", "invoicer: invoices with line items"),
            doc("invoicer/money.py", "def to_cents(amount):\n    return int(round(float(amount) * 100))\n"),
            doc("invoicer/invoice.py", "class Invoice:\n    def total_cents(self): ..."),
            doc("setup.cfg", "[metadata]\nname = x"),
        ];
        let ranked = bm25_rank("to_cents rounds half a cent down: to_cents(2.675) gives 267", &docs);
        assert_eq!(ranked[0].0, 1, "{ranked:?}");
        assert!(!ranked.iter().any(|(i, _)| *i == 3), "no shared term, not ranked");
    }

    #[test]
    fn messages_hold_issue_and_files_within_budget() {
        let settings = PromptSettings { retrieval: Retrieval::Bm25, max_files: 2, max_file_chars: 30 };
        let files = vec![doc("a.py", &"x = 1\n".repeat(10)), doc("b.py", "y = 2\n"), doc("c.py", "z = 3\n")];
        let messages = build_messages("Bug: x is wrong", &shown_files(&files, &settings));
        assert_eq!(messages.len(), 2);
        let user = &messages[1].content;
        assert!(user.contains("<issue>\nBug: x is wrong\n</issue>"));
        assert!(user.contains("[start of a.py]") && user.contains("(truncated)"));
        assert!(!user.contains("[start of b.py]"), "budget spent on a.py");
        assert!(!user.contains("c.py"));
        assert!(user.contains("<patch>"));
    }
}
