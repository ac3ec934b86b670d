//! Environments built from task repositories, and `swe validate`, on the real Docker engine.
//! The sample tasks of every runner are graded by `swe_grade`; these cover what goes wrong.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use repairbench::grade::Verdict;
use repairbench::repair::{self, GradePlan, GradeSettings};
use repairbench::report::ConsoleProgress;
use repairbench::sandbox::{images, DockerSandbox};
use repairbench::tasks::PredictionSource;

fn sample(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("issues").join(name)
}

/// A task folder under `root` made from the sample `from`, its task.json changed by `edit`.
fn task_folder(root: &Path, from: &str, id: &str, edit: impl FnOnce(&mut serde_json::Value)) {
    let dir = root.join(id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(sample(from).join("repo.bundle"), dir.join("repo.bundle")).unwrap();
    let mut task: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sample(from).join("task.json")).unwrap()).unwrap();
    task["instance_id"] = id.into();
    edit(&mut task);
    std::fs::write(dir.join("task.json"), serde_json::to_string_pretty(&task).unwrap()).unwrap();
}

fn plan(dataset: &Path, out: &Path, image: &str) -> GradePlan {
    let mut settings = GradeSettings::new(image);
    settings.timeout = Duration::from_secs(120);
    settings.workers = 2;
    GradePlan {
        dataset: dataset.to_owned(),
        predictions: PredictionSource::Gold,
        repos: None,
        url_template: Some(format!("{}/no-remote/{{repo}}", out.display())),
        cache_dir: out.join("cache"),
        out: out.join("out"),
        settings,
        extra_manifest: BTreeMap::new(),
        force: false,
        specs: None,
        perturb: None,
    }
}

async fn docker() -> (Arc<DockerSandbox>, String) {
    let sandbox = DockerSandbox::connect().await.expect("the Docker engine must be running for these tests");
    let image = images::ensure_default_image(sandbox.docker()).await.expect("default Python image");
    (Arc::new(sandbox), image)
}

#[test]
fn a_failed_environment_build_is_env_error_with_its_step_and_log() {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let (sandbox, image) = docker().await;
        let dir = tempfile::tempdir().unwrap();
        let tasks = dir.path().join("tasks");
        task_folder(&tasks, "textkit-slugify", "acme__textkit-badenv", |task| {
            task["environment"] = serde_json::json!({"pip": ["repairbench-no-such-package-zz9"]});
        });
        let report = repair::grade(
            repair::Grader::Local(sandbox),
            &plan(&tasks, dir.path(), &image),
            &mut ConsoleProgress::hidden(),
        )
        .await
        .unwrap();
        let result = &report.instances[0];
        assert_eq!(result.verdict, Verdict::EnvError, "{result:#?}");
        assert_eq!(result.reason.as_deref(), Some("environment_build_failed"));
        let detail = result.detail.as_deref().unwrap();
        assert!(detail.contains("pip-install repairbench-no-such-package-zz9`"), "{detail}");
        let log = std::fs::read_to_string(
            dir.path().join("out").join(&result.log_dir).join("environment_build.log"),
        )
        .unwrap();
        // The installer's own words (uv): the package is named as not found.
        assert!(log.contains("repairbench-no-such-package-zz9 was not found"), "{log}");
    });
}

#[test]
fn validate_accepts_fair_tasks_and_names_what_is_wrong_with_the_others() {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let (sandbox, image) = docker().await;
        let dir = tempfile::tempdir().unwrap();
        let tasks = dir.path().join("tasks");
        task_folder(&tasks, "textkit-slugify", "acme__textkit-fair", |_| {});
        task_folder(&tasks, "textkit-slugify", "acme__textkit-nogold", |task| task["patch"] = "".into());
        // A test that already passes listed as FAIL_TO_PASS: the task does not test the fix.
        task_folder(&tasks, "textkit-slugify", "acme__textkit-weak", |task| {
            let mut f2p: Vec<String> = serde_json::from_str(task["FAIL_TO_PASS"].as_str().unwrap()).unwrap();
            f2p.push("tests/test_slug.py::test_simple_words".into());
            task["FAIL_TO_PASS"] = serde_json::to_string(&f2p).unwrap().into();
        });
        let mut plan = plan(&tasks, dir.path(), &image);
        plan.out = dir.path().join("validation");
        let report =
            repair::validate::validate(sandbox, &plan, &mut ConsoleProgress::hidden()).await.unwrap();
        let by_id: BTreeMap<&str, &repair::validate::InstanceValidation> =
            report.instances.iter().map(|v| (v.instance_id.as_str(), v)).collect();
        assert_eq!((report.valid, report.invalid), (1, 2), "{report:#?}");
        assert!(by_id["acme__textkit-fair"].valid);
        assert!(by_id["acme__textkit-nogold"].problems[0].contains("gold does not resolve it"));
        assert_eq!(
            by_id["acme__textkit-weak"].fail_to_pass_passing_unpatched,
            ["tests/test_slug.py::test_simple_words"]
        );
        for file in ["validation.json", "gold/report.json", "unpatched/report.json"] {
            assert!(plan.out.join(file).is_file(), "{file}");
        }
    });
}

