//! The generation probes on SWE tasks: `path-guess` asks for the file to fix from the issue
//! text alone; `patch-prefix` continues the gold patch from its first third. Greedy, so two
//! runs give the same answers.

use std::collections::BTreeMap;

use super::items::{Expected, ProbeItem};
use crate::model::{ChatMessage, GenerateRequest, LanguageModel, ModelError, Prompt, Sampling};
use crate::stats::separation::rouge_l;

/// Tokens a path or option answer may take.
const ANSWER_TOKENS: usize = 48;
/// Bounds on a patch continuation's tokens (about a token per three characters of the rest).
const REST_TOKENS: (usize, usize) = (16, 512);

/// The `path-guess` question: the repository's name and the problem statement, nothing of the
/// repository's content.
pub fn path_question(repo: &str, problem_statement: &str) -> String {
    format!(
        "Repository: {repo}\n\nIssue:\n{}\n\nWhich file of the repository must be changed to fix this issue? \
         Answer with the file's path from the repository root, and nothing else.",
        problem_statement.trim()
    )
}

/// The `ts-guess` question: the item's prompt with one option masked.
pub fn masked_question(prompt: &str) -> String {
    format!(
        "Here is a multiple-choice question from a benchmark, with one option replaced by {mask}.\n\n{}\n\n\
         What is the text of the option marked {mask}? Reply with that option's text only.",
        prompt.trim_end(),
        mask = crate::suites::prompt::MASK
    )
}

/// An option as a `ts-guess` answer gives it: its first non-empty line without a leading
/// option letter (`B.`, `B)`), quotes or a final period, whitespace collapsed, lowercase.
pub fn answered_option(answer: &str) -> String {
    let line = answer.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    let bytes = line.as_bytes();
    let line = if bytes.len() > 2 && bytes[0].is_ascii_uppercase() && matches!(bytes[1], b'.' | b')' | b':') {
        line[2..].trim()
    } else {
        line
    };
    normalized_option(line)
}

