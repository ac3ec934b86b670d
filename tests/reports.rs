//! The CI views of a run (`junit.xml`, `report.md`) checked the way CI tools read them: the
//! JUnit file against the JUnit schema (the one pytest's source distribution carries for its
//! own tests, fetched from the package index like any test dependency) with xmllint.

use std::path::{Path, PathBuf};
use std::process::Command;

use repairbench::grade::{SuccessFailure, TestsStatus, Verdict};
use repairbench::repair::{reports, GradeReport, InstanceResult};

/// The JUnit schema, downloaded once into the cache.
fn junit_schema() -> PathBuf {
    let dir = repairbench::env::cache_dir().join("test-data").join("junit-schema");
    let xsd = dir.join("pytest-8.3.4/testing/example_scripts/junit-10.xsd");
    if xsd.is_file() {
        return xsd;
    }
    std::fs::create_dir_all(&dir).unwrap();
    let download = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "pytest==8.3.4", "-d"])
        .arg(&dir)
        .output()
        .expect("pip");
    assert!(download.status.success(), "{}", String::from_utf8_lossy(&download.stderr));
    let unpack = Command::new("tar")
        .arg("xzf")
        .arg(dir.join("pytest-8.3.4.tar.gz"))
        .arg("-C")
        .arg(&dir)
        .arg("pytest-8.3.4/testing/example_scripts/junit-10.xsd")
        .status()
        .unwrap();
    assert!(unpack.success() && xsd.is_file());
    xsd
}

fn xmllint_valid(xml_path: &Path) {
    let out = Command::new("xmllint")
        .arg("--noout")
        .arg("--schema")
        .arg(junit_schema())
        .arg(xml_path)
        .output()
        .expect("xmllint (libxml2-utils; scripts/setup installs it)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn instance(id: &str, verdict: Verdict, detail: Option<&str>) -> InstanceResult {
    let text = serde_json::json!({
        "instance_id": id, "verdict": verdict, "resolved": verdict == Verdict::Resolved,
        "resolution": if verdict == Verdict::Resolved { "FULL" } else { "NO" },
        "patch_applied": true, "apply_method": "git2",
        "tests_status": TestsStatus {
            fail_to_pass: SuccessFailure { success: vec![], failure: vec!["tests/test_a.py::test_x".into()] },
            pass_to_pass: SuccessFailure::default(),
        },
        "flaky_tests": [], "status_source": "junit", "test_exit": "exit 1", "detail": detail,
        "model_name_or_path": "m", "timings": {"prepare_s": 0.1, "tests_s": 1.5, "reruns_s": 0.0, "total_s": 2.5},
        "log_dir": format!("logs/{id}"),
    });
    serde_json::from_value(text).unwrap()
}

#[test]
fn swe_junit_is_valid_against_the_junit_schema_and_markdown_has_the_headline() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("logs/acme__b-2")).unwrap();
    std::fs::write(dir.path().join("logs/acme__b-2/test_output.txt"), "E assert 1 == 2 <&>\nFAILED x\n")
        .unwrap();
    let report = GradeReport::new(
        vec![
            instance("acme__a-1", Verdict::Resolved, None),
            instance("acme__b-2", Verdict::Unresolved, None),
            instance("acme__c-3", Verdict::EnvError, Some("environment build failed at `RUN pip install x`")),
        ],
        vec![],
    );
    let xml = reports::junit(&report, dir.path());
    let path = dir.path().join("junit.xml");
    std::fs::write(&path, &xml).unwrap();
    xmllint_valid(&path);
    assert!(xml.contains("failures=\"1\" errors=\"1\""), "{xml}");
    assert!(xml.contains("E assert 1 == 2 &lt;&amp;&gt;"), "the log tail travels with the failure: {xml}");
    let md = reports::markdown(&report);
    assert!(md.starts_with("## repairbench swe grade: 1/3 resolved (33.3%, 95% CI 6.1%–79.2%)"), "{md}");
    assert!(md.contains("| acme__c-3 | env_error | environment build failed"), "{md}");
}
