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
        // Decoded from the JSON strings the files hold, not kept as one string ("[\"...\"]").
        assert!(
            task.fail_to_pass
                .iter()
                .chain(&task.pass_to_pass)
                .all(|id| !id.starts_with('[') && !id.is_empty()),
            "lists decoded from JSON strings: {:?}",
            task.fail_to_pass
        );
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

#[test]
fn ids_that_cannot_name_a_log_folder_or_would_share_one_and_repos_outside_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.jsonl");
    let f2p = serde_json::json!(["t.py::x"]);
    let outside = task_json("a__b-5", f2p.clone()).replace("acme/textkit", "../other");
    let dotted = task_json("a__b-6", f2p.clone()).replace("acme/textkit", "acme/..");
    let lines = [
        task_json("x/1", f2p.clone()),
        task_json("x_1", f2p.clone()),
        task_json("x 1", f2p.clone()),
        task_json("..", f2p.clone()),
        task_json(".", f2p.clone()),
        outside,
        dotted,
        task_json("line\nbreak", f2p.clone()),
    ];
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let set = tasks::load_tasks(&path).unwrap();
    let ids: Vec<&str> = set.tasks.iter().map(|t| t.instance_id.as_str()).collect();
    assert_eq!(ids, ["x/1"]);
    let shown = path.display().to_string();
    let reasons: Vec<String> = set.skipped.iter().map(|s| format!("{} {}", s.location, s.reason)).collect();
    assert_eq!(reasons.len(), 7, "{reasons:#?}");
    assert!(set.skipped.iter().all(|s| s.invalid_input), "{reasons:#?}");
    // The colliding ids name each other and where the first one is.
    for (i, id) in [(1, "x_1"), (2, "x 1")] {
        assert!(
            reasons[i - 1].starts_with(&format!(
                "{shown}:{} field `instance_id`: {id:?} and \"x/1\" ({shown}:1)",
                i + 1
            )),
            "{reasons:#?}"
        );
    }
    assert!(reasons[2].contains("\"..\" cannot name a log folder"), "{reasons:#?}");
    assert!(reasons[3].contains("\".\" cannot name a log folder"), "{reasons:#?}");
    assert!(reasons[4].contains("field `repo`") && reasons[4].contains("../other"), "{reasons:#?}");
    assert!(reasons[5].contains("field `repo`") && reasons[5].contains("acme/.."), "{reasons:#?}");
    assert!(reasons[6].contains("field `instance_id`") && reasons[6].contains("U+000A"), "{reasons:#?}");
}

#[test]
fn build_inputs_with_control_characters_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.jsonl");
    let with = |id: &str, extra: serde_json::Value| {
        let mut task: serde_json::Value =
            serde_json::from_str(&task_json(id, serde_json::json!(["t.py::x"]))).unwrap();
        for (key, value) in extra.as_object().unwrap() {
            task[key] = value.clone();
        }
        task.to_string()
    };
    let injected = "true\nADD http://127.0.0.1:9/secret /workspace/secret";
    let lines = [
        with("a-1", serde_json::json!({"environment": {"install": ["make deps", injected]}})),
        with("a-2", serde_json::json!({"environment": {"apt": ["redis-server\nFROM evil"]}})),
        with("a-3", serde_json::json!({"environment": {"env": {"A\nB": "x"}}})),
        with("a-4", serde_json::json!({"environment": {"pip": ["x\r"]}})),
        with(
            "a-5",
            serde_json::json!({"services": [{"name": "db", "build": {"run": [injected]}, "command": ["db"]}]}),
        ),
        with("a-6", serde_json::json!({"services": [{"name": "db", "image": "x", "env": {"K": "v\n"}}]})),
        with(
            "a-7",
            serde_json::json!({"environment": {"install": ["pip install -e '.[test]' && echo ok"], "apt": ["libpq-dev"]}}),
        ),
    ];
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let set = tasks::load_tasks(&path).unwrap();
    let ids: Vec<&str> = set.tasks.iter().map(|t| t.instance_id.as_str()).collect();
    assert_eq!(ids, ["a-7"], "plain commands and packages load");
    let reasons: Vec<&str> = set.skipped.iter().map(|s| s.reason.as_str()).collect();
    let fields = [
        "field `environment.install[1]`",
        "field `environment.apt[0]`",
        "field `environment.env`",
        "field `environment.pip[0]`",
        "field `services[0].build.run[0]`",
        "field `services[0].env.K`",
    ];
    assert_eq!(reasons.len(), fields.len(), "{reasons:#?}");
    for (reason, field) in reasons.iter().zip(fields) {
        assert!(reason.starts_with(field), "{reason} names {field}");
    }
}

