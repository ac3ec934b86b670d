//! `report.html` in a real browser: output folders written with the crate's own types (a SWE
//! run whose patches and ids are hostile, two suite runs, a comparison), their views made by
//! `repairbench report` and `compare --html`, each page loaded from disk by headless Chromium
//! with the network cut off, and the rendered DOM checked: the headline against the run's
//! files, one row per item, the diff's line classes, hostile text as text. A screenshot of the
//! SWE page is kept under the test's output folder.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;

use common::browser::{assert_self_contained, chromium, load, text_of};

use regex::Regex;
use repairbench::grade::runners::RunnerKind;
use repairbench::grade::{Resolution, SuccessFailure, TestStatus, TestsStatus, Verdict};
use repairbench::repair::runners::CiOutcome;
use repairbench::repair::{GradeReport, InstanceResult, Timings};
use repairbench::suites::metrics::aggregate;
use repairbench::suites::record::{ChoiceRecord, OutputRecord};
use repairbench::suites::{code_scores, ProgramStatus, SampleRecord};
use serde_json::{json, Value};

const HOSTILE: &str =
    "</script><script>alert(1)</script><img src=x onerror=\"document.body.setAttribute('data-pwned','1')\">";

/// A folder kept after the test (the screenshot is for people to look at).
fn output_folder(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report_html").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn repairbench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_repairbench")).args(args).output().expect("the binary runs")
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The opening tags of the table rows of items (`expandable`: those with a detail).
fn item_rows(dom: &str, expandable: bool) -> Vec<String> {
    let class = if expandable { "item expandable( open)?" } else { "item" };
    Regex::new(&format!(r#"<tr class="{class}"[^>]*>"#))
        .unwrap()
        .find_iter(dom)
        .map(|m| m.as_str().to_owned())
        .collect()
}

fn instance(
    id: &str,
    verdict: Verdict,
    f2p: (usize, usize),
    p2p: (usize, usize),
    secs: f64,
) -> InstanceResult {
    let tests = |prefix: &str, (pass, fail): (usize, usize)| SuccessFailure {
        success: (0..pass).map(|i| format!("tests/test_{prefix}.py::test_ok_{i}")).collect(),
        failure: (0..fail).map(|i| format!("tests/test_{prefix}.py::test_bad_{i}")).collect(),
    };
    let safe = repairbench::repair::safe_name(id);
    InstanceResult {
        instance_id: id.into(),
        verdict,
        resolved: verdict == Verdict::Resolved,
        resolution: if verdict == Verdict::Resolved { Resolution::Full } else { Resolution::No },
        patch_applied: !matches!(verdict, Verdict::PatchApplyFailed | Verdict::EmptyPatch),
        apply_method: None,
        tests_status: TestsStatus { fail_to_pass: tests("f2p", f2p), pass_to_pass: tests("p2p", p2p) },
        flaky_tests: Vec::new(),
        tampering: Vec::new(),
        status_source: None,
        runner: Some(RunnerKind::Pytest),
        python: None,
        packages_as_of: None,
        environment_spec: None,
        ci_jobs: Vec::new(),
        services: Vec::new(),
        test_exit: Some("exit 1".into()),
        detail: None,
        reason: None,
        model_name_or_path: Some("smol".into()),
        perturbation: None,
        fingerprint: None,
        timings: Timings { total_s: secs, tests_s: secs / 2.0, ..Timings::default() },
        log_dir: format!("logs/{safe}"),
    }
}

const GOOD_PATCH: &str = "diff --git a/widgets/core.py b/widgets/core.py\n--- a/widgets/core.py\n+++ b/widgets/core.py\n@@ -1,3 +1,3 @@\n def area(w, h):\n-    return w + h\n+    return w * h\n \n";

/// A `swe grade` output folder as the grader leaves it: report.json, manifest.json, and per
/// instance model.patch and logs. Returns the report.
fn write_swe_run(dir: &Path, flip: bool) -> GradeReport {
    let hostile_patch = format!(
        "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,3 @@\n-# {HOSTILE}\n+# {HOSTILE}\n+print('<b>bold</b> & https://example.invalid/x.js')\n x = 1\n"
    );
    let mut unresolved = instance("acme__widgets-2", Verdict::Unresolved, (0, 1), (2, 1), 12.5);
    unresolved.detail = Some(format!("tests failed {HOSTILE}"));
    unresolved.ci_jobs = vec![
        CiOutcome { job: "lint".into(), status: TestStatus::Failed, detail: "exit 1".into() },
        CiOutcome { job: "unit".into(), status: TestStatus::Passed, detail: "exit 0".into() },
    ];
    let mut hostile_id =
        instance("evil__\"><svg onload=alert(2)>-3", Verdict::PatchApplyFailed, (0, 1), (0, 3), 0.4);
    hostile_id.detail = Some("patch does not apply".into());
    let mut env = instance("acme__widgets-4", Verdict::EnvError, (0, 1), (0, 3), 30.0);
    env.detail = Some("environment build failed at `RUN pip install -e .`".into());
    env.reason = Some("environment_build_failed".into());
    let first = if flip { Verdict::Unresolved } else { Verdict::Resolved };
    let instances = vec![
        instance("acme__widgets-1", first, (2, 0), (3, 0), 8.25),
        unresolved,
        hostile_id,
        env,
        instance("acme__widgets-5", Verdict::EmptyPatch, (0, 1), (0, 3), 0.0),
        instance(
            "acme__widgets-6",
            if flip { Verdict::Resolved } else { Verdict::Unresolved },
            (1, 0),
            (3, 0),
            5.0,
        ),
    ];
    let patches = [
        GOOD_PATCH.to_owned(),
        hostile_patch,
        "garbage".into(),
        GOOD_PATCH.into(),
        String::new(),
        GOOD_PATCH.into(),
    ];
    for (r, patch) in instances.iter().zip(patches) {
        let logs = dir.join(&r.log_dir);
        std::fs::create_dir_all(logs.join("ci")).unwrap();
        std::fs::write(logs.join("model.patch"), patch).unwrap();
        std::fs::write(logs.join("test_output.txt"), "FAILED tests/test_f2p.py::test_bad_0\n").unwrap();
        std::fs::write(logs.join("test_command.txt"), "python -m pytest -rA\n").unwrap();
        if !r.ci_jobs.is_empty() {
            std::fs::write(logs.join("ci/lint.log"), "E501 line too long\n").unwrap();
        }
    }
    let report = GradeReport::new(instances, Vec::new());
    std::fs::write(dir.join("report.json"), serde_json::to_string_pretty(&report).unwrap()).unwrap();
    let manifest = json!({
        "command": "swe grade",
        "dataset": {"path": "tasks.jsonl", "sha256": "d1", "instances": 6, "bundles": {}},
        "settings": {"image": "img", "timeout_s": 1800.0, "workers": 2, "flaky_reruns": 2,
                     "limits": {"memory_bytes": 2147483648u64, "cpus": 1.0, "pids": 256}},
    });
    std::fs::write(dir.join("manifest.json"), serde_json::to_string_pretty(&manifest).unwrap()).unwrap();
    report
}

#[test]
fn swe_report_renders_in_a_browser_with_hostile_patches_as_text() {
    let dir = output_folder("swe");
    let report = write_swe_run(&dir, false);
    let out = repairbench(&["report", s(&dir)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("swe grade (6 items)"));
    for view in ["report.md", "junit.xml"] {
        assert!(dir.join(view).is_file(), "{view}");
    }
    let page = dir.join("report.html");
    let html = std::fs::read_to_string(&page).unwrap();
    assert_self_contained(&html);

    let dom = load(&page, "");
    // The headline is report.json's numbers.
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let (resolved, total) =
        (summary["summary"]["resolved"].as_u64().unwrap(), summary["summary"]["total"].as_u64().unwrap());
    assert_eq!((resolved, total), (1, 6));
    assert_eq!(text_of(&dom, "resolved"), format!("{resolved}/{total}"));
    let rate = summary["summary"]["resolved_rate"].as_f64().unwrap();
    assert_eq!(text_of(&dom, "rate"), format!("{:.1}%", rate * 100.0));
    let (lo, hi) = repairbench::stats::wilson_95(resolved as usize, total as usize);
    assert_eq!(text_of(&dom, "ci"), format!("{:.1}%–{:.1}%", lo * 100.0, hi * 100.0));
    assert_eq!(text_of(&dom, "infrastructure"), "1");
    // One row per instance, our script ran (it writes the count), the verdict chart is there.
    assert_eq!(item_rows(&dom, true).len(), report.instances.len());
    assert!(dom.contains("showing 6 of 6"), "the table script ran");
    assert!(dom.contains("<svg class=\"chart bars\""));
    // The diff is rendered with classed lines.
    assert!(dom.contains("<span class=\"add\">+    return w * h</span>"), "added line");
    assert!(dom.contains("<span class=\"del\">-    return w + h</span>"), "removed line");
    assert!(dom.contains("<span class=\"hunk\">@@ -1,3 +1,3 @@</span>"));
    // Hostile text is text: escaped in the DOM, no element made of it, nothing it ran.
    assert!(
        dom.contains("&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror="),
        "{dom}"
    );
    assert!(!dom.contains("<img") && !dom.contains("<b>bold"), "no element from a patch");
    assert!(!Regex::new(r"<body[^>]*data-pwned").unwrap().is_match(&dom), "the payload did not run");
    assert!(!Regex::new(r"<svg[^>]*onload").unwrap().is_match(&dom), "the instance id stayed text");
    assert_eq!(dom.matches("<svg").count(), 1, "only the verdict chart is an svg");
    // Links to the logs are relative; CI jobs are listed.
    assert!(dom.contains("<a href=\"logs/acme__widgets-2/test_output.txt\">test_output.txt</a>"));
    assert!(dom.contains("<a href=\"logs/acme__widgets-2/ci/lint.log\">ci/lint.log</a>"));
    assert!(dom.contains("<td>lint</td><td class=\"v-unresolved\">FAILED</td>"));

    // `#q=` filters and `#open=` opens a row.
    let filtered = load(&page, "#q=unresolved&open=acme__widgets-2");
    let rows = item_rows(&filtered, true);
    let shown: Vec<&String> = rows.iter().filter(|r| !r.contains("hidden")).collect();
    assert_eq!(shown.len(), 2, "unresolved and its neighbour widgets-6: {rows:#?}");
    assert!(shown.iter().any(|r| r.contains("acme__widgets-2") && r.contains("open")), "{shown:#?}");
    assert!(filtered.contains("showing 2 of 6"));

    let screenshot = dir.join("screenshot.png");
    chromium(&page, "#open=acme__widgets-2", &format!("--screenshot={}", screenshot.display()));
    let png = std::fs::read(&screenshot).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 20_000, "a real screenshot");
    println!("screenshot: {}", screenshot.display());
}

/// Runs `script` in a copy of `page` after the page's own script (the copy drops the page's
/// policy, which admits our script only) and returns what it left in `data-probe` on the body.
fn probe(page: &Path, script: &str) -> String {
    let html = std::fs::read_to_string(page).unwrap();
    let html = Regex::new(r#"<meta http-equiv="Content-Security-Policy"[^>]*>"#).unwrap().replace(&html, "");
    let copy = page.with_file_name("probe.html");
    let wrapped = format!(
        "<script>document.body.setAttribute('data-probe', (function () {{ {script} }})());</script></body>"
    );
    std::fs::write(&copy, html.replace("</body>", &wrapped)).unwrap();
    let (dom, _) = chromium(&copy, "", "--dump-dom");
    let found = Regex::new(r#"data-probe="([^"]*)""#).unwrap().captures(&dom).map(|c| c[1].to_owned());
    found.unwrap_or_else(|| panic!("the probe left nothing: {dom}"))
}

#[test]
fn tables_sort_as_numbers_filter_and_keep_details_with_their_rows() {
    let dir = output_folder("swe-table");
    write_swe_run(&dir, false);
    assert!(repairbench(&["report", s(&dir)]).status.success());
    let times = "return [].map.call(document.querySelectorAll('#instances tr.item'), \
                 function (r) { return r.cells[5].textContent; }).join(',');";
    let script = format!(
        "var th = document.querySelectorAll('#instances th')[5]; th.click(); var up = (function () {{ {times} }})(); \
         th.click(); var down = (function () {{ {times} }})(); \
         var paired = [].every.call(document.querySelectorAll('#instances tr.item'), \
           function (r) {{ return r.nextElementSibling && r.nextElementSibling.classList.contains('detail'); }}); \
         var only = document.querySelector('#instances select'); only.value = 'unresolved'; \
         only.dispatchEvent(new Event('change')); \
         var row = document.querySelector('#instances tr[data-id=\"acme__widgets-6\"]'); row.click(); \
         return [up, down, paired, document.querySelector('#instances .count').textContent, \
           row.nextElementSibling.hidden].join(' | ');"
    );
    let seen = probe(&dir.join("report.html"), &script);
    assert_eq!(
        seen,
        "0.0 s,0.4 s,5.0 s,8.2 s,12.5 s,30.0 s | 30.0 s,12.5 s,8.2 s,5.0 s,0.4 s,0.0 s | true | showing 2 of 6 | false"
    );
}

fn mc_record(seed: u64, doc: usize, subject: &str, right: bool) -> SampleRecord {
    let choices: Vec<ChoiceRecord> = (0..4)
        .map(|i| ChoiceRecord {
            continuation: format!(" option {i} <i>{}</i>", if i == 2 { HOSTILE } else { "" }),
            loglikelihood: -1.0 - i as f64,
            tokens: 3,
            chars: 10,
            is_greedy: i == 0,
        })
        .collect();
    let gold = if right { 0 } else { 1 };
    SampleRecord {
        suite: "mmlu".into(),
        seed,
        doc_id: format!("{subject}/{doc}"),
        index: doc,
        group: Some(subject.into()),
        prompt: format!("Question {doc} {HOSTILE}\nAnswer:"),
        prompt_sha256: "0".repeat(64),
        target: json!(gold),
        outputs: Vec::new(),
        choices,
        extracted: [("acc".to_owned(), Some("0".to_owned()))].into(),
        scores: [("acc".to_owned(), f64::from(u8::from(right)))].into(),
        variant: None,
        fingerprint: None,
    }
}

fn code_record(seed: u64, doc: usize, statuses: &[ProgramStatus]) -> SampleRecord {
    SampleRecord {
        suite: "humaneval".into(),
        seed,
        doc_id: format!("HumanEval/{doc}"),
        index: doc,
        group: None,
        prompt: "def f():\n".into(),
        prompt_sha256: "0".repeat(64),
        target: Value::Null,
        outputs: statuses
            .iter()
            .map(|s| OutputRecord {
                text: format!("    return 1  # {HOSTILE}"),
                finish: None,
                status: Some(*s),
            })
            .collect(),
        choices: Vec::new(),
        extracted: Default::default(),
        scores: code_scores(statuses, &[1, 2]),
        variant: None,
        fingerprint: None,
    }
}

/// An `eval` output folder: samples.jsonl, then results.json as the engine makes it.
fn write_suite_run(dir: &Path, suite: &str, kind: &str, seeds: &[u64], records: &[SampleRecord]) -> Value {
    let lines: Vec<String> = records.iter().map(|r| serde_json::to_string(r).unwrap()).collect();
    std::fs::write(dir.join("samples.jsonl"), lines.join("\n") + "\n").unwrap();
    let per_seed: Vec<(u64, Vec<&SampleRecord>)> =
        seeds.iter().map(|&s| (s, records.iter().filter(|r| r.seed == s).collect())).collect();
    let agg = aggregate(&per_seed);
    let items = records.iter().map(|r| &r.doc_id).collect::<std::collections::BTreeSet<_>>().len();
    let results = json!({"suite": suite, "kind": kind, "items": items, "seeds": seeds,
                         "metrics": agg.metrics, "groups": agg.groups, "config": {}});
    std::fs::write(dir.join("results.json"), serde_json::to_string_pretty(&results).unwrap()).unwrap();
    std::fs::write(dir.join("manifest.json"), "{}").unwrap();
    results
}

#[test]
fn suite_reports_show_subjects_seeds_and_pass_at_k() {
    let dir = output_folder("mmlu");
    let mut records = Vec::new();
    for seed in [0, 1, 2] {
        for doc in 0..4 {
            let subject = if doc < 2 { "anatomy" } else { "astronomy" };
            records.push(mc_record(seed, doc, subject, !(doc + seed as usize).is_multiple_of(3)));
        }
    }
    let results = write_suite_run(&dir, "mmlu", "multiple_choice", &[0, 1, 2], &records);
    let out = repairbench(&["report", s(&dir)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page = dir.join("report.html");
    assert_self_contained(&std::fs::read_to_string(&page).unwrap());
    let dom = load(&page, "");
    let acc = &results["metrics"]["acc"];
    assert_eq!(text_of(&dom, "metric-acc"), format!("{:.4}", acc["value"].as_f64().unwrap()));
    assert!(text_of(&dom, "metric-acc-note")
        .starts_with(&format!("± {:.4} stderr", acc["stderr"].as_f64().unwrap())));
    assert_eq!(item_rows(&dom, true).len(), 12, "one row per item and seed");
    assert!(
        dom.contains("<svg class=\"chart bars\"")
            && dom.contains(">anatomy</text>")
            && dom.contains(">astronomy</text>")
    );
    assert_eq!(
        dom.split("<svg class=\"chart seeds\"")
            .nth(1)
            .unwrap()
            .split("</svg>")
            .next()
            .unwrap()
            .matches("<circle")
            .count(),
        3
    );
    assert!(!dom.contains("<img") && !dom.contains("<i>"), "options and prompts stay text");

    let dir = output_folder("humaneval");
    use ProgramStatus::{Failed, Passed};
    let records = vec![
        code_record(0, 0, &[Passed, Passed]),
        code_record(0, 1, &[Passed, Failed]),
        code_record(0, 2, &[Failed, Failed]),
    ];
    let results = write_suite_run(&dir, "humaneval", "code", &[0], &records);
    assert!(repairbench(&["report", s(&dir)]).status.success());
    let dom = load(&dir.join("report.html"), "");
    assert_eq!(
        text_of(&dom, "metric-pass@1"),
        format!("{:.4}", results["metrics"]["pass@1"]["value"].as_f64().unwrap())
    );
    assert_eq!(
        text_of(&dom, "metric-pass@2"),
        format!("{:.4}", results["metrics"]["pass@2"]["value"].as_f64().unwrap())
    );
    let curve = dom
        .split("<svg class=\"chart curve\"")
        .nth(1)
        .expect("a pass@k curve")
        .split("</svg>")
        .next()
        .unwrap();
    assert!(curve.contains(">k=1</text>") && curve.contains(">k=2</text>"), "{curve}");
    assert!(dom.contains("<td>1/2 passed</td>"), "a code item's answer is how its programs ended");
    assert!(!dom.contains("<img"));
}

#[test]
fn compare_html_shows_the_headline_and_flipped_items() {
    let root = output_folder("compare");
    let (base, new) = (root.join("base"), root.join("new"));
    std::fs::create_dir_all(&base).unwrap();
    std::fs::create_dir_all(&new).unwrap();
    write_swe_run(&base, false);
    write_swe_run(&new, true);
    let page = root.join("compare.html");
    let out = repairbench(&["compare", s(&base), s(&new), "--json", "--html", s(&page)]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_self_contained(&std::fs::read_to_string(&page).unwrap());
    let dom = load(&page, "");
    assert_eq!(text_of(&dom, "verdict"), c["verdict"].as_str().unwrap());
    assert_eq!(text_of(&dom, "delta"), format!("{:+.4}", c["delta"].as_f64().unwrap()));
    assert_eq!(text_of(&dom, "base"), format!("{:.4}", c["base"].as_f64().unwrap()));
    let rows = item_rows(&dom, false);
    assert_eq!(rows.len(), 2, "one regression, one improvement: {rows:#?}");
    assert!(dom.contains("<td>acme__widgets-1</td><td class=\"regression\">regression</td><td>resolved</td><td>unresolved</td>"), "{dom}");
    assert!(dom.contains("<td>acme__widgets-6</td><td class=\"improvement\">improvement</td><td>unresolved</td><td>resolved</td>"));
}

#[test]
fn report_names_the_file_a_run_lacks() {
    let root = tempfile::tempdir().unwrap();
    let stderr = |dir: &Path| {
        let out = repairbench(&["report", s(dir)]);
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(stderr(root.path()).contains("holds no run"), "{}", stderr(root.path()));
    let swe = root.path().join("swe");
    std::fs::create_dir_all(&swe).unwrap();
    std::fs::write(swe.join("results.jsonl"), "").unwrap();
    let text = stderr(&swe);
    assert!(text.contains(&format!("{} is missing", swe.join("report.json").display())), "{text}");
    let suite = root.path().join("suite");
    std::fs::create_dir_all(&suite).unwrap();
    std::fs::write(suite.join("samples.jsonl"), "").unwrap();
    let text = stderr(&suite);
    assert!(text.contains(&format!("{} is missing", suite.join("results.json").display())), "{text}");
    std::fs::write(suite.join("results.json"), "{\"suite\": \"x\"}").unwrap();
    let text = stderr(&suite);
    assert!(text.contains("results.json: field `seeds` is missing"), "{text}");
}
