//! `tasks harvest` on a history the test scripts: a fix with its test is kept with the lists
//! derived by hand; a docs change, a test-only change, a change whose new test already passed
//! and a change whose test is flaky are dropped with their reasons; the kept task is a valid
//! task folder. The GitLab test harvests the same kind of history through a local server that
//! speaks GitLab's REST API v4 (tests/fixtures/fake_gitlab.py) and finds the same tasks, plus
//! the issues' texts.

#![recursion_limit = "256"]

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

fn rev_parse(repo: &Path, rev: &str) -> String {
    let out = Command::new("git").arg("-C").arg(repo).args(["rev-parse", rev]).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Merges `branch` into main with a merge commit, as GitLab's default merge method does.
fn merge_into_main(repo: &Path, branch: &str, message: &str) -> String {
    git(repo, &["checkout", "-q", "main"]);
    git(repo, &["merge", "-q", "--no-ff", branch, "-m", message]);
    rev_parse(repo, "HEAD")
}

fn commit(repo: &Path, message: &str, files: &[(&str, &str)]) -> String {
    for (path, text) in files {
        let full = repo.join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, text).unwrap();
    }
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", message]);
    rev_parse(repo, "HEAD")
}

const CALC_V0: &str = "def add(a, b):\n    return a + b\n\n\ndef clamp(x, lo, hi):\n    return max(lo, x)\n";
const CALC_V1: &str =
    "def add(a, b):\n    return a + b\n\n\ndef clamp(x, lo, hi):\n    return min(hi, max(lo, x))\n";
const CALC_V2: &str =
    "def add(a, b):\n    return sum((a, b))\n\n\ndef clamp(x, lo, hi):\n    return min(hi, max(lo, x))\n";
const TESTS_V0: &str = "from calc import add, clamp\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_clamp_low():\n    assert clamp(-1, 0, 10) == 0\n";

/// `calc` in `dir`: an initial import whose tests are `tests`, then the clamp fix with a test of
/// it. Returns the repository and the fix's commit.
fn calc_with_clamp_fix(dir: &Path, tests: &str) -> (std::path::PathBuf, String) {
    let repo = dir.join("calc");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    commit(
        &repo,
        "Initial import",
        &[
            ("pyproject.toml", "[project]\nname = \"calc\"\nversion = \"1.0\"\n"),
            ("calc/__init__.py", "from .core import add, clamp\n"),
            ("calc/core.py", CALC_V0),
            ("tests/test_calc.py", tests),
        ],
    );
    let fix = commit(
        &repo,
        "clamp() ignores the upper bound",
        &[
            ("calc/core.py", CALC_V1),
            (
                "tests/test_calc.py",
                &format!("{tests}\n\ndef test_clamp_high():\n    assert clamp(11, 0, 10) == 10\n"),
            ),
        ],
    );
    (repo, fix)
}

