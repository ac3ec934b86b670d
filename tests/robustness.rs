//! Perturbed suite runs through the real default model (SmolLM2-135M) on the small fixtures:
//! options that are never shown change nothing, options that are shown move with their
//! content, and variants resume and pair like originals.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use repairbench::kernel::store::StoredRecord;
use repairbench::model::{Engine, LanguageModel};
use repairbench::suites::perturb::{CodeEdit, Family, PerturbSpec};
use repairbench::suites::{evaluate, load_suite, EvalOptions, EvalSummary, SampleRecord};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/suites")
}

fn model() -> Engine {
    Engine::load(repairbench::model::DEFAULT_MODEL).expect("the default model GGUF must be present")
}

fn records(out: &Path) -> BTreeMap<String, SampleRecord> {
    std::fs::read_to_string(out.join("samples.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<SampleRecord>(l).unwrap())
        .map(|r| (r.key(), r))
        .collect()
}

fn run(engine: &mut Engine, suite: &str, data: &str, out: &Path, spec: Option<PerturbSpec>) -> EvalSummary {
    let suite = load_suite(suite).unwrap();
    let mut opts = EvalOptions::new(out);
    opts.data = Some(fixtures().join(data));
    opts.shots = Some(0);
    opts.perturb = spec;
    evaluate(&suite, &opts, Some(engine as &mut dyn LanguageModel), None).unwrap()
}

fn circular() -> Option<PerturbSpec> {
    Some(PerturbSpec { families: vec![Family::OptionsCircular], seed: 0, variants: 1 })
}

/// ARC and HellaSwag score each option after the same question and never list the options, so
/// rotating them changes no prompt, no score and no choice.
#[test]
fn options_never_shown_change_nothing_when_rotated() {
    let mut engine = model();
    let dir = tempfile::tempdir().unwrap();
    for (suite, data) in [("arc_easy", "arc"), ("hellaswag", "hellaswag")] {
        let out = dir.path().join(suite);
        let summary = run(&mut engine, suite, data, &out, circular());
        let r = &summary.robustness["options.circular"];
        // 4 + 4 + 3 options in ARC's fixture, 4 each in HellaSwag's: n - 1 rotations each.
        let expected_variants = if suite == "arc_easy" { 3 + 3 + 2 } else { 9 };
        assert_eq!((r.items, r.variants), (3, expected_variants), "{suite}");
        assert_eq!(r.worst_case, r.original, "{suite}: {r:?}");
        assert_eq!(r.consistency, 1.0, "{suite}: {r:?}");
        assert_eq!((r.drop, r.prompt_changed, r.applied), (0.0, 0.0, 1.0), "{suite}");
        assert_eq!(summary.metrics["acc"].n, 3, "{suite}: variants are not items");
        // Each variant scored its options exactly as the original did, each in its new place.
        let recs = records(&out);
        for v in recs.values().filter(|r| r.variant.is_some()) {
            let original = &recs[&SampleRecord::key_of(v.seed, &v.doc_id)];
            let order = v.variant.as_ref().unwrap().option_order.as_ref().unwrap();
            for (shown, &from) in order.iter().enumerate() {
                let (a, b) = (&v.choices[shown], &original.choices[from]);
                assert_eq!(a.continuation, b.continuation, "{suite} {}", v.doc_id);
                assert!((a.loglikelihood - b.loglikelihood).abs() < 1e-9, "{suite} {}", v.doc_id);
            }
        }
    }
}

/// MMLU lists its options under letters: each rotation changes the prompt, shows the same
/// option texts byte for byte in their new places, and keeps the gold with its text.
#[test]
fn listed_options_move_whole_and_the_gold_follows_its_text() {
    let mut engine = model();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mmlu");
    let spec = PerturbSpec {
        families: vec![Family::OptionsCircular, Family::OptionsPermute(2)],
        seed: 7,
        variants: 1,
    };
    let summary = run(&mut engine, "mmlu", "mmlu", &out, Some(spec.clone()));
    let circular = &summary.robustness["options.circular"];
    assert_eq!((circular.items, circular.variants), (5, 15));
    assert_eq!(circular.prompt_changed, 1.0);
    let options = circular.options.as_ref().unwrap();
    assert_eq!(options.recall_by_position.len(), 4);
    assert!(options.recall_by_position.iter().all(Option::is_some), "rotations put the gold everywhere");
    let rate_sum: f64 = options.selection_rate.values().sum();
    assert!((rate_sum - 1.0).abs() < 1e-12);
    let lines = |prompt: &str| -> Vec<String> {
        prompt
            .lines()
            .filter(|l| l.len() > 3 && l.as_bytes()[1] == b'.' && l.as_bytes()[2] == b' ')
            .map(|l| l[3..].to_owned())
            .collect()
    };
    let recs = records(&out);
    let variants: Vec<&SampleRecord> = recs.values().filter(|r| r.variant.is_some()).collect();
    assert_eq!(variants.len(), 15 + 10);
    for v in variants {
        let original = &recs[&SampleRecord::key_of(v.seed, &v.doc_id)];
        let order = v.variant.as_ref().unwrap().option_order.as_ref().unwrap();
        let (shown, before) = (lines(&v.prompt), lines(&original.prompt));
        assert_eq!(shown.len(), 4, "{}", v.prompt);
        for (i, &from) in order.iter().enumerate() {
            assert_eq!(shown[i], before[from], "{}: option texts move whole", v.doc_id);
        }
        let gold = |r: &SampleRecord, texts: &[String]| texts[r.target.as_u64().unwrap() as usize].clone();
        assert_eq!(gold(v, &shown), gold(original, &before), "{}: the gold keeps its text", v.doc_id);
        // The letter scored is the one of the option's new place.
        assert_eq!(v.choices[1].continuation, " B");
    }
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["robustness"]["options.permute"]["variants"], 10);
    assert_eq!(
        results["config"]["perturb"]["families"],
        serde_json::json!(["options.circular", "options.permute:2"])
    );
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("| options.circular | acc |"), "{report}");
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    for part in [
        "id=\"robust-families\"",
        "id=\"variants\"",
        "options.circular: recall by gold position",
        "options.permute#2",
    ] {
        assert!(page.contains(part), "report.html lacks {part}");
    }
    assert_eq!(
        page.matches("<tr class=\"item expandable\" data-id=\"0:").count(),
        5 + 25,
        "items, then variants"
    );

    // A rerun computes nothing; a plain run into the same folder reuses the originals; another
    // --perturb-seed recomputes the seeded permutations only.
    let again = run(&mut engine, "mmlu", "mmlu", &out, Some(spec.clone()));
    assert_eq!((again.computed, again.resumed), (0, 30));
    assert_eq!(again.robustness, summary.robustness);
    let plain = run(&mut engine, "mmlu", "mmlu", &out, None);
    assert_eq!((plain.computed, plain.metrics["acc"].value), (0, summary.metrics["acc"].value));
    let reseeded = run(&mut engine, "mmlu", "mmlu", &out, Some(PerturbSpec { seed: 8, ..spec }));
    assert_eq!((reseeded.computed, reseeded.resumed), (10, 20));
}

