//! `tasks harvest` on a history the test scripts: a fix with its test is kept with the lists
//! derived by hand; a docs change, a test-only change and a change whose new test already
//! passed are dropped with their reasons; the kept task is a valid task folder.

use std::path::Path;
use std::process::Command;

fn git(repo: &Path, args: &[&str]) {
    let status = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .env("GIT_AUTHOR_NAME", "Dev")
        .env("GIT_AUTHOR_EMAIL", "dev@example.com")
        .env("GIT_COMMITTER_NAME", "Dev")
        .env("GIT_COMMITTER_EMAIL", "dev@example.com")
        .env("GIT_AUTHOR_DATE", "2024-03-01T12:00:00+00:00")
        .env("GIT_COMMITTER_DATE", "2024-03-01T12:00:00+00:00")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?}");
}

fn commit(repo: &Path, message: &str, files: &[(&str, &str)]) -> String {
    for (path, text) in files {
        let full = repo.join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, text).unwrap();
    }
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", message]);
    let out = Command::new("git").arg("-C").arg(repo).args(["rev-parse", "HEAD"]).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

const CALC_V0: &str = "def add(a, b):\n    return a + b\n\n\ndef clamp(x, lo, hi):\n    return max(lo, x)\n";
const CALC_V1: &str =
    "def add(a, b):\n    return a + b\n\n\ndef clamp(x, lo, hi):\n    return min(hi, max(lo, x))\n";
const CALC_V2: &str =
    "def add(a, b):\n    return sum((a, b))\n\n\ndef clamp(x, lo, hi):\n    return min(hi, max(lo, x))\n";
const TESTS_V0: &str = "from calc import add, clamp\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_clamp_low():\n    assert clamp(-1, 0, 10) == 0\n";

#[test]
fn harvest_keeps_fixes_with_failing_tests_and_says_why_it_drops_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("calc");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    commit(
        &repo,
        "Initial import",
        &[
            ("pyproject.toml", "[project]\nname = \"calc\"\nversion = \"1.0\"\n"),
            ("calc/__init__.py", "from .core import add, clamp\n"),
            ("calc/core.py", CALC_V0),
            ("tests/test_calc.py", TESTS_V0),
        ],
    );
    let fix = commit(
        &repo,
        "clamp() ignores the upper bound",
        &[
            ("calc/core.py", CALC_V1),
            (
                "tests/test_calc.py",
                &format!("{TESTS_V0}\n\ndef test_clamp_high():\n    assert clamp(11, 0, 10) == 10\n"),
            ),
        ],
    );
    let docs = commit(
        &repo,
        "Document clamp",
        &[("README.md", "# calc\n\nclamp(x, lo, hi) keeps x within bounds.\n")],
    );
    let tests_only = commit(
        &repo,
        "More tests",
        &[(
            "tests/test_more.py",
            "from calc import add\n\n\ndef test_add_zero():\n    assert add(0, 0) == 0\n",
        )],
    );
    let refactor = commit(
        &repo,
        "add() through sum(), with a test",
        &[
            ("calc/core.py", CALC_V2),
            ("tests/test_more.py", "from calc import add\n\n\ndef test_add_zero():\n    assert add(0, 0) == 0\n\n\ndef test_add_negative():\n    assert add(-1, -2) == -3\n"),
        ],
    );

    let out = dir.path().join("tasks");
    let run = Command::new(env!("CARGO_BIN_EXE_repairbench"))
        .args(["tasks", "harvest", "--repo"])
        .arg(&repo)
        .args(["--timeout", "120", "--out"])
        .arg(&out)
        .env(repairbench::env::CACHE_DIR, repairbench::env::cache_dir())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&run.stderr));

    let records: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(out.join("harvest.json")).unwrap()).unwrap();
    let by_commit = |sha: &str| {
        records.iter().find(|r| r["commit"] == sha).unwrap_or_else(|| panic!("{sha} in {records:?}"))
    };
    let kept = by_commit(&fix);
    assert_eq!(kept["kept"], true, "{kept}");
    // By hand: the new test fails before the fix and passes after; the old ones pass both times.
    assert_eq!(kept["FAIL_TO_PASS"], serde_json::json!(["tests/test_calc.py::test_clamp_high"]));
    assert_eq!(
        kept["PASS_TO_PASS"],
        serde_json::json!(["tests/test_calc.py::test_add", "tests/test_calc.py::test_clamp_low"])
    );
    assert_eq!(by_commit(&docs)["reason"], "no test change");
    assert_eq!(by_commit(&tests_only)["reason"], "no code change");
    assert_eq!(by_commit(&refactor)["reason"], "FAIL_TO_PASS empty");
    assert_eq!(records.len(), 4, "the root commit has no base: {records:?}");

    // The kept task is a task folder like the bundled samples, and a fair one.
    let id = kept["instance_id"].as_str().unwrap();
    let task: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join(id).join("task.json")).unwrap()).unwrap();
    assert_eq!(task["harvest"]["source_commit"], fix.as_str());
    assert_eq!(task["problem_statement"], "clamp() ignores the upper bound");
    let validation = dir.path().join("validation");
    let validate = Command::new(env!("CARGO_BIN_EXE_repairbench"))
        .args(["swe", "validate", "--timeout", "120", "--dataset"])
        .arg(out.join(id))
        .arg("--out")
        .arg(&validation)
        .output()
        .unwrap();
    assert!(validate.status.success(), "{}", String::from_utf8_lossy(&validate.stdout));

    // A rerun into the same folder with the same settings examines nothing again.
    let again = Command::new(env!("CARGO_BIN_EXE_repairbench"))
        .args(["tasks", "harvest", "--repo"])
        .arg(&repo)
        .args(["--timeout", "120", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(again.status.success());
    let lines = std::fs::read_to_string(out.join("harvest.jsonl")).unwrap().lines().count();
    assert_eq!(lines, 4, "finished candidates are kept, not examined again");
}
