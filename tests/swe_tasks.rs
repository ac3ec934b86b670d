//! Loading datasets and predictions, and finding repositories: the shapes SWE-bench publishes,
//! our task folders, and bad input (each bad record skipped with file, line and what was
//! expected; the rest loaded).

use std::path::{Path, PathBuf};

use repairbench::tasks::{self, repos, PredictionSource, RepoError, RepoLocator};

fn issues() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("issues")
}

fn task_json(id: &str, f2p: serde_json::Value) -> String {
    serde_json::json!({
        "repo": "acme/textkit", "instance_id": id, "base_commit": "dfd83be5e1c3",
        "patch": "", "test_patch": "", "problem_statement": "p", "hints_text": "",
        "version": 0.3, "environment_setup_commit": null, "created_at": "2024",
        "FAIL_TO_PASS": f2p, "PASS_TO_PASS": "[]"
    })
    .to_string()
}

#[test]
fn bundled_task_folders_load_with_their_bundles() {
    let set = tasks::load_tasks(&issues()).unwrap();
    assert!(set.skipped.is_empty(), "{:?}", set.skipped);
    assert!(set.tasks.len() >= 3);
    for task in &set.tasks {
        assert!(task.bundle.as_ref().is_some_and(|b| b.is_file()), "{} has its bundle", task.instance_id);
        assert!(!task.fail_to_pass.is_empty() && !task.pass_to_pass.is_empty());
        assert!(task.fail_to_pass[0].contains("::"), "lists decoded from JSON strings");
    }
    // One folder on its own works too.
    let one = tasks::load_tasks(&issues().join("textkit-slugify")).unwrap();
    assert_eq!(one.tasks.len(), 1);
    assert_eq!(one.tasks[0].version.as_deref(), Some("0.3"));
}

#[test]
fn malformed_lines_are_skipped_with_file_line_and_expectation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.jsonl");
    let good_list = task_json("a__b-1", serde_json::json!(["t.py::x"]));
    let good_string = task_json("a__b-2", serde_json::json!("[\"t.py::y\"]"));
    let missing_commit =
        good_list.replace("\"base_commit\":\"dfd83be5e1c3\",", "").replace("a__b-1", "a__b-3");
    let bad_list = task_json("a__b-4", serde_json::json!("not json"));
    std::fs::write(
        &path,
        format!("{good_list}\n{{\"repo\": \n\n{good_string}\n{missing_commit}\n{bad_list}\n{good_list}\n"),
    )
    .unwrap();
    let set = tasks::load_tasks(&path).unwrap();
    let ids: Vec<&str> = set.tasks.iter().map(|t| t.instance_id.as_str()).collect();
    assert_eq!(ids, ["a__b-1", "a__b-2"]);
    assert_eq!(set.tasks[1].fail_to_pass, vec!["t.py::y".to_string()]);
    let shown = path.display().to_string();
    let reasons: Vec<String> = set.skipped.iter().map(|s| format!("{} {}", s.location, s.reason)).collect();
    assert_eq!(reasons.len(), 4, "{reasons:#?}");
    assert!(reasons[0].starts_with(&format!("{shown}:2 expected one JSON object per line")), "{reasons:#?}");
    assert!(
        reasons[1].starts_with(&format!("{shown}:5 ")) && reasons[1].contains("missing field `base_commit`"),
        "{reasons:#?}"
    );
    assert!(
        reasons[2].starts_with(&format!("{shown}:6 ")) && reasons[2].contains("not a JSON list"),
        "{reasons:#?}"
    );
    assert!(
        reasons[3].starts_with(&format!("{shown}:7 ")) && reasons[3].contains("duplicate"),
        "{reasons:#?}"
    );
}

#[test]
fn json_array_datasets_name_the_element() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.json");
    let good = task_json("a__b-1", serde_json::json!(["t.py::x"]));
    std::fs::write(&path, format!("[{good}, {{\"instance_id\": \"x\"}}]")).unwrap();
    let set = tasks::load_tasks(&path).unwrap();
    assert_eq!(set.tasks.len(), 1);
    assert_eq!(set.skipped[0].location, format!("{}[1]", path.display()));
    assert_eq!(set.skipped[0].instance_id.as_deref(), Some("x"));
    assert!(matches!(tasks::load_tasks(&dir.path().join("nope.json")), Err(tasks::LoadError::Read { .. })));
}

