//! The real binary, and its output made comparable across machines for snapshots.

use std::path::Path;
use std::process::{Command, Output};

/// The `repairbench` binary this test build made.
pub fn repairbench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_repairbench"))
}

/// Runs `repairbench ARGS` with the cache in `cache` (the default cache when `None`).
pub fn run(args: &[&str], cache: Option<&Path>) -> Output {
    let mut command = repairbench();
    command.args(args);
    if let Some(cache) = cache {
        command.env(repairbench::env::CACHE_DIR, cache);
    }
    command.output().expect("running repairbench")
}

/// `text` with each of `paths` written as its name, times (`12.3s`, `4 ms`) as `[TIME]`, and
/// the repository root as `[REPO]`, so a snapshot holds what does not change between runs.
pub fn redact(text: &str, paths: &[(&Path, &str)]) -> String {
    let mut text = text.to_owned();
    let repo = env!("CARGO_MANIFEST_DIR");
    // Longest first: a path inside another is replaced after it.
    let mut paths: Vec<(String, &str)> =
        paths.iter().map(|(p, name)| (p.display().to_string(), *name)).collect();
    paths.push((repo.to_owned(), "[REPO]"));
    paths.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    for (path, name) in paths {
        text = text.replace(&path, name);
    }
    let times = regex::Regex::new(r"\b\d+(\.\d+)?\s?(ms|s)\b").unwrap();
    times.replace_all(&text, "[TIME]").into_owned()
}

/// stdout and stderr of a finished command, with its exit status, for a snapshot.
pub fn transcript(output: &Output, paths: &[(&Path, &str)]) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    redact(&format!("exit: {:?}\n--- stdout\n{stdout}--- stderr\n{stderr}", output.status.code()), paths)
}
