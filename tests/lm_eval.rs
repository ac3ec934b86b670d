//! lm-evaluation-harness itself (pinned, in the venv `scripts/setup` prepares) against
//! `repairbench serve` with the tokenizer `model export-tokenizer` wrote, on files in the
//! layouts of MMLU (written here: two subjects, enough rows for five shots), ARC-Easy and
//! HellaSwag (our fixtures), through task files written here that take the published tasks'
//! templates. `repairbench eval` on the same files must give, item by item, the same rendered
//! prompt, the same per-option log-likelihoods within 1e-4 nats, the same chosen option, and
//! the same `acc` and `acc_norm`.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::cli::run;
use repairbench::model::DEFAULT_MODEL;
use serde_json::{json, Value};

/// `repairbench serve` on a free loopback port, stopped when dropped.
struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn start() -> Self {
        let mut child = common::cli::repairbench()
            .args(["serve", "--model", DEFAULT_MODEL, "--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let base = line.trim().strip_prefix("listening on ").expect("the address line").to_owned();
        Self { child, base }
    }

    fn model_id(&self) -> String {
        let mut response = ureq::get(&format!("{}/models", self.base)).call().unwrap();
        let models: Value = serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap();
        models["data"][0]["id"].as_str().unwrap().to_owned()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/suites").join(name)
}

fn write_jsonl(path: &Path, rows: &[Value]) {
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(path, text).unwrap();
}

/// MMLU-layout rows of two subjects, six dev rows and three test rows each, written here.
fn mmlu_rows() -> (Vec<Value>, Vec<Value>) {
    let row = |subject: &str, q: String, choices: [String; 4], answer: usize| json!({"question": q, "subject": subject, "choices": choices, "answer": answer});
    let (mut dev, mut test) = (Vec::new(), Vec::new());
    for i in 0..9usize {
        let (a, b) = (i + 2, 2 * i + 3);
        let options = [a + b, a + b + 1, a * b, a + b + 10].map(|n| n.to_string());
        let math = row("elementary_mathematics", format!("What is {a} + {b}?"), options, 0);
        let elements =
            ["hydrogen", "helium", "lithium", "carbon", "oxygen", "neon", "sodium", "iron", "gold"];
        let symbols = ["H", "He", "Li", "C", "O", "Ne", "Na", "Fe", "Au"];
        let options = [1, 2, 3, 0].map(|k| symbols[(i + k) % 9].to_owned());
        let chemistry = row(
            "high_school_chemistry",
            format!(" What is the chemical symbol of {}? ", elements[i]),
            options,
            3,
        );
        let into = if i < 6 { &mut dev } else { &mut test };
        into.extend([math, chemistry]);
    }
    (dev, test)
}

/// A task file in lm-evaluation-harness's format, reading local JSON files.
fn task_yaml(name: &str, files: &[(&str, &Path)], body: &str) -> String {
    let files: String =
        files.iter().map(|(split, path)| format!("    {split}: {}\n", path.display())).collect();
    format!("task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n{files}output_type: multiple_choice\ntest_split: test\n{body}metric_list:\n  - metric: acc\n  - metric: acc_norm\n")
}

/// lm-evaluation-harness's samples of each task, by task name.
fn lm_eval(
    server: &Server,
    tokenizer: &Path,
    include: &Path,
    tasks: &[String],
    shots: usize,
    out: &Path,
) -> BTreeMap<String, Vec<Value>> {
    let model_args = format!(
        "model={},base_url={}/completions,tokenizer={},tokenizer_backend=huggingface,tokenized_requests=True,num_concurrent=1,max_retries=1",
        server.model_id(),
        server.base,
        tokenizer.display()
    );
    let output = Command::new(common::hf_venv::python())
        .args(["-m", "lm_eval", "--model", "local-completions", "--model_args", &model_args])
        .args(["--tasks", &tasks.join(","), "--include_path", include.to_str().unwrap()])
        .args(["--num_fewshot", &shots.to_string(), "--log_samples", "--output_path", out.to_str().unwrap()])
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_DATASETS_OFFLINE", "1")
        .env("HF_HOME", out.join("hf-home"))
        .output()
        .unwrap();
    assert!(output.status.success(), "lm_eval: {}", String::from_utf8_lossy(&output.stderr));
    let mut samples = BTreeMap::new();
    for entry in walk(out) {
        let name = entry.file_name().unwrap().to_string_lossy().into_owned();
        if let Some(task) =
            name.strip_prefix("samples_").and_then(|n| n.rsplit_once('_')).map(|(t, _)| t.to_owned())
        {
            let (rows, bad): (Vec<Value>, _) = repairbench::report::read_jsonl(&entry);
            assert!(bad.is_empty(), "{bad:?}");
            samples.insert(task, rows);
        }
    }
    samples
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// `repairbench eval SUITE` on `data`: its records in row order.
fn ours(suite: &str, data: &Path, shots: usize, out: &Path) -> Vec<Value> {
    let args = [
        "eval",
        suite,
        "--data",
        data.to_str().unwrap(),
        "--shots",
        &shots.to_string(),
        "--out",
        out.to_str().unwrap(),
    ];
    let output = run(&args, None);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let (mut rows, bad): (Vec<Value>, _) = repairbench::report::read_jsonl(&out.join("samples.jsonl"));
    assert!(bad.is_empty(), "{bad:?}");
    rows.sort_by_key(|r| r["index"].as_u64());
    rows
}

/// One item of each side agrees: prompt, every option's text and log-likelihood, choice, acc,
/// acc_norm. Returns the largest log-likelihood difference.
fn agree(what: &str, theirs: &Value, ours: &Value) -> f64 {
    let arguments = theirs["arguments"].as_object().unwrap();
    let choices = ours["choices"].as_array().unwrap();
    assert_eq!(arguments.len(), choices.len(), "{what}");
    let mut largest: f64 = 0.0;
    for (i, choice) in choices.iter().enumerate() {
        let args = &arguments[&format!("gen_args_{i}")];
        assert_eq!(args["arg_0"], ours["prompt"], "{what}: the rendered prompt");
        assert_eq!(args["arg_1"], choice["continuation"], "{what}: option {i}");
        let ll: f64 = theirs["filtered_resps"][i][0].as_str().unwrap().parse().unwrap();
        let diff = (ll - choice["loglikelihood"].as_f64().unwrap()).abs();
        assert!(
            diff <= 1e-4,
            "{what}: option {i} log-likelihood {ll} against ours {}",
            choice["loglikelihood"]
        );
        largest = largest.max(diff);
    }
    for metric in ["acc", "acc_norm"] {
        assert_eq!(theirs[metric].as_f64(), ours["scores"][metric].as_f64(), "{what}: {metric}");
    }
    let lls: Vec<f64> = (0..choices.len())
        .map(|i| theirs["filtered_resps"][i][0].as_str().unwrap().parse().unwrap())
        .collect();
    let their_choice = (0..lls.len()).fold(0, |best, i| if lls[i] > lls[best] { i } else { best });
    assert_eq!(
        Some(their_choice.to_string().as_str()),
        ours["extracted"]["acc"].as_str(),
        "{what}: the chosen option"
    );
    largest
}

#[test]
fn lm_evaluation_harness_and_our_suites_agree_item_by_item() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let tokenizer = root.join("tokenizer");
    let output = run(&["model", "export-tokenizer", DEFAULT_MODEL, tokenizer.to_str().unwrap()], None);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));

    // The data: MMLU's layout written here (one lm-eval task per subject, as published), ARC-Easy
    // and HellaSwag from our fixtures.
    let include = root.join("tasks");
    std::fs::create_dir_all(&include).unwrap();
    let mmlu = root.join("mmlu");
    std::fs::create_dir_all(&mmlu).unwrap();
    let (dev, test) = mmlu_rows();
    write_jsonl(&mmlu.join("dev.jsonl"), &dev);
    write_jsonl(&mmlu.join("test.jsonl"), &test);
    let mut mmlu_tasks = Vec::new();
    for subject in ["elementary_mathematics", "high_school_chemistry"] {
        let of =
            |rows: &[Value]| rows.iter().filter(|r| r["subject"] == subject).cloned().collect::<Vec<_>>();
        let (dev_file, test_file) =
            (mmlu.join(format!("{subject}.dev.jsonl")), mmlu.join(format!("{subject}.test.jsonl")));
        write_jsonl(&dev_file, &of(&dev));
        write_jsonl(&test_file, &of(&test));
        let body = format!(
            "fewshot_split: dev\nfewshot_config:\n  sampler: first_n\ndescription: \"The following are multiple choice questions (with answers) about {}.\\n\\n\"\n\
             doc_to_text: \"{{{{question.strip()}}}}\\nA. {{{{choices[0]}}}}\\nB. {{{{choices[1]}}}}\\nC. {{{{choices[2]}}}}\\nD. {{{{choices[3]}}}}\\nAnswer:\"\n\
             doc_to_choice: [\"A\", \"B\", \"C\", \"D\"]\ndoc_to_target: answer\n",
            subject.replace('_', " ")
        );
        let name = format!("rb_mmlu_{subject}");
        std::fs::write(
            include.join(format!("{name}.yaml")),
            task_yaml(&name, &[("test", &test_file), ("dev", &dev_file)], &body),
        )
        .unwrap();
        mmlu_tasks.push(name);
    }
    let arc = fixture("arc/test.jsonl");
    let body = "doc_to_text: \"Question: {{question}}\\nAnswer:\"\ndoc_to_target: \"{{choices.label.index(answerKey)}}\"\ndoc_to_choice: \"{{choices.text}}\"\n";
    std::fs::write(include.join("rb_arc_easy.yaml"), task_yaml("rb_arc_easy", &[("test", &arc)], body))
        .unwrap();
    // HellaSwag's published task prepares each row in Python; ours does the same in a few lines.
    std::fs::write(
        include.join("rb_hellaswag_utils.py"),
        "import re\n\n\ndef clean(text):\n    text = text.strip().replace(\" [title]\", \". \")\n    text = re.sub(\"\\\\[.*?\\\\]\", \"\", text)\n    return text.replace(\"  \", \" \")\n\n\n\
         def process_docs(dataset):\n    def one(doc):\n        context = doc[\"ctx_a\"] + \" \" + doc[\"ctx_b\"].capitalize()\n        return {\"query\": clean(doc[\"activity_label\"] + \": \" + context), \"options\": [clean(e) for e in doc[\"endings\"]], \"gold\": int(doc[\"label\"])}\n\n    return dataset.map(one)\n",
    )
    .unwrap();
    let body = "process_docs: !function rb_hellaswag_utils.process_docs\ndoc_to_text: \"{{query}}\"\ndoc_to_target: \"{{gold}}\"\ndoc_to_choice: \"options\"\n";
    std::fs::write(
        include.join("rb_hellaswag.yaml"),
        task_yaml("rb_hellaswag", &[("test", &fixture("hellaswag/test.jsonl"))], body),
    )
    .unwrap();

    let server = Server::start();
    let mut largest: f64 = 0.0;
    let mut items = 0;
    // Zero-shot: every task; five-shot: MMLU, whose prompts then hold five answered examples.
    let zero_tasks: Vec<String> =
        mmlu_tasks.iter().cloned().chain(["rb_arc_easy".into(), "rb_hellaswag".into()]).collect();
    for (shots, tasks) in [(0, zero_tasks), (5, mmlu_tasks.clone())] {
        let theirs =
            lm_eval(&server, &tokenizer, &include, &tasks, shots, &root.join(format!("lm-eval-{shots}")));
        assert_eq!(theirs.len(), tasks.len(), "{:?}", theirs.keys());
        let mmlu_ours = ours("mmlu", &mmlu, shots, &root.join(format!("mmlu-{shots}")));
        for task in &tasks {
            let our_rows: Vec<Value> = match task.as_str() {
                "rb_arc_easy" => ours("arc_easy", &fixture("arc"), 0, &root.join("arc")),
                "rb_hellaswag" => ours("hellaswag", &fixture("hellaswag"), 0, &root.join("hellaswag")),
                subject_task => {
                    let subject = subject_task.strip_prefix("rb_mmlu_").unwrap();
                    mmlu_ours.iter().filter(|r| r["group"] == subject).cloned().collect()
                }
            };
            let mut their_rows = theirs[task].clone();
            their_rows.sort_by_key(|r| r["doc_id"].as_u64());
            assert_eq!(their_rows.len(), our_rows.len(), "{task}");
            let mean = |rows: &[Value], at: &dyn Fn(&Value) -> f64| {
                rows.iter().map(at).sum::<f64>() / rows.len() as f64
            };
            for metric in ["acc", "acc_norm"] {
                println!(
                    "{task} {shots}-shot {metric}: lm-eval {:.4}, ours {:.4}",
                    mean(&their_rows, &|r| r[metric].as_f64().unwrap()),
                    mean(&our_rows, &|r| r["scores"][metric].as_f64().unwrap())
                );
            }
            for (t, o) in their_rows.iter().zip(&our_rows) {
                largest = largest.max(agree(&format!("{task} {shots}-shot item {}", t["doc_id"]), t, o));
                items += 1;
            }
            if shots == 5 {
                assert_eq!(
                    our_rows[0]["prompt"].as_str().unwrap().matches("\nAnswer:").count(),
                    6,
                    "five examples"
                );
            }
        }
    }
    println!("{items} items agree; the largest per-option log-likelihood difference is {largest:.2e} nats");
    assert_eq!(items, 3 + 3 + 3 + 3 + 3 + 3, "MMLU 0- and 5-shot, ARC-Easy, HellaSwag");
}
