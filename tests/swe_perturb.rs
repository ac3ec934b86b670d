//! Perturbed repair tasks (`--perturb` on `swe`): every variant of the bundled issues keeps
//! what grading reads and the code in its statement, and a perturbed `swe run` with the real
//! default model grades each variant against its own prediction and reports robustness.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use repairbench::perturb::text::TextEdit;
use repairbench::repair::perturb::{expand, variant_problems, SweFamily, SwePerturbSpec};
use repairbench::tasks;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// `repairbench swe COMMAND --dataset DATASET --out OUT EXTRA…`.
fn swe(command: &str, dataset: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args =
        vec!["swe", command, "--dataset", dataset.to_str().unwrap(), "--out", out.to_str().unwrap()];
    args.extend(extra);
    common::cli::run(&args, None)
}

fn all_families(seed: u64, variants: usize) -> SwePerturbSpec {
    SwePerturbSpec {
        families: vec![
            SweFamily::Statement(TextEdit::Typo),
            SweFamily::Statement(TextEdit::Case),
            SweFamily::ContextOrder,
        ],
        seed,
        variants,
    }
}

/// No Docker needed: a variant's gold and unpatched runs are its original's (grading reads
/// nothing a variant changes), so what `swe validate` adds for a variant is this check.
#[test]
fn every_variant_of_the_bundled_issues_passes_the_variant_check() {
    let originals = tasks::load_tasks(&repo("issues")).unwrap().tasks;
    assert!(originals.len() >= 10, "{} bundled issues", originals.len());
    let expanded = expand(originals.clone(), &all_families(0, 3));
    assert_eq!(expanded.len(), originals.len() * 10);
    let by_id: BTreeMap<&str, &tasks::SweTask> =
        originals.iter().map(|t| (t.instance_id.as_str(), t)).collect();
    let (mut statement_variants, mut edited) = (0, 0);
    for variant in &expanded[originals.len()..] {
        let of = variant.variant.as_ref().expect("a variant says what it is");
        let original = by_id[of.original.as_str()];
        assert_eq!(variant_problems(original, variant), Vec::<String>::new(), "{}", variant.instance_id);
        // Every backtick span of the original is still there, in order.
        let spans = |text: &str| text.split('`').skip(1).step_by(2).map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(spans(&variant.problem_statement), spans(&original.problem_statement));
        if of.family == "context.order" {
            assert_eq!(variant.problem_statement, original.problem_statement);
            assert!(of.context_order.is_some());
        } else {
            statement_variants += 1;
            edited += usize::from(of.statement_edited);
        }
    }
    assert!(edited * 10 >= statement_variants * 9, "{edited} of {statement_variants} statements edited");
    // Byte-identical for every model and run; another --perturb-seed gives other variants.
    assert_eq!(expand(originals.clone(), &all_families(0, 3)), expanded);
    let other = expand(originals.clone(), &all_families(1, 3));
    let differ =
        other.iter().zip(&expanded).filter(|(a, b)| a.problem_statement != b.problem_statement).count();
    assert!(differ > originals.len(), "{differ} statements differ under another seed");
}

/// The real model and the real sandbox on one bundled issue: one prediction per variant, each
/// graded, the headline over the originals only, robustness per family, and `swe validate
/// --perturb` judging each variant.
#[test]
fn a_perturbed_swe_run_grades_every_variant() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let dataset = repo("issues/intervals-touching");
    let perturb = ["--perturb", "statement.typo,context.order", "--variants", "2", "--perturb-seed", "3"];
    let mut args = vec!["--max-tokens", "48", "--max-files", "3", "--timeout", "120"];
    args.extend(perturb);
    let output = swe("run", &dataset, &out, &args);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));

    let lines: Vec<serde_json::Value> = std::fs::read_to_string(out.join("predictions.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: BTreeSet<&str> = lines.iter().map(|l| l["instance_id"].as_str().unwrap()).collect();
    let original = "acme__intervals-42";
    let expected: BTreeSet<String> = std::iter::once(original.to_owned())
        .chain(
            ["statement.typo#1", "statement.typo#2", "context.order#1", "context.order#2"]
                .map(|v| format!("{original}@{v}")),
        )
        .collect();
    assert_eq!(ids, expected.iter().map(String::as_str).collect());
    let line = |id: &str| lines.iter().find(|l| l["instance_id"] == id).unwrap();
    let shown = |l: &serde_json::Value| l["context_files"].as_array().unwrap().clone();
    for index in [1, 2] {
        let typo = line(&format!("{original}@statement.typo#{index}"));
        assert_eq!(typo["variant"]["applied"], true);
        assert_ne!(typo["prompt_sha256"], line(original)["prompt_sha256"]);
        let order = line(&format!("{original}@context.order#{index}"));
        // The same files as the original's prompt shows (the first of those retrieved, as many as
        // fit), in the variant's order.
        let mut files: Vec<String> = order["variant"]["files_shown"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(shown(order), shown(line(original)));
        let mut relevance: Vec<String> =
            shown(order).iter().take(files.len()).map(|f| f.as_str().unwrap().to_owned()).collect();
        assert!(files.len() >= 2, "{files:?}: two files or more, or no order can change");
        let applied = files != relevance;
        assert_eq!(order["variant"]["applied"], applied);
        assert_eq!(order["prompt_sha256"] != line(original)["prompt_sha256"], applied);
        files.sort();
        relevance.sort();
        assert_eq!(files, relevance);
    }

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["summary"]["total"], 1, "the headline counts the dataset's own instance");
    assert_eq!(report["instances"].as_array().unwrap().len(), 5, "every variant graded");
    for instance in report["instances"].as_array().unwrap() {
        // The model wrote the line, so the result knows the prompt; an empty patch answers nothing.
        assert!(instance["perturbation"]["prompt_sha256"].is_string(), "{instance}");
        let empty = instance["verdict"] == "empty_patch";
        assert_eq!(instance["perturbation"]["change_sha256"].is_null(), empty, "{instance}");
    }
    let robustness = report["robustness"].as_object().unwrap();
    assert_eq!(robustness.keys().collect::<Vec<_>>(), ["context.order", "statement.typo"]);
    for figures in robustness.values() {
        assert_eq!((figures["items"].as_u64(), figures["variants"].as_u64()), (Some(1), Some(2)));
        assert_eq!(figures["metric"], "resolved");
    }
    assert_eq!(robustness["statement.typo"]["applied"], 1.0);
    let markdown = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(markdown.contains("Robustness") && markdown.contains("statement.typo"), "{markdown}");

    // `swe validate --perturb`: the original graded with gold and without a patch, each variant
    // judged beside it.
    let validation_out = dir.path().join("validate");
    let mut args = vec!["--timeout", "120"];
    args.extend(perturb);
    let output = swe("validate", &dataset, &validation_out, &args);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stdout));
    let validation: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(validation_out.join("validation.json")).unwrap())
            .unwrap();
    assert_eq!(validation["valid"], 5);
    let gold: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(validation_out.join("gold/report.json")).unwrap())
            .unwrap();
    assert_eq!(gold["instances"].as_array().unwrap().len(), 1, "variants are not graded again");
    for instance in validation["instances"].as_array().unwrap().iter().skip(1) {
        assert_eq!(instance["variant_of"], original);
    }
}