#[test]
fn a_bad_task_json_or_a_bad_byte_in_one_line_is_named_and_the_rest_loads() {
    let dir = tempfile::tempdir().unwrap();
    let folders = dir.path().join("issues");
    for (name, content) in [
        ("good", task_json("a__good-1", serde_json::json!(["t.py::x"])).into_bytes()),
        ("empty", Vec::new()),
        (
            "latin1",
            task_json("a__caf\u{e9}-1", serde_json::json!(["t.py::x"]))
                .replace('\u{e9}', "\u{1}")
                .into_bytes()
                .into_iter()
                .map(|b| if b == 1 { 0xe9 } else { b })
                .collect(),
        ),
    ] {
        std::fs::create_dir_all(folders.join(name)).unwrap();
        std::fs::write(folders.join(name).join("task.json"), content).unwrap();
    }
    let set = tasks::load_tasks(&folders).unwrap();
    assert_eq!(set.tasks.iter().map(|t| t.instance_id.as_str()).collect::<Vec<_>>(), ["a__good-1"]);
    let reasons: Vec<String> = set.skipped.iter().map(|s| format!("{} {}", s.location, s.reason)).collect();
    assert_eq!(reasons.len(), 2, "{reasons:#?}");
    assert!(reasons[0].contains("empty/task.json") && reasons[0].contains("empty file"), "{reasons:#?}");
    assert!(reasons[1].contains("latin1/task.json") && reasons[1].contains("not UTF-8"), "{reasons:#?}");
    assert!(set.skipped.iter().all(|s| s.invalid_input));

    // Predictions: the line with a raw non-UTF-8 byte is named, the others are read.
    let tasks_file = dir.path().join("data.jsonl");
    let lines = [
        task_json("a__b-1", serde_json::json!(["t.py::x"])),
        task_json("a__b-2", serde_json::json!(["t.py::x"])),
    ];
    std::fs::write(&tasks_file, lines.join("\n") + "\n").unwrap();
    let tasks = tasks::load_tasks(&tasks_file).unwrap().tasks;
    let predictions = dir.path().join("preds.jsonl");
    let mut bytes = br#"{"instance_id": "a__b-1", "model_patch": "caf"#.to_vec();
    bytes.extend([0xe9, b'"', b'}', b'\n']);
    bytes.extend(br#"{"instance_id": "a__b-2", "model_patch": "diff"}"#);
    bytes.push(b'\n');
    std::fs::write(&predictions, bytes).unwrap();
    let set = tasks::load_predictions(&PredictionSource::File(predictions.clone()), &tasks).unwrap();
    assert_eq!(set.by_instance.keys().collect::<Vec<_>>(), ["a__b-2"]);
    assert_eq!(set.skipped.len(), 1);
    assert_eq!(set.skipped[0].location, format!("{}:1", predictions.display()));
    assert!(set.skipped[0].reason.contains("not UTF-8"), "{:?}", set.skipped);
}

#[test]
fn a_run_that_skipped_invalid_input_exits_5_naming_each_line() {
    let dir = tempfile::tempdir().unwrap();
    let dataset = dir.path().join("bad.jsonl");
    std::fs::write(&dataset, "{\"repo\": 1}\nnot json\n").unwrap();
    let grade = |dataset: &Path, predictions: &str, out: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_repairbench"))
            .args(["swe", "grade", "--dataset"])
            .arg(dataset)
            .args(["--predictions", predictions, "--out"])
            .arg(dir.path().join(out))
            .env(repairbench::env::CACHE_DIR, dir.path().join("cache"))
            .output()
            .unwrap()
    };
    let all_invalid = grade(&dataset, "gold", "out-bad");
    let stdout = String::from_utf8_lossy(&all_invalid.stdout);
    assert_eq!(
        all_invalid.status.code(),
        Some(5),
        "{stdout}\n{}",
        String::from_utf8_lossy(&all_invalid.stderr)
    );
    for line in [1, 2] {
        assert!(stdout.contains(&format!("{}:{line}", dataset.display())), "line {line} named: {stdout}");
    }

    // A valid dataset, and predictions of which none matches a task.
    let good = dir.path().join("good.jsonl");
    std::fs::write(&good, task_json("a__b-1", serde_json::json!(["t.py::x"])) + "\n").unwrap();
    let predictions = dir.path().join("preds.jsonl");
    std::fs::write(&predictions, "{\"instance_id\": \"other-1\", \"model_patch\": \"\"}\n").unwrap();
    let none_matched = grade(&good, predictions.to_str().unwrap(), "out-none");
    let stdout = String::from_utf8_lossy(&none_matched.stdout);
    assert_eq!(none_matched.status.code(), Some(5), "{stdout}");
    assert!(stdout.contains(&format!("{}:1", predictions.display())), "{stdout}");
}
