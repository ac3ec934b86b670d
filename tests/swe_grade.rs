//! Grading on the real Docker engine with the bundled sample repositories: gold resolves every
//! sample and the empty patch none; hostile, partial, hanging and broken predictions get the
//! verdicts they deserve; bad input is skipped with a reason while the rest is graded; a run
//! killed midway resumes without losing or redoing finished instances.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use repairbench::grade::{pytest_log, Resolution, Verdict};
use repairbench::patch::{extract::file_diff, ApplyMethod};
use repairbench::repair::{self, GradePlan, GradeReport, InstanceResult};
use repairbench::report::ConsoleProgress;
use repairbench::sandbox::{images, DockerSandbox};
use repairbench::tasks::{self, repos, PredictionSource, RepoLocator, SweTask};

fn issues() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("issues")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap()
}

async fn docker() -> (Arc<DockerSandbox>, String) {
    let sandbox = DockerSandbox::connect().await.expect("the Docker engine must be running for these tests");
    let image = images::ensure_default_image(sandbox.docker()).await.expect("default Python image");
    (Arc::new(sandbox), image)
}

fn plan(dataset: &Path, predictions: PredictionSource, out: &Path, cache: &Path, image: &str) -> GradePlan {
    common::swe::grade_plan(dataset, predictions, out, cache, image)
}

async fn grade(sandbox: &Arc<DockerSandbox>, plan: &GradePlan) -> GradeReport {
    repair::grade(repair::Grader::Local(sandbox.clone()), plan, &mut ConsoleProgress::hidden()).await.unwrap()
}

fn by_id(report: &GradeReport) -> BTreeMap<String, InstanceResult> {
    report.instances.iter().map(|r| (r.instance_id.clone(), r.clone())).collect()
}

#[test]
fn gold_resolves_every_sample_and_empty_none() {
    runtime().block_on(async {
        let (sandbox, image) = docker().await;
        let dir = tempfile::tempdir().unwrap();
        let gold = grade(
            &sandbox,
            &plan(&issues(), PredictionSource::Gold, &dir.path().join("gold"), dir.path(), &image),
        )
        .await;
        assert!(gold.summary.total >= 3);
        assert_eq!(gold.summary.resolved, gold.summary.total, "{:#?}", gold.instances);
        for result in &gold.instances {
            assert_eq!(result.resolution, Resolution::Full);
            assert_eq!(result.apply_method, Some(ApplyMethod::Git2));
            assert!(
                result.tests_status.fail_to_pass.failure.is_empty()
                    && !result.tests_status.fail_to_pass.success.is_empty()
            );
            assert!(result.flaky_tests.is_empty());
        }
        let out = dir.path().join("gold");
        for file in ["report.json", "results.jsonl", "manifest.json", "report.md", "junit.xml", "report.html"]
        {
            assert!(out.join(file).is_file(), "{file}");
        }
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
        assert_eq!(manifest["settings"]["image"], image.as_str());
        assert_eq!(manifest["settings"]["timeout_s"], 60.0);
        // Every runner's sample resolves, each in an environment built from its repository.
        let runners: std::collections::BTreeSet<&str> =
            gold.instances.iter().filter_map(|r| r.runner.map(|k| k.as_str())).collect();
        for runner in ["pytest", "cargo", "go", "node", "django", "sympy"] {
            assert!(runners.contains(runner), "{runner} among {runners:?}");
        }
        let with_ci = gold.instances.iter().find(|r| !r.ci_jobs.is_empty()).expect("a sample with CI jobs");
        assert!(with_ci.tests_status.pass_to_pass.success.contains(&"ci:lint".to_string()));
        let pytest = gold.instances.iter().find(|r| r.runner.map(|k| k.as_str()) == Some("pytest")).unwrap();
        let log = out.join(&pytest.log_dir);
        for file in ["model.patch", "test_output.txt", "junit.xml", "apply.log", "result.json"] {
            assert!(log.join(file).is_file(), "{file} in {}", log.display());
        }

        let empty = grade(
            &sandbox,
            &plan(&issues(), PredictionSource::Empty, &dir.path().join("empty"), dir.path(), &image),
        )
        .await;
        assert_eq!(empty.summary.resolved, 0);
        assert_eq!(empty.summary.verdicts["empty_patch"], empty.summary.total);
    });
}

