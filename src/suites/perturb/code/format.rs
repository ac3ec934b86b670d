//! `code.format`: the same code in another whitespace style. Indentation is rebuilt from the
//! block structure (a new unit per level, continuation lines and docstrings moved with their
//! statement), spaces around binary operators and after commas are taken out or put in, and
//! the blank lines between module-level definitions change. Each step is kept only when the
//! code parses to the same tree with the same tokens.

use std::ops::Range;

use super::python::{Edit, Source};

/// How operators and commas are spaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spacing {
    /// `a+b`, `f(a,b)`.
    Compact,
    /// `a + b`, `f(a, b)`.
    Spacious,
}

/// Operators written with punctuation (word operators such as `not in` keep their spaces).
const OPERATORS: &[&str] = &[
    "+", "-", "*", "/", "//", "%", "**", "@", "<<", ">>", "&", "|", "^", "<", ">", "<=", ">=", "==", "!=",
    "=", "+=", "-=", "*=", "/=", "//=", "%=", "**=", "&=", "|=", "^=", "<<=", ">>=", "@=",
];

/// Parents under which those tokens are binary operators or an assignment's `=` (not a unary
/// minus, a splat, a keyword argument or a default).
const OPERATOR_PARENTS: &[&str] =
    &["binary_operator", "comparison_operator", "assignment", "augmented_assignment"];

/// The unit of indentation the source uses (the first indented statement's), if any.
pub fn indent_unit(src: &Source) -> Option<String> {
    let text = &src.text;
    for (range, _, _) in src.code_tokens() {
        let line_start = text[..range.start].rfind('\n').map_or(0, |i| i + 1);
        let prefix = &text[line_start..range.start];
        if !prefix.is_empty() && prefix.chars().all(|c| c == ' ' || c == '\t') {
            return Some(prefix.to_owned());
        }
    }
    None
}

/// Edits giving every statement `unit` per block level; `None` when the indentation cannot be
/// read (tabs mixed in, a dedent to a width never used).
pub fn reindent(src: &Source, unit: &str) -> Option<Vec<Edit>> {
    let text = &src.text;
    let tokens = src.code_tokens();
    let strings = src.long_strings();
    let comments = src.comments();
    let mut edits = Vec::new();
    let mut widths = vec![0usize];
    // The last statement's old width and new indentation: lines inside it move with it.
    let mut statement: Option<(usize, String)> = None;
    let (mut next_token, mut brackets) = (0usize, 0i64);
    let mut continued = false;
    let mut line_start = 0;
    for line in text.split_inclusive('\n') {
        let start = line_start;
        line_start += line.len();
        let body = line.trim_end_matches(['\n', '\r']);
        let width = body.len() - body.trim_start_matches([' ', '\t']).len();
        if width == body.len() {
            continue;
        }
        let first = start + width;
        while next_token < tokens.len() && tokens[next_token].0.start < first {
            match tokens[next_token].1 {
                "(" | "[" | "{" => brackets += 1,
                ")" | "]" | "}" => brackets -= 1,
                _ => {}
            }
            next_token += 1;
        }
        let prefix = &text[start..first];
        let in_string = enclosing(&strings, first).filter(|(r, _)| first < r.end);
        let moves_with_statement = match in_string {
            Some((_, docstring)) => *docstring,
            None => true,
        };
        let starts_statement = in_string.is_none()
            && comments.binary_search_by_key(&first, |c| c.start).is_err()
            && brackets == 0
            && !continued;
        if starts_statement {
            if prefix.contains('\t') {
                return None;
            }
            if width > *widths.last().expect("never empty") {
                widths.push(width);
            }
            while width < *widths.last().expect("never empty") {
                widths.pop();
            }
            if widths.last() != Some(&width) {
                return None;
            }
            let new = unit.repeat(widths.len() - 1);
            if new != prefix {
                edits.push(Edit { range: start..first, text: new.clone() });
            }
            statement = Some((width, new));
        } else if moves_with_statement {
            if let Some((old, new)) = &statement {
                if width >= *old && !prefix.contains('\t') {
                    let moved = format!("{new}{}", " ".repeat(width - old));
                    if moved != prefix {
                        edits.push(Edit { range: start..first, text: moved });
                    }
                }
            }
        }
        let end = start + body.len();
        continued = body.ends_with('\\')
            && enclosing(&strings, end).is_none()
            && comments
                .get(comments.partition_point(|c| c.start < end).wrapping_sub(1))
                .is_none_or(|c| end > c.end);
    }
    Some(edits)
}