/// Lowercase, whitespace collapsed, without surrounding quotes or a final period.
fn normalized_option(text: &str) -> String {
    let text = text.trim().trim_matches(|c: char| "`'\"".contains(c)).trim_end_matches('.');
    text.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

/// A text split after the first half of its words: the first half as it stands (up to the
/// start of the next word) and the rest. `None` under four words.
pub fn split_halves(text: &str) -> Option<(String, String)> {
    let starts: Vec<usize> = text
        .char_indices()
        .filter(|&(i, c)| !c.is_whitespace() && (i == 0 || text[..i].ends_with(char::is_whitespace)))
        .map(|(i, _)| i)
        .collect();
    if starts.len() < 4 {
        return None;
    }
    let cut = starts[starts.len().div_ceil(2)];
    Some((text[..cut].trim_end().to_owned(), text[cut..].to_owned()))
}

/// The two `guided` prompts for a first half: one naming the dataset and split and asking for
/// the rest exactly as published there, and a general one asking only for a fitting end.
pub fn guided_prompts(first: &str, dataset: &str, split: &str) -> [String; 2] {
    [
        format!(
            "Below is the beginning of an item from the {split} split of the {dataset} dataset. Write the rest \
             of the item exactly as it appears in that dataset, and nothing else.\n\nBeginning: {first}\n\nRest:"
        ),
        format!(
            "Below is the beginning of a text. Write a rest for it so that the two parts make one text, and \
             nothing else.\n\nBeginning: {first}\n\nRest:"
        ),
    ]
}

/// The gold patch split after its first third of lines (at least one line each side): what
/// the model is shown and what it should go on to write. `None` for a patch under three lines.
pub fn split_patch(patch: &str) -> Option<(String, String)> {
    let lines: Vec<&str> = patch.lines().collect();
    if lines.len() < 3 {
        return None;
    }
    let cut = lines.len().div_ceil(3);
    Some((lines[..cut].join("\n") + "\n", lines[cut..].join("\n")))
}

/// The path a `path-guess` answer names: the first word of its first non-empty line that looks
/// like a path (has a `/` or a `.`), without quotes, backticks or a diff's `a/`/`b/`/`./`.
pub fn answered_path(answer: &str) -> Option<String> {
    let line = answer.lines().find(|l| !l.trim().is_empty())?;
    line.split_whitespace()
        .map(|w| {
            let quote = |c: char| "`'\"*,;:()[]<>".contains(c);
            w.trim_start_matches(quote).trim_end_matches(|c: char| quote(c) || c == '.')
        })
        .find(|w| w.contains('/') || w.contains('.'))
        .map(|w| {
            let w = w.strip_prefix("./").unwrap_or(w);
            let w = w.strip_prefix("a/").or_else(|| w.strip_prefix("b/")).unwrap_or(w);
            w.trim_start_matches('/').to_owned()
        })
        .filter(|w| !w.is_empty())
}

/// An item's answers by prompt and the values they scored.
pub type Answered = (BTreeMap<String, String>, BTreeMap<String, f64>);

/// The requests a generation method sends for `item`: one, or `guided`'s two (guided,
/// general).
fn requests(item: &ProbeItem) -> Vec<GenerateRequest> {
    let chat = |text: String, max_tokens| GenerateRequest {
        prompt: Prompt::Chat(vec![ChatMessage::new("user", text)]),
        max_tokens,
        sampling: Sampling::GREEDY,
        stop: Vec::new(),
        n: 1,
    };
    let rest_tokens = |rest: &str| (rest.len() / 3).clamp(REST_TOKENS.0, REST_TOKENS.1);
    match &item.expected {
        Expected::Rest(rest) => vec![GenerateRequest {
            prompt: Prompt::Text(item.text.clone()),
            ..chat(String::new(), rest_tokens(rest))
        }],
        Expected::SecondHalf { dataset, split, rest } => guided_prompts(&item.text, dataset, split)
            .into_iter()
            .map(|p| chat(p, rest_tokens(rest)))
            .collect(),
        Expected::Paths(_) | Expected::Option(_) | Expected::Nothing => {
            vec![chat(item.text.clone(), ANSWER_TOKENS)]
        }
    }
}

/// Each item's answers by prompt (`answer`; `guided` and `general`) and its values
/// (`path_match` 0 or 1; `rouge_l`; `ts_exact`, `ts_rouge_l`; `guided_rouge_l`,
/// `general_rouge_l`, `guided_gain`), in item order.
pub fn answer_all(model: &mut dyn LanguageModel, items: &[&ProbeItem]) -> Vec<Result<Answered, ModelError>> {
    let per_item: Vec<Vec<GenerateRequest>> = items.iter().map(|i| requests(i)).collect();
    let flat: Vec<GenerateRequest> = per_item.iter().flatten().cloned().collect();
    let mut outputs = model.generate_many(&flat).into_iter();
    per_item
        .iter()
        .zip(items)
        .map(|(sent, item)| {
            let mut texts = Vec::new();
            let mut failed = None;
            for output in outputs.by_ref().take(sent.len()) {
                match output {
                    Ok(o) => texts.push(o.sequences.into_iter().next().map(|s| s.text).unwrap_or_default()),
                    Err(e) => failed = failed.or(Some(e)),
                }
            }
            if let Some(e) = failed {
                return Err(e);
            }
            Ok(scored(&item.expected, texts))
        })
        .collect()
}

/// The answers named, and the values they score against `expected`.
fn scored(expected: &Expected, texts: Vec<String>) -> Answered {
    let value = |pairs: &[(&str, f64)]| pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect();
    let one = texts.first().cloned().unwrap_or_default();
    let values = match expected {
        Expected::Paths(files) => {
            let hit = answered_path(&one).is_some_and(|p| files.contains(&p));
            value(&[("path_match", if hit { 1.0 } else { 0.0 })])
        }
        Expected::Rest(rest) => value(&[("rouge_l", rouge_l(&one, rest))]),
        Expected::Option(option) => {
            let (said, truth) = (answered_option(&one), normalized_option(option));
            value(&[
                ("ts_exact", if said == truth { 1.0 } else { 0.0 }),
                ("ts_rouge_l", rouge_l(&said, &truth)),
            ])
        }
        Expected::SecondHalf { rest, .. } => {
            let guided = rouge_l(&one, rest);
            let general = rouge_l(texts.get(1).map_or("", String::as_str), rest);
            value(&[
                ("guided_rouge_l", guided),
                ("general_rouge_l", general),
                ("guided_gain", guided - general),
            ])
        }
        Expected::Nothing => BTreeMap::new(),
    };
    let names: &[&str] = match expected {
        Expected::SecondHalf { .. } => &["guided", "general"],
        _ => &["answer"],
    };
    let answers = names.iter().zip(texts).map(|(n, t)| ((*n).to_owned(), t)).collect();
    (answers, values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_read_from_common_answer_shapes() {
        for answer in [
            "src/app/models.py",
            "`src/app/models.py`",
            "The file is src/app/models.py.",
            "The fix belongs in `src/app/models.py`.",
            "\n  a/src/app/models.py\nbecause ...",
            "./src/app/models.py",
            "\"/src/app/models.py\"",
        ] {
            assert_eq!(answered_path(answer).as_deref(), Some("src/app/models.py"), "{answer:?}");
        }
        assert_eq!(answered_path("I do not know"), None);
        assert_eq!(answered_path(""), None);
    }

    #[test]
    fn an_option_is_read_without_its_letter_quotes_or_period() {
        for answer in ["B. Fifty six", "\"fifty  six\"", "B) fifty six.\nmore", "Fifty six"] {
            assert_eq!(answered_option(answer), "fifty six", "{answer:?}");
        }
        assert_eq!(normalized_option("Fifty six."), "fifty six");
    }

    #[test]
    fn a_text_splits_after_half_its_words() {
        let (first, rest) = split_halves("one two  three\nfour five").unwrap();
        assert_eq!((first.as_str(), rest.as_str()), ("one two  three", "four five"));
        assert_eq!(split_halves("  a b c d"), Some(("  a b".into(), "c d".into())));
        assert_eq!(split_halves("a b c"), None);
    }

    #[test]
    fn a_patch_splits_after_its_first_third() {
        let (prefix, rest) = split_patch("1\n2\n3\n4\n5\n6\n7").unwrap();
        assert_eq!((prefix.as_str(), rest.as_str()), ("1\n2\n3\n", "4\n5\n6\n7"));
        assert_eq!(split_patch("1\n2"), None);
    }
}
