//! Shell words: the one quoting rule for every command repairbench builds for `sh -c` or a
//! Dockerfile `RUN` (POSIX `sh`, through `shlex`), so that what runs in the sandbox is exactly
//! the words given: an empty word stays an (empty) argument, and every metacharacter is quoted.

use std::borrow::Cow;

/// A word no shell argument can hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} holds a NUL byte, which no shell argument can")]
pub struct NulByte(pub String);

/// `word` as one shell argument: unchanged when nothing in it needs quoting, quoted otherwise
/// (the empty word as `''`).
pub fn quote(word: &str) -> Result<Cow<'_, str>, NulByte> {
    shlex::try_quote(word).map_err(|_| NulByte(word.to_owned()))
}

/// `words` as shell arguments, separated by spaces.
pub fn join<S: AsRef<str>>(words: &[S]) -> Result<String, NulByte> {
    let quoted: Vec<Cow<'_, str>> = words.iter().map(|w| quote(w.as_ref())).collect::<Result<_, _>>()?;
    Ok(quoted.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `sh` makes of `script`'s arguments, one per line.
    fn sh_args(script: &str) -> Vec<String> {
        let out = std::process::Command::new("sh")
            .args(["-c", &format!("for a in {script}; do printf '%s\\n' \"[$a]\"; done")])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned).collect()
    }

    #[test]
    fn every_word_reaches_the_shell_as_itself() {
        let words = [
            "plain",
            "",
            "two words",
            "it's",
            "$(touch /tmp/x)",
            "`id`",
            "a;b&c|d",
            "*.py",
            "~root",
            "back\\slash",
            "\"q\"",
            "line\nbreak",
            "tab\there",
            "#comment",
            "-p",
            "héllo",
        ];
        let joined = join(&words).unwrap();
        let seen = sh_args(&joined);
        let expected: Vec<String> = words.iter().map(|w| format!("[{w}]")).collect();
        assert_eq!(seen.join("\n"), expected.join("\n"));
        assert_eq!(quote("").unwrap(), "''");
        assert_eq!(quote("tests/test_x.py").unwrap(), "tests/test_x.py");
        assert_eq!(quote("a\0b"), Err(NulByte("a\0b".into())));
    }
}