#[test]
fn predictions_for_unknown_instances_are_skipped() {
    let set = tasks::load_tasks(&issues()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("preds.jsonl");
    std::fs::write(
        &path,
        concat!(
            "{\"instance_id\": \"acme__textkit-101\", \"model_name_or_path\": \"m\", \"model_patch\": \"x\", \"full_output\": \"kept\"}\n",
            "{\"instance_id\": \"nobody__nothing-1\", \"model_name_or_path\": \"m\", \"model_patch\": \"x\"}\n",
            "{\"instance_id\": \"acme__intervals-42\", \"model_patch\": null}\n",
            "not json\n",
        ),
    )
    .unwrap();
    let preds = tasks::load_predictions(&PredictionSource::File(path.clone()), &set.tasks).unwrap();
    assert_eq!(preds.by_instance.len(), 2);
    assert_eq!(preds.by_instance["acme__textkit-101"].extra["full_output"], "kept");
    assert_eq!(preds.by_instance["acme__intervals-42"].patch(), "");
    assert_eq!(preds.skipped.len(), 2);
    assert_eq!(preds.skipped[0].location, format!("{}:4", path.display()));
    assert_eq!(preds.skipped[1].location, format!("{}:2", path.display()));
    assert!(preds.skipped[1].reason.contains("not in the dataset"));

    let gold = tasks::load_predictions(&PredictionSource::parse("gold"), &set.tasks).unwrap();
    let empty = tasks::load_predictions(&PredictionSource::parse("empty"), &set.tasks).unwrap();
    for task in &set.tasks {
        assert_eq!(gold.by_instance[&task.instance_id].patch(), task.patch);
        assert_eq!(empty.by_instance[&task.instance_id].patch(), "");
    }
}

#[test]
fn repositories_from_repos_dir_bundles_and_url_template() {
    let set = tasks::load_tasks(&issues()).unwrap();
    let mut task = set.tasks.iter().find(|t| t.instance_id == "acme__textkit-101").unwrap().clone();
    let bundle = task.bundle.take().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let repos_dir = tempfile::tempdir().unwrap();

    // DIR/OWNER/NAME.bundle
    std::fs::create_dir_all(repos_dir.path().join("acme")).unwrap();
    std::fs::copy(&bundle, repos_dir.path().join("acme/textkit.bundle")).unwrap();
    let locator = RepoLocator::new(Some(repos_dir.path().into()), None, cache.path().into());
    let found = locator.locate(&task).unwrap();
    let (repo, _) = repos::open_commit(&found, &task.repo, &task.base_commit).unwrap();
    assert!(repos::read_at_commit(&repo, &task.base_commit, "textkit/slug.py").is_some());
    assert!(repos::list_files(&repo, &task.base_commit).contains(&"tests/test_slug.py".to_string()));

    // A missing commit is a clear error.
    let err = repos::open_commit(&found, &task.repo, "deadbeefdeadbeef").err().unwrap();
    assert!(matches!(err, RepoError::MissingCommit { .. }));
    assert_eq!(err.to_string(), "repository acme/textkit: commit deadbeefdeadbeef not found");

    // A plain clone under DIR/OWNER/NAME wins over the bundle.
    let plain = repos_dir.path().join("acme/textkit");
    let status =
        std::process::Command::new("git").args(["clone", "-q"]).arg(&bundle).arg(&plain).status().unwrap();
    assert!(status.success());
    assert_eq!(locator.locate(&task).unwrap(), plain);

    // The URL template (here a local path, as a mirror server would be) is cloned into the cache.
    let served = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(served.path().join("acme")).unwrap();
    let status = std::process::Command::new("git")
        .args(["clone", "-q", "--bare"])
        .arg(&bundle)
        .arg(served.path().join("acme/textkit.git"))
        .status()
        .unwrap();
    assert!(status.success());
    let template = format!("{}/{{owner}}/{{name}}.git", served.path().display());
    let by_url = RepoLocator::new(None, Some(template), cache.path().into());
    let mirror = by_url.locate(&task).unwrap();
    assert!(mirror.starts_with(cache.path().join("mirrors")));
    assert!(repos::open_commit(&mirror, &task.repo, &task.base_commit).is_ok());

    // Nothing anywhere: the error names what was searched and why the clone failed.
    task.repo = "acme/missing".into();
    let nowhere = RepoLocator::new(
        Some(repos_dir.path().into()),
        Some(format!("{}/{{repo}}.git", served.path().display())),
        cache.path().into(),
    );
    let err = nowhere.locate(&task).unwrap_err().to_string();
    assert!(err.starts_with("repository acme/missing: not found under"), "{err}");
    assert!(err.contains("acme/missing"), "{err}");
}
