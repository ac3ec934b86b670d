//! JUnit XML as pytest writes it (`--junitxml`, `-o junit_family=xunit1`) to per-test status
//! keyed by pytest node id.
//!
//! The node id is rebuilt from `file` (xunit1 writes it) and `classname`: `tests.test_a.TestX`
//! with file `tests/test_a.py` gives `tests/test_a.py::TestX::name`. Without `file`, the module
//! part of `classname` is matched against the test files the run was given.

use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

use super::{StatusMap, TestStatus};

#[derive(Debug, thiserror::Error)]
pub enum JunitError {
    #[error("JUnit XML is malformed at byte {position}")]
    Malformed {
        position: u64,
        #[source]
        source: quick_xml::Error,
    },
    #[error("JUnit XML has no <testsuite> element")]
    NoSuite,
}

/// Statuses from one report, plus collection errors (files that could not be imported).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JunitReport {
    pub statuses: StatusMap,
    pub collection_errors: Vec<String>,
    pub tests: usize,
}

/// One `<testcase>` as written; shared with the reader of other tools' reports
/// ([`super::runners::junit_generic`]).
#[derive(Default)]
pub(crate) struct Case {
    pub(crate) classname: String,
    pub(crate) name: String,
    pub(crate) file: Option<String>,
    pub(crate) failure: bool,
    pub(crate) error: bool,
    pub(crate) skipped: bool,
    pub(crate) xfail: bool,
}

/// The counts a `<testsuite>` states in its attributes.
pub(crate) struct SuiteCounts {
    /// False when the element has no `tests` attribute (then the counts are all 0).
    pub(crate) stated: bool,
    pub(crate) tests: usize,
    pub(crate) failures: usize,
    pub(crate) errors: usize,
    pub(crate) skipped: usize,
    /// Not inside another `<testsuite>`, so its counts are not part of an enclosing one's.
    pub(crate) outermost: bool,
}

pub(crate) enum Item {
    /// A `<testsuites>` element.
    Suites,
    Suite(SuiteCounts),
    Case(Case),
}

fn attr(element: &BytesStart<'_>, key: &[u8]) -> Option<String> {
    element
        .attributes()
        .flatten()
        .find(|a| a.key.as_ref() == key)
        .and_then(|a| a.unescape_value().ok().map(|v| v.into_owned()))
}

fn node_id(case: &Case, known_files: &[String]) -> String {
    let file = case.file.clone().or_else(|| {
        known_files
            .iter()
            .filter(|f| {
                let module = f.trim_end_matches(".py").replace('/', ".");
                case.classname == module || case.classname.starts_with(&format!("{module}."))
            })
            .max_by_key(|f| f.len())
            .cloned()
    });
    let Some(file) = file else {
        // Unknown layout: the dotted class name is the best id there is.
        return if case.classname.is_empty() {
            case.name.clone()
        } else {
            format!("{}::{}", case.classname, case.name)
        };
    };
    let module = file.trim_end_matches(".py").replace('/', ".");
    let classes = case.classname.strip_prefix(&module).unwrap_or("").trim_start_matches('.');
    let mut id = file;
    for class in classes.split('.').filter(|c| !c.is_empty()) {
        id.push_str("::");
        id.push_str(class);
    }
    id.push_str("::");
    id.push_str(&case.name);
    id
}

fn finish(case: Case, known_files: &[String], report: &mut JunitReport) {
    // pytest reports a module that fails to import as a test case with an empty class name.
    if case.classname.is_empty() && case.error {
        report.collection_errors.push(case.name);
        return;
    }
    // Same precedence as SWE-bench's reading of `-rA` lines, where a later line wins.
    let status = if case.failure {
        TestStatus::Failed
    } else if case.error {
        TestStatus::Error
    } else if case.xfail {
        TestStatus::Xfail
    } else if case.skipped {
        TestStatus::Skipped
    } else {
        TestStatus::Passed
    };
    report.tests += 1;
    report.statuses.insert(node_id(&case, known_files), status);
}

fn suite_counts(element: &BytesStart<'_>, outermost: bool) -> SuiteCounts {
    let count = |key: &[u8]| attr(element, key).and_then(|v| v.trim().parse().ok());
    SuiteCounts {
        stated: count(b"tests").is_some(),
        tests: count(b"tests").unwrap_or(0),
        failures: count(b"failures").unwrap_or(0),
        errors: count(b"errors").unwrap_or(0),
        skipped: count(b"skipped").or_else(|| count(b"skip")).unwrap_or(0),
        outermost,
    }
}

