//! `go test -json ./...` (test2json events, one JSON object a line) to per-test statuses.
//!
//! Id: `<Package>::<Test>`, subtests keeping Go's own `TestX/sub` name (Go has already turned
//! spaces into underscores): `example.com/m/calc::TestTable/with_space`. Parent tests count as
//! tests too, as Go reports them. A package that fails without any test event (it did not
//! build, or its test binary died before running a test) is recorded as `<Package>::(build)`
//! with status Error, so a patch that breaks compilation is visible even when nobody lists the
//! package's tests. Go before 1.24 prints build failures only as text on stderr (`FAIL\t<pkg>
//! [build failed]`); that line is read too when stderr is mixed in. Other lines that are not
//! JSON are ignored, except that a line starting with `{` that does not parse is a problem.
//! Tests that started but never finished (a timeout or a panic killed the package) are Failed
//! and listed in the problems. `go test` prints no per-test totals, so there is no summary.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::RunnerReport;
use crate::grade::TestStatus;

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "Action")]
    action: String,
    #[serde(rename = "Package", default)]
    package: Option<String>,
    #[serde(rename = "Test", default)]
    test: Option<String>,
    /// Go 1.24+: set on a package's `fail` when its test binary did not build.
    #[serde(rename = "FailedBuild", default)]
    failed_build: Option<String>,
}

#[derive(Default)]
struct Package {
    tests_seen: bool,
    test_failed: bool,
    /// The package's own pass/fail/skip.
    outcome: Option<String>,
    build_failed: bool,
}

fn test_status(action: &str) -> Option<TestStatus> {
    match action {
        "pass" => Some(TestStatus::Passed),
        "fail" => Some(TestStatus::Failed),
        "skip" => Some(TestStatus::Skipped),
        _ => None,
    }
}

/// `FAIL\texample.com/m/broken [build failed]`, as Go before 1.24 prints on stderr.
fn text_build_failure(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("FAIL")?.trim_start();
    let package = rest.strip_suffix("[build failed]").or_else(|| rest.strip_suffix("[setup failed]"))?;
    Some(package.trim_end()).filter(|p| !p.is_empty() && !p.contains(char::is_whitespace))
}

