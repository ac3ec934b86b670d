//! Reading an answer out of generated text and comparing it with the reference, as
//! lm-evaluation-harness does: a regex filter (GSM8K's strict `#### N`, or its flexible "last
//! number-like run"), or the last `\boxed{...}`; then `exact_match` after the suite's
//! `ignore` patterns are removed from both sides and, if asked, case is folded.

use regex::Regex;

use super::def::{AnswerDef, ExtractDef, ExtractKind};

/// Why an extractor's or comparison's declaration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ExtractorError {
    #[error("bad pattern")]
    Pattern(#[source] regex::Error),
    #[error("type \"regex\" needs a pattern")]
    MissingPattern,
    #[error("only type \"regex\" takes a pattern or group_select")]
    UnexpectedPattern,
    #[error("bad ignore pattern `{pattern}`")]
    Ignore {
        pattern: String,
        #[source]
        source: regex::Error,
    },
}

pub struct Extractor {
    pub name: String,
    kind: ExtractKind,
    pattern: Option<Regex>,
    group_select: i64,
}

impl Extractor {
    pub fn new(def: &ExtractDef) -> Result<Self, ExtractorError> {
        let pattern = match (def.kind, &def.pattern) {
            (ExtractKind::Regex, Some(p)) => Some(Regex::new(p).map_err(ExtractorError::Pattern)?),
            (ExtractKind::Regex, None) => return Err(ExtractorError::MissingPattern),
            (_, Some(_)) => return Err(ExtractorError::UnexpectedPattern),
            (_, None) if def.group_select.is_some() => return Err(ExtractorError::UnexpectedPattern),
            (_, None) => None,
        };
        Ok(Self {
            name: def.name.clone(),
            kind: def.kind,
            pattern,
            group_select: def.group_select.unwrap_or(0),
        })
    }

    /// The answer as found in the text (trimmed, not yet normalized), or `None` when the text has
    /// none (an invalid answer; lm-eval's `[invalid]`).
    ///
    /// A regex takes the match at `group_select` among all matches (negative counts from the
    /// end), and of that match its first non-empty group, or the whole match when the pattern
    /// has no groups: Python's `re.findall` as lm-eval's regex filter reads it.
    pub fn extract(&self, text: &str) -> Option<String> {
        let raw = match self.kind {
            ExtractKind::Regex => {
                let re = self.pattern.as_ref()?;
                let matches: Vec<regex::Captures> = re.captures_iter(text).collect();
                let at = if self.group_select < 0 {
                    matches.len().checked_sub(self.group_select.unsigned_abs() as usize)?
                } else {
                    self.group_select as usize
                };
                let caps = matches.get(at)?;
                if caps.len() > 1 {
                    caps.iter().skip(1).flatten().map(|m| m.as_str()).find(|m| !m.is_empty())?.to_string()
                } else {
                    caps.get(0)?.as_str().to_string()
                }
            }
            ExtractKind::Boxed => last_boxed(text)?,
        };
        Some(raw.trim().to_string())
    }
}

/// How an extracted answer is compared with the reference: lm-eval's `exact_match` with
/// `regexes_to_ignore` (removed in order, from both sides) and `ignore_case`.
pub struct AnswerMatch {
    ignore: Vec<Regex>,
    ignore_case: bool,
}

impl AnswerMatch {
    pub fn new(def: &AnswerDef) -> Result<Self, ExtractorError> {
        let ignore = def
            .ignore
            .iter()
            .map(|p| Regex::new(p).map_err(|source| ExtractorError::Ignore { pattern: p.clone(), source }))
            .collect::<Result<_, _>>()?;
        Ok(Self { ignore, ignore_case: def.ignore_case })
    }

    /// The text both sides are compared in.
    pub fn normalize(&self, text: &str) -> String {
        let mut text = text.to_string();
        for re in &self.ignore {
            text = re.replace_all(&text, "").into_owned();
        }
        if self.ignore_case {
            text = text.to_lowercase();
        }
        text
    }
}