#[test]
fn a_patch_that_fails_the_ci_lint_job_is_not_resolved() {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let (sandbox, image) = docker().await;
        let dir = tempfile::tempdir().unwrap();
        let patch = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/swe/slugger-lint-breaking.patch"),
        )
        .unwrap();
        let predictions = dir.path().join("wrong.jsonl");
        let line = serde_json::json!({"instance_id": "acme__slugger-77", "model_name_or_path": "wrong", "model_patch": patch});
        std::fs::write(&predictions, format!("{line}\n")).unwrap();
        let mut plan = plan(&sample("slugger-ci-lint"), dir.path(), &image);
        plan.predictions = PredictionSource::File(predictions.clone());
        let report = repair::grade(repair::Grader::Local(sandbox.clone()), &plan, &mut ConsoleProgress::hidden()).await.unwrap();
        let result = &report.instances[0];
        assert_eq!(result.verdict, Verdict::Unresolved, "{result:#?}");
        // The tests pass; only the lint job fails.
        assert!(result.tests_status.fail_to_pass.failure.is_empty(), "{result:#?}");
        assert_eq!(result.tests_status.pass_to_pass.failure, ["ci:lint"]);
        let lint_log = dir.path().join("out").join(&result.log_dir).join("ci/lint.log");
        assert!(std::fs::read_to_string(lint_log).unwrap().contains("imported but unused"));

        // The same patch with a `pyflakes` of its own at the root, which `python3 -m pyflakes`
        // would run from there in place of the real one and pass: refused before anything runs.
        let fake = "diff --git a/pyflakes/__main__.py b/pyflakes/__main__.py\nnew file mode 100644\n--- /dev/null\n+++ b/pyflakes/__main__.py\n@@ -0,0 +1 @@\n+raise SystemExit(0)\n";
        let line = serde_json::json!({"instance_id": "acme__slugger-77", "model_name_or_path": "wrong", "model_patch": format!("{patch}{fake}")});
        std::fs::write(&predictions, format!("{line}\n")).unwrap();
        plan.out = dir.path().join("out-shadowing");
        let report = repair::grade(repair::Grader::Local(sandbox), &plan, &mut ConsoleProgress::hidden()).await.unwrap();
        let result = &report.instances[0];
        assert_eq!((result.verdict, result.reason.as_deref()), (Verdict::PatchApplyFailed, Some("shadows_module")), "{result:#?}");
        assert_eq!(result.tampering.iter().map(|t| t.path.as_str()).collect::<Vec<_>>(), ["pyflakes/__main__.py"]);
    });
}

