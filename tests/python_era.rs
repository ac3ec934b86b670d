//! The Python and the tools of a commit's era, on the real Docker engine: a scripted project
//! of mid-2020 whose conftest uses a hook signature today's pytest rejects (the case of a real
//! 2020 fix in a well-known templating library) resolves under the Python 3.9 image with a
//! pytest of that era, and fails under Python 3.13 (the trixie image) with today's pytest.
//! On that Python 3.9, which has no PYTHONSAFEPATH, a patch to a module at the root named
//! after one that pytest imports at its start still never runs there.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::scripted::ScriptedRepo;
use repairbench::grade::Verdict;
use repairbench::repair::{self, InstanceResult};
use repairbench::report::ConsoleProgress;
use repairbench::sandbox::{images, DockerSandbox};
use repairbench::tasks::PredictionSource;

/// pytest before 7 passed `path` (a py.path) to this hook; pytest 8 refuses the signature.
const OLD_CONFTEST: &str =
    "def pytest_ignore_collect(path, config):\n    return path.basename.startswith(\"scratch_\")\n";

const ERA_TESTS: &str = "import sys\n\nimport pytest\n\nfrom slugs import slug\n\n\n\
def test_era_python_and_pytest():\n    assert sys.version_info[:2] == (3, 9)\n    assert pytest.__version__.startswith(\"6.\")\n\n\n\
def test_lowercase():\n    assert slug(\"Hello\") == \"hello\"\n";

/// A task folder for a scripted repository with `files`, committed on `date`; the fix joins
/// words with dashes, and the test patch adds a test of that. Returns the folder, the
/// repository and its base commit.
fn slug_task(
    dir: &Path,
    name: &str,
    date: &str,
    files: &[(&str, String)],
    edit: impl FnOnce(&mut serde_json::Value),
) -> (std::path::PathBuf, ScriptedRepo, String) {
    let repo = ScriptedRepo::init(&dir.join(format!("{name}-repo")), date);
    let mut all = vec![("slugs.py", "def slug(text):\n    return text.lower()\n".to_owned())];
    all.extend(files.iter().cloned());
    let base = repo.commit(&all, "slugs");
    let patch = repo.diff(
        &base,
        &[("slugs.py", "def slug(text):\n    return \"-\".join(text.lower().split())\n".to_owned())],
    );
    let tests = files.iter().find(|(p, _)| *p == "tests/test_slugs.py").map(|(_, t)| t.clone()).unwrap();
    let test_patch = repo.diff(
        &base,
        &[("tests/test_slugs.py", format!("{tests}\n\ndef test_words_are_joined_by_dashes():\n    assert slug(\"Hello World\") == \"hello-world\"\n"))],
    );
    let mut task = serde_json::json!({
        "repo": format!("acme/{name}"), "instance_id": format!("acme__{name}-1"), "base_commit": base,
        "patch": patch, "test_patch": test_patch, "problem_statement": "slug() keeps spaces.",
        "FAIL_TO_PASS": ["tests/test_slugs.py::test_words_are_joined_by_dashes"],
        "PASS_TO_PASS": ["tests/test_slugs.py::test_lowercase"],
    });
    edit(&mut task);
    let dataset = dir.join(name);
    repo.task_folder(&dataset.join(name), &task);
    (dataset, repo, base)
}

fn grade_gold(dataset: &Path, out: &Path) -> InstanceResult {
    grade(dataset, PredictionSource::Gold, out)
}

fn grade(dataset: &Path, predictions: PredictionSource, out: &Path) -> InstanceResult {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let sandbox =
            DockerSandbox::connect().await.expect("the Docker engine must be running for these tests");
        let image = images::ensure_default_image(sandbox.docker()).await.expect("default image");
        let mut plan =
            common::swe::grade_plan(dataset, predictions, &out.join("out"), &out.join("cache"), &image);
        plan.settings.timeout = std::time::Duration::from_secs(120);
        let report =
            repair::grade(repair::Grader::Local(Arc::new(sandbox)), &plan, &mut ConsoleProgress::hidden())
                .await
                .unwrap();
        report.instances.into_iter().next().unwrap()
    })
}

