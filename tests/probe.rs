//! `probe contamination` with the default model: a planted signal is found (the model's own
//! greedy continuations against seeded shuffles of their words), identical sets do not
//! separate, two runs agree to the bit, a rerun resumes, and bad input names its line.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use common::cli::repairbench;
use repairbench::model::{Engine, GenerateRequest, LanguageModel, Prompt, Sampling, DEFAULT_MODEL};
use repairbench::rng::SplitMix64;

const OPENINGS: [&str; 16] = [
    "Once upon a time, in a small village,",
    "The history of the Roman Empire",
    "To install the package, run",
    "def fibonacci(n):",
    "The weather today is",
    "In mathematics, a prime number",
    "My favourite recipe for bread",
    "The quarterly report shows that",
    "Photosynthesis is the process",
    "import numpy as np\n",
    "Dear hiring manager,",
    "The rules of chess are",
    "A good night's sleep",
    "The city council voted",
    "When the train arrived at the station,",
    "Water boils at",
];

/// The default model's greedy continuation of each opening, with the opening.
fn greedy_texts() -> Vec<String> {
    let mut engine = Engine::load(DEFAULT_MODEL).expect("the default model loads");
    OPENINGS
        .iter()
        .map(|opening| {
            let request = GenerateRequest {
                prompt: Prompt::Text((*opening).into()),
                max_tokens: 48,
                sampling: Sampling::GREEDY,
                stop: vec![],
                n: 1,
            };
            let output = engine.generate(&request).unwrap();
            format!("{opening}{}", output.sequences[0].text)
        })
        .collect()
}

/// The words of `text` in a seeded random order.
fn shuffled(text: &str, seed: u64) -> String {
    let mut words: Vec<&str> = text.split_whitespace().collect();
    let mut rng = SplitMix64::new(seed);
    for i in (1..words.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        words.swap(i, j);
    }
    words.join(" ")
}

fn write_texts(path: &Path, texts: &[String]) {
    let lines: Vec<String> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| serde_json::json!({"id": format!("t{i}"), "text": t}).to_string())
        .collect();
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

