//! The text families' edits (HELM-style invariance): a typo inside a word, a word's case, an
//! extra space. Only plain words are edited: anything holding a digit, a path or file name,
//! an identifier, a URL, code between backticks, math between dollar signs or a traceback is
//! left byte for byte, so numbers, code and paths mean what they meant.

use std::ops::Range;

use crate::rng::SplitMix64;

/// Which edit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextEdit {
    /// Two neighbouring letters inside a word of four or more swapped.
    Typo,
    /// A word's case changed: to lower case when it has a capital, else to upper case.
    Case,
    /// A space between two words doubled.
    Space,
}

/// Share of the candidates each edit touches; at least one is always touched when there is one.
const EDIT_SHARE: f64 = 0.15;

/// Byte ranges no edit may touch: code spans, math, and tracebacks (from their first line to
/// the next blank line).
pub fn protected(text: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    for delimiter in ["```", "`", "$$", "$"] {
        let mut from = 0;
        while let Some(start) = text[from..].find(delimiter).map(|i| i + from) {
            let after = start + delimiter.len();
            let Some(end) = text[after..].find(delimiter).map(|i| i + after + delimiter.len()) else { break };
            out.push(start..end);
            from = end;
        }
    }
    let mut offset = 0;
    let mut in_traceback = false;
    for line in text.split_inclusive('\n') {
        if line.starts_with("Traceback (most recent call last)") {
            in_traceback = true;
        } else if line.trim().is_empty() {
            in_traceback = false;
        }
        if in_traceback {
            out.push(offset..offset + line.len());
        }
        offset += line.len();
    }
    out
}

/// The plain words of `text` outside protected ranges (its own and `also_protected`): runs of
/// ASCII letters making up a whole whitespace-separated token but for surrounding punctuation.
/// These are all an edit may change.
pub fn words(text: &str, also_protected: &[Range<usize>]) -> Vec<Range<usize>> {
    let mut guarded = protected(text);
    guarded.extend_from_slice(also_protected);
    let mut out = Vec::new();
    let mut offset = 0;
    for token in text.split_inclusive(char::is_whitespace) {
        let start = offset;
        offset += token.len();
        let token = token.trim_end();
        let core = token
            .trim_matches(|c: char| matches!(c, '.' | ',' | ';' | ':' | '!' | '?' | '"' | '\'' | '(' | ')'));
        if core.is_empty() || !core.bytes().all(|b| b.is_ascii_alphabetic()) {
            continue;
        }
        let lead = token.len() - token.trim_start_matches(|c: char| !c.is_ascii_alphabetic()).len();
        let range = start + lead..start + lead + core.len();
        if !guarded.iter().any(|g| g.start < range.end && range.start < g.end) {
            out.push(range);
        }
    }
    out
}

/// Picks a seeded share of `candidates` (at least one when there is any), in order.
fn pick<T: Clone>(candidates: &[T], rng: &mut SplitMix64) -> Vec<T> {
    let mut chosen: Vec<T> = candidates.iter().filter(|_| rng.next_f64() < EDIT_SHARE).cloned().collect();
    if chosen.is_empty() && !candidates.is_empty() {
        chosen.push(candidates[(rng.next_u64() % candidates.len() as u64) as usize].clone());
    }
    chosen
}

/// `text` with `edit` applied under `seed`; the same text back when nothing can be edited.
pub fn apply(edit: TextEdit, text: &str, seed: u64) -> String {
    apply_outside(edit, text, seed, &[])
}

