//! JUnit XML from any tool (Maven Surefire, Gradle, jest-junit, cargo-nextest, Node's junit
//! reporter) to per-test statuses, one report file or many.
//!
//! Id: `<classname>::<name>`, or `<name>` when the class name is empty: Surefire's
//! `com.example.SlugTest::joinsWords`, nextest's `slugger::cli::runs_help`. Status: `<failure>`
//! -> Failed, `<error>` -> Error, `<skipped>` -> Skipped, and `<skipped>` together with
//! `<failure>` (Node's failing `todo` test) -> Xfail. Surefire's `<flakyFailure>` and
//! `<rerunFailure>` are not `<failure>`: a test that passed on a rerun is Passed. The XML
//! walking is [`crate::grade::junit`]'s.
//!
//! Summary: the `tests`/`failures`/`errors`/`skipped` attributes of the `<testsuite>` elements,
//! checked against the test cases of each file. Tools disagree on what a nested suite's counts
//! include, so when any file nests suites, or a suite states no counts, there is no summary.

use super::{Counts, RunnerReport};
use crate::grade::junit::{self, Case, Item, JunitError};
use crate::grade::TestStatus;

#[derive(Debug, thiserror::Error)]
#[error("JUnit report {file} cannot be read")]
pub struct JunitFileError {
    pub file: String,
    #[source]
    pub source: JunitError,
}

fn status(case: &Case) -> TestStatus {
    match (case.failure, case.error, case.skipped) {
        (true, _, true) => TestStatus::Xfail,
        (true, _, false) => TestStatus::Failed,
        (false, true, _) => TestStatus::Error,
        (false, false, true) => TestStatus::Skipped,
        (false, false, false) => TestStatus::Passed,
    }
}

