//! JUnit XML for CI test reports (GitLab's `artifacts:reports:junit`, Jenkins): one
//! `testcase` per graded item, in the layout of the schema those tools read (testsuites >
//! testsuite > properties, testcase with failure / error / skipped, system-out). The one
//! writer of JUnit XML: grading, suites and `compare` all go through [`render`].

use quick_xml::escape::escape;

/// How one item ended.
#[derive(Debug, Clone, PartialEq)]
pub enum CaseOutcome {
    Passed,
    /// The item was graded and is wrong: `kind` (a verdict) and a message.
    Failed {
        kind: String,
        message: String,
    },
    /// No grade could be given (infrastructure).
    Error {
        kind: String,
        message: String,
    },
    Skipped {
        message: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    pub classname: String,
    pub name: String,
    pub time_s: f64,
    pub outcome: CaseOutcome,
    /// Shown under the case (a log excerpt); kept short by the caller.
    pub output: Option<String>,
}

/// Characters XML 1.0 cannot hold at all, even escaped (test output may carry them).
fn xml_text(text: &str) -> String {
    let clean: String = text
        .chars()
        .filter(|c| matches!(c, '\t' | '\n' | '\r') || (*c >= ' ' && *c != '\u{FFFE}' && *c != '\u{FFFF}'))
        .collect();
    escape(&clean).into_owned()
}

/// One test suite named `suite` holding `cases`, with `properties` (name, value) first.
pub fn render(suite: &str, properties: &[(&str, String)], cases: &[Case]) -> String {
    let count = |f: fn(&CaseOutcome) -> bool| cases.iter().filter(|c| f(&c.outcome)).count();
    let failures = count(|o| matches!(o, CaseOutcome::Failed { .. }));
    let errors = count(|o| matches!(o, CaseOutcome::Error { .. }));
    let skipped = count(|o| matches!(o, CaseOutcome::Skipped { .. }));
    let time: f64 = cases.iter().map(|c| c.time_s).sum();
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    xml.push_str(&format!(
        "<testsuites name=\"{suite}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{time:.3}\">\n",
        suite = xml_text(suite),
        tests = cases.len()
    ));
    xml.push_str(&format!(
        "  <testsuite name=\"{suite}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"{skipped}\" time=\"{time:.3}\">\n",
        suite = xml_text(suite),
        tests = cases.len()
    ));
    if !properties.is_empty() {
        xml.push_str("    <properties>\n");
        for (name, value) in properties {
            xml.push_str(&format!(
                "      <property name=\"{}\" value=\"{}\"/>\n",
                xml_text(name),
                xml_text(value)
            ));
        }
        xml.push_str("    </properties>\n");
    }
    for case in cases {
        xml.push_str(&format!(
            "    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3}\"",
            xml_text(&case.classname),
            xml_text(&case.name),
            case.time_s.max(0.0)
        ));
        if case.outcome == CaseOutcome::Passed && case.output.is_none() {
            xml.push_str("/>\n");
            continue;
        }
        xml.push_str(">\n");
        match &case.outcome {
            CaseOutcome::Passed => {}
            CaseOutcome::Failed { kind, message } => xml.push_str(&format!(
                "      <failure type=\"{}\" message=\"{}\">{}</failure>\n",
                xml_text(kind),
                xml_text(message),
                xml_text(message)
            )),
            CaseOutcome::Error { kind, message } => xml.push_str(&format!(
                "      <error type=\"{}\" message=\"{}\">{}</error>\n",
                xml_text(kind),
                xml_text(message),
                xml_text(message)
            )),
            CaseOutcome::Skipped { message } => {
                xml.push_str(&format!("      <skipped message=\"{}\"/>\n", xml_text(message)))
            }
        }
        if let Some(output) = &case.output {
            xml.push_str(&format!("      <system-out>{}</system-out>\n", xml_text(output)));
        }
        xml.push_str("    </testcase>\n");
    }
    xml.push_str("  </testsuite>\n</testsuites>\n");
    xml
}

/// The last `lines` lines of `text`.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_escapes_what_it_writes() {
        let cases = vec![
            Case {
                classname: "swe".into(),
                name: "a<1>".into(),
                time_s: 1.0,
                outcome: CaseOutcome::Passed,
                output: None,
            },
            Case {
                classname: "swe".into(),
                name: "b".into(),
                time_s: 2.0,
                outcome: CaseOutcome::Failed { kind: "unresolved".into(), message: "x & \"y\"\u{1}".into() },
                output: Some("log\u{0} <tail>".into()),
            },
            Case {
                classname: "swe".into(),
                name: "c".into(),
                time_s: 0.0,
                outcome: CaseOutcome::Error { kind: "env_error".into(), message: "no image".into() },
                output: None,
            },
        ];
        let xml = render("repairbench swe", &[("verdict", "a<b".into())], &cases);
        assert!(
            xml.contains("tests=\"3\" failures=\"1\" errors=\"1\" skipped=\"0\" time=\"3.000\""),
            "{xml}"
        );
        assert!(xml.contains("name=\"a&lt;1&gt;\""));
        assert!(xml.contains("message=\"x &amp; &quot;y&quot;\""), "control characters dropped: {xml}");
        assert!(xml.contains("<system-out>log &lt;tail&gt;</system-out>"));
        assert!(xml.contains("<property name=\"verdict\" value=\"a&lt;b\"/>"), "{xml}");
        let report = crate::grade::junit::parse(&xml, &[]).expect("our own reader reads it back");
        assert_eq!(report.tests, 3);
    }
}