fn probe(target: &Path, control: &Path, out: &Path) -> Output {
    let output = repairbench()
        .args(["probe", "contamination", "--method", "mink:20", "--texts"])
        .arg(target)
        .arg("--control-texts")
        .arg(control)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn separation<'a>(results: &'a serde_json::Value, statistic: &str) -> &'a serde_json::Value {
    results["separations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["statistic"] == statistic && s["part"] == "text")
        .unwrap_or_else(|| panic!("no {statistic} in {results}"))
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every record of `samples.jsonl`, in file order.
fn samples(out: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(out.join("samples.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_planted_signal_is_found_and_identical_sets_do_not_separate() {
    let dir = tempfile::tempdir().unwrap();
    let greedy = greedy_texts();
    let shuffles: Vec<String> = greedy.iter().enumerate().map(|(i, t)| shuffled(t, i as u64)).collect();
    let (target, control) = (dir.path().join("greedy.jsonl"), dir.path().join("shuffled.jsonl"));
    write_texts(&target, &greedy);
    write_texts(&control, &shuffles);

    let out = dir.path().join("planted");
    let first = probe(&target, &control, &out);
    let results = read_json(&out.join("results.json"));
    for statistic in ["min_k", "min_k_plus_plus"] {
        let s = separation(&results, statistic);
        assert!(s["auroc"].as_f64().unwrap() >= 0.9, "{statistic}: {s}");
        assert!(s["auroc_ci95"][0].as_f64().unwrap() > 0.5, "{statistic}: {s}");
        assert_eq!((s["target"]["n"].as_u64(), s["control"]["n"].as_u64()), (Some(16), Some(16)));
    }
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(stdout.contains("32 scored now, 0 kept"), "{stdout}");
    assert!(stdout.contains("evidence the model has seen it"), "{stdout}");
    // Every view was written, and the CI view flags the separation.
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap();
    assert!(
        junit.contains("name=\"min_k text\"") && junit.contains("<failure type=\"separated\""),
        "{junit}"
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<svg class=\"chart strips\"") && html.contains("data-id=\"control/text/t15\""));
    assert!(std::fs::read_to_string(out.join("report.md")).unwrap().contains("| min_k | text |"));
    let manifest = read_json(&out.join("manifest.json"));
    assert_eq!(manifest["model"]["source"], DEFAULT_MODEL);
    assert_eq!(manifest["config"]["method"], "mink:20");
    assert_eq!(manifest["inputs"]["target"]["sha256"].as_str().map(str::len), Some(64));

    // A rerun into the same folder scores nothing again; a second folder gets the same values.
    let again = probe(&target, &control, &out);
    assert!(String::from_utf8_lossy(&again.stdout).contains("0 scored now, 32 kept"));
    let twin = dir.path().join("twin");
    probe(&target, &control, &twin);
    assert_eq!(samples(&out), samples(&twin));
    assert_eq!(read_json(&out.join("results.json")), read_json(&twin.join("results.json")));

    // The same texts on both sides: nothing to tell apart.
    let same = dir.path().join("same");
    probe(&target, &target, &same);
    let results = read_json(&same.join("results.json"));
    for statistic in ["min_k", "min_k_plus_plus", "mean_logprob"] {
        let s = separation(&results, statistic);
        assert_eq!(s["auroc"].as_f64(), Some(0.5), "{s}");
        let (lo, hi) = (s["auroc_ci95"][0].as_f64().unwrap(), s["auroc_ci95"][1].as_f64().unwrap());
        assert!(lo <= 0.5 && 0.5 <= hi, "{statistic}: {s}");
    }
}

#[test]
fn bad_input_names_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.jsonl");
    std::fs::write(&good, "{\"id\": \"a\", \"text\": \"some words to score\"}\n").unwrap();
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"id\": \"a\", \"text\": \"fine\"}\n{\"id\": \"b\", \"txt\": \"typo\"}\n")
        .unwrap();
    let output = repairbench()
        .args(["probe", "contamination", "--texts"])
        .arg(&good)
        .arg("--control-texts")
        .arg(&bad)
        .arg("--out")
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("{}:2: expected {{\"id\": ..., \"text\": ...}}", bad.display())),
        "{stderr}"
    );
    assert!(stderr.contains("unknown field `txt`"), "{stderr}");
    // A method that does not exist is a usage error naming what exists.
    let output = repairbench()
        .args(["probe", "contamination", "--method", "mink:0", "--texts"])
        .arg(&good)
        .arg("--control-texts")
        .arg(&good)
        .arg("--out")
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("K a percentage in 1..=100"));
}

/// A model that answers from a table: the first entry whose key the prompt contains.
struct Scripted {
    info: repairbench::model::ModelInfo,
    table: Vec<(String, String)>,
}

impl Scripted {
    fn new(table: Vec<(String, String)>) -> Self {
        let info = serde_json::from_value(serde_json::json!({
            "source": "scripted", "path": "scripted", "sha256": "scripted-table",
            "architecture": "table", "name": null, "parameters": 0, "quantization": "none",
            "context_length": 1 << 20, "vocab_size": 0, "bos_token": null, "eos_token": null,
            "add_bos": false, "chat_template": null,
        }))
        .unwrap();
        Self { info, table }
    }
}

impl LanguageModel for Scripted {
    fn info(&self) -> &repairbench::model::ModelInfo {
        &self.info
    }

