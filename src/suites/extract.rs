//! Reading an answer out of generated text: a regex (GSM8K's strict `#### N`), the last
//! number in the text (flexible), or the last `\boxed{...}`.

use regex::Regex;

use super::def::{ExtractDef, ExtractKind};

/// Why an extractor's declaration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ExtractorError {
    #[error("bad pattern")]
    Pattern(#[source] regex::Error),
    #[error("type \"regex\" needs a pattern")]
    MissingPattern,
    #[error("only type \"regex\" takes a pattern")]
    UnexpectedPattern,
}

pub struct Extractor {
    pub name: String,
    kind: ExtractKind,
    pattern: Option<Regex>,
}

fn last_number_re() -> &'static Regex {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| Regex::new(r"-?\$?\d(?:[\d,]*\d)?(?:\.\d+)?").expect("number regex is valid"))
}

impl Extractor {
    pub fn new(def: &ExtractDef) -> Result<Self, ExtractorError> {
        let pattern = match (def.kind, &def.pattern) {
            (ExtractKind::Regex, Some(p)) => Some(Regex::new(p).map_err(ExtractorError::Pattern)?),
            (ExtractKind::Regex, None) => return Err(ExtractorError::MissingPattern),
            (_, Some(_)) => return Err(ExtractorError::UnexpectedPattern),
            (_, None) => None,
        };
        Ok(Self { name: def.name.clone(), kind: def.kind, pattern })
    }

    /// The normalized answer, or `None` when the text has none (an invalid answer).
    pub fn extract(&self, text: &str) -> Option<String> {
        let raw = match self.kind {
            ExtractKind::Regex => {
                let re = self.pattern.as_ref()?;
                let caps = re.captures(text)?;
                caps.get(1).or_else(|| caps.get(0))?.as_str().to_string()
            }
            ExtractKind::LastNumber => last_number_re().find_iter(text).last()?.as_str().to_string(),
            ExtractKind::Boxed => last_boxed(text)?,
        };
        let normalized = normalize_answer(&raw);
        (!normalized.is_empty()).then_some(normalized)
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

/// Canonical form for comparing answers: whitespace, `$`, thousands commas and a trailing
/// period removed; numbers written in their shortest form (`18.00` → `18`, `-0` → `0`).
pub fn normalize_answer(raw: &str) -> String {
    let s: String = raw.trim().chars().filter(|c| *c != '$' && *c != ',').collect();
    let s = s.trim().trim_end_matches('.').trim().to_string();
    if let Ok(v) = s.parse::<f64>() {
        if v.is_finite() {
            if v.fract() == 0.0 && v.abs() < 1e15 {
                return format!("{}", v as i64);
            }
            return format!("{v}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(kind: ExtractKind, pattern: Option<&str>) -> Extractor {
        Extractor::new(&ExtractDef { name: "t".into(), kind, pattern: pattern.map(String::from) }).unwrap()
    }

    #[test]
    fn strict_flexible_boxed() {
        let strict = ex(ExtractKind::Regex, Some(r"#### (\-?[0-9\.\,\$]+)"));
        let flexible = ex(ExtractKind::LastNumber, None);
        let boxed = ex(ExtractKind::Boxed, None);
        let text = "She has 3 + 4 = 7 apples, so 1,200 cents.\n#### 1,200";
        assert_eq!(strict.extract(text).as_deref(), Some("1200"));
        assert_eq!(flexible.extract(text).as_deref(), Some("1200"));
        assert_eq!(boxed.extract(text), None);

        let text = "The answer is $18.00.";
        assert_eq!(strict.extract(text), None);
        assert_eq!(flexible.extract(text).as_deref(), Some("18"));

        let text = r"so \boxed{\frac{1}{2}} or \boxed{-5}.";
        assert_eq!(boxed.extract(text).as_deref(), Some("-5"));
        assert_eq!(last_boxed(r"\boxed{\frac{1}{2}}").as_deref(), Some(r"\frac{1}{2}"));
        assert_eq!(flexible.extract("no digits here"), None);
        assert_eq!(flexible.extract("it drops to -3.5 degrees").as_deref(), Some("-3.5"));
        assert_eq!(strict.extract("#### -7").as_deref(), Some("-7"));
        // An unclosed box is not an answer.
        assert_eq!(boxed.extract(r"\boxed{12"), None);
    }

    #[test]
    fn normalization() {
        assert_eq!(normalize_answer(" $1,234. "), "1234");
        assert_eq!(normalize_answer("0.50"), "0.5");
        assert_eq!(normalize_answer("-0"), "0");
        assert_eq!(normalize_answer("x + 1"), "x + 1");
    }

    #[test]
    fn bad_extractors_are_rejected() {
        let e = Extractor::new(&ExtractDef { name: "s".into(), kind: ExtractKind::Regex, pattern: None });
        assert!(e.is_err());
        let e = Extractor::new(&ExtractDef {
            name: "s".into(),
            kind: ExtractKind::Regex,
            pattern: Some("(".into()),
        });
        assert!(e.is_err());
    }
}