/// [`apply`], leaving the byte ranges `kept` (a docstring's examples) alone as well.
pub fn apply_outside(edit: TextEdit, text: &str, seed: u64, kept: &[Range<usize>]) -> String {
    let mut rng = SplitMix64::new(seed);
    let words = words(text, kept);
    // Each replacement is (range, new text), applied from the end so ranges stay valid.
    let mut replacements: Vec<(Range<usize>, String)> = match edit {
        TextEdit::Typo => {
            let candidates: Vec<Range<usize>> = words
                .into_iter()
                .filter(|w| {
                    w.len() >= 4 && text.as_bytes()[w.start + 1..w.end - 1].windows(2).any(|p| p[0] != p[1])
                })
                .collect();
            pick(&candidates, &mut rng)
                .into_iter()
                .map(|w| {
                    let mut letters = text.as_bytes()[w.clone()].to_vec();
                    // Inner neighbours that differ, so the swap changes the word.
                    let spots: Vec<usize> =
                        (1..letters.len() - 2).filter(|&i| letters[i] != letters[i + 1]).collect();
                    let i = spots[(rng.next_u64() % spots.len() as u64) as usize];
                    letters.swap(i, i + 1);
                    (w, String::from_utf8(letters).expect("ASCII letters"))
                })
                .collect()
        }
        TextEdit::Case => pick(&words, &mut rng)
            .into_iter()
            .map(|w| {
                let word = &text[w.clone()];
                let changed = if word.bytes().any(|b| b.is_ascii_uppercase()) {
                    word.to_ascii_lowercase()
                } else {
                    word.to_ascii_uppercase()
                };
                (w, changed)
            })
            .collect(),
        TextEdit::Space => {
            // A space right after a word, with a word right after it.
            let starts: Vec<usize> = words.iter().map(|w| w.start).collect();
            let gaps: Vec<usize> = words
                .iter()
                .filter(|w| text[w.end..].starts_with(' ') && starts.contains(&(w.end + 1)))
                .map(|w| w.end)
                .collect();
            pick(&gaps, &mut rng).into_iter().map(|at| (at..at + 1, "  ".to_owned())).collect()
        }
    };
    let mut out = text.to_owned();
    replacements.sort_by_key(|(r, _)| std::cmp::Reverse(r.start));
    for (range, with) in replacements {
        out.replace_range(range, &with);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "Janet sells 16 eggs at $2 each; see `parse_args()` in src/cli.py, v1.2 and https://x.org.\nTraceback (most recent call last):\n  File \"a.py\", line 3\nValueError: bad value here\n\nWhich answer follows?";

    /// What the edits may never change: every token with a digit, a path, code or math, and
    /// the traceback, in place.
    #[test]
    fn protected_text_survives_every_edit() {
        for edit in [TextEdit::Typo, TextEdit::Case, TextEdit::Space] {
            for seed in 0..200 {
                let out = apply(edit, SAMPLE, seed);
                assert_ne!(out, SAMPLE, "{edit:?} {seed}: always one edit");
                for kept in [
                    "16",
                    "$2",
                    "`parse_args()`",
                    "src/cli.py,",
                    "v1.2",
                    "https://x.org.",
                    "File \"a.py\", line 3",
                    "ValueError: bad value here",
                ] {
                    assert!(out.contains(kept), "{edit:?} {seed}: {kept} in {out}");
                }
                let digits = |s: &str| s.chars().filter(char::is_ascii_digit).collect::<String>();
                assert_eq!(digits(&out), digits(SAMPLE));
            }
        }
    }

    /// Edits are pinned: a change of any needs a `VERSION` bump.
    #[test]
    fn edits_are_pinned() {
        let text = "Which gas do plants take in for photosynthesis?";
        assert_eq!(apply(TextEdit::Typo, text, 1), "Which gas do platns take in for photosynthesis?");
        assert_eq!(apply(TextEdit::Case, text, 1), "which gas do plants take in for photosynthesis?");
        assert_eq!(apply(TextEdit::Space, text, 1), "Which gas do plants  take in for photosynthesis?");
        assert_eq!(apply(TextEdit::Typo, "12 + 7 = ?", 1), "12 + 7 = ?", "nothing to edit");
        assert_eq!(apply(TextEdit::Typo, "I a x", 1), "I a x", "no word long enough");
        assert_eq!(apply(TextEdit::Typo, "A book", 3), "A book", "no inner letters that differ");
    }
}
