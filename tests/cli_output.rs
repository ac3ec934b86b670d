//! Snapshots of what people read: the CLI's answers to the most common bad inputs, and the
//! summaries of `swe grade` (gold patches of a bundled issue) and `eval` (the MMLU fixture),
//! with times and paths redacted (the main job's are in `main_job.rs`)
//! (`tests/snapshots/`; `cargo insta review` after an intended change).

mod common;

use std::path::{Path, PathBuf};

use common::cli::{run, transcript};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// One bad input: the files it needs are written into `dir` first.
struct BadInput {
    name: &'static str,
    args: Vec<String>,
}

fn bad_inputs(dir: &Path) -> Vec<BadInput> {
    let at = |name: &str| dir.join(name).display().to_string();
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "dataset.jsonl",
        "{\"instance_id\": \"a\", \"repo\": \"x/y\", \"base_commit\": \"abc\"}\n{not json\n",
    );
    write("tasks/broken/task.json", "{\"instance_id\": \"broken\", \"problem_statement\": 3}\n");
    write("predictions.jsonl", "{\"instance_id\": \"textkit-slugify\", \"model_patch\": 5}\n");
    write("run.toml", "model = \"x.gguf\"\nbogus = 1\n");
    write("unfinished/samples.jsonl", "{}\n");
    std::fs::create_dir_all(dir.join("empty")).unwrap();
    let slugify = repo("issues/textkit-slugify").display().to_string();
    let mmlu = repo("tests/fixtures/suites/mmlu").display().to_string();
    let owned = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<String>>();
    let cases: Vec<(&str, Vec<String>)> = vec![
        (
            "dataset_missing",
            owned(&[
                "swe",
                "grade",
                "--dataset",
                &at("nope.jsonl"),
                "--predictions",
                "gold",
                "--out",
                &at("o1"),
            ]),
        ),
        (
            "dataset_lines_invalid",
            owned(&["swe", "validate", "--dataset", &at("dataset.jsonl"), "--out", &at("o2")]),
        ),
        (
            "task_folder_field_wrong",
            owned(&["swe", "grade", "--dataset", &at("tasks"), "--predictions", "gold", "--out", &at("o3")]),
        ),
        (
            "prediction_field_wrong",
            owned(&[
                "swe",
                "grade",
                "--dataset",
                &slugify,
                "--predictions",
                &at("predictions.jsonl"),
                "--out",
                &at("o4"),
            ]),
        ),
        ("suite_unknown", owned(&["eval", "nosuch", "--out", &at("o5")])),
        ("suite_data_missing", owned(&["eval", "mmlu", "--data", &at("nope"), "--out", &at("o6")])),
        (
            "model_missing",
            owned(&["eval", "mmlu", "--model", &at("missing.gguf"), "--data", &mmlu, "--out", &at("o7")]),
        ),
        ("config_unknown_key", owned(&["run", "--config", &at("run.toml")])),
        ("compare_not_a_run", owned(&["compare", &at("empty"), &at("empty")])),
        ("report_unfinished", owned(&["report", &at("unfinished")])),
        ("size_unit_unknown", owned(&["sandbox", "run", "--memory", "12x", "--", "true"])),
        (
            "date_impossible",
            owned(&["tasks", "harvest", "--repo", ".", "--since", "2026-02-31", "--out", &at("o8")]),
        ),
    ];
    cases.into_iter().map(|(name, args)| BadInput { name, args }).collect()
}

#[test]
fn bad_inputs_get_an_error_that_names_the_input() {
    // Grading connects and checks its image first: built now, so no build talk lands in the
    // transcripts.
    common::sandbox::default_image();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let cases = bad_inputs(dir.path());
    assert!(cases.len() >= 10);
    for case in cases {
        let args: Vec<&str> = case.args.iter().map(String::as_str).collect();
        let output = run(&args, Some(&cache));
        assert!(!output.status.success(), "{}: {args:?} succeeded", case.name);
        let text = transcript(&output, &[(dir.path(), "[DIR]")]);
        let command = common::cli::redact(&case.args.join(" "), &[(dir.path(), "[DIR]")]);
        insta::with_settings!({ description => command }, {
            insta::assert_snapshot!(case.name, text);
        });
    }
}

#[test]
fn eval_summary_on_the_mmlu_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mmlu = repo("tests/fixtures/suites/mmlu");
    let args = ["eval", "mmlu", "--data", mmlu.to_str().unwrap(), "--shots", "1", "--seeds", "0,1"];
    let output = run(&[&args[..], &["--out", out.to_str().unwrap()]].concat(), None);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    // stdout only: stderr's progress depends on what the cache already held (a model fetch).
    insta::assert_snapshot!(common::cli::redact(
        &String::from_utf8_lossy(&output.stdout),
        &[(&out, "[OUT]")]
    ));
    assert_index(&out, "suite-mmlu-headline", "acc 0.2000");
}

/// The run folder's `index.html` in the browser: the part's headline, the model and machine,
/// and links that reach files of the folder.
fn assert_index(out: &Path, headline_id: &str, headline: &str) {
    let index = out.join("index.html");
    let html = std::fs::read_to_string(&index).unwrap();
    common::browser::assert_self_contained(&html);
    let dom = common::browser::load(&index, "");
    let shown = common::browser::text_of(&dom, headline_id);
    assert!(shown.starts_with(headline), "{shown}");
    assert!(dom.contains("CPU"), "{dom}");
    let hrefs: Vec<String> = regex::Regex::new(r#"href="([^"]+)""#)
        .unwrap()
        .captures_iter(&html)
        .map(|c| c[1].to_owned())
        .collect();
    assert_eq!(hrefs.len(), 3, "{hrefs:?}");
    for href in hrefs {
        assert!(out.join(&href).is_file(), "index.html links to {href}, which is not there");
    }
}

#[test]
fn swe_grade_summary_of_gold_patches() {
    common::sandbox::default_image();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let dataset = repo("issues/textkit-slugify");
    let args = ["swe", "grade", "--dataset", dataset.to_str().unwrap(), "--predictions", "gold"];
    let output =
        run(&[&args[..], &["--out", out.to_str().unwrap()]].concat(), Some(&dir.path().join("cache")));
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    insta::assert_snapshot!(common::cli::redact(
        &String::from_utf8_lossy(&output.stdout),
        &[(&out, "[OUT]")]
    ));
    assert_index(&out, "repair-headline", "1 of 1 resolved (100.0%)");
}