#[test]
fn a_2020_project_gets_python_3_9_and_a_pytest_of_its_era_and_fails_under_todays() {
    let dir = tempfile::tempdir().unwrap();
    let files = [("conftest.py", OLD_CONFTEST.to_owned()), ("tests/test_slugs.py", ERA_TESTS.to_owned())];
    let (dataset, _, _) = slug_task(dir.path(), "slugs-2020", "2020-06-01T10:00:00+00:00", &files, |_| {});
    let result = grade_gold(&dataset, &dir.path().join("era"));
    assert_eq!(result.verdict, Verdict::Resolved, "{result:#?}");
    let python = result.python.as_deref().unwrap();
    assert!(
        python.starts_with("3.9 (")
            && python.contains("3.8 was the newest on the environment commit's date 2020-06-01"),
        "{python}"
    );
    // Half a year into Python 3.9's life, later than the commit: pytest 6.2, which still takes
    // the old hook signature.
    assert_eq!(result.packages_as_of.as_deref(), Some("2021-04-03T00:00:00Z"));

    // The same project under today's tools: Python 3.13 (the trixie image) and packages with
    // no cutoff, so pytest 9, which refuses the conftest's hook: nothing passes.
    let (dataset, _, _) = slug_task(dir.path(), "slugs-today", "2020-06-01T10:00:00+00:00", &files, |task| {
        task["environment"] = serde_json::json!({"python": "3.13", "packages_as_of": "latest"});
    });
    let result = grade_gold(&dataset, &dir.path().join("today"));
    assert_ne!(result.verdict, Verdict::Resolved, "{result:#?}");
    assert_eq!(result.python.as_deref(), Some("3.13 (the task's environment.python is 3.13; available)"));
    assert_eq!(result.packages_as_of, None);
    let log =
        std::fs::read_to_string(dir.path().join("today/out").join(&result.log_dir).join("test_output.txt"))
            .unwrap();
    assert!(
        log.contains("PluginValidationError") && log.contains("pytest_ignore_collect"),
        "{result:#?}\n{log}"
    );
}

/// Imported as `attr` (pytest 6 imports attrs at its start), it says so, hands pytest the real
/// attrs, and arranges for every failing test to be reported as passed.
const HOSTILE_ATTR: &str = r#"import os
import sys

print("HOSTILE attr.py RAN", flush=True)
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
del sys.modules["attr"]
import attr as _real  # noqa: E402

sys.modules["attr"] = _real


class _Forger:
    def find_spec(self, name, path=None, target=None):
        if name != "_pytest.reports":
            return None
        import importlib.util

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            original = module.TestReport.from_item_and_call.__func__

            def forged(cls, item, call):
                report = original(cls, item, call)
                if report.failed:
                    report.outcome, report.longrepr = "passed", None
                return report

            module.TestReport.from_item_and_call = classmethod(forged)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Forger())
"#;

/// Python 3.9 has no PYTHONSAFEPATH, so `python3 -m pytest` would put the repository's root
/// first on `sys.path` and import a root module before pytest's own dependencies. A project
/// whose root has a module named after one of them (its own, so a patch may change it) gets a
/// hostile patch to it: it never runs, and the fix it lacks stays unresolved.
#[test]
fn on_python_3_9_a_root_module_named_after_a_pytest_dependency_never_runs() {
    let dir = tempfile::tempdir().unwrap();
    let own_attr = "\"\"\"The project's own attribute helpers.\"\"\"\n\n\ndef names(obj):\n    return sorted(vars(obj))\n";
    let files = [
        ("attr.py", own_attr.to_owned()),
        ("conftest.py", OLD_CONFTEST.to_owned()),
        ("tests/test_slugs.py", ERA_TESTS.to_owned()),
    ];
    let (dataset, repo, base) =
        slug_task(dir.path(), "slugs-attr", "2020-06-01T10:00:00+00:00", &files, |_| {});
    let result = grade_gold(&dataset, &dir.path().join("gold"));
    assert_eq!(result.verdict, Verdict::Resolved, "{result:#?}");
    assert!(result.python.as_deref().unwrap().starts_with("3.9 ("), "{result:#?}");

    let hostile = repo.diff(&base, &[("attr.py", HOSTILE_ATTR.to_owned())]);
    let predictions = dir.path().join("hostile.jsonl");
    let line = serde_json::json!({"instance_id": "acme__slugs-attr-1", "model_name_or_path": "hostile", "model_patch": hostile});
    std::fs::write(&predictions, format!("{line}\n")).unwrap();
    let out = dir.path().join("hostile");
    let result = grade(&dataset, PredictionSource::File(predictions), &out);
    assert_eq!(result.verdict, Verdict::Unresolved, "{result:#?}");
    assert_eq!(
        result.tests_status.fail_to_pass.failure,
        ["tests/test_slugs.py::test_words_are_joined_by_dashes"]
    );
    assert!(result.tampering.is_empty(), "{result:#?}");
    let log = std::fs::read_to_string(out.join("out").join(&result.log_dir).join("test_output.txt")).unwrap();
    assert!(!log.contains("HOSTILE attr.py RAN"), "{log}");
    assert!(log.contains("1 failed"), "{log}");
}