    fn generate(
        &mut self,
        request: &GenerateRequest,
    ) -> repairbench::model::error::Result<repairbench::model::GenerateOutput> {
        let prompt = match &request.prompt {
            Prompt::Text(text) => text.clone(),
            Prompt::Chat(messages) => messages.iter().map(|m| m.content.as_str()).collect(),
            Prompt::Tokens(_) => String::new(),
        };
        let text = self
            .table
            .iter()
            .find(|(key, _)| prompt.contains(key.as_str()))
            .map(|e| e.1.clone())
            .unwrap_or_default();
        Ok(repairbench::model::GenerateOutput {
            prompt_text: prompt,
            prompt_tokens: 0,
            sequences: vec![repairbench::model::Generation {
                text,
                tokens: vec![],
                finish: repairbench::model::FinishReason::Eos,
            }],
            prefill_tok_s: 0.0,
            decode_tok_s: 0.0,
        })
    }

    fn score(
        &mut self,
        _: &[repairbench::model::ScoreRequest],
    ) -> repairbench::model::error::Result<Vec<repairbench::model::ScoreOutput>> {
        Err(repairbench::model::ModelError::Step("the scripted model does not score".into()))
    }

    fn render_chat(
        &self,
        messages: &[repairbench::model::ChatMessage],
    ) -> repairbench::model::error::Result<String> {
        Ok(messages.iter().map(|m| m.content.as_str()).collect())
    }
}

fn bundled_issues() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("issues")
}

fn run_scripted(
    method: &str,
    table: Vec<(String, String)>,
    control: &Path,
    out: &Path,
) -> repairbench::probe::ProbeSummary {
    let plan = repairbench::probe::ProbePlan {
        method: repairbench::probe::Method::parse_name(method).unwrap(),
        target: repairbench::probe::SetSource::Dataset(bundled_issues()),
        control: repairbench::probe::SetSource::Dataset(control.to_owned()),
        limit: None,
        out: out.to_owned(),
        force: false,
    };
    let mut model = Scripted::new(table);
    repairbench::probe::probe(&plan, &mut model, &mut repairbench::report::ConsoleProgress::new()).unwrap()
}

#[test]
fn path_guess_and_patch_prefix_give_a_scripted_models_exact_scores() {
    use repairbench::probe::{split_patch, ProbeRecord, Side};
    let dir = tempfile::tempdir().unwrap();
    let tasks = repairbench::tasks::load_tasks(&bundled_issues()).unwrap().tasks;
    assert_eq!(tasks.len(), 13);
    // The control: four of the same tasks under other ids (their texts, so the table answers).
    let control = dir.path().join("control.jsonl");
    let lines: Vec<String> = tasks[..4]
        .iter()
        .map(|t| {
            let mut t = t.clone();
            t.instance_id = format!("{}-control", t.instance_id);
            serde_json::to_string(&t).unwrap()
        })
        .collect();
    std::fs::write(&control, lines.join("\n")).unwrap();
    let record =
        |summary: &repairbench::probe::ProbeSummary, side: Side, part: &str, id: &str| -> ProbeRecord {
            summary.records[&ProbeRecord::key_of(side, part, id)].clone()
        };

    // path-guess: even tasks get the gold file in a sentence, odd ones a wrong path.
    let table: Vec<(String, String)> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let gold = repairbench::patch::diff::files_touched(&t.patch)[0].clone();
            let answer =
                if i % 2 == 0 { format!("The fix belongs in `{gold}`.") } else { "src/nowhere.py".into() };
            (t.problem_statement.trim().to_owned(), answer)
        })
        .collect();
    let summary = run_scripted("path-guess", table, &control, &dir.path().join("paths"));
    for (i, t) in tasks.iter().enumerate() {
        let r = record(&summary, Side::Target, "path", &t.instance_id);
        assert_eq!(r.values["path_match"], if i % 2 == 0 { 1.0 } else { 0.0 }, "{}: {r:?}", t.instance_id);
    }
    let s = &summary.separations[0];
    assert_eq!((s.statistic.as_str(), s.target.n, s.control.n), ("path_match", 13, 4));
    assert_eq!((s.target.mean, s.control.mean), (7.0 / 13.0, 2.0 / 4.0));

    // patch-prefix: the exact rest (1), its first half of words (precision 1, recall h/n, so
    // F1 = 2h/(h+n)), or nothing (0).
    let mut expected = BTreeMap::new();
    let table: Vec<(String, String)> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let (prefix, rest) = split_patch(&t.patch).unwrap();
            let words: Vec<&str> = rest.split_whitespace().collect();
            let half = words.len() / 2;
            let (answer, value) = match i % 3 {
                0 => (rest.clone(), 1.0),
                1 => (words[..half].join(" "), 2.0 * half as f64 / (half + words.len()) as f64),
                _ => (String::new(), 0.0),
            };
            expected.insert(t.instance_id.clone(), value);
            (prefix, answer)
        })
        .collect();
    let summary = run_scripted("patch-prefix", table, &control, &dir.path().join("prefix"));
    for t in &tasks {
        let r = record(&summary, Side::Target, "patch", &t.instance_id);
        assert!((r.values["rouge_l"] - expected[&t.instance_id]).abs() < 1e-12, "{}: {r:?}", t.instance_id);
    }
    let control_rouge =
        record(&summary, Side::Control, "patch", &format!("{}-control", tasks[1].instance_id));
    assert!((control_rouge.values["rouge_l"] - expected[&tasks[1].instance_id]).abs() < 1e-12);
    // mink asks for log-probabilities the scripted model does not give: every item says so.
    let summary = run_scripted("mink", Vec::new(), &control, &dir.path().join("mink"));
    assert_eq!(summary.errors, summary.records.len());
    assert!(summary
        .records
        .values()
        .all(|r| r.error.as_deref().is_some_and(|e| e.contains("does not score"))));
}

