//! The channel test results come through: a harness-owned pytest plugin signs pytest's JUnit
//! report with a key only it and repairbench know, and repairbench accepts a report only with
//! a valid signature that also agrees with pytest's own `-rA` summary.
//!
//! The key and the results path reach the plugin through a hand-off file that the plugin
//! deletes when pytest imports it, before any conftest or test module is loaded: nothing is
//! exported to the tests, nothing is in argv, and the names are random. An `atexit` hook that
//! rewrites or deletes the results, a deleted report with a printed summary, or a summary that
//! disagrees with the report all end as [`Tampered`].

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{StatusMap, TestStatus};

/// The plugin, shipped inside the binary.
pub const PLUGIN_SOURCE: &str = include_str!("../../harness/pytest_results.py");

/// Why a run's results cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Tampered {
    #[error("the run left no signed results")]
    Missing,
    #[error("the results are not what the harness signed: {0}")]
    BadSignature(String),
    #[error("the JUnit report and pytest's summary disagree: {0}")]
    Disagree(String),
    /// Another runner's output does not hold together (see `repair::runners`).
    #[error("the test runner's output is inconsistent: {0}")]
    Inconsistent(String),
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    // The operating system's generator; without one no secret can be made, and no grading is
    // possible at all.
    getrandom::fill(&mut bytes).expect("the operating system's random number generator");
    bytes
}

/// A random name part (24 hex digits) no tested code can guess.
pub fn random_token() -> String {
    hex::encode(random_bytes::<12>())
}

/// One test run's secret: where the plugin goes, and the key its results are signed with.
pub struct ResultsChannel {
    key: [u8; 32],
    token: String,
    workspace: String,
}

impl ResultsChannel {
    pub fn new(workspace: &str) -> Self {
        Self {
            key: random_bytes::<32>(),
            token: random_token(),
            workspace: workspace.trim_end_matches('/').to_owned(),
        }
    }

    fn plugin_dir(&self) -> String {
        format!(".rb-{}", self.token)
    }

    /// The plugin's module name (`-p NAME`).
    pub fn module(&self) -> String {
        format!("rb_results_{}", self.token)
    }

    /// Where the signed results are written, inside the environment.
    pub fn results_path(&self) -> String {
        format!("{}/.rb-results-{}.json", self.workspace, self.token)
    }

    /// Files to put into the workspace (relative path, content): the plugin and its hand-off.
    pub fn files(&self) -> Vec<(String, Vec<u8>)> {
        let handoff = serde_json::json!({"key": hex::encode(self.key), "results": self.results_path()});
        vec![
            (format!("{}/{}.py", self.plugin_dir(), self.module()), PLUGIN_SOURCE.as_bytes().to_vec()),
            (format!("{}/handoff.json", self.plugin_dir()), handoff.to_string().into_bytes()),
        ]
    }

    /// pytest arguments that load the plugin and print the summary it is checked against.
    pub fn pytest_args(&self) -> Vec<String> {
        // `--color=no` after the project's own addopts wins over a `--color=yes` there.
        ["-p", &self.module(), "-rA", "--color=no", "-p", "no:cacheprovider", "-o", "junit_family=xunit1"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    /// The folder the plugin is imported from (it must be on `PYTHONPATH`).
    pub fn plugin_path(&self) -> String {
        format!("{}/{}", self.workspace, self.plugin_dir())
    }

    /// For a task's own test command: the plugin and the summary through `PYTEST_ADDOPTS`.
    pub fn addopts(&self) -> (String, String) {
        ("PYTEST_ADDOPTS".into(), self.pytest_args().join(" "))
    }

    /// The JUnit XML inside the results file, if its signature is valid.
    pub fn open(&self, results_file: Option<&[u8]>) -> Result<String, Tampered> {
        let bytes = results_file.ok_or(Tampered::Missing)?;
        let bad = |why: &str| Tampered::BadSignature(why.to_owned());
        let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|_| bad("not JSON"))?;
        let xml =
            value["junit_hex"].as_str().and_then(|h| hex::decode(h).ok()).ok_or_else(|| bad("no report"))?;
        let mac = value["hmac_sha256"]
            .as_str()
            .and_then(|h| hex::decode(h).ok())
            .ok_or_else(|| bad("no signature"))?;
        let mut check = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key length");
        check.update(&xml);
        check.verify_slice(&mac).map_err(|_| bad("signature does not match"))?;
        String::from_utf8(xml).map_err(|_| bad("report is not UTF-8"))
    }
}

/// Pass, fail, skip or xfail: the distinctions both reports make the same way (a test that
/// fails in its call and errors in teardown is FAILED in one and ERROR in the other).
fn class(status: TestStatus) -> &'static str {
    match status {
        TestStatus::Passed => "passed",
        TestStatus::Failed | TestStatus::Error => "failed",
        TestStatus::Skipped => "skipped",
        TestStatus::Xfail => "xfailed",
    }
}