/// Parses the output of `go test -json`.
pub fn parse(json_lines: &str) -> RunnerReport {
    let mut report = RunnerReport::default();
    let mut packages: BTreeMap<String, Package> = BTreeMap::new();
    // (package, test) that got `run` and no result yet.
    let mut running: BTreeSet<(String, String)> = BTreeSet::new();
    for (number, line) in json_lines.lines().enumerate() {
        let line = line.trim();
        if !line.starts_with('{') {
            if let Some(package) = text_build_failure(line) {
                packages.entry(package.to_owned()).or_default().build_failed = true;
            }
            continue;
        }
        let event: Event = match serde_json::from_str(line) {
            Ok(event) => event,
            Err(e) => {
                let start: String = line.chars().take(80).collect();
                report.problems.push(format!("line {}: not a test2json event ({e}): {start}", number + 1));
                continue;
            }
        };
        // Go 1.24+ `build-output`/`build-fail` events name an ImportPath, not a Package; the
        // package's own `fail` (with FailedBuild) follows, so they need no handling.
        let Some(package_name) = event.package else {
            continue;
        };
        let package = packages.entry(package_name.clone()).or_default();
        match event.test {
            Some(test) => {
                package.tests_seen = true;
                if event.action == "run" {
                    running.insert((package_name, test));
                } else if let Some(status) = test_status(&event.action) {
                    package.test_failed |= status == TestStatus::Failed;
                    running.remove(&(package_name.clone(), test.clone()));
                    report.record(format!("{package_name}::{test}"), status);
                }
            }
            None if test_status(&event.action).is_some() => {
                package.build_failed |= event.failed_build.is_some();
                package.outcome = Some(event.action);
            }
            None => {}
        }
    }
    for (package_name, test) in running {
        let outcome = packages.get(&package_name).and_then(|p| p.outcome.as_deref()).unwrap_or("no result");
        report
            .problems
            .push(format!("{package_name}::{test} started but never finished (package: {outcome})"));
        report.record(format!("{package_name}::{test}"), TestStatus::Failed);
    }
    for (name, package) in &packages {
        let failed = package.outcome.as_deref() == Some("fail");
        if package.build_failed || (failed && !package.tests_seen) {
            report.record(format!("{name}::(build)"), TestStatus::Error);
        } else if failed
            && !package.test_failed
            && !report.problems.iter().any(|p| p.starts_with(&format!("{name}::")))
        {
            report.problems.push(format!("{name} failed although none of its tests did"));
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use TestStatus::*;

    // Real `go test -json ./... 2>&1` (go 1.19.8, Debian bookworm) on a module with a passing,
    // a failing (after printing to stdout), a skipped and a panicking test, table subtests the
    // panic kept from running, nested subtests, a slow subtest (5 s, no timeout here), a package
    // that does not build (reported only as text on stderr by this Go) and a package without
    // test files.
    const MODULE: &str = r#"# example.com/m/broken [example.com/m/broken.test]
broken/broken.go:3:26: cannot use "x" (untyped string constant) as int value in return statement
FAIL	example.com/m/broken [build failed]
{"Time":"2026-12-01T13:06:05.967530272Z","Action":"run","Package":"example.com/m/calc","Test":"TestAdd"}
{"Time":"2026-12-01T13:06:05.967654684Z","Action":"output","Package":"example.com/m/calc","Test":"TestAdd","Output":"=== RUN   TestAdd\n"}
{"Time":"2026-12-01T13:06:05.967666558Z","Action":"output","Package":"example.com/m/calc","Test":"TestAdd","Output":"--- PASS: TestAdd (0.00s)\n"}
{"Time":"2026-12-01T13:06:05.967669984Z","Action":"pass","Package":"example.com/m/calc","Test":"TestAdd","Elapsed":0}
{"Time":"2026-12-01T13:06:05.967673174Z","Action":"run","Package":"example.com/m/calc","Test":"TestAddFails"}
{"Time":"2026-12-01T13:06:05.967674706Z","Action":"output","Package":"example.com/m/calc","Test":"TestAddFails","Output":"=== RUN   TestAddFails\n"}
{"Time":"2026-12-01T13:06:05.967676468Z","Action":"output","Package":"example.com/m/calc","Test":"TestAddFails","Output":"computing 2+2\n"}
{"Time":"2026-12-01T13:06:05.967678068Z","Action":"output","Package":"example.com/m/calc","Test":"TestAddFails","Output":"    calc_test.go:17: Add(2, 2) = 4, want 5\n"}
{"Time":"2026-12-01T13:06:05.967681456Z","Action":"output","Package":"example.com/m/calc","Test":"TestAddFails","Output":"--- FAIL: TestAddFails (0.00s)\n"}
{"Time":"2026-12-01T13:06:05.967682931Z","Action":"fail","Package":"example.com/m/calc","Test":"TestAddFails","Elapsed":0}
{"Time":"2026-12-01T13:06:05.967684341Z","Action":"run","Package":"example.com/m/calc","Test":"TestSkipped"}
{"Time":"2026-12-01T13:06:05.967685636Z","Action":"output","Package":"example.com/m/calc","Test":"TestSkipped","Output":"=== RUN   TestSkipped\n"}
{"Time":"2026-12-01T13:06:05.967687047Z","Action":"output","Package":"example.com/m/calc","Test":"TestSkipped","Output":"    calc_test.go:22: needs a database\n"}
{"Time":"2026-12-01T13:06:05.967688603Z","Action":"output","Package":"example.com/m/calc","Test":"TestSkipped","Output":"--- SKIP: TestSkipped (0.00s)\n"}
{"Time":"2026-12-01T13:06:05.967690124Z","Action":"skip","Package":"example.com/m/calc","Test":"TestSkipped","Elapsed":0}
{"Time":"2026-12-01T13:06:05.967691294Z","Action":"run","Package":"example.com/m/calc","Test":"TestPanics"}
{"Time":"2026-12-01T13:06:05.967692448Z","Action":"output","Package":"example.com/m/calc","Test":"TestPanics","Output":"=== RUN   TestPanics\n"}
{"Time":"2026-12-01T13:06:05.967695443Z","Action":"output","Package":"example.com/m/calc","Test":"TestPanics","Output":"--- FAIL: TestPanics (0.00s)\n"}
{"Time":"2026-12-01T13:06:05.969853659Z","Action":"output","Package":"example.com/m/calc","Test":"TestPanics","Output":"panic: runtime error: integer divide by zero [recovered]\n"}
{"Time":"2026-12-01T13:06:05.969872507Z","Action":"output","Package":"example.com/m/calc","Test":"TestPanics","Output":"\tpanic: runtime error: integer divide by zero\n"}
{"Time":"2026-12-01T13:06:05.969875144Z","Action":"output","Package":"example.com/m/calc","Test":"TestPanics","Output":"\n"}
{"Time":"2026-12-01T13:06:05.969877706Z","Action":"output","Package":"example.com/m/calc","Test":"TestPanics","Output":"goroutine 21 [running]:\n"}
{"Time":"2026-12-01T13:06:05.969879696Z","Action":"output","Package":"example.com/m/calc","Test":"TestPanics","Output":"testing.tRunner.func1.2({0x508e80, 0x5fea80})\n"}
{"Time":"2026-12-01T13:06:05.969881267Z","Action":"output","Package":"example.com/m/calc","Test":"TestPanics","Output":"\t/usr/lib/go-1.19/src/testing/testing.go:1396 +0x24e\n"}
{"Time":"2026-12-01T13:06:05.96988318Z","Action":"output","Package":"example.com/m/calc","Test":"TestPanics","Output":"testing.tRunner.func1()\n"}
{"Time":"2026-12-01T13:06:05.969885085Z","Action":"output","Package":"example.com/m/calc","Test":"TestPanics","Output":"\t/usr/lib/go-1.19/src/testing/testing.go:1399 +0x39f\n"}
{"Time":"2026-12-01T13:06:05.969886954Z","Action":"output","Package":"example.com/m/calc","Test":"TestPanics","Output":"panic({0x508e80, 0x5fea80})\n"}
{"Time":"2026-12-01T13:06:05.969899628Z","Action":"output","Package":"example.com/m/calc","Test":"TestPanics","Output":"\t/usr/lib/go-1.19/src/runtime/panic.go:884 +0x212\n"}
{"Time":"2026-12-01T13:06:05.969901397Z","Action":"output","Package":"example.com/m/calc","Test":"TestPanics","Output":"example.com/m/calc.Div(...)\n"}
{"Time":"2026-12-01T13:06:05.969902831Z","Action":"output","Package":"example.com/m/calc","Test":"TestPanics","Output":"\t/tmp/gomod/calc/calc.go:4\n"}
{"Time":"2026-12-01T13:06:05.96990447Z","Action":"output","Package":"example.com/m/calc","Test":"TestPanics","Output":"example.com/m/calc.TestPanics(0xc0000969c0?)\n"}
{"Time":"2026-12-01T13:06:05.969906154Z","Action":"output","Package":"example.com/m/calc","Test":"TestPanics","Output":"\t/tmp/gomod/calc/calc_test.go:26 +0x12\n"}
{"Time":"2026-12-01T13:06:05.969907739Z","Action":"output","Package":"example.com/m/calc","Test":"TestPanics","Output":"testing.tRunner(0xc000096d00, 0x52f590)\n"}
{"Time":"2026-12-01T13:06:05.969909365Z","Action":"output","Package":"example.com/m/calc","Test":"TestPanics","Output":"\t/usr/lib/go-1.19/src/testing/testing.go:1446 +0x10b\n"}
{"Time":"2026-12-01T13:06:05.969911064Z","Action":"output","Package":"example.com/m/calc","Test":"TestPanics","Output":"created by testing.(*T).Run\n"}
{"Time":"2026-12-01T13:06:05.96991236Z","Action":"output","Package":"example.com/m/calc","Test":"TestPanics","Output":"\t/usr/lib/go-1.19/src/testing/testing.go:1493 +0x35f\n"}
{"Time":"2026-12-01T13:06:05.970109208Z","Action":"fail","Package":"example.com/m/calc","Test":"TestPanics","Elapsed":0}
{"Time":"2026-12-01T13:06:05.97012848Z","Action":"output","Package":"example.com/m/calc","Output":"FAIL\texample.com/m/calc\t0.004s\n"}
{"Time":"2026-12-01T13:06:05.970131744Z","Action":"fail","Package":"example.com/m/calc","Elapsed":0.004}
{"Time":"2026-12-01T13:06:05.970866858Z","Action":"output","Package":"example.com/m/noTests","Output":"?   \texample.com/m/noTests\t[no test files]\n"}
{"Time":"2026-12-01T13:06:05.970877596Z","Action":"skip","Package":"example.com/m/noTests","Elapsed":0}
{"Time":"2026-12-01T13:06:05.99594377Z","Action":"run","Package":"example.com/m/util","Test":"TestTwice"}
{"Time":"2026-12-01T13:06:05.99596435Z","Action":"output","Package":"example.com/m/util","Test":"TestTwice","Output":"=== RUN   TestTwice\n"}
{"Time":"2026-12-01T13:06:05.995968507Z","Action":"output","Package":"example.com/m/util","Test":"TestTwice","Output":"    u_test.go:6: logging from a passing test\n"}
{"Time":"2026-12-01T13:06:05.995971396Z","Action":"run","Package":"example.com/m/util","Test":"TestTwice/nested"}
{"Time":"2026-12-01T13:06:05.995973185Z","Action":"output","Package":"example.com/m/util","Test":"TestTwice/nested","Output":"=== RUN   TestTwice/nested\n"}
{"Time":"2026-12-01T13:06:05.995975407Z","Action":"run","Package":"example.com/m/util","Test":"TestTwice/nested/deeper"}
{"Time":"2026-12-01T13:06:05.995977484Z","Action":"output","Package":"example.com/m/util","Test":"TestTwice/nested/deeper","Output":"=== RUN   TestTwice/nested/deeper\n"}
{"Time":"2026-12-01T13:06:05.995979589Z","Action":"output","Package":"example.com/m/util","Test":"TestTwice/nested/deeper","Output":"    u_test.go:11: later\n"}
{"Time":"2026-12-01T13:06:05.995984127Z","Action":"output","Package":"example.com/m/util","Test":"TestTwice","Output":"--- PASS: TestTwice (0.00s)\n"}
{"Time":"2026-12-01T13:06:05.99598791Z","Action":"output","Package":"example.com/m/util","Test":"TestTwice/nested","Output":"    --- PASS: TestTwice/nested (0.00s)\n"}
{"Time":"2026-12-01T13:06:05.995990333Z","Action":"output","Package":"example.com/m/util","Test":"TestTwice/nested/deeper","Output":"        --- SKIP: TestTwice/nested/deeper (0.00s)\n"}
{"Time":"2026-12-01T13:06:05.995992212Z","Action":"skip","Package":"example.com/m/util","Test":"TestTwice/nested/deeper","Elapsed":0}
{"Time":"2026-12-01T13:06:05.995995411Z","Action":"pass","Package":"example.com/m/util","Test":"TestTwice/nested","Elapsed":0}
{"Time":"2026-12-01T13:06:05.99599704Z","Action":"pass","Package":"example.com/m/util","Test":"TestTwice","Elapsed":0}
{"Time":"2026-12-01T13:06:05.996003844Z","Action":"output","Package":"example.com/m/util","Output":"PASS\n"}
{"Time":"2026-12-01T13:06:05.996005823Z","Action":"output","Package":"example.com/m/util","Output":"ok  \texample.com/m/util\t(cached)\n"}
{"Time":"2026-12-01T13:06:05.996008874Z","Action":"pass","Package":"example.com/m/util","Elapsed":0}
{"Time":"2026-12-01T13:06:06.179737175Z","Action":"run","Package":"example.com/m/slow","Test":"TestQuick"}
{"Time":"2026-12-01T13:06:06.179799863Z","Action":"output","Package":"example.com/m/slow","Test":"TestQuick","Output":"=== RUN   TestQuick\n"}
{"Time":"2026-12-01T13:06:06.179809194Z","Action":"output","Package":"example.com/m/slow","Test":"TestQuick","Output":"--- PASS: TestQuick (0.00s)\n"}
{"Time":"2026-12-01T13:06:06.179812192Z","Action":"pass","Package":"example.com/m/slow","Test":"TestQuick","Elapsed":0}
{"Time":"2026-12-01T13:06:06.179817241Z","Action":"run","Package":"example.com/m/slow","Test":"TestHangs"}
{"Time":"2026-12-01T13:06:06.179819363Z","Action":"output","Package":"example.com/m/slow","Test":"TestHangs","Output":"=== RUN   TestHangs\n"}
{"Time":"2026-12-01T13:06:06.179821581Z","Action":"run","Package":"example.com/m/slow","Test":"TestHangs/inner"}
{"Time":"2026-12-01T13:06:06.17982631Z","Action":"output","Package":"example.com/m/slow","Test":"TestHangs/inner","Output":"=== RUN   TestHangs/inner\n"}
{"Time":"2026-12-01T13:06:11.183559084Z","Action":"output","Package":"example.com/m/slow","Test":"TestHangs","Output":"--- PASS: TestHangs (5.00s)\n"}
{"Time":"2026-12-01T13:06:11.183598079Z","Action":"output","Package":"example.com/m/slow","Test":"TestHangs/inner","Output":"    --- PASS: TestHangs/inner (5.00s)\n"}
{"Time":"2026-12-01T13:06:11.1836008Z","Action":"pass","Package":"example.com/m/slow","Test":"TestHangs/inner","Elapsed":5}
{"Time":"2026-12-01T13:06:11.183606984Z","Action":"pass","Package":"example.com/m/slow","Test":"TestHangs","Elapsed":5}
{"Time":"2026-12-01T13:06:11.183608677Z","Action":"output","Package":"example.com/m/slow","Output":"PASS\n"}
{"Time":"2026-12-01T13:06:11.183962442Z","Action":"output","Package":"example.com/m/slow","Output":"ok  \texample.com/m/slow\t5.010s\n"}
{"Time":"2026-12-01T13:06:11.185508144Z","Action":"pass","Package":"example.com/m/slow","Elapsed":5.011}
"#;

    // Real `go test -json -timeout 1s ./slow/`: a subtest hangs; the goroutine dump's output
    // events are left out.
    const TIMEOUT: &str = r#"{"Time":"2026-12-01T13:06:13.497122195Z","Action":"run","Package":"example.com/m/slow","Test":"TestQuick"}
{"Time":"2026-12-01T13:06:13.497260399Z","Action":"output","Package":"example.com/m/slow","Test":"TestQuick","Output":"=== RUN   TestQuick\n"}
{"Time":"2026-12-01T13:06:13.497270172Z","Action":"output","Package":"example.com/m/slow","Test":"TestQuick","Output":"--- PASS: TestQuick (0.00s)\n"}
{"Time":"2026-12-01T13:06:13.497274882Z","Action":"pass","Package":"example.com/m/slow","Test":"TestQuick","Elapsed":0}
{"Time":"2026-12-01T13:06:13.497278808Z","Action":"run","Package":"example.com/m/slow","Test":"TestHangs"}
{"Time":"2026-12-01T13:06:13.497280696Z","Action":"output","Package":"example.com/m/slow","Test":"TestHangs","Output":"=== RUN   TestHangs\n"}
{"Time":"2026-12-01T13:06:13.497282727Z","Action":"run","Package":"example.com/m/slow","Test":"TestHangs/inner"}
{"Time":"2026-12-01T13:06:13.497286661Z","Action":"output","Package":"example.com/m/slow","Test":"TestHangs/inner","Output":"=== RUN   TestHangs/inner\n"}
{"Time":"2026-12-01T13:06:14.50815973Z","Action":"output","Package":"example.com/m/slow","Test":"TestHangs/inner","Output":"panic: test timed out after 1s\n"}
{"Time":"2026-12-01T13:06:14.508270369Z","Action":"output","Package":"example.com/m/slow","Test":"TestHangs/inner","Output":"example.com/m/slow.TestHangs(0xc000096680?)\n"}
{"Time":"2026-12-01T13:06:14.508281597Z","Action":"output","Package":"example.com/m/slow","Test":"TestHangs/inner","Output":"time.Sleep(0x12a05f200)\n"}
{"Time":"2026-12-01T13:06:14.508286774Z","Action":"output","Package":"example.com/m/slow","Test":"TestHangs/inner","Output":"example.com/m/slow.TestHangs.func1(0xc000096680?)\n"}
{"Time":"2026-12-01T13:06:14.508660579Z","Action":"output","Package":"example.com/m/slow","Output":"FAIL\texample.com/m/slow\t1.019s\n"}
{"Time":"2026-12-01T13:06:14.508666262Z","Action":"fail","Package":"example.com/m/slow","Elapsed":1.019}
"#;

    #[test]
    fn statuses_keyed_by_package_and_test() {
        let report = parse(MODULE);
        let got: Vec<(&str, TestStatus)> = report.statuses.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            got,
            vec![
                ("example.com/m/broken::(build)", Error),
                ("example.com/m/calc::TestAdd", Passed),
                ("example.com/m/calc::TestAddFails", Failed),
                ("example.com/m/calc::TestPanics", Failed),
                ("example.com/m/calc::TestSkipped", Skipped),
                ("example.com/m/slow::TestHangs", Passed),
                ("example.com/m/slow::TestHangs/inner", Passed),
                ("example.com/m/slow::TestQuick", Passed),
                ("example.com/m/util::TestTwice", Passed),
                ("example.com/m/util::TestTwice/nested", Passed),
                ("example.com/m/util::TestTwice/nested/deeper", Skipped),
            ]
        );
        assert_eq!(report.summary, None);
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }

    #[test]
    fn a_timeout_fails_the_tests_it_interrupted() {
        let report = parse(TIMEOUT);
        assert_eq!(report.statuses.get("example.com/m/slow::TestQuick"), Some(&Passed));
        assert_eq!(report.statuses.get("example.com/m/slow::TestHangs"), Some(&Failed));
        assert_eq!(report.statuses.get("example.com/m/slow::TestHangs/inner"), Some(&Failed));
        assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
        assert!(report.problems[1].contains("TestHangs/inner started but never finished (package: fail)"));
    }

    #[test]
    fn newer_go_reports_build_failures_as_events() {
        // Go 1.24's documented shape: build-output/build-fail events, then the package's fail
        // with FailedBuild (hand-written: the Go installed here is older).
        let events = r#"{"ImportPath":"example.com/m/broken [example.com/m/broken.test]","Action":"build-output","Output":"broken/broken.go:3:26: cannot use \"x\" as int value\n"}
{"ImportPath":"example.com/m/broken [example.com/m/broken.test]","Action":"build-fail"}
{"Time":"2026-12-01T13:06:05.9Z","Action":"start","Package":"example.com/m/broken"}
{"Time":"2026-12-01T13:06:05.9Z","Action":"output","Package":"example.com/m/broken","Output":"FAIL\texample.com/m/broken [build failed]\n"}
{"Time":"2026-12-01T13:06:05.9Z","Action":"fail","Package":"example.com/m/broken","Elapsed":0,"FailedBuild":"example.com/m/broken [example.com/m/broken.test]"}
FAIL	example.com/m/broken [build failed]
"#;
        let report = parse(events);
        let got: Vec<(&String, &TestStatus)> = report.statuses.iter().collect();
        assert_eq!(got, vec![(&"example.com/m/broken::(build)".to_string(), &Error)]);
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }

    #[test]
    fn broken_json_is_a_problem_and_plain_text_is_not() {
        let input = "go: downloading example.com/x v1.0.0\n{\"Action\":\"pass\",\"Package\":\"p\",\"Test\":\"T\"}\n{\"Action\":\"pa\n";
        let report = parse(input);
        assert_eq!(report.statuses.get("p::T"), Some(&Passed));
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert!(report.problems[0].starts_with("line 3: not a test2json event"), "{:?}", report.problems);
    }

    #[test]
    fn a_package_failing_with_all_tests_passed_is_a_problem() {
        // TestMain calling os.Exit(1) after m.Run(), or a leak checker failing the binary.
        let input = "{\"Action\":\"run\",\"Package\":\"p\",\"Test\":\"T\"}\n{\"Action\":\"pass\",\"Package\":\"p\",\"Test\":\"T\"}\n{\"Action\":\"fail\",\"Package\":\"p\"}\n";
        let report = parse(input);
        assert_eq!(report.statuses.len(), 1);
        assert_eq!(report.problems, vec!["p failed although none of its tests did".to_string()]);
    }
}