#[test]
fn harvest_keeps_fixes_with_failing_tests_and_says_why_it_drops_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let (repo, fix) = calc_with_clamp_fix(dir.path(), TESTS_V0);
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

    // A fix whose new test draws its parameter (and so its test id) at random: the id differs
    // between the two runs of the same tree, every time.
    let flaky = commit(
        &repo,
        "scale(), tested with a random factor",
        &[
            ("calc/scale.py", "def scale(x, k):\n    return x * k\n"),
            (
                "tests/test_scale.py",
                "import random\n\nimport pytest\n\nfrom calc.scale import scale\n\n\n\
                 @pytest.mark.parametrize(\"k\", [random.randrange(10**9)])\n\
                 def test_scale(k):\n    assert scale(2, k) == 2 * k\n",
            ),
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
    let flaky = by_commit(&flaky);
    assert_eq!(flaky["reason"], "flaky", "{flaky}");
    assert_eq!(flaky["FAIL_TO_PASS"], serde_json::json!([]));
    let flaky_ids = flaky["flaky"].as_array().unwrap();
    assert!(
        flaky_ids.len() >= 2
            && flaky_ids
                .iter()
                .all(|id| id.as_str().unwrap().starts_with("tests/test_scale.py::test_scale[")),
        "each run's id is flaky: {flaky}"
    );
    assert_eq!(records.len(), 5, "the root commit has no base: {records:?}");
    // The clamp fix is still verbatim at HEAD: a model trained on HEAD has seen it.
    assert_eq!(kept["fix_text_at_later_commit"]["commit"], rev_parse(&repo, "HEAD").as_str(), "{kept}");

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
    assert_eq!(lines, 5, "finished candidates are kept, not examined again");
}

/// A merge request as GitLab's REST API v4 returns it (the documented fields; `diff_refs`
/// only appears in the single-MR response, which the fake server honours).
#[allow(clippy::too_many_arguments)]
fn merge_request(
    iid: u64,
    title: &str,
    description: &str,
    branch: &str,
    created_at: &str,
    merged_at: &str,
    merge_commit: Option<&str>,
    squash_commit: Option<&str>,
    head: &str,
    base: &str,
) -> serde_json::Value {
    let user = serde_json::json!({
        "id": 7, "username": "dev", "name": "Dev", "state": "active", "locked": false,
        "avatar_url": null, "web_url": "{base}/dev"
    });
    serde_json::json!({
        "id": 1000 + iid, "iid": iid, "project_id": 42, "title": title, "description": description,
        "state": "merged", "created_at": created_at, "updated_at": merged_at,
        "merged_by": user, "merge_user": user, "merged_at": merged_at,
        "closed_by": null, "closed_at": null, "target_branch": "main", "source_branch": branch,
        "user_notes_count": 1, "upvotes": 0, "downvotes": 0, "author": user, "assignees": [],
        "assignee": null, "reviewers": [], "source_project_id": 42, "target_project_id": 42,
        "labels": ["bug"], "draft": false, "work_in_progress": false, "milestone": null,
        "merge_when_pipeline_succeeds": false, "merge_status": "can_be_merged",
        "detailed_merge_status": "not_open", "sha": head, "merge_commit_sha": merge_commit,
        "squash_commit_sha": squash_commit, "discussion_locked": null,
        "should_remove_source_branch": true, "force_remove_source_branch": true,
        "prepared_at": created_at, "reference": format!("!{iid}"),
        "references": {"short": format!("!{iid}"), "relative": format!("!{iid}"), "full": format!("team/calc!{iid}")},
        "web_url": format!("{{base}}/team/calc/-/merge_requests/{iid}"),
        "time_stats": {"time_estimate": 0, "total_time_spent": 0, "human_time_estimate": null, "human_total_time_spent": null},
        "squash": squash_commit.is_some(), "squash_on_merge": squash_commit.is_some(),
        "task_completion_status": {"count": 0, "completed_count": 0}, "has_conflicts": false,
        "blocking_discussions_resolved": true, "approvals_before_merge": null,
        "diff_refs": {"base_sha": base, "head_sha": head, "start_sha": base}
    })
}

fn note(id: u64, issue_iid: u64, body: &str, created_at: &str, system: bool) -> serde_json::Value {
    serde_json::json!({
        "id": id, "type": null, "body": body, "attachment": null,
        "author": {"id": 8, "username": "reporter", "name": "Reporter", "state": "active", "locked": false, "avatar_url": null, "web_url": "{base}/reporter"},
        "created_at": created_at, "updated_at": created_at, "system": system, "noteable_id": 500 + issue_iid,
        "noteable_type": "Issue", "project_id": 42, "resolvable": false, "confidential": false,
        "internal": false, "noteable_iid": issue_iid, "commands_changes": {}
    })
}

struct FakeGitLab {
    child: std::process::Child,
    base: String,
    log: std::path::PathBuf,
}

impl Drop for FakeGitLab {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl FakeGitLab {
    /// Starts tests/fixtures/fake_gitlab.py over https, with a certificate for 127.0.0.1 signed
    /// by a private CA, as a self-hosted instance has; returns the CA's certificate.
    fn start(dir: &Path, state: &serde_json::Value) -> (Self, std::path::PathBuf) {
        let path = |name: &str| dir.join(name).to_str().unwrap().to_owned();
        std::fs::write(dir.join("server.ext"), "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
            .unwrap();
        let (ca, ca_key, cert, key, csr) =
            (path("ca.pem"), path("ca.key"), path("server.pem"), path("server.key"), path("server.csr"));
        for args in [
            vec![
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=Test CA",
                "-keyout",
                &ca_key,
                "-out",
                &ca,
            ],
            vec![
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                "/CN=127.0.0.1",
                "-keyout",
                &key,
                "-out",
                &csr,
            ],
            vec![
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &ca,
                "-CAkey",
                &ca_key,
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &path("server.ext"),
                "-out",
                &cert,
            ],
        ] {
            let made =
                Command::new("openssl").args(&args).output().expect("openssl (scripts/setup installs it)");
            assert!(made.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&made.stderr));
        }
        let state_path = dir.join("gitlab-state.json");
        std::fs::write(&state_path, serde_json::to_vec(state).unwrap()).unwrap();
        let (port_file, log) = (dir.join("gitlab.port"), dir.join("gitlab-requests.jsonl"));
        let child = Command::new("python3")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fake_gitlab.py"))
            .args([&state_path, &port_file, &log])
            .args([&cert, &key])
            .spawn()
            .unwrap();
        let mut server = Self { child, base: String::new(), log };
        for _ in 0..100 {
            if let Ok(port) = std::fs::read_to_string(&port_file) {
                server.base = format!("https://127.0.0.1:{port}");
                return (server, ca.into());
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("the fake GitLab server did not start");
    }

    fn requests(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn files_containing(dir: &Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            found.extend(files_containing(&path, needle));
        } else if std::fs::read(&path).unwrap().windows(needle.len()).any(|w| w == needle) {
            found.push(path);
        }
    }
    found
}

#[test]
fn gitlab_merge_requests_give_the_same_tasks_as_the_history_plus_issue_texts() {
    const MEAN_V0: &str = "def mean(xs):\n    return sum(xs) // len(xs)\n";
    const MEAN_V1: &str = "def mean(xs):\n    return sum(xs) / len(xs)\n";
    const TOKEN: &str = "glpat-Sb3cr3tT0k3nF0rT3sts";
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("calc");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    let import = commit(
        &repo,
        "Initial import",
        &[
            ("pyproject.toml", "[project]\nname = \"calc\"\nversion = \"1.0\"\n"),
            ("calc/__init__.py", "from .core import add, clamp\n"),
            ("calc/core.py", CALC_V0),
            ("calc/stats.py", MEAN_V0),
            ("tests/test_calc.py", TESTS_V0),
        ],
    );
    // !1: a branch merged with a merge commit; it closes issue #3.
    git(&repo, &["checkout", "-q", "-b", "fix-clamp"]);
    let head_1 = commit(
        &repo,
        "Respect the upper bound in clamp()",
        &[
            ("calc/core.py", CALC_V1),
            (
                "tests/test_calc.py",
                &format!("{TESTS_V0}\n\ndef test_clamp_high():\n    assert clamp(11, 0, 10) == 10\n"),
            ),
        ],
    );
    let merge_1 = merge_into_main(
        &repo,
        "fix-clamp",
        "Merge branch 'fix-clamp' into 'main'\n\nCloses #3\n\nSee merge request team/calc!1",
    );
    // !2: documentation only.
    git(&repo, &["checkout", "-q", "-b", "docs"]);
    let head_2 = commit(&repo, "Document clamp", &[("README.md", "# calc\n\nclamp(x, lo, hi)\n")]);
    let merge_2 =
        merge_into_main(&repo, "docs", "Merge branch 'docs' into 'main'\n\nSee merge request team/calc!2");
    // !3: one commit, fast-forwarded (no merge commit); it closes no issue, so its own text states the problem.
    let head_3 = commit(
        &repo,
        "mean() floors its result",
        &[
            ("calc/stats.py", MEAN_V1),
            ("tests/test_stats.py", "from calc.stats import mean\n\n\ndef test_mean_keeps_fractions():\n    assert mean([1, 2]) == 1.5\n\n\ndef test_mean_of_one():\n    assert mean([4]) == 4\n"),
        ],
    );
    // Served as GitLab serves a project: a bare copy over dumb HTTP.
    let served = dir.path().join("served.git");
    let cloned =
        Command::new("git").args(["clone", "-q", "--bare"]).arg(&repo).arg(&served).status().unwrap();
    assert!(cloned.success());
    git(&served, &["update-server-info"]);

    let issue_3 = serde_json::json!({
        "id": 503, "iid": 3, "project_id": 42, "title": "clamp() ignores the upper bound",
        "description": "clamp(11, 0, 10) returns 11; it should return 10.", "state": "closed",
        "created_at": "2024-02-27T09:00:00.000Z", "updated_at": "2024-03-01T12:00:00.000Z",
        "closed_at": "2024-03-01T12:00:00.000Z", "closed_by": null, "labels": ["bug"], "milestone": null,
        "assignees": [], "author": {"id": 8, "username": "reporter", "name": "Reporter", "state": "active", "locked": false, "avatar_url": null, "web_url": "{base}/reporter"},
        "type": "ISSUE", "assignee": null, "user_notes_count": 2, "merge_requests_count": 1, "upvotes": 0,
        "downvotes": 0, "due_date": null, "confidential": false, "discussion_locked": null, "issue_type": "issue",
        "web_url": "{base}/team/calc/-/issues/3",
        "time_stats": {"time_estimate": 0, "total_time_spent": 0, "human_time_estimate": null, "human_total_time_spent": null},
        "task_completion_status": {"count": 0, "completed_count": 0},
        "references": {"short": "#3", "relative": "#3", "full": "team/calc#3"}
    });
    let state = serde_json::json!({
        "token": TOKEN,
        "repo_dir": served,
        "max_per_page": 2,
        "omit_totals": ["notes"],
        "no_link": ["notes"],
        "throttle": ["/api/v4/projects/42/merge_requests?page=2"],
        "project": {
            "id": 42, "description": "", "name": "calc", "name_with_namespace": "team / calc", "path": "calc",
            "path_with_namespace": "team/calc", "created_at": "2024-02-01T10:00:00.000Z", "default_branch": "main",
            "tag_list": [], "topics": [], "ssh_url_to_repo": "git@127.0.0.1:team/calc.git",
            "http_url_to_repo": "{base}/team/calc.git", "web_url": "{base}/team/calc", "readme_url": null,
            "forks_count": 0, "avatar_url": null, "star_count": 0, "last_activity_at": "2024-03-03T10:00:00.000Z",
            "namespace": {"id": 9, "name": "team", "path": "team", "kind": "group", "full_path": "team", "parent_id": null, "avatar_url": null, "web_url": "{base}/groups/team"},
            "visibility": "private"
        },
        "merge_requests": [
            merge_request(1, "Respect the upper bound in clamp()", "Closes #3", "fix-clamp",
                "2024-02-28T10:00:00.000Z", "2024-03-01T12:00:00.000Z", Some(&merge_1), None, &head_1, &import),
            merge_request(2, "Document clamp", "", "docs",
                "2024-03-01T13:00:00.000Z", "2024-03-01T14:00:00.000Z", Some(&merge_2), None, &head_2, &merge_1),
            merge_request(3, "mean() floors its result", "mean([1, 2]) gives 1 instead of 1.5.", "fix-mean",
                "2024-03-02T10:00:00.000Z", "2024-03-03T10:00:00.000Z", None, None, &head_3, &merge_2),
        ],
        "closes_issues": { "1": [issue_3] },
        "notes": { "3": [
            note(1, 3, "Reproduced on main: clamp(11, 0, 10) == 11.", "2024-02-27T10:00:00.000Z", false),
            note(2, 3, "mentioned in merge request !1", "2024-02-28T10:00:05.000Z", true),
            note(3, 3, "Fixed by !1, thanks.", "2024-03-01T12:01:00.000Z", false),
        ]},
    });
    let (server, ca) = FakeGitLab::start(dir.path(), &state);

    let harvest = |out: &Path, source: &[&str]| {
        let run = Command::new(env!("CARGO_BIN_EXE_repairbench"))
            .args(["tasks", "harvest"])
            .args(source)
            .args(["--timeout", "120", "--out"])
            .arg(out)
            .env("GITLAB_TOKEN", TOKEN)
            .output()
            .unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
        assert!(run.status.success(), "{stdout}\n{stderr}");
        assert!(!stdout.contains(TOKEN) && !stderr.contains(TOKEN), "the token is never printed");
        let records: Vec<serde_json::Value> =
            serde_json::from_slice(&std::fs::read(out.join("harvest.json")).unwrap()).unwrap();
        records
    };
    let from_history = dir.path().join("from-history");
    let history = harvest(&from_history, &["--repo", repo.to_str().unwrap()]);
    let from_gitlab = dir.path().join("from-gitlab");
    let ca = ca.to_str().unwrap().to_owned();
    let merged =
        harvest(&from_gitlab, &["--gitlab", &server.base, "--project", "team/calc", "--ca-cert", &ca]);

    // The same candidates with the same outcomes, lists and instance ids.
    let summary = |records: &[serde_json::Value]| {
        let mut rows: Vec<String> = records
            .iter()
            .map(|r| {
                format!(
                    "{} {} {} {} {}",
                    r["commit"], r["instance_id"], r["reason"], r["FAIL_TO_PASS"], r["PASS_TO_PASS"]
                )
            })
            .collect();
        rows.sort();
        rows
    };
    assert_eq!(summary(&history), summary(&merged));
    let reason = |commit: &str| merged.iter().find(|r| r["commit"] == commit).map(|r| r["reason"].clone());
    assert_eq!(reason(&merge_1), Some(serde_json::Value::Null));
    assert_eq!(reason(&merge_2), Some("no test change".into()));
    assert_eq!(reason(&head_3), Some(serde_json::Value::Null));

    for record in merged.iter().filter(|r| r["kept"] == true) {
        let id = record["instance_id"].as_str().unwrap();
        let read = |root: &Path| -> serde_json::Value {
            serde_json::from_slice(&std::fs::read(root.join(id).join("task.json")).unwrap()).unwrap()
        };
        let (plain, rich) = (read(&from_history), read(&from_gitlab));
        for field in
            ["repo", "instance_id", "base_commit", "patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS"]
        {
            assert_eq!(plain[field], rich[field], "{id}: {field}");
        }
        let mr = &rich["harvest"]["merge_request"];
        if record["commit"] == merge_1.as_str() {
            assert_eq!(
                rich["problem_statement"],
                "clamp() ignores the upper bound\n\nclamp(11, 0, 10) returns 11; it should return 10."
            );
            assert_eq!(
                rich["hints_text"], "Reproduced on main: clamp(11, 0, 10) == 11.",
                "only human notes before the MR"
            );
            assert_eq!(mr["iid"], 1);
            assert_eq!(mr["issues"][0]["web_url"], format!("{}/team/calc/-/issues/3", server.base));
            assert_eq!(mr["merged_unix"], 1_709_294_400);
            assert_eq!(rich["harvest"]["fix_text_at_later_commit"]["commit"], head_3.as_str());
        } else {
            assert_eq!(
                rich["problem_statement"],
                "mean() floors its result\n\nmean([1, 2]) gives 1 instead of 1.5."
            );
            assert_eq!(rich["hints_text"], "");
            assert_eq!(mr["iid"], 3);
            assert_eq!(rich["harvest"]["fix_text_at_later_commit"], serde_json::Value::Null, "it is HEAD");
        }
        assert_ne!(
            plain["problem_statement"], rich["problem_statement"],
            "history alone knows only the commit message"
        );
    }

    // The client paged, waited out the 429, and always authenticated.
    let requests = server.requests();
    let list = |page: &str| {
        requests
            .iter()
            .filter(|r| r["path"] == "/api/v4/projects/42/merge_requests" && r["query"]["page"] == page)
            .map(|r| r["status"].as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(list("2"), [429, 200], "{requests:?}");
    assert!(requests.iter().all(|r| r["status"] != 401), "{requests:?}");
    assert!(requests
        .iter()
        .any(|r| r["path"].as_str().unwrap().ends_with("/info/refs") && r["auth"] == "basic"));
    assert!(
        requests.iter().any(|r| r["path"] == "/api/v4/projects/42/merge_requests/3"),
        "diff_refs of the fast-forward MR"
    );
    // The token is in no file written.
    assert_eq!(files_containing(&from_gitlab, TOKEN.as_bytes()), Vec::<std::path::PathBuf>::new());

    // Every harvested task passes validation.
    let validate = Command::new(env!("CARGO_BIN_EXE_repairbench"))
        .args(["swe", "validate", "--timeout", "120", "--dataset"])
        .arg(&from_gitlab)
        .arg("--out")
        .arg(dir.path().join("validation"))
        .output()
        .unwrap();
    assert!(validate.status.success(), "{}", String::from_utf8_lossy(&validate.stdout));
}

const SERVER_V0: &str = r#"import json
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlparse


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        url = urlparse(self.path)
        if url.path == "/health":
            body = {"ok": True}
        else:
            words = parse_qs(url.query).get("text", [""])[0].split()
            body = {"words": len(words) - 1}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


HTTPServer(("0.0.0.0", 8000), Handler).serve_forever()
"#;

const API_TESTS_V0: &str = r#"import json
from urllib.request import urlopen


def get(path):
    return json.load(urlopen("http://api:8000" + path, timeout=5))


def test_health():
    assert get("/health") == {"ok": True}
"#;

#[test]
fn harvest_runs_the_tests_of_a_multi_service_repository_with_its_services() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("wordcount");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    commit(
        &repo,
        "Word counting service",
        &[("svc/server.py", SERVER_V0), ("tests/test_api.py", API_TESTS_V0)],
    );
    let fix = commit(
        &repo,
        "The word count is one short",
        &[
            ("svc/server.py", &SERVER_V0.replace("len(words) - 1", "len(words)")),
            (
                "tests/test_api.py",
                &format!("{API_TESTS_V0}\n\ndef test_counts_every_word():\n    assert get(\"/count?text=a+b+c\") == {{\"words\": 3}}\n"),
            ),
        ],
    );
    let services = dir.path().join("services.json");
    std::fs::write(
        &services,
        r#"{"services": [{"name": "api", "build": {}, "command": ["python3", "svc/server.py"], "repo": true,
            "ports": [8000], "ready": {"http": "/health", "timeout_s": 30}}]}"#,
    )
    .unwrap();
    let harvest = |out: &Path, extra: &[&Path]| -> serde_json::Value {
        let mut command = Command::new(env!("CARGO_BIN_EXE_repairbench"));
        command.args(["tasks", "harvest", "--repo"]).arg(&repo).args(["--timeout", "120", "--out"]).arg(out);
        for services in extra {
            command.arg("--services").arg(services);
        }
        let run = command.output().unwrap();
        assert!(
            run.status.success(),
            "{}\n{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        );
        let records: Vec<serde_json::Value> =
            serde_json::from_slice(&std::fs::read(out.join("harvest.json")).unwrap()).unwrap();
        records.into_iter().find(|r| r["commit"] == fix.as_str()).unwrap()
    };
    // Without its service the tests fail before and after the fix: nothing to derive.
    let alone = harvest(&dir.path().join("alone"), &[]);
    assert_eq!(alone["reason"], "FAIL_TO_PASS empty", "{alone}");
    assert_eq!(alone["PASS_TO_PASS"], serde_json::json!([]), "{alone}");

    let out = dir.path().join("with-services");
    let kept = harvest(&out, &[&services]);
    assert_eq!(kept["kept"], true, "{kept}");
    assert_eq!(kept["FAIL_TO_PASS"], serde_json::json!(["tests/test_api.py::test_counts_every_word"]));
    assert_eq!(kept["PASS_TO_PASS"], serde_json::json!(["tests/test_api.py::test_health"]));
    let task: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.join(kept["instance_id"].as_str().unwrap()).join("task.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(task["services"][0]["name"], "api", "the task carries its services: {task}");
    let validate = Command::new(env!("CARGO_BIN_EXE_repairbench"))
        .args(["swe", "validate", "--timeout", "120", "--dataset"])
        .arg(&out)
        .arg("--out")
        .arg(dir.path().join("validation"))
        .output()
        .unwrap();
    assert!(validate.status.success(), "{}", String::from_utf8_lossy(&validate.stdout));
}

/// `--specs` with `--spec REPO@VERSION`: every candidate is examined in that entry's
/// environment, so a test that passes only there is PASS_TO_PASS, and the kept task carries
/// the environment (and validates with it). Without it the same test fails before and after and
/// is in neither list. An entry the file lacks is refused, naming the versions it has.
#[test]
fn a_spec_entry_is_the_environment_the_lists_are_derived_in() {
    let dir = tempfile::tempdir().unwrap();
    // The fix's test file also holds a test that passes only where CALC_MODE is strict.
    let tests = format!(
        "import os\n\n{TESTS_V0}\n\ndef test_strict_mode():\n    assert os.environ.get(\"CALC_MODE\") == \"strict\"\n"
    );
    let (repo, fix) = calc_with_clamp_fix(dir.path(), &tests);
    let specs = dir.path().join("specs.json");
    std::fs::write(
        &specs,
        r#"{"format": "repairbench-specs/1", "source": "our table",
            "repos": {"acme/calc": {"1.0": {"env": {"CALC_MODE": "strict"}}}}}"#,
    )
    .unwrap();
    // `--out` relative to the working folder, as a user types it.
    let harvest = |out: &str, spec: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_repairbench"));
        command.current_dir(dir.path());
        command.args(["tasks", "harvest", "--repo"]).arg(&repo).args(["--commit", &fix]);
        if !spec.is_empty() {
            command.arg("--specs").arg(&specs).args(spec);
        }
        command.args(["--timeout", "120", "--out"]).arg(out).output().unwrap()
    };
    let lists = |out: &Path| {
        let records: Vec<serde_json::Value> =
            serde_json::from_slice(&std::fs::read(out.join("harvest.json")).unwrap()).unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0]["kept"], true, "{}", records[0]);
        (records[0]["PASS_TO_PASS"].clone(), records[0]["instance_id"].as_str().unwrap().to_owned())
    };

    let plain = dir.path().join("plain");
    let run = harvest("plain", &[]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let (p2p, _) = lists(&plain);
    assert_eq!(
        p2p,
        serde_json::json!(["tests/test_calc.py::test_add", "tests/test_calc.py::test_clamp_low"])
    );

    let in_spec = dir.path().join("in-spec");
    let run = harvest("in-spec", &["--spec", "acme/calc@1.0"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let (p2p, id) = lists(&in_spec);
    assert_eq!(
        p2p,
        serde_json::json!([
            "tests/test_calc.py::test_add",
            "tests/test_calc.py::test_clamp_low",
            "tests/test_calc.py::test_strict_mode"
        ])
    );
    let task: serde_json::Value =
        serde_json::from_slice(&std::fs::read(in_spec.join(&id).join("task.json")).unwrap()).unwrap();
    assert_eq!(task["environment"]["env"]["CALC_MODE"], "strict", "{task}");
    assert_eq!(task["harvest"]["environment_spec"], "acme/calc 1.0 (our table)");
    let validate = Command::new(env!("CARGO_BIN_EXE_repairbench"))
        .args(["swe", "validate", "--timeout", "120", "--dataset"])
        .arg(in_spec.join(&id))
        .arg("--out")
        .arg(dir.path().join("validation"))
        .output()
        .unwrap();
    assert!(validate.status.success(), "{}", String::from_utf8_lossy(&validate.stdout));

    let refused = harvest("refused", &["--spec", "acme/calc@2.0"]);
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("acme/calc has no version 2.0 (it has 1.0)"), "{stderr}");
}