/// The entry of `map` for `id`, or for the id `id` is the start of (the summary cuts a test
/// id at its first space).
fn lookup<'a>(map: &'a StatusMap, id: &str) -> Option<&'a TestStatus> {
    map.get(id).or_else(|| {
        map.iter()
            .find(|(k, _)| k.starts_with(id) && k[id.len()..].starts_with(|c: char| c != ':'))
            .map(|(_, v)| v)
    })
}

/// Checks the signed JUnit statuses against the `-rA` summary: every test the summary names
/// has the same outcome in the report (collection errors aside), and every graded test the
/// report says passed is named as passed by the summary. SKIPPED lines carry no test id, so
/// skips are compared through the report only.
pub fn cross_check(
    junit: &StatusMap,
    collection_errors: usize,
    summary: Option<&StatusMap>,
    graded: &[String],
) -> Result<(), Tampered> {
    let summary = summary.ok_or_else(|| Tampered::Disagree("the output has no -rA summary".into()))?;
    let mut unmatched_errors = 0;
    for (id, status) in summary {
        if *status == TestStatus::Skipped {
            continue;
        }
        match lookup(junit, id) {
            Some(reported) if class(*reported) == class(*status) => {}
            Some(reported) => {
                return Err(Tampered::Disagree(format!(
                    "{id} is {} in the summary, {} in the report",
                    class(*status),
                    class(*reported)
                )))
            }
            None if *status == TestStatus::Error => unmatched_errors += 1,
            None => return Err(Tampered::Disagree(format!("{id} is in the summary only"))),
        }
    }
    if unmatched_errors > collection_errors {
        return Err(Tampered::Disagree("the summary lists errors the report does not have".into()));
    }
    for id in graded {
        if let Some(reported) = junit.get(id).filter(|s| matches!(s, TestStatus::Passed | TestStatus::Xfail))
        {
            let named = summary.get(id).or_else(|| {
                summary.iter().find(|(k, _)| id.starts_with(k.as_str()) && id.len() > k.len()).map(|(_, v)| v)
            });
            if named.map(|s| class(*s)) != Some(class(*reported)) {
                return Err(Tampered::Disagree(format!("{id} {} in the report only", class(*reported))));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, TestStatus)]) -> StatusMap {
        entries.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn signed(channel: &ResultsChannel, xml: &[u8]) -> Vec<u8> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&channel.key).unwrap();
        mac.update(xml);
        serde_json::json!({"junit_hex": hex::encode(xml), "hmac_sha256": hex::encode(mac.finalize().into_bytes())})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn only_what_the_key_signed_opens() {
        let channel = ResultsChannel::new("/workspace");
        let good = signed(&channel, b"<testsuite/>");
        assert_eq!(channel.open(Some(&good)).unwrap(), "<testsuite/>");
        let other = signed(&ResultsChannel::new("/workspace"), b"<testsuite/>");
        assert!(matches!(channel.open(Some(&other)), Err(Tampered::BadSignature(_))));
        let text = String::from_utf8(good).unwrap();
        let forged =
            text.replacen(&hex::encode(b"<testsuite/>"), &hex::encode(b"<testsuite></testsuite>"), 1);
        assert!(matches!(channel.open(Some(forged.as_bytes())), Err(Tampered::BadSignature(_))));
        assert_eq!(channel.open(None), Err(Tampered::Missing));
        assert_ne!(channel.results_path(), ResultsChannel::new("/workspace").results_path());
    }

    #[test]
    fn summary_and_report_must_agree() {
        use TestStatus::*;
        let graded = vec!["t.py::a".to_string(), "t.py::b".to_string()];
        let junit = map(&[("t.py::a", Passed), ("t.py::b", Failed), ("t.py::c[x y]", Passed)]);
        let summary = map(&[("t.py::a", Passed), ("t.py::b", Error), ("t.py::c[x", Passed)]);
        assert_eq!(cross_check(&junit, 0, Some(&summary), &graded), Ok(()));
        let forged = map(&[("t.py::a", Passed), ("t.py::b", Passed)]);
        assert!(cross_check(&junit, 0, Some(&forged), &graded).is_err());
        let rewritten = map(&[("t.py::a", Passed), ("t.py::b", Passed), ("t.py::c[x y]", Passed)]);
        assert!(cross_check(&rewritten, 0, Some(&summary), &graded).is_err());
        assert!(cross_check(&junit, 0, None, &graded).is_err());
        let silent = map(&[("t.py::b", Failed)]);
        assert!(cross_check(&junit, 0, Some(&silent), &graded).is_err(), "a pass only the report knows");
        let collection = map(&[("t.py", Error)]);
        assert_eq!(cross_check(&StatusMap::new(), 1, Some(&collection), &graded), Ok(()));
        assert!(cross_check(&StatusMap::new(), 0, Some(&collection), &graded).is_err());
    }
}