/// The last string (of `strings`, outermost, in order) starting before `at`; the caller checks
/// whether it reaches `at`.
fn enclosing(strings: &[(Range<usize>, bool)], at: usize) -> Option<&(Range<usize>, bool)> {
    let i = strings.partition_point(|(r, _)| r.start < at);
    i.checked_sub(1).map(|i| &strings[i]).filter(|(r, _)| at <= r.end)
}

/// Edits spacing binary operators, assignments' `=` and commas as `spacing` says.
pub fn respace(src: &Source, spacing: Spacing) -> Vec<Edit> {
    let text = &src.text;
    let tokens = src.code_tokens();
    let is_operator = |(_, kind, parent): &(Range<usize>, &str, &str)| {
        OPERATORS.contains(kind) && OPERATOR_PARENTS.contains(parent)
    };
    let mut edits = Vec::new();
    for pair in tokens.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let gap = a.0.end..b.0.start;
        if !text[gap.clone()].bytes().all(|c| c == b' ') {
            continue;
        }
        let after_comma = a.1 == "," && !matches!(b.1, ")" | "]" | "}");
        let around_operator = is_operator(a) || is_operator(b);
        if !(after_comma || around_operator) {
            continue;
        }
        let wanted = match spacing {
            Spacing::Compact => "",
            Spacing::Spacious => " ",
        };
        if text[gap.clone()] != *wanted {
            edits.push(Edit { range: gap, text: wanted.to_owned() });
        }
    }
    edits
}

/// Edits putting `blank` blank lines before every module-level function or class that follows
/// another statement.
pub fn blank_lines(src: &Source, blank: usize) -> Vec<Edit> {
    let text = &src.text;
    let statements = src.top_statements();
    let mut edits = Vec::new();
    for pair in statements.windows(2) {
        let ((previous, _), (next, defines)) = (&pair[0], &pair[1]);
        let gap = previous.end..next.start;
        let between = &text[gap.clone()];
        if !defines || !between.chars().all(char::is_whitespace) || !between.contains('\n') {
            continue;
        }
        // The gap ends at the definition's first column: module level has no indentation.
        let wanted = "\n".repeat(blank + 1);
        if between != wanted {
            edits.push(Edit { range: gap, text: wanted });
        }
    }
    edits
}

#[cfg(test)]
mod tests {
    use super::super::python::apply;
    use super::*;

    const SOURCE: &str = "import os\n\n\ndef f(a, b):\n    \"\"\"Sum.\n\n    >>> f(1, 2)\n    3\n    \"\"\"\n    total = a+b  # add\n    if total > 0:\n        items = [a,\n                 b]\n        return sum(items, -1)\n    return -total\n";

    #[test]
    fn reindent_rebuilds_levels_and_moves_inner_lines() {
        let src = Source::parse(SOURCE).unwrap();
        assert_eq!(indent_unit(&src).as_deref(), Some("    "));
        let out = apply(SOURCE, &reindent(&src, "\t").unwrap());
        assert_eq!(
            out,
            "import os\n\n\ndef f(a, b):\n\t\"\"\"Sum.\n\n\t>>> f(1, 2)\n\t3\n\t\"\"\"\n\ttotal = a+b  # add\n\tif total > 0:\n\t\titems = [a,\n\t\t         b]\n\t\treturn sum(items, -1)\n\treturn -total\n"
        );
        let after = Source::parse(out).unwrap();
        assert_eq!(after.shape(false), src.shape(false));
    }

    #[test]
    fn respace_touches_operators_and_commas_only() {
        let src = Source::parse(SOURCE).unwrap();
        let compact = apply(SOURCE, &respace(&src, Spacing::Compact));
        assert!(
            compact.contains("def f(a,b):")
                && compact.contains("total=a+b")
                && compact.contains("sum(items,-1)")
        );
        assert!(compact.contains(">>> f(1, 2)"), "strings are left alone: {compact}");
        assert!(compact.contains("return -total") && compact.contains("if total>0:"));
        let spacious = apply(SOURCE, &respace(&src, Spacing::Spacious));
        assert!(spacious.contains("total = a + b"));
        for out in [compact, spacious] {
            assert_eq!(Source::parse(out).unwrap().shape(true), src.shape(true));
        }
    }

    #[test]
    fn blank_lines_before_definitions() {
        let src = Source::parse(SOURCE).unwrap();
        assert!(apply(SOURCE, &blank_lines(&src, 1)).starts_with("import os\n\ndef f"));
        assert!(blank_lines(&src, 2).is_empty());
    }
}