const GOLD_SLUG_BODY: &str = "    words = []
    current = []
    for char in _ascii(text).lower():
        if char.isalnum():
            current.append(char)
        elif current:
            words.append(\"\".join(current))
            current = []
    if current:
        words.append(\"\".join(current))
    return separator.join(words)
";

const BASE_SLUG_BODY: &str = "    out = []
    for char in _ascii(text).lower():
        if char.isalnum():
            out.append(char)
        else:
            out.append(separator)
    return \"\".join(out)
";

fn base_file(task: &SweTask, cache: &Path, path: &str) -> String {
    let locator = RepoLocator::new(None, None, cache.to_owned());
    let repo = git2::Repository::open(locator.locate(task).unwrap()).unwrap();
    String::from_utf8(repos::read_at_commit(&repo, &task.base_commit, path).unwrap()).unwrap()
}

#[test]
fn verdicts_for_hanging_breaking_test_editing_partial_flaky_and_bad_input() {
    runtime().block_on(async {
        let (sandbox, image) = docker().await;
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let sample = tasks::load_tasks(&issues().join("textkit-slugify")).unwrap().tasks.remove(0);
        let slug = base_file(&sample, &cache, "textkit/slug.py");
        let tests_file = base_file(&sample, &cache, "tests/test_slug.py");
        assert!(slug.contains(BASE_SLUG_BODY));
        let fixed = slug.replace(BASE_SLUG_BODY, GOLD_SLUG_BODY);
        let slug_diff = |new: &str| file_diff("textkit/slug.py", &slug, new);

        let mut predictions: Vec<(&str, String)> = Vec::new();
        // Never returns: the deadline ends it.
        predictions.push(("hang", slug_diff(&slug.replace("    out = []\n", "    while True:\n        pass\n    out = []\n"))));
        // Fixes the bug but breaks accents (a PASS_TO_PASS test).
        predictions.push(("breaks-p2p", slug_diff(&fixed.replace("\"ignore\"", "\"replace\""))));
        // Collapses repeats but leaves edge dashes: one of two FAIL_TO_PASS tests.
        let partial = slug.replace(
            "        else:\n            out.append(separator)\n",
            "        elif not out or out[-1] != separator:\n            out.append(separator)\n",
        );
        predictions.push(("partial", slug_diff(&partial)));
        // No fix; rewrites the tests and adds a conftest that reports every test as passed.
        let conftest = "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n    outcome = yield\n    outcome.get_result().outcome = \"passed\"\n";
        let edits_tests = format!(
            "{}{}",
            file_diff("tests/test_slug.py", &tests_file, &tests_file.replace("== \"hello-world\"", "is not None")),
            file_diff("tests/conftest.py", "", conftest).replace("--- a/tests/conftest.py", "--- /dev/null")
        );
        predictions.push(("edits-tests", edits_tests));
        // No fix; claims the failing tests passed, in the log, after pytest's summary.
        let fake = format!(
            "{slug}\nimport atexit as _atexit\nimport sys as _sys\n_atexit.register(lambda: _sys.stdout.write(\"PASSED tests/test_slug.py::test_repeated_separators_collapse\\nPASSED tests/test_slug.py::test_no_separator_at_the_ends\\n\"))\n"
        );
        predictions.push(("fake-pass", slug_diff(&fake)));
        // The gold fix, but the custom-separator test (PASS_TO_PASS) fails one run in four, at
        // random: reruns of the whole command in fresh environments let it pass.
        let flaky = fixed.replace(
            "    words = []\n",
            "    import os\n    if separator != \"-\" and os.urandom(1)[0] < 64:\n        return \"\"\n    words = []\n",
        );
        predictions.push(("flaky", slug_diff(&flaky)));
        // The gold fix, but the custom-separator test fails whenever it runs after two other
        // calls: always in the full run, never alone. Rerunning only the failing test would
        // call it flaky; rerunning the whole command does not.
        let order = fixed.replace(
            "    words = []\n",
            "    global _calls\n    _calls = globals().get(\"_calls\", 0) + 1\n    if separator != \"-\" and _calls > 2:\n        return \"\"\n    words = []\n",
        );
        predictions.push(("order-dependent", slug_diff(&order)));
        // A syntax error: nothing can be collected, but the tests run fine without the patch.
        predictions.push(("broken-import", slug_diff(&fixed.replace("def slugify(text, separator=\"-\"):", "def slugify(text, separator=\"-\")"))));
        // The gold patch with wrong line numbers and no header.
        let shifted = sample.patch.replace("@@ -10,10 +10,14 @@", "@@ -2,10 +2,14 @@");
        let shifted = shifted.lines().filter(|l| !l.starts_with("diff --git") && !l.starts_with("index ")).collect::<Vec<_>>().join("\n") + "\n";
        predictions.push(("offset", shifted));
        predictions.push(("no-apply", "--- a/textkit/slug.py\n+++ b/textkit/slug.py\n@@ -1,1 +1,1 @@\n-import regex\n+import re\n".into()));
        predictions.push(("no-runner", sample.patch.clone()));
        predictions.push(("missing-repo", sample.patch.clone()));
        predictions.push(("missing-commit", sample.patch.clone()));

        // Dataset: copies of the sample under new ids, plus bad records.
        let mut lines = Vec::new();
        for (suffix, _) in &predictions {
            let mut task = sample.clone();
            task.instance_id = format!("acme__textkit-{suffix}");
            match *suffix {
                "no-runner" => task.test_cmd = Some("no-such-test-runner --all".into()),
                "missing-repo" => task.repo = "acme/missing".into(),
                "missing-commit" => task.base_commit = "0123456789abcdef0123456789abcdef01234567".into(),
                _ => {}
            }
            lines.push(serde_json::to_string(&task).unwrap());
        }
        lines.insert(3, "{\"repo\": \"acme/textkit\", \"instance_id\": ".into());
        let dataset = dir.path().join("dataset.jsonl");
        std::fs::write(&dataset, lines.join("\n") + "\n").unwrap();
        let mut pred_lines: Vec<String> = predictions
            .iter()
            .map(|(suffix, patch)| {
                serde_json::json!({"instance_id": format!("acme__textkit-{suffix}"), "model_name_or_path": "test", "model_patch": patch}).to_string()
            })
            .collect();
        pred_lines.push(serde_json::json!({"instance_id": "ghost__nothing-1", "model_patch": "x"}).to_string());
        pred_lines.push("[1, 2".into());
        let preds = dir.path().join("preds.jsonl");
        std::fs::write(&preds, pred_lines.join("\n") + "\n").unwrap();
        let repos_dir = dir.path().join("repos");
        std::fs::create_dir_all(repos_dir.join("acme")).unwrap();
        std::fs::copy(sample.bundle.as_ref().unwrap(), repos_dir.join("acme/textkit.bundle")).unwrap();

        let out = dir.path().join("out");
        let mut plan = plan(&dataset, PredictionSource::File(preds.clone()), &out, &cache, &image);
        plan.repos = Some(repos_dir);
        plan.settings.timeout = Duration::from_secs(20);
        plan.settings.flaky_reruns = 5;
        let report = grade(&sandbox, &plan).await;
        let results = by_id(&report);
        let get = |suffix: &str| results.get(&format!("acme__textkit-{suffix}")).unwrap_or_else(|| panic!("{suffix} graded"));
        let summary: Vec<String> = report.instances.iter().map(|r| format!("{} {:?} {:?}", r.instance_id, r.verdict, r.detail)).collect();

        assert_eq!(get("hang").verdict, Verdict::Timeout, "{summary:#?}");

        let breaks = get("breaks-p2p");
        assert_eq!((breaks.verdict, breaks.resolution), (Verdict::Unresolved, Resolution::No), "{summary:#?}");
        assert_eq!(breaks.tests_status.pass_to_pass.failure, vec!["tests/test_slug.py::test_accents_are_dropped".to_string()]);
        assert!(breaks.tests_status.fail_to_pass.failure.is_empty());
        assert!(breaks.flaky_tests.is_empty(), "a real failure stays a failure after reruns");

        let partial = get("partial");
        assert_eq!((partial.verdict, partial.resolution), (Verdict::Unresolved, Resolution::Partial), "{summary:#?}");
        assert_eq!(partial.tests_status.fail_to_pass.success, vec!["tests/test_slug.py::test_repeated_separators_collapse".to_string()]);
        assert_eq!(partial.tests_status.fail_to_pass.failure, vec!["tests/test_slug.py::test_no_separator_at_the_ends".to_string()]);

        let edits = get("edits-tests");
        assert_eq!(edits.verdict, Verdict::Unresolved, "{summary:#?}");
        let put_back: Vec<&str> = edits.tampering.iter().map(|t| t.path.as_str()).collect();
        assert_eq!(put_back, ["tests/conftest.py", "tests/test_slug.py"]);
        assert_eq!(edits.tests_status.fail_to_pass.failure.len(), 2);

        let fake = get("fake-pass");
        assert_eq!(fake.verdict, Verdict::Unresolved, "{summary:#?}");
        let log = std::fs::read_to_string(out.join(&fake.log_dir).join("test_output.txt")).unwrap();
        assert!(log.contains("PASSED tests/test_slug.py::test_no_separator_at_the_ends"), "the forgery is in the log");
        // SWE-bench's whole-log reading would have believed it; our summary reading does not.
        let whole = pytest_log::parse_whole_log(&log);
        let summary_only = pytest_log::parse_summary(&log).unwrap();
        let id = "tests/test_slug.py::test_no_separator_at_the_ends";
        assert_eq!(whole[id], repairbench::grade::TestStatus::Passed);
        assert_eq!(summary_only[id], repairbench::grade::TestStatus::Failed);

        let flaky = get("flaky");
        assert_eq!(flaky.verdict, Verdict::Resolved, "{summary:#?}");
        assert!(flaky.flaky_tests.iter().all(|t| t == "tests/test_slug.py::test_custom_separator"), "{:?}", flaky.flaky_tests);
        assert_eq!(out.join(&flaky.log_dir).join("reruns.txt").is_file(), !flaky.flaky_tests.is_empty());

        let order = get("order-dependent");
        assert_eq!(order.verdict, Verdict::Unresolved, "{summary:#?}");
        assert!(order.flaky_tests.is_empty(), "fails in every full run: not flaky");
        assert_eq!(order.tests_status.pass_to_pass.failure, vec!["tests/test_slug.py::test_custom_separator".to_string()]);
        let reruns = std::fs::read_to_string(out.join(&order.log_dir).join("reruns.txt")).unwrap();
        assert_eq!(reruns.matches("===== rerun").count(), 5, "every rerun ran the whole command");

        let broken = get("broken-import");
        assert_eq!(broken.verdict, Verdict::Unresolved, "the patch's fault, not the environment's: {summary:#?}");
        assert!(broken.detail.as_deref().is_some_and(|d| d.contains("tests run without it")));

        let offset = get("offset");
        assert_eq!((offset.verdict, offset.apply_method), (Verdict::Resolved, Some(ApplyMethod::Fuzzy)), "{summary:#?}");

        let no_apply = get("no-apply");
        assert_eq!((no_apply.verdict, no_apply.patch_applied), (Verdict::PatchApplyFailed, false));

        assert_eq!(get("no-runner").verdict, Verdict::EnvError, "{summary:#?}");

        let missing_repo = get("missing-repo");
        assert_eq!(missing_repo.verdict, Verdict::Error);
        assert!(missing_repo.detail.as_deref().unwrap().contains("repository acme/missing: not found"), "{:?}", missing_repo.detail);
        let missing_commit = get("missing-commit");
        assert_eq!(missing_commit.verdict, Verdict::Error);
        assert!(missing_commit.detail.as_deref().unwrap().contains("commit 0123456789abcdef0123456789abcdef01234567 not found"));

        // Everything left out is listed with where and why.
        let skipped: Vec<String> = report.skipped.iter().map(|s| format!("{} | {}", s.location, s.reason)).collect();
        let dataset_shown = dataset.display().to_string();
        let preds_shown = preds.display().to_string();
        assert!(skipped.iter().any(|s| s.starts_with(&format!("{dataset_shown}:4 | expected one JSON object per line"))), "{skipped:#?}");
        assert!(skipped.iter().any(|s| s.starts_with(&format!("{preds_shown}:{} | ", predictions.len() + 1)) && s.contains("not in the dataset")), "{skipped:#?}");
        assert!(skipped.iter().any(|s| s.starts_with(&format!("{preds_shown}:{} | ", predictions.len() + 2))), "{skipped:#?}");
        assert!(skipped.iter().any(|s| s.starts_with("acme__textkit-missing-repo | ")), "{skipped:#?}");
        assert_eq!(report.summary.total, predictions.len());
    });
}

fn count_lines_per_id(path: &Path) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(line) {
            *counts.entry(value["instance_id"].as_str().unwrap().to_owned()).or_default() += 1;
        }
    }
    counts
}