#[test]
fn the_generation_probes_run_on_the_bundled_issues_with_the_default_model() {
    let dir = tempfile::tempdir().unwrap();
    let issues = bundled_issues();
    for (method, limit) in [("path-guess", "13"), ("patch-prefix", "4"), ("guided", "3")] {
        let out = dir.path().join(method);
        let output = repairbench()
            .args(["probe", "contamination", "--method", method, "--limit", limit, "--dataset"])
            .arg(&issues)
            .arg("--control-dataset")
            .arg(&issues)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let text =
            format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert_eq!(output.status.code(), Some(0), "{text}");
        let records = samples(&out);
        let n: usize = limit.parse().unwrap();
        // guided takes each task's problem statement and its patch's added lines.
        let per_task = if method == "guided" { 4 } else { 2 };
        assert_eq!(records.len(), per_task * n, "{text}");
        let (statistic, answers) = match method {
            "path-guess" => ("path_match", vec!["answer"]),
            "patch-prefix" => ("rouge_l", vec!["answer"]),
            _ => ("guided_rouge_l", vec!["general", "guided"]),
        };
        for r in &records {
            let v = r["values"][statistic].as_f64().unwrap_or_else(|| panic!("{r}"));
            assert!((0.0..=1.0).contains(&v), "{r}");
            let keys: Vec<&String> = r["answers"].as_object().unwrap().keys().collect();
            assert_eq!(keys, answers, "{r}");
        }
        // Identical sets, identical greedy answers: no separation.
        let results = read_json(&out.join("results.json"));
        assert_eq!(results["separations"][0]["auroc"].as_f64(), Some(0.5), "{results}");
        println!("{method}: {text}");
    }
}