/// `identity` under greedy scoring is the noise floor: exactly no drop.
#[test]
fn identity_drops_exactly_nothing_and_fewshot_order_reorders_the_examples() {
    let mut engine = model();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mmlu");
    let suite = load_suite("mmlu").unwrap();
    let mut opts = EvalOptions::new(&out);
    opts.data = Some(fixtures().join("mmlu"));
    opts.shots = Some(3);
    opts.perturb =
        Some(PerturbSpec { families: vec![Family::Identity, Family::FewshotOrder], seed: 3, variants: 2 });
    let summary = evaluate(&suite, &opts, Some(&mut engine as &mut dyn LanguageModel), None).unwrap();
    let identity = &summary.robustness["identity"];
    assert_eq!((identity.drop, identity.worst_case, identity.consistency), (0.0, identity.original, 1.0));
    assert_eq!(identity.prompt_changed, 0.0);
    let fewshot = &summary.robustness["fewshot.order"];
    assert_eq!(fewshot.identity_drop, Some(0.0));
    let recs = records(&out);
    for v in recs.values().filter(|r| r.variant.as_ref().is_some_and(|v| v.family == "fewshot.order")) {
        let original = &recs[&SampleRecord::key_of(v.seed, &v.doc_id)];
        let order = v.variant.as_ref().unwrap().fewshot_order.as_ref().unwrap();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, (0..order.len()).collect::<Vec<_>>());
        // Same examples, same question: the same lines in another order, the question last.
        let mut a: Vec<&str> = v.prompt.lines().collect();
        let mut b: Vec<&str> = original.prompt.lines().collect();
        assert_eq!(a.last(), b.last());
        a.sort();
        b.sort();
        assert_eq!(a, b, "{}", v.doc_id);
        assert_eq!(v.variant.as_ref().unwrap().applied, v.prompt != original.prompt);
    }
    assert!(fewshot.applied > 0.0, "{fewshot:?}");
}

