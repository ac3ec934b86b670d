//! repairbench: measures how well a coding model really fixes bugs in your code.
//!
//! Data flows one way: task or suite item → prompt → model (generate or score) → patch or
//! answer → sandbox run → grade → result event → reporters. Each stage is its own module and
//! knows nothing of the stages after it: the model knows no containers, the sandbox knows no
//! models, grading never calls the model.

pub mod compare;
pub mod dates;
pub mod deadline;
pub mod env;
pub mod grade;
pub mod http;
pub mod kernel;
pub mod model;
pub mod order;
pub mod patch;
pub mod repair;
pub mod report;
pub mod rng;
pub mod run;
pub mod sandbox;
pub mod serve;
pub mod shell;
pub mod stats;
pub mod suites;
pub mod tasks;

/// `text` without terminal escape sequences (colours, cursor moves): tools run by the
/// sandbox may colour their output, and readers of logs and reports want the words.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        // CSI: ESC [ parameters... final byte in @..~; otherwise ESC and one or two characters.
        if chars.next_if_eq(&'[').is_some() {
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        } else if let Some('(' | ')') = chars.next() {
            // A character set designation: ESC ( B.
            chars.next();
        }
    }
    out
}

#[cfg(test)]
#[test]
fn colours_are_stripped_and_words_kept() {
    let line = "\u{1b}[36m\u{1b}[1m==== short test summary info ====\u{1b}[0m and \u{1b}(B";
    assert_eq!(strip_ansi(line), "==== short test summary info ==== and ");
}

/// Standard base64 with padding (a report page's script hash, HTTP Basic credentials).
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
#[test]
fn base64_matches_the_rfc_examples() {
    for (plain, encoded) in [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foobar", "Zm9vYmFy")]
    {
        assert_eq!(base64(plain.as_bytes()), encoded);
    }
    assert_eq!(base64(b"ab"), "YWI=");
    assert_eq!(base64(b"abc"), "YWJj");
    assert_eq!(base64(b"a"), "YQ==");
}

/// An error and its `#[source]` chain on one line (`outer: cause: root cause`), for reports
/// and logs that keep text only.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