/// Walks a JUnit XML document, handing over each `<testsuites>`, `<testsuite>` and finished
/// `<testcase>` in document order.
pub(crate) fn walk(xml: &str, mut on: impl FnMut(Item)) -> Result<(), JunitError> {
    let mut reader = Reader::from_str(xml);
    let mut current: Option<Case> = None;
    let mut suite_depth = 0usize;
    loop {
        let event = reader
            .read_event()
            .map_err(|source| JunitError::Malformed { position: reader.buffer_position(), source })?;
        match event {
            Event::Start(ref e) | Event::Empty(ref e) => {
                let empty = matches!(event, Event::Empty(_));
                match e.local_name().as_ref() {
                    b"testsuites" => on(Item::Suites),
                    b"testsuite" => {
                        on(Item::Suite(suite_counts(e, suite_depth == 0)));
                        suite_depth += usize::from(!empty);
                    }
                    b"testcase" => {
                        let case = Case {
                            classname: attr(e, b"classname").unwrap_or_default(),
                            name: attr(e, b"name").unwrap_or_default(),
                            file: attr(e, b"file").map(|f| f.replace('\\', "/")),
                            ..Case::default()
                        };
                        if empty {
                            on(Item::Case(case));
                        } else {
                            current = Some(case);
                        }
                    }
                    b"failure" => {
                        if let Some(case) = current.as_mut() {
                            case.failure = true;
                        }
                    }
                    b"error" => {
                        if let Some(case) = current.as_mut() {
                            case.error = true;
                        }
                    }
                    b"skipped" => {
                        if let Some(case) = current.as_mut() {
                            case.skipped = true;
                            case.xfail |= attr(e, b"type").is_some_and(|t| t == "pytest.xfail");
                        }
                    }
                    _ => {}
                }
            }
            Event::End(ref e) if e.local_name().as_ref() == b"testcase" => {
                if let Some(case) = current.take() {
                    on(Item::Case(case));
                }
            }
            Event::End(ref e) if e.local_name().as_ref() == b"testsuite" => {
                suite_depth = suite_depth.saturating_sub(1);
            }
            Event::Eof => return Ok(()),
            _ => {}
        }
    }
}

/// Parses a JUnit XML report. `known_files` are the test files the run was given.
pub fn parse(xml: &str, known_files: &[String]) -> Result<JunitReport, JunitError> {
    let mut report = JunitReport::default();
    let mut saw_suite = false;
    walk(xml, |item| match item {
        Item::Suites => {}
        Item::Suite(_) => saw_suite = true,
        Item::Case(case) => finish(case, known_files, &mut report),
    })?;
    if !saw_suite {
        return Err(JunitError::NoSuite);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = r#"<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="1" failures="1" skipped="2" tests="6" time="0.05">
<testcase classname="tests.test_text" name="test_ok" file="tests/test_text.py" line="3" time="0.001" />
<testcase classname="tests.test_text.TestSlug" name="test_param[a-b]" file="tests/test_text.py" line="9" time="0.001"><failure message="assert 1 == 2">trace &lt;here&gt;</failure></testcase>
<testcase classname="tests.test_text" name="test_skip" file="tests/test_text.py" line="12" time="0"><skipped type="pytest.skip" message="no">skip</skipped></testcase>
<testcase classname="tests.test_text" name="test_xf" file="tests/test_text.py" line="15" time="0"><skipped type="pytest.xfail" message="known" /></testcase>
<testcase classname="tests.test_text" name="test_teardown" file="tests/test_text.py" line="18" time="0"><error message="failed on teardown">boom</error></testcase>
<testcase classname="" name="tests.test_broken" time="0"><error message="collection failure">ImportError</error></testcase>
</testsuite></testsuites>"#;

    #[test]
    fn statuses_keyed_by_node_id() {
        let report = parse(REPORT, &[]).unwrap();
        let get = |id: &str| report.statuses.get(id).copied();
        assert_eq!(get("tests/test_text.py::test_ok"), Some(TestStatus::Passed));
        assert_eq!(get("tests/test_text.py::TestSlug::test_param[a-b]"), Some(TestStatus::Failed));
        assert_eq!(get("tests/test_text.py::test_skip"), Some(TestStatus::Skipped));
        assert_eq!(get("tests/test_text.py::test_xf"), Some(TestStatus::Xfail));
        assert_eq!(get("tests/test_text.py::test_teardown"), Some(TestStatus::Error));
        assert_eq!(report.collection_errors, vec!["tests.test_broken".to_string()]);
        assert_eq!(report.tests, 5);
    }

    #[test]
    fn without_file_attribute_the_known_files_place_the_module() {
        let xml = r#"<testsuite><testcase classname="tests.unit.test_a.TestX" name="test_y"/></testsuite>"#;
        let report = parse(xml, &["tests/unit/test_a.py".into()]).unwrap();
        assert!(report.statuses.contains_key("tests/unit/test_a.py::TestX::test_y"), "{report:?}");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(matches!(parse("<testsuite><testcase></testsuite>", &[]), Err(JunitError::Malformed { .. })));
        assert!(matches!(parse("PASSED tests/x.py::y", &[]), Err(JunitError::NoSuite)));
    }
}