#[test]
fn any_tool_writing_junit_xml_is_a_runner() {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let (sandbox, image) = docker().await;
        let dir = tempfile::tempdir().unwrap();
        let tasks = dir.path().join("tasks");
        // pytest stands in for Surefire or Jest here: only its JUnit file is read.
        task_folder(&tasks, "textkit-slugify", "acme__textkit-junit", |task| {
            let ids = |key: &str| -> Vec<String> {
                let list: Vec<String> = serde_json::from_str(task[key].as_str().unwrap()).unwrap();
                list.iter().map(|id| id.replace("tests/test_slug.py::", "tests.test_slug::")).collect()
            };
            let (f2p, p2p) = (ids("FAIL_TO_PASS"), ids("PASS_TO_PASS"));
            task["FAIL_TO_PASS"] = serde_json::json!(f2p);
            task["PASS_TO_PASS"] = serde_json::json!(p2p);
            task["environment"] = serde_json::json!({
                "runner": "junit",
                "junit": ["build/reports/*.xml"],
                "test_cmd": "python3 -m pytest -p no:cacheprovider --junitxml=build/reports/TEST-slug.xml tests",
            });
        });
        let report = repair::grade(repair::Grader::Local(sandbox.clone()), &plan(&tasks, dir.path(), &image), &mut ConsoleProgress::hidden())
            .await
            .unwrap();
        let result = &report.instances[0];
        assert_eq!(result.verdict, Verdict::Resolved, "{result:#?}");
        assert_eq!(result.tests_status.fail_to_pass.success.len(), 2, "{result:#?}");
        let mut unpatched = plan(&tasks, &dir.path().join("unpatched"), &image);
        unpatched.predictions = PredictionSource::Empty;
        unpatched.settings.test_empty_patches = true;
        let report = repair::grade(repair::Grader::Local(sandbox), &unpatched, &mut ConsoleProgress::hidden()).await.unwrap();
        let result = &report.instances[0];
        assert_eq!(result.verdict, Verdict::Unresolved, "{result:#?}");
        assert_eq!(result.tests_status.fail_to_pass.failure.len(), 2, "{result:#?}");
        assert_eq!(result.tests_status.pass_to_pass.success.len(), 3, "{result:#?}");
    });
}

#[test]
fn images_build_prepares_every_environment_of_a_dataset() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_repairbench"))
        .args(["images", "build", "--dataset"])
        .arg(sample("ledger-src-layout"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("acme__ledger-58") && stdout.contains("repairbench/env-python:"), "{stdout}");
    assert!(stdout.contains("1 environments ready, 0 failed"), "{stdout}");
}

fn git(repo: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(repo)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn each_ci_job_runs_in_a_fresh_container_so_a_daemon_or_file_one_leaves_is_gone_for_the_next() {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let (sandbox, image) = docker().await;
        let dir = tempfile::tempdir().unwrap();
        // A scripted repository: a bug, and a CI configuration whose first job leaves a daemon
        // writing a heartbeat and a file in the workspace, and whose second job fails if it finds either.
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
        let ci = "stages: [first, second]\n\
                  leave-daemon:\n  stage: first\n  script:\n    - \"(while true; do date > /tmp/daemon-alive; sleep 0.1; done) >/dev/null 2>&1 &\"\n    - echo left > leftover.txt\n    - sleep 0.3\n\
                  check-clean:\n  stage: second\n  script:\n    - sleep 0.5\n    - test ! -e /tmp/daemon-alive\n    - test ! -e leftover.txt\n";
        std::fs::write(repo.join(".gitlab-ci.yml"), ci).unwrap();
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "base"]);
        let base = git(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
        std::fs::write(repo.join("calc.py"), "def add(a, b):\n    return a + b\n").unwrap();
        let patch = git(&repo, &["diff"]);
        git(&repo, &["checkout", "-q", "calc.py"]);
        std::fs::create_dir_all(repo.join("tests")).unwrap();
        std::fs::write(repo.join("tests/test_calc.py"), "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n").unwrap();
        git(&repo, &["add", "-N", "tests/test_calc.py"]);
        let test_patch = git(&repo, &["diff"]);
        let tasks = dir.path().join("tasks");
        std::fs::create_dir_all(tasks.join("ci")).unwrap();
        git(&repo, &["bundle", "create", tasks.join("ci/repo.bundle").to_str().unwrap(), "main"]);
        let task = serde_json::json!({
            "repo": "acme/calc", "instance_id": "acme__calc-1", "base_commit": base, "patch": patch,
            "test_patch": test_patch, "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
            "PASS_TO_PASS": ["ci:leave-daemon", "ci:check-clean"], "ci_jobs": ["all"],
        });
        std::fs::write(tasks.join("ci/task.json"), task.to_string()).unwrap();
        let report = repair::grade(repair::Grader::Local(sandbox), &plan(&tasks, dir.path(), &image), &mut ConsoleProgress::hidden()).await.unwrap();
        let result = &report.instances[0];
        assert_eq!(result.verdict, Verdict::Resolved, "{result:#?}");
        let jobs: Vec<(&str, &str)> = result.ci_jobs.iter().map(|j| (j.job.as_str(), j.detail.as_str())).collect();
        assert_eq!(jobs, [("leave-daemon", "exit 0"), ("check-clean", "exit 0")], "{result:#?}");
    });
}