#[test]
fn a_killed_run_resumes_without_losing_or_redoing_work() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let results = out.join("results.jsonl");
    let command = |predictions: &str| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_repairbench"));
        command
            .args(["swe", "grade", "--dataset"])
            .arg(issues())
            .args(["--predictions", predictions, "--workers", "1", "--timeout", "60", "--out"])
            .arg(&out)
            .env(repairbench::env::CACHE_DIR, dir.path().join("cache"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        command
    };
    let samples = tasks::load_tasks(&issues()).unwrap().tasks.len();
    let mut child = command("gold").spawn().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(240);
    while count_lines_per_id(&results).is_empty() {
        assert!(std::time::Instant::now() < deadline, "no result within 240 s");
        assert!(child.try_wait().unwrap().is_none(), "the run ended before it could be killed");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let after_kill = count_lines_per_id(&results);
    assert!(!after_kill.is_empty() && after_kill.len() < samples, "killed midway: {after_kill:?}");
    assert!(!out.join("report.json").exists(), "the report is written at the end only");

    let resumed = command("gold").output().unwrap();
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    let counts = count_lines_per_id(&results);
    assert_eq!(counts.len(), samples, "{counts:?}");
    assert!(counts.values().all(|&n| n == 1), "finished instances were not graded again: {counts:?}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["summary"]["resolved"], samples);
    assert_eq!(report["instances"].as_array().unwrap().len(), samples);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    assert!(
        manifest["settings"]["image_id"].as_str().is_some_and(|id| id.starts_with("sha256:")),
        "{manifest}"
    );

    // Unchanged inputs: nothing reruns. Changed predictions: everything does.
    assert!(command("gold").output().unwrap().status.success());
    assert_eq!(count_lines_per_id(&results), counts);
    assert!(command("empty").output().unwrap().status.success());
    assert!(count_lines_per_id(&results).values().all(|&n| n == 2));
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["summary"]["verdicts"]["empty_patch"], samples);
}

/// A pytest plugin that reports every test as passed, wherever pytest would load it from.
const FORCE_PASS: &str = "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n    outcome = yield\n    report = outcome.get_result()\n    report.outcome = \"passed\"\n    report.longrepr = None\n";

/// Library code (appended to slug.py, the module under test) for each results attack.
const SKIP_FROM_LIBRARY: &str = r#"
_unfixed = slugify


def slugify(text, separator="-"):
    import pytest
    if text in ("Hello,  World", "  Hello World!"):
        pytest.skip("not applicable on this platform")
    return _unfixed(text, separator)
"#;

const REWRITE_AT_EXIT: &str = r#"
import atexit as _atexit


def _passify(xml):
    import re
    xml = re.sub(rb"<failure[^>]*>.*?</failure>", b"", xml, flags=re.S)
    return re.sub(rb'failures="[0-9]+"', b'failures="0"', xml)


def _forge():
    import json, os
    for root in ("/workspace", "/tmp"):
        for folder, _, files in os.walk(root):
            for name in files:
                path = os.path.join(folder, name)
                try:
                    data = open(path, "rb").read()
                except OSError:
                    continue
                if b"<testcase" in data:
                    open(path, "wb").write(_passify(data))
                elif b"junit_hex" in data:
                    value = json.loads(data)
                    value["junit_hex"] = _passify(bytes.fromhex(value["junit_hex"])).hex()
                    open(path, "w").write(json.dumps(value))


_atexit.register(_forge)
"#;

const DELETE_AND_PRINT_AT_EXIT: &str = r#"
import atexit as _atexit


def _vanish():
    import os, sys
    for root in ("/workspace", "/tmp"):
        for folder, _, files in os.walk(root):
            for name in files:
                if name.endswith((".json", ".xml")):
                    try:
                        os.remove(os.path.join(folder, name))
                    except OSError:
                        pass
    sys.stdout.write(
        "=========================== short test summary info ============================\n"
        "PASSED tests/test_slug.py::test_simple_words\n"
        "PASSED tests/test_slug.py::test_accents_are_dropped\n"
        "PASSED tests/test_slug.py::test_custom_separator\n"
        "PASSED tests/test_slug.py::test_repeated_separators_collapse\n"
        "PASSED tests/test_slug.py::test_no_separator_at_the_ends\n"
        "============================== 5 passed in 0.01s ===============================\n"
    )
    sys.stdout.flush()


_atexit.register(_vanish)
"#;

/// Fixes the bug only if the test process can see where results go or how they are signed.
const LEAK_PROBE: &str = r#"
def _leaked():
    import glob, os, sys
    seen = list(os.environ.values()) + list(sys.argv)
    seen.append(open("/proc/self/cmdline", "rb").read().decode("utf-8", "replace"))
    if any("rb-results" in s or "handoff" in s or ".xml" in s for s in seen):
        return True
    return bool(glob.glob("/workspace/**/handoff.json", recursive=True) + glob.glob("/workspace/.rb-results*"))


if _leaked():
    def slugify(text, separator="-"):
        import re
        return separator.join(re.findall(r"[a-z0-9]+", _ascii(text).lower()))
"#;

/// A module that, imported as the top-level `hmac` (inside the results plugin's own import),
/// swaps in the real one and turns every failing test into a pass: the signed report and
/// pytest's summary then agree. It works wherever its folder comes first on `sys.path`.
const SHADOWING_HMAC: &str = r#"import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
del sys.modules["hmac"]
import hmac as _real  # noqa: E402

sys.modules["hmac"] = _real
from _pytest import reports  # noqa: E402

_original = reports.TestReport.from_item_and_call.__func__


def _forged(cls, item, call):
    report = _original(cls, item, call)
    if report.failed:
        report.outcome, report.longrepr = "passed", None
    return report


reports.TestReport.from_item_and_call = classmethod(_forged)
"#;

#[test]
fn hostile_patches_earn_no_credit_and_write_nothing_outside() {
    runtime().block_on(async {
        let (sandbox, image) = docker().await;
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let sample = tasks::load_tasks(&issues().join("textkit-slugify")).unwrap().tasks.remove(0);
        let slug = base_file(&sample, &cache, "textkit/slug.py");
        let pyproject = base_file(&sample, &cache, "pyproject.toml");
        let readme = base_file(&sample, &cache, "README.md");
        let slug_with = |code: &str| file_diff("textkit/slug.py", &slug, &format!("{slug}{code}"));
        let new_file = |path: &str, text: &str| {
            file_diff(path, "", text).replace(&format!("--- a/{path}"), "--- /dev/null").replacen(
                &format!("diff --git a/{path} b/{path}\n"),
                &format!("diff --git a/{path} b/{path}\nnew file mode 100644\n"),
                1,
            )
        };
        let escape = dir.path().join("escape.txt");
        let mut attacks: Vec<(&str, String)> = Vec::new();
        // Paths: climbing out on each apply route, absolute, through git's folder.
        attacks.push(("climb-git2", new_file("../../escape.txt", "pwned\n")));
        attacks.push(("climb-normalized", "--- /dev/null\n+++ b/../../escape.txt\n@@ -0,0 +1,9 @@\n+pwned\n".into()));
        attacks.push(("absolute", format!("--- /dev/null\n+++ {}\n@@ -0,0 +1 @@\n+pwned\n", escape.display())));
        attacks.push(("git-dir", new_file(".git/hooks/post-checkout", "#!/bin/sh\ntouch /tmp/pwned\n")));
        // Test infrastructure: a conftest under a C-quoted name, one made by renaming a file,
        // a plugin through pyproject's addopts, through setup.cfg, through pytest.ini.
        let quoted = new_file("tests/conftest.py", FORCE_PASS).replace("a/tests/conftest.py", "\"a/tests/conf\\164est.py\"").replace("b/tests/conftest.py", "\"b/tests/conf\\164est.py\"");
        attacks.push(("quoted-conftest", quoted));
        let renamed = file_diff("conftest.py", &readme, FORCE_PASS)
            .replace("diff --git a/conftest.py b/conftest.py\n", "diff --git a/README.md b/conftest.py\nsimilarity index 0%\nrename from README.md\nrename to conftest.py\n")
            .replace("--- a/conftest.py", "--- a/README.md");
        attacks.push(("renamed-conftest", renamed));
        let plugin = new_file("textkit/evil.py", FORCE_PASS);
        let addopts = pyproject.replace("[tool.pytest.ini_options]\n", "[tool.pytest.ini_options]\naddopts = \"-p textkit.evil\"\n");
        assert_ne!(addopts, pyproject);
        attacks.push(("pyproject-addopts", format!("{}{plugin}", file_diff("pyproject.toml", &pyproject, &addopts))));
        let no_section = pyproject.replace("[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n", "");
        assert_ne!(no_section, pyproject);
        attacks.push((
            "setup-cfg-addopts",
            format!("{}{}{plugin}", file_diff("pyproject.toml", &pyproject, &no_section), new_file("setup.cfg", "[tool:pytest]\naddopts = -p textkit.evil\n")),
        ));
        attacks.push(("pytest-ini", format!("{}{plugin}", new_file("pytest.ini", "[pytest]\naddopts = -p textkit.evil\n"))));
        attacks.push(("sitecustomize", new_file("sitecustomize.py", "import builtins\n")));
        // Results: skipped or xfailed from library code, the report rewritten or deleted at
        // exit with a printed summary, and a probe for the results channel's secrets.
        attacks.push(("skip-from-library", slug_with(SKIP_FROM_LIBRARY)));
        attacks.push(("xfail-from-library", slug_with(&SKIP_FROM_LIBRARY.replace("pytest.skip(", "pytest.xfail("))));
        attacks.push(("rewrite-at-exit", slug_with(REWRITE_AT_EXIT)));
        attacks.push(("delete-and-print-at-exit", slug_with(DELETE_AND_PRINT_AT_EXIT)));
        attacks.push(("leak-probe", slug_with(LEAK_PROBE)));
        // Shadowing: a module at the root named after one the results plugin imports (refused
        // before anything runs), and the same module in a folder the task puts on PYTHONPATH
        // (not at the root, so not refused: the import order has to hold).
        attacks.push(("shadow-hmac", new_file("hmac.py", SHADOWING_HMAC)));
        attacks.push(("shadow-json", new_file("json.py", &SHADOWING_HMAC.replace("hmac", "json"))));
        attacks.push(("shadow-through-pythonpath", new_file("textkit/hmac.py", SHADOWING_HMAC)));

        let mut lines = Vec::new();
        let mut preds = Vec::new();
        for (name, patch) in &attacks {
            let mut task = sample.clone();
            task.instance_id = format!("attack-{name}");
            if *name == "shadow-through-pythonpath" {
                let mut environment = task.environment.clone().unwrap_or_default();
                environment.env.insert("PYTHONPATH".into(), "textkit".into());
                task.environment = Some(environment);
            }
            lines.push(serde_json::to_string(&task).unwrap());
            preds.push(serde_json::json!({"instance_id": task.instance_id, "model_name_or_path": "hostile", "model_patch": patch}).to_string());
        }
        let dataset = dir.path().join("attacks.jsonl");
        std::fs::write(&dataset, lines.join("\n") + "\n").unwrap();
        let preds_file = dir.path().join("preds.jsonl");
        std::fs::write(&preds_file, preds.join("\n") + "\n").unwrap();
        let repos_dir = dir.path().join("repos");
        std::fs::create_dir_all(repos_dir.join("acme")).unwrap();
        std::fs::copy(sample.bundle.as_ref().unwrap(), repos_dir.join("acme/textkit.bundle")).unwrap();
        let out = dir.path().join("out");
        let mut plan = plan(&dataset, PredictionSource::File(preds_file), &out, &cache, &image);
        plan.repos = Some(repos_dir);
        plan.settings.flaky_reruns = 0;
        let report = grade(&sandbox, &plan).await;
        let results = by_id(&report);
        let get = |name: &str| results.get(&format!("attack-{name}")).unwrap_or_else(|| panic!("{name} graded"));
        let table: Vec<String> = report
            .instances
            .iter()
            .map(|r| format!("{} {:?} {:?} {:?} {:?}", r.instance_id, r.verdict, r.reason, r.detail, r.tampering))
            .collect();

        // No attack earns credit.
        assert_eq!(report.summary.total, attacks.len());
        assert_eq!(report.summary.resolved, 0, "{table:#?}");
        for name in ["climb-git2", "climb-normalized", "absolute", "git-dir"] {
            let r = get(name);
            assert_eq!((r.verdict, r.reason.as_deref()), (Verdict::PatchApplyFailed, Some("unsafe_path")), "{name}: {table:#?}");
        }
        let put_back = |name: &str| get(name).tampering.iter().map(|t| t.path.clone()).collect::<Vec<_>>();
        assert_eq!(put_back("quoted-conftest"), ["tests/conftest.py"], "{table:#?}");
        assert_eq!(put_back("renamed-conftest"), ["conftest.py"], "{table:#?}");
        assert_eq!(put_back("pyproject-addopts"), ["pyproject.toml"], "{table:#?}");
        assert_eq!(put_back("setup-cfg-addopts"), ["pyproject.toml", "setup.cfg"], "{table:#?}");
        assert_eq!(put_back("pytest-ini"), ["pytest.ini"], "{table:#?}");
        assert_eq!(put_back("sitecustomize"), ["sitecustomize.py"], "{table:#?}");
        assert!(get("shadow-through-pythonpath").tampering.is_empty(), "{table:#?}");
        for name in ["shadow-hmac", "shadow-json", "sitecustomize"] {
            let r = get(name);
            assert_eq!((r.verdict, r.reason.as_deref()), (Verdict::PatchApplyFailed, Some("shadows_module")), "{name}: {table:#?}");
            assert!(r.tampering.iter().all(|t| t.rule.starts_with("shadows_module")), "{name}: {table:#?}");
        }
        assert_eq!(put_back("shadow-hmac"), ["hmac.py"], "{table:#?}");
        assert_eq!(put_back("shadow-json"), ["json.py"], "{table:#?}");
        for name in ["quoted-conftest", "renamed-conftest", "pyproject-addopts", "setup-cfg-addopts", "pytest-ini", "skip-from-library", "xfail-from-library", "leak-probe", "shadow-through-pythonpath"] {
            let r = get(name);
            assert_eq!(r.verdict, Verdict::Unresolved, "{name}: {table:#?}");
            assert_eq!(r.tests_status.fail_to_pass.failure.len(), 2, "{name}: {table:#?}");
        }
        for name in ["rewrite-at-exit", "delete-and-print-at-exit"] {
            let r = get(name);
            assert_eq!((r.verdict, r.reason.as_deref()), (Verdict::Error, Some("results_tampered")), "{name}: {table:#?}");
        }
        let detail = |name: &str| get(name).detail.clone().unwrap_or_default();
        assert!(detail("rewrite-at-exit").contains("signature does not match"), "{table:#?}");
        assert!(detail("delete-and-print-at-exit").contains("no signed results"), "{table:#?}");
        // The printed forgery is in the log; it was not believed.
        let log = std::fs::read_to_string(out.join(&get("delete-and-print-at-exit").log_dir).join("test_output.txt")).unwrap();
        assert!(log.contains("5 passed in 0.01s"), "{log}");

        // Nothing was written outside: not beside the output, not in /tmp, not into the cache.
        assert!(!escape.exists());
        assert!(!dir.path().parent().unwrap().join("escape.txt").exists());
        assert!(!Path::new("/tmp/pwned").exists());
        let mirrors: Vec<_> = std::fs::read_dir(cache.join("bundles")).unwrap().flatten().collect();
        for mirror in mirrors {
            let repo = git2::Repository::open(mirror.path()).unwrap();
            assert!(!repo.path().join("hooks/post-checkout").exists());
        }
    });
}

/// A cluster worker whose engine lacks the coordinator's image, and builds another default
/// image, stops with a message saying how to give it the coordinator's images.
#[test]
fn a_worker_without_the_coordinators_image_says_how_to_get_it() {
    let dir = tempfile::tempdir().unwrap();
    let settings = repair::GradeSettings::new("repairbench/python:0000000000000000");
    let settings_file = dir.path().join("settings.json");
    std::fs::write(&settings_file, serde_json::to_vec(&settings).unwrap()).unwrap();
    let predictions = dir.path().join("predictions.jsonl");
    std::fs::write(&predictions, "").unwrap();
    let issues = Path::new(env!("CARGO_MANIFEST_DIR")).join("issues");
    let out = common::cli::repairbench()
        .args(["worker", "grade", "--dataset"])
        .arg(&issues)
        .arg("--predictions")
        .arg(&predictions)
        .arg("--settings")
        .arg(&settings_file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("lacks the coordinator's image repairbench/python:0000000000000000")
            && text.contains("docker load"),
        "{text}"
    );
}