/// A family that cannot act on a suite is refused before anything runs.
#[test]
fn a_family_that_cannot_apply_is_refused() {
    let suite = load_suite("gsm8k").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut opts = EvalOptions::new(dir.path());
    opts.data = Some(fixtures().join("gsm8k"));
    opts.perturb = circular();
    let mut engine = model();
    let err = evaluate(&suite, &opts, Some(&mut engine as &mut dyn LanguageModel), None).unwrap_err();
    assert_eq!(err.to_string(), "suite `gsm8k`: options.circular moves options, and this suite has none");
    assert!(!dir.path().join("samples.jsonl").exists());
    opts.perturb = Some(PerturbSpec { families: vec![Family::Code(CodeEdit::Rename)], seed: 0, variants: 1 });
    let err = evaluate(&suite, &opts, Some(&mut engine as &mut dyn LanguageModel), None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "suite `gsm8k`: code.rename edits a task's code, and the suite file does not say where it is ([perturb.code])"
    );
    assert!(!dir.path().join("samples.jsonl").exists());
}

fn text_families() -> Vec<Family> {
    ["text.typo", "text.case", "text.space"]
        .iter()
        .map(|f| repairbench::suites::perturb::parse_family(f).unwrap())
        .collect()
}

/// The text families edit the question's prose only: MMLU's option lines stay byte for byte,
/// GSM8K's numerals stay the same multiset, and every item's prompt changes.
#[test]
fn text_edits_keep_options_and_numbers_and_change_every_prompt() {
    let mut engine = model();
    let dir = tempfile::tempdir().unwrap();
    let spec = PerturbSpec { families: text_families(), seed: 11, variants: 2 };
    let mmlu = run(&mut engine, "mmlu", "mmlu", &dir.path().join("mmlu"), Some(spec.clone()));
    let recs = records(&dir.path().join("mmlu"));
    for v in recs.values().filter(|r| r.variant.is_some()) {
        let original = &recs[&SampleRecord::key_of(v.seed, &v.doc_id)];
        let options = |p: &str| {
            let listed = |l: &&str| (l.len() > 3 && &l[1..3] == ". ") || l.starts_with("Answer:");
            p.lines().filter(listed).map(str::to_owned).collect::<Vec<_>>()
        };
        assert_eq!(options(&v.prompt), options(&original.prompt), "{}: options and cue unchanged", v.doc_id);
        assert_eq!(
            v.choices.iter().map(|c| &c.continuation).collect::<Vec<_>>(),
            original.choices.iter().map(|c| &c.continuation).collect::<Vec<_>>()
        );
        assert_eq!(v.target, original.target);
    }
    for family in ["text.typo", "text.case", "text.space"] {
        let r = &mmlu.robustness[family];
        assert_eq!(r.variants, 10, "{family}");
        assert!(r.prompt_changed >= 0.9 && r.applied >= 0.9, "{family}: {r:?}");
    }

    let suite = load_suite("gsm8k").unwrap();
    let out = dir.path().join("gsm8k");
    let mut opts = EvalOptions::new(&out);
    opts.data = Some(fixtures().join("gsm8k"));
    opts.shots = Some(0);
    opts.limit = Some(2);
    opts.perturb = Some(PerturbSpec { variants: 1, ..spec });
    let gsm8k = evaluate(&suite, &opts, Some(&mut engine as &mut dyn LanguageModel), None).unwrap();
    let recs = records(&out);
    let numerals = |text: &str| {
        let mut found: Vec<String> = text
            .split(|c: char| !c.is_ascii_digit() && c != '.')
            .map(|s| s.trim_matches('.').to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        found.sort();
        found
    };
    let mut variants = 0;
    for v in recs.values().filter(|r| r.variant.is_some()) {
        let original = &recs[&SampleRecord::key_of(v.seed, &v.doc_id)];
        assert_ne!(v.prompt, original.prompt, "{:?}", v.variant);
        assert_eq!(numerals(&v.prompt), numerals(&original.prompt), "{}", v.prompt);
        assert_eq!(v.target, original.target);
        variants += 1;
    }
    assert_eq!(variants, 6);
    assert_eq!(gsm8k.robustness.len(), 3);
}

/// `format:K` renders MMLU's own templates with other label styles, cues and gaps: the same
/// format for every document, the option texts and the scored letters unchanged.
#[test]
fn formats_restyle_the_prompt_and_keep_its_content() {
    let mut engine = model();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mmlu");
    let spec = PerturbSpec {
        families: vec![repairbench::suites::perturb::parse_family("format:4").unwrap()],
        seed: 5,
        variants: 1,
    };
    let summary = run(&mut engine, "mmlu", "mmlu", &out, Some(spec));
    let r = &summary.robustness["format"];
    assert_eq!((r.items, r.variants, r.prompt_changed), (5, 20, 1.0));
    let f = r.formats.as_ref().unwrap();
    assert_eq!(f.per_format.len(), 5);
    assert_eq!(f.per_format[0], summary.metrics["acc"].value);
    let max = f.per_format.iter().copied().fold(f64::MIN, f64::max);
    let min = f.per_format.iter().copied().fold(f64::MAX, f64::min);
    assert!((f.spread - (max - min)).abs() < 1e-12 && f.spread_ci95[0] <= f.spread_ci95[1]);
    let recs = records(&out);
    let mut by_index: BTreeMap<usize, serde_json::Value> = BTreeMap::new();
    for v in recs.values().filter(|r| r.variant.is_some()) {
        let variant = v.variant.as_ref().unwrap();
        let format = serde_json::to_value(variant.format.as_ref().unwrap()).unwrap();
        assert_eq!(by_index.entry(variant.index).or_insert(format.clone()), &format, "one format per index");
        let original = &recs[&SampleRecord::key_of(v.seed, &v.doc_id)];
        let label = format["label"].as_str().unwrap();
        let texts = |prompt: &str, label: &str| -> Vec<String> {
            ["A", "B", "C", "D"]
                .iter()
                .map(|l| {
                    let shown = label.replace("{L}", l);
                    let line = prompt
                        .lines()
                        .find(|line| line.starts_with(&shown))
                        .unwrap_or_else(|| panic!("{shown} in {prompt}"));
                    line[shown.len()..].to_owned()
                })
                .collect()
        };
        assert_eq!(texts(&v.prompt, label), texts(&original.prompt, "{L}. "), "{}", v.prompt);
        assert!(v.prompt.ends_with(format["cue"].as_str().unwrap()));
        assert_eq!(
            v.choices.iter().map(|c| c.continuation.as_str()).collect::<Vec<_>>(),
            [" A", " B", " C", " D"]
        );
    }
    assert_eq!(by_index.len(), 4);
    let distinct: std::collections::BTreeSet<String> = by_index.values().map(|f| f.to_string()).collect();
    assert_eq!(distinct.len(), 4, "four different formats");
}

/// `format:K` on GSM8K, a generation suite: the question's name and the answer cue take each
/// format's casing and separator in the few-shot examples and the question alike, and the stop
/// at the next question follows the format, so no output runs on into a question of its own.
#[test]
fn formats_on_a_generation_suite_move_its_stop_sequences() {
    let suite = load_suite("gsm8k").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gsm8k");
    let mut opts = EvalOptions::new(&out);
    opts.data = Some(fixtures().join("gsm8k"));
    opts.shots = Some(2);
    opts.limit = Some(3);
    opts.perturb = Some(PerturbSpec {
        families: vec![repairbench::suites::perturb::parse_family("format:3").unwrap()],
        seed: 1,
        variants: 1,
    });
    let mut engine = model();
    let summary = evaluate(&suite, &opts, Some(&mut engine as &mut dyn LanguageModel), None).unwrap();
    let r = &summary.robustness["format"];
    assert_eq!((r.items, r.variants, r.prompt_changed), (3, 9, 1.0));
    assert_eq!(r.formats.as_ref().unwrap().per_format.len(), 4);
    for record in records(&out).values() {
        let (question, cue) = match &record.variant {
            Some(v) => {
                let f = v.format.as_ref().unwrap();
                (f.question.clone(), f.cue.clone())
            }
            None => ("Question:".to_owned(), "Answer:".to_owned()),
        };
        let key = record.key();
        // Two examples and the question, each introduced by the format's name for it.
        assert_eq!(record.prompt.matches(&format!("{question} ")).count(), 3, "{key}: {}", record.prompt);
        assert!(record.prompt.ends_with(&cue), "{key}");
        for output in &record.outputs {
            assert!(!output.text.contains(&question), "{key}: ran on past its stop: {}", output.text);
        }
    }
}

/// How many sequences the engine decodes together changes nothing in a perturbed run: the
/// same outputs for every original and variant, the same robustness section.
#[test]
fn decoding_one_or_eight_at_a_time_gives_the_same_perturbed_run() {
    let suite = load_suite("gsm8k").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for batch in [1, 8] {
        let mut engine = model();
        engine.set_max_batch(batch);
        let out = dir.path().join(format!("batch-{batch}"));
        let mut opts = EvalOptions::new(&out);
        opts.data = Some(fixtures().join("gsm8k"));
        opts.shots = Some(0);
        opts.limit = Some(2);
        opts.perturb = Some(PerturbSpec {
            families: vec![
                Family::Identity,
                repairbench::suites::perturb::parse_family("text.typo").unwrap(),
            ],
            seed: 3,
            variants: 2,
        });
        let summary = evaluate(&suite, &opts, Some(&mut engine as &mut dyn LanguageModel), None).unwrap();
        let outputs: BTreeMap<String, Vec<String>> = records(&out)
            .into_iter()
            .map(|(k, r)| (k, r.outputs.into_iter().map(|o| o.text).collect()))
            .collect();
        runs.push((outputs, summary.robustness));
    }
    assert_eq!(runs[0].0.len(), 2 * (1 + 2 + 2));
    assert_eq!(runs[0], runs[1]);
    assert_eq!(runs[0].1["identity"].drop, 0.0, "greedy decoding: identity drops nothing");
}

/// A document id with `@` could take a variant's key, so a perturbed run refuses it, naming
/// the row.
#[test]
fn an_id_that_could_pass_for_a_variant_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let rows = std::fs::read_to_string(fixtures().join("arc/test.jsonl")).unwrap();
    let rows = rows.replacen("\"MCAS_2004_9_6\"", "\"Mercury_7175875@options.circular#1\"", 1);
    std::fs::write(dir.path().join("test.jsonl"), rows).unwrap();
    let suite = load_suite("arc_easy").unwrap();
    let mut opts = EvalOptions::new(dir.path().join("out"));
    opts.data = Some(dir.path().to_owned());
    opts.perturb = circular();
    let mut engine = model();
    let err =
        evaluate(&suite, &opts, Some(&mut engine as &mut dyn LanguageModel), None).unwrap_err().to_string();
    assert!(err.contains("test.jsonl:2:") && err.contains("holds `@`"), "{err}");
}