#[test]
fn a_server_without_prompt_log_probabilities_is_refused_for_mink_and_answers_path_guess() {
    let base = common::serve::plain_server();
    let dir = tempfile::tempdir().unwrap();
    let issues = bundled_issues();
    let run = |method: &str, out: &str| {
        repairbench()
            .args(["probe", "contamination", "--method", method, "--limit", "2", "--dataset"])
            .arg(&issues)
            .arg("--control-dataset")
            .arg(&issues)
            .args(["--model", &format!("openai:{base}"), "--out"])
            .arg(dir.path().join(out))
            .output()
            .unwrap()
    };
    let refused = run("mink", "mink");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("mink:20 scores texts, and this model cannot"), "{stderr}");
    assert!(stderr.contains("prompt log-probabilities"), "{stderr}");
    let answered = run("path-guess", "paths");
    assert_eq!(answered.status.code(), Some(0), "{}", String::from_utf8_lossy(&answered.stderr));
    let records = samples(&dir.path().join("paths"));
    assert_eq!(records.len(), 4);
    assert!(
        records.iter().all(|r| r["answers"]["answer"] == " x" && r["values"]["path_match"] == 0.0),
        "{records:?}"
    );
}

#[test]
fn ts_guess_masks_a_wrong_option_and_scores_a_scripted_models_answers_exactly() {
    use repairbench::probe::{probe, Method, ProbePlan, ProbeRecord, SetSource, Side};
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/suites/mmlu/test.jsonl");
    let suite = repairbench::suites::load_suite("mmlu").unwrap();
    let (docs, _, _) = repairbench::suites::engine::test_docs(&suite, Some(&data)).unwrap();
    assert_eq!(docs.len(), 5);
    // Per document: the masked option, and an answer that is it with a letter and a period
    // (exact), it in quotes and capitals (exact), or something else (neither exact nor near).
    let mut table = Vec::new();
    let mut expected = BTreeMap::new();
    for (i, doc) in docs.iter().enumerate() {
        let (prompt, option) =
            repairbench::suites::prompt::masked_wrong_option(&suite, doc).unwrap().unwrap();
        let gold = doc.row.fields["answer"].as_u64().unwrap() as usize;
        assert_ne!(
            doc.row.fields["choices"][gold].as_str(),
            Some(option.as_str()),
            "a wrong option is masked"
        );
        assert!(prompt.contains(". [MASK]\n"), "{prompt}");
        let question = doc.row.fields["question"].as_str().unwrap().to_owned();
        let (answer, value) = match i % 3 {
            0 => (format!("C. {option}."), 1.0),
            1 => (format!("\"{}\"", option.to_uppercase()), 1.0),
            _ => ("no idea at all".to_owned(), 0.0),
        };
        expected.insert(doc.id.clone(), value);
        table.push((question, answer));
    }
    let dir = tempfile::tempdir().unwrap();
    let set = SetSource::Suite { suite: "mmlu".into(), data: Some(data.clone()) };
    let plan = ProbePlan {
        method: Method::TsGuess,
        target: set.clone(),
        control: set,
        limit: None,
        out: dir.path().join("ts"),
        force: false,
    };
    let summary =
        probe(&plan, &mut Scripted::new(table), &mut repairbench::report::ConsoleProgress::new()).unwrap();
    for doc in &docs {
        let r = &summary.records[&ProbeRecord::key_of(Side::Target, "option", &doc.id)];
        assert_eq!(r.values["ts_exact"], expected[&doc.id], "{r:?}");
        assert_eq!(r.values["ts_rouge_l"], expected[&doc.id], "{r:?}");
    }
    // A suite that is not multiple choice, or texts, cannot be asked for a masked option.
    let mut plan = plan;
    plan.control = SetSource::Texts(data);
    let err = probe(&plan, &mut Scripted::new(Vec::new()), &mut repairbench::report::ConsoleProgress::new())
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("ts-guess probes multiple-choice suites") && err.contains("the control set is texts"),
        "{err}"
    );
}