/// Parses JUnit reports, given as (file name, XML) pairs.
pub fn parse(xml_files: &[(String, String)]) -> Result<RunnerReport, JunitFileError> {
    let mut report = RunnerReport::default();
    // Per file: stated counts, counts of its cases; None when its counts cannot be compared.
    let mut checks: Vec<(&str, Option<Counts>, Counts)> = Vec::new();
    for (file, xml) in xml_files {
        let mut saw_root = false;
        let mut stated = Some(Counts::default());
        let mut seen = Counts::default();
        junit::walk(xml, |item| match item {
            Item::Suites => saw_root = true,
            Item::Suite(suite) => {
                saw_root = true;
                if !suite.outermost || !suite.stated {
                    stated = None;
                } else if let Some(stated) = stated.as_mut() {
                    let failed = suite.failures + suite.errors;
                    stated.passed += suite.tests.saturating_sub(failed + suite.skipped);
                    stated.failed += failed;
                    stated.skipped += suite.skipped;
                }
            }
            Item::Case(case) => {
                let status = status(&case);
                // An xfail is a skip to the tool that wrote the report.
                seen.add(if status == TestStatus::Xfail { TestStatus::Skipped } else { status });
                let id = if case.classname.is_empty() {
                    case.name
                } else {
                    format!("{}::{}", case.classname, case.name)
                };
                report.record(id, status);
            }
        })
        .map_err(|source| JunitFileError { file: file.clone(), source })?;
        if !saw_root {
            return Err(JunitFileError { file: file.clone(), source: JunitError::NoSuite });
        }
        checks.push((file, stated, seen));
    }
    if !checks.is_empty() && checks.iter().all(|(_, stated, _)| stated.is_some()) {
        for (file, stated, seen) in checks {
            report.check_summary(file, stated.expect("checked above"), seen);
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use TestStatus::*;

    fn files(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(f, x)| (f.to_string(), x.to_string())).collect()
    }

    fn statuses(report: &RunnerReport) -> Vec<(&str, TestStatus)> {
        report.statuses.iter().map(|(k, v)| (k.as_str(), *v)).collect()
    }

    // Maven Surefire's TEST-<class>.xml layout (written to its format: no Maven repository is
    // reachable here): a failure, an error, a skip, a flaky test that passed on rerun.
    const SUREFIRE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuite xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" version="3.0" name="com.example.SlugTest" time="0.052" tests="5" errors="1" skipped="1" failures="1">
  <properties>
    <property name="java.version" value="17.0.12"/>
  </properties>
  <testcase name="lowercases" classname="com.example.SlugTest" time="0.004"/>
  <testcase name="joinsWords" classname="com.example.SlugTest" time="0.011">
    <failure message="expected: &lt;a_b&gt; but was: &lt;a-b&gt;" type="org.opentest4j.AssertionFailedError"><![CDATA[org.opentest4j.AssertionFailedError: expected: <a_b> but was: <a-b>
	at com.example.SlugTest.joinsWords(SlugTest.java:17)]]></failure>
    <system-out><![CDATA[joining words now
]]></system-out>
  </testcase>
  <testcase name="readsConfig" classname="com.example.SlugTest" time="0.001">
    <error message="config.yml (No such file or directory)" type="java.io.FileNotFoundException"><![CDATA[java.io.FileNotFoundException: config.yml]]></error>
  </testcase>
  <testcase name="stripsEmoji" classname="com.example.SlugTest" time="0">
    <skipped message="not yet"/>
  </testcase>
  <testcase name="timesOutSometimes" classname="com.example.SlugTest" time="0.020">
    <flakyFailure message="timeout" type="java.util.concurrent.TimeoutException"><stackTrace><![CDATA[java.util.concurrent.TimeoutException]]></stackTrace></flakyFailure>
  </testcase>
</testsuite>
"#;

    // cargo-nextest's `junit.xml` layout (written to its format): one suite per test binary.
    const NEXTEST: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="3" failures="1" errors="0" uuid="3f1c2a4e-8d7b-4c55-9e0f-2b6a1d9c7e31" timestamp="2026-12-01T13:10:00.000+00:00" time="0.031">
    <testsuite name="slugger" tests="2" disabled="0" errors="0" failures="1">
        <testcase name="parser::tests::empty" classname="slugger" timestamp="2026-12-01T13:10:00.001+00:00" time="0.004">
        </testcase>
        <testcase name="parser::tests::panics" classname="slugger" timestamp="2026-12-01T13:10:00.001+00:00" time="0.005">
            <failure type="test failure">thread &apos;parser::tests::panics&apos; panicked at src/lib.rs:38:22</failure>
            <system-out></system-out>
        </testcase>
    </testsuite>
    <testsuite name="slugger::cli" tests="1" disabled="0" errors="0" failures="0">
        <testcase name="runs_help" classname="slugger::cli" timestamp="2026-12-01T13:10:00.002+00:00" time="0.003">
        </testcase>
    </testsuite>
</testsuites>
"#;

    // Real `node --test --test-reporter=junit` (Node 20.20) with failure bodies shortened:
    // nested suites, a class name that is always "test", a failing todo.
    const NODE: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<testsuites>
	<testsuite name="slug" time="0.012169" disabled="0" errors="0" tests="4" failures="2" skipped="2" hostname="vm">
		<testcase name="lowercases" time="0.008813" classname="test"/>
		<testcase name="joins words" time="0.001739" classname="test" failure="Expected values to be strictly equal:'a-b' !== 'a_b'">
			<failure type="testCodeFailure" message="Expected values to be strictly equal:'a-b' !== 'a_b'">AssertionError</failure>
		</testcase>
		<testsuite name="unicode" time="0.000382" disabled="0" errors="0" tests="2" failures="0" skipped="1" hostname="vm">
			<testcase name="keeps accents" time="0.000172" classname="test"/>
			<testcase name="strips emoji" time="0.000067" classname="test">
				<skipped type="skipped" message="not yet"/>
			</testcase>
		</testsuite>
		<testcase name="handles tabs" time="0.000144" classname="test" failure="Expected values to be strictly equal:'a-b' !== 'a_b'">
			<skipped type="todo" message="later"/>
			<failure type="testCodeFailure" message="Expected values to be strictly equal:'a-b' !== 'a_b'">AssertionError</failure>
		</testcase>
	</testsuite>
	<testcase name="top level ok" time="0.000067" classname="test"/>
	<!-- tests 11 -->
</testsuites>
"#;

    #[test]
    fn surefire_and_nextest_reports_together() {
        let report =
            parse(&files(&[("TEST-com.example.SlugTest.xml", SUREFIRE), ("junit.xml", NEXTEST)])).unwrap();
        assert_eq!(
            statuses(&report),
            vec![
                ("com.example.SlugTest::joinsWords", Failed),
                ("com.example.SlugTest::lowercases", Passed),
                ("com.example.SlugTest::readsConfig", Error),
                ("com.example.SlugTest::stripsEmoji", Skipped),
                ("com.example.SlugTest::timesOutSometimes", Passed),
                ("slugger::cli::runs_help", Passed),
                ("slugger::parser::tests::empty", Passed),
                ("slugger::parser::tests::panics", Failed),
            ]
        );
        assert_eq!(report.summary, Some(Counts { passed: 4, failed: 3, skipped: 1 }));
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }

    #[test]
    fn nested_suites_give_ids_but_no_summary() {
        let report = parse(&files(&[("node.xml", NODE)])).unwrap();
        assert_eq!(
            statuses(&report),
            vec![
                ("test::handles tabs", Xfail),
                ("test::joins words", Failed),
                ("test::keeps accents", Passed),
                ("test::lowercases", Passed),
                ("test::strips emoji", Skipped),
                ("test::top level ok", Passed),
            ]
        );
        assert_eq!(report.summary, None);
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }

    #[test]
    fn counts_that_disagree_and_empty_class_names() {
        let xml = r#"<testsuite name="s" tests="3" failures="0" errors="0" skipped="0"><testcase name="a"/><testcase classname="" name="b"><failure/></testcase></testsuite>"#;
        let report = parse(&files(&[("r.xml", xml)])).unwrap();
        assert_eq!(statuses(&report), vec![("a", Passed), ("b", Failed)]);
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert!(
            report.problems[0].starts_with("r.xml: the summary says 3 passed, 0 failed"),
            "{:?}",
            report.problems
        );
        // jest-junit writes an empty <testsuites> when no test ran: not an error here.
        let empty =
            parse(&files(&[("jest.xml", r#"<testsuites name="jest tests" tests="0"></testsuites>"#)]))
                .unwrap();
        assert!(empty.statuses.is_empty());
    }

    #[test]
    fn an_unreadable_file_is_named() {
        let err = parse(&files(&[("ok.xml", NEXTEST), ("cut.xml", "<testsuite><testcase></testsuite>")]))
            .unwrap_err();
        assert_eq!(err.file, "cut.xml");
        assert!(matches!(err.source, JunitError::Malformed { .. }));
        assert_eq!(err.to_string(), "JUnit report cut.xml cannot be read");
        let err = parse(&files(&[("x.xml", "<html/>")])).unwrap_err();
        assert!(matches!(err.source, JunitError::NoSuite));
    }
}