/// Content of the last `\boxed{...}` (braces balanced), or of `\fbox{...}`.
pub fn last_boxed(text: &str) -> Option<String> {
    let start = text.rfind("\\boxed").or_else(|| text.rfind("\\fbox"))?;
    let rest = &text[start..];
    let open = rest.find('{')?;
    let mut depth = 0usize;
    for (i, ch) in rest[open..].char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(rest[open + 1..open + i].to_string());
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(kind: ExtractKind, pattern: Option<&str>, group_select: Option<i64>) -> Extractor {
        Extractor::new(&ExtractDef {
            name: "t".into(),
            kind,
            pattern: pattern.map(String::from),
            group_select,
        })
        .unwrap()
    }

    /// GSM8K's filters and comparison as lm-eval's task file declares them.
    fn gsm8k() -> (Extractor, Extractor, AnswerMatch) {
        let strict = ex(ExtractKind::Regex, Some(r"#### (\-?[0-9\.\,]+)"), None);
        let flexible = ex(ExtractKind::Regex, Some(r"(-?[$0-9.,]{2,})|(-?[0-9]+)"), Some(-1));
        let answer = AnswerMatch::new(&AnswerDef {
            target: toml::Spanned::new(0..0, String::new()),
            ignore: [",", r"\$", "(?s).*#### ", r"\.$"].map(String::from).to_vec(),
            ignore_case: true,
            extract: Vec::new(),
        })
        .unwrap();
        (strict, flexible, answer)
    }

    #[test]
    fn regex_filters_read_as_lm_eval_reads_them() {
        let (strict, flexible, answer) = gsm8k();
        let text = "She has 3 + 4 = 7 apples, so 1,200 cents.\n#### 1,200";
        assert_eq!(strict.extract(text).as_deref(), Some("1,200"));
        assert_eq!(flexible.extract(text).as_deref(), Some("1,200"));
        assert_eq!(answer.normalize("1,200"), "1200");
        assert_eq!(answer.normalize("A lot.\n#### 1,200"), "1200");

        // The flexible pattern's second group, the last match, and a trailing period kept by the
        // filter but dropped by the comparison.
        assert_eq!(flexible.extract("it is 7 then 9").as_deref(), Some("9"));
        assert_eq!(flexible.extract("The answer is $18.00.").as_deref(), Some("$18.00."));
        assert_eq!(answer.normalize("$18.00."), "18.00");
        assert_eq!(strict.extract("The answer is 18."), None);
        assert_eq!(flexible.extract("no digits here"), None);
        assert_eq!(strict.extract("#### -7").as_deref(), Some("-7"));
        // Case is folded on both sides.
        assert_eq!(answer.normalize("Yes"), answer.normalize("yES"));
        // group_select counts from the front as well; past the end there is no answer.
        let second = ex(ExtractKind::Regex, Some("[0-9]+"), Some(1));
        assert_eq!(second.extract("1 2 3").as_deref(), Some("2"));
        assert_eq!(second.extract("1"), None);
        let third_last = ex(ExtractKind::Regex, Some("[0-9]+"), Some(-3));
        assert_eq!(third_last.extract("1 2"), None);
    }

    #[test]
    fn boxed_answers() {
        let boxed = ex(ExtractKind::Boxed, None, None);
        assert_eq!(boxed.extract(r"so \boxed{\frac{1}{2}} or \boxed{-5}.").as_deref(), Some("-5"));
        assert_eq!(last_boxed(r"\boxed{\frac{1}{2}}").as_deref(), Some(r"\frac{1}{2}"));
        // An unclosed box is not an answer.
        assert_eq!(boxed.extract(r"\boxed{12"), None);
    }

    #[test]
    fn bad_extractors_are_rejected() {
        let def = |kind, pattern: Option<&str>, group_select| ExtractDef {
            name: "s".into(),
            kind,
            pattern: pattern.map(String::from),
            group_select,
        };
        assert!(Extractor::new(&def(ExtractKind::Regex, None, None)).is_err());
        assert!(Extractor::new(&def(ExtractKind::Regex, Some("("), None)).is_err());
        assert!(Extractor::new(&def(ExtractKind::Boxed, None, Some(-1))).is_err());
    }
}