/// `swe grade --perturb` on predictions made elsewhere: each variant graded in the sandbox
/// against its own patch, and the figures exact. The original and two variants get the gold
/// patch, one variant nothing.
#[test]
fn graded_variants_give_exact_robustness_figures() {
    let dir = tempfile::tempdir().unwrap();
    let dataset = repo("issues/intervals-touching");
    let task: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dataset.join("task.json")).unwrap()).unwrap();
    let gold = task["patch"].as_str().unwrap();
    let original = "acme__intervals-42";
    let predictions = dir.path().join("predictions.jsonl");
    let lines: Vec<String> = [
        (original.to_owned(), gold),
        (format!("{original}@statement.typo#1"), gold),
        (format!("{original}@statement.typo#2"), ""),
        (format!("{original}@context.order#1"), gold),
        (format!("{original}@context.order#2"), gold),
    ]
    .iter()
    .map(|(id, patch)| {
        serde_json::json!({"instance_id": id, "model_name_or_path": "m", "model_patch": patch}).to_string()
    })
    .collect();
    std::fs::write(&predictions, lines.join("\n") + "\n").unwrap();
    let out = dir.path().join("grade");
    let perturb = ["--perturb", "statement.typo,context.order", "--variants", "2", "--timeout", "120"];
    let output = swe(
        "grade",
        &dataset,
        &out,
        &[&["--predictions", predictions.to_str().unwrap()], &perturb[..]].concat(),
    );
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stdout));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let verdicts: BTreeMap<&str, &str> = report["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["instance_id"].as_str().unwrap(), r["verdict"].as_str().unwrap()))
        .collect();
    assert_eq!(verdicts.values().filter(|v| **v == "resolved").count(), 4, "{verdicts:?}");
    assert_eq!(verdicts[format!("{original}@statement.typo#2").as_str()], "empty_patch");
    assert_eq!(
        (report["summary"]["total"].as_u64(), report["summary"]["resolved"].as_u64()),
        (Some(1), Some(1))
    );
    let typo = &report["robustness"]["statement.typo"];
    let figure = |name: &str| typo[name].as_f64().unwrap();
    assert_eq!((figure("original"), figure("variant_mean"), figure("worst_case")), (1.0, 0.5, 0.0));
    assert_eq!((figure("drop"), figure("flips_right_to_wrong"), figure("consistency")), (0.5, 0.5, 0.0));
    assert_eq!(typo["mcnemar"][1]["right_to_wrong"], 1);
    let order = &report["robustness"]["context.order"];
    let figure = |name: &str| order[name].as_f64().unwrap();
    assert_eq!((figure("worst_case"), figure("drop"), figure("consistency")), (1.0, 0.0, 1.0));
    // Predictions graded elsewhere carry no variant line: a statement variant applied when its
    // statement changed, an order cannot be told.
    assert_eq!((typo["applied"].as_f64(), order["applied"].as_f64()), (Some(1.0), Some(0.0)));
}

#[test]
fn an_unknown_family_and_variant_ids_in_a_dataset_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let dataset = repo("issues/intervals-touching");
    let output = common::cli::run(
        &["swe", "validate", "--dataset", "x", "--perturb", "statement.nope", "--out", "o"],
        None,
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("statement.nope") && stderr.contains("context.order"), "{stderr}");

    // A dataset may not use a variant's id for its own instance.
    let mut task: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dataset.join("task.json")).unwrap()).unwrap();
    task["instance_id"] = "acme__intervals-42@statement.case#1".into();
    let path = dir.path().join("tasks.jsonl");
    std::fs::write(&path, format!("{task}\n")).unwrap();
    let set = tasks::load_tasks(&path).unwrap();
    assert!(set.tasks.is_empty());
    assert!(set.skipped[0].reason.contains("holds `@`"), "{:?}", set.skipped);
}