#[test]
fn guided_gain_of_a_scripted_model_that_knows_the_target_is_significant_and_exact() {
    use repairbench::probe::{
        guided_prompts, probe, split_halves, Method, ProbePlan, ProbeRecord, SetSource, Side,
    };
    let dir = tempfile::tempdir().unwrap();
    let seen: Vec<String> =
        (0..12).map(|i| format!("item {i} of a benchmark the model has read many times over")).collect();
    let unseen: Vec<String> =
        (0..12).map(|i| format!("entry {i} written by the team after the cutoff date last year")).collect();
    let (target, control) = (dir.path().join("seen.jsonl"), dir.path().join("unseen.jsonl"));
    write_texts(&target, &seen);
    write_texts(&control, &unseen);
    // Under the guided prompt the model recites a target item's second half; under the general
    // prompt, and for control items, it says nothing that matches.
    let mut table = Vec::new();
    for text in &seen {
        let (first, rest) = split_halves(text).unwrap();
        let [guided, general] = guided_prompts(&first, "seen", "test");
        table.push((guided, rest));
        table.push((general, "something else".to_owned()));
    }
    let plan = ProbePlan {
        method: Method::Guided,
        target: SetSource::Texts(target),
        control: SetSource::Texts(control),
        limit: None,
        out: dir.path().join("guided"),
        force: false,
    };
    let summary =
        probe(&plan, &mut Scripted::new(table), &mut repairbench::report::ConsoleProgress::new()).unwrap();
    let r = &summary.records[&ProbeRecord::key_of(Side::Target, "text", "t3")];
    assert_eq!(
        (r.values["guided_rouge_l"], r.values["general_rouge_l"], r.values["guided_gain"]),
        (1.0, 0.0, 1.0),
        "{r:?}"
    );
    assert_eq!(r.answers.keys().collect::<Vec<_>>(), ["general", "guided"]);
    let [target_gain, control_gain] = [&summary.guided_gains[0], &summary.guided_gains[1]];
    assert_eq!((target_gain.side, target_gain.n, target_gain.gain), (Side::Target, 12, 1.0));
    // Every resampled mean gain is 1: the one-sided p is its floor, 1 / (resamples + 1).
    assert_eq!(target_gain.p_above, 1.0 / (repairbench::probe::RESAMPLES as f64 + 1.0));
    assert_eq!((control_gain.side, control_gain.gain, control_gain.p_above), (Side::Control, 0.0, 1.0));
    let md = std::fs::read_to_string(dir.path().join("guided/report.md")).unwrap();
    assert!(
        md.contains("| target | text | 1.0000 | 0.0000 | 1.0000 [1.0000, 1.0000] | 0.0005 | 12 |"),
        "{md}"
    );
    let junit = std::fs::read_to_string(dir.path().join("guided/junit.xml")).unwrap();
    assert!(
        junit.contains("name=\"guided_gain target text\"") && junit.contains("<failure type=\"guided\""),
        "{junit}"
    );
}

#[test]
fn mink_on_a_suite_scores_each_item_as_published_with_its_gold_answer() {
    let dir = tempfile::tempdir().unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/suites/mmlu/test.jsonl");
    let control = dir.path().join("control.jsonl");
    write_texts(&control, &["A few words the team wrote after the cutoff.".to_owned()]);
    let out = dir.path().join("suite");
    let output = repairbench()
        .args(["probe", "contamination", "--suite", "mmlu", "--limit", "2", "--data"])
        .arg(&data)
        .arg("--control-texts")
        .arg(&control)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let records = samples(&out);
    assert_eq!(records.len(), 3);
    // The first item, zero-shot, as the suite renders it, then the gold option's letter.
    let first =
        "The following are multiple choice questions (with answers) about elementary mathematics.\n\n\
                 What is 10 divided by 2?\nA. 2\nB. 5\nC. 8\nD. 20\nAnswer: B";
    let item = records.iter().find(|r| r["side"] == "target" && r["id"] == "0").unwrap();
    assert_eq!(item["text_sha256"], repairbench::digest::sha256_hex(first));
    assert_eq!(item["chars"], first.chars().count());
    assert!(item["values"]["min_k"].as_f64().unwrap() < item["values"]["mean_logprob"].as_f64().unwrap());
}
