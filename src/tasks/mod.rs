//! Code-repair tasks: SWE-bench instances and predictions, task folders under `issues/`.
//!
//! Loading never stops at the first bad record: every record that cannot be used becomes a
//! [`Skipped`] entry naming the file, line and what was expected, and the rest goes on.

pub mod build_inputs;
pub mod ci;
pub mod gitlab;
pub mod prompt;
pub mod repos;
pub mod services;
pub mod specs;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};

pub use repos::{RepoError, RepoLocator};

/// File name of a task folder's instance (see [`load_tasks`]).
pub const TASK_FILE: &str = "task.json";
/// File name of a task folder's repository bundle.
pub const BUNDLE_FILE: &str = "repo.bundle";

/// What a task's tests need beyond the default image (field `environment`, ours). Without
/// `image`, an environment image is built from the repository itself (see
/// `repair::environment`): the runner's toolchain, the project installed with its test
/// dependencies, then these extras.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskEnvironment {
    /// A prebuilt image to run the tests in; nothing is built.
    #[serde(default)]
    pub image: Option<String>,
    /// The Python the project wants (`3`, `3.8`): the nearest the images offer inside the
    /// project's declared range is used, and the choice recorded with its reason.
    #[serde(default)]
    pub python: Option<String>,
    /// Python packages installed into the environment's venv.
    #[serde(default)]
    pub pip: Vec<String>,
    /// Debian packages installed into the image.
    #[serde(default)]
    pub apt: Vec<String>,
    /// Shell commands run from the repository root while the image is built (network on).
    #[serde(default)]
    pub install: Vec<String>,
    /// Shell commands run the same way, before the project and its requirements are installed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_install: Vec<String>,
    /// The requirement files of the repository (`tests/requirements/py3.txt`) installed into
    /// the venv before the project; when absent, those found at the repository's root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirements: Option<Vec<String>>,
    /// The time (RFC 3339) Python packages are resolved as of, or `latest` for no cutoff; the
    /// environment commit's time when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packages_as_of: Option<String>,
    /// Extra environment variables for the tests.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The test runner (`pytest`, `cargo`, `go`, `node`, `junit`); detected when absent.
    #[serde(default)]
    pub runner: Option<crate::grade::runners::RunnerKind>,
    /// For the `junit` runner: globs (from the repository root) of the XML reports.
    #[serde(default)]
    pub junit: Vec<String>,
    /// Same as the task's top-level `test_cmd`.
    #[serde(default)]
    pub test_cmd: Option<String>,
}

/// One SWE-bench instance, plus our optional `test_cmd` and `environment`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweTask {
    pub repo: String,
    pub instance_id: String,
    pub base_commit: String,
    /// The gold patch (source changes only).
    #[serde(default)]
    pub patch: String,
    /// Changes to the tests that check the fix; applied after any prediction.
    pub test_patch: String,
    #[serde(default)]
    pub problem_statement: String,
    #[serde(default)]
    pub hints_text: String,
    #[serde(default, deserialize_with = "string_or_number")]
    pub version: Option<String>,
    #[serde(default)]
    pub environment_setup_commit: Option<String>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(rename = "FAIL_TO_PASS", deserialize_with = "test_list")]
    pub fail_to_pass: Vec<String>,
    #[serde(rename = "PASS_TO_PASS", default, deserialize_with = "test_list")]
    pub pass_to_pass: Vec<String>,
    /// Shell command run from the repository root; default: pytest over the test_patch files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_cmd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<TaskEnvironment>,
    /// The spec `environment` came from (`--specs`), as `REPO VERSION (SOURCE)`.
    #[serde(skip)]
    pub environment_spec: Option<String>,
    /// The repository's own CI jobs to run as grading steps (names, or `all`); each is one
    /// outcome `ci:JOB` in FAIL_TO_PASS/PASS_TO_PASS.
    #[serde(default, skip_serializing_if = "Vec::is_empty", deserialize_with = "one_or_many")]
    pub ci_jobs: Vec<String>,
    /// Services the tests talk to, started for every test run (see [`services`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<services::TaskService>,
    /// Commands run inside services after the tests, each graded as `service:NAME::CHECK`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_checks: Vec<services::ServiceCheck>,
    /// Where the instance was read from (`file:line`), for messages.
    #[serde(skip)]
    pub origin: String,
    /// A task folder's own repository bundle, used before `--repos` and the URL template.
    #[serde(skip)]
    pub bundle: Option<PathBuf>,
    /// What this task is a perturbed variant of (`--perturb`); `None` for a dataset's own.
    #[serde(skip)]
    pub variant: Option<TaskVariant>,
}

/// A task made from another by a perturbation that must not change its answer: the statement
/// edited, or the retrieved files shown in another order. Grading reads nothing it changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskVariant {
    /// The original's instance id.
    pub original: String,
    pub family: String,
    /// From 1; the original is 0.
    pub index: usize,
    /// Whether the statement differs from the original's.
    pub statement_edited: bool,
    /// The key of the order the retrieved files are shown in (`context.order`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_order: Option<u64>,
}

impl SweTask {
    /// The test command the task gives (top level, or in `environment`).
    pub fn test_command(&self) -> Option<&str> {
        self.test_cmd.as_deref().or_else(|| self.environment.as_ref().and_then(|e| e.test_cmd.as_deref()))
    }

    /// The commit whose tree the environment is built from.
    pub fn environment_commit(&self) -> &str {
        self.environment_setup_commit.as_deref().filter(|c| !c.is_empty()).unwrap_or(&self.base_commit)
    }

    /// `OWNER/NAME` split in two; `None` when `repo` is not of that shape.
    pub fn owner_name(&self) -> Option<(&str, &str)> {
        let (owner, name) = self.repo.split_once('/')?;
        (!owner.is_empty() && !name.is_empty() && !name.contains('/')).then_some((owner, name))
    }
}

/// FAIL_TO_PASS / PASS_TO_PASS: a JSON list, or (as the published datasets store them) a
/// string holding a JSON list.
fn test_list<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ListOrString {
        List(Vec<String>),
        Encoded(String),
    }
    match ListOrString::deserialize(deserializer)
        .map_err(|_| de::Error::custom("expected a list of test ids or a string holding a JSON list"))?
    {
        ListOrString::List(list) => Ok(list),
        ListOrString::Encoded(text) if text.trim().is_empty() => Ok(Vec::new()),
        ListOrString::Encoded(text) => serde_json::from_str(&text)
            .map_err(|e| de::Error::custom(format!("string is not a JSON list of test ids: {e}"))),
    }
}

fn one_or_many<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    match OneOrMany::deserialize(deserializer)
        .map_err(|_| de::Error::custom("expected a job name, `all`, or a list of job names"))?
    {
        OneOrMany::One(name) => Ok(vec![name]),
        OneOrMany::Many(names) => Ok(names),
    }
}

fn string_or_number<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    match Option::<serde_json::Value>::deserialize(deserializer)? {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s)),
        Some(serde_json::Value::Number(n)) => Ok(Some(n.to_string())),
        Some(other) => Err(de::Error::custom(format!("expected a string or number, found {other}"))),
    }
}

pub use crate::report::Skipped;

/// Errors that stop loading a whole file (a bad record only skips that record).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: expected a JSON array or JSON lines of {what}")]
    NotJson {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: no {what} found (expected {TASK_FILE} in it or in its subfolders)")]
    EmptyFolder { path: PathBuf, what: &'static str },
}

/// Tasks read from a dataset, with what was skipped.
#[derive(Debug, Default)]
pub struct TaskSet {
    pub tasks: Vec<SweTask>,
    pub skipped: Vec<Skipped>,
}

/// Records with their locations (`file:line` or `file[index]`), and what was skipped.
type Records<T> = (Vec<(String, T)>, Vec<Skipped>);

/// Reads records of type `T` from a JSON array, a single JSON object or JSON lines. Each
/// record that does not parse is reported with its location and serde's reason.
fn read_records<T: serde::de::DeserializeOwned>(
    path: &Path,
    what: &'static str,
) -> Result<Records<T>, LoadError> {
    let bytes = std::fs::read(path).map_err(|source| LoadError::Read { path: path.to_owned(), source })?;
    let shown = path.display();
    let mut records = Vec::new();
    let mut skipped = Vec::new();
    let is_jsonl = path.extension().is_some_and(|e| e == "jsonl");
    // A whole document must be UTF-8; JSON lines are read line by line, so one bad line is
    // skipped and named while the others are read.
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            let bytes = e.into_bytes();
            if !is_jsonl {
                skipped.push(Skipped::invalid(format!("{shown}"), None, format!("not UTF-8 (at byte {at})")));
                return Ok((records, skipped));
            }
            for (index, line) in bytes.split(|b| *b == b'\n').enumerate() {
                let location = format!("{shown}:{}", index + 1);
                match std::str::from_utf8(line) {
                    Ok(line) => read_line(line, location, what, &mut records, &mut skipped),
                    Err(e) => skipped.push(Skipped::invalid(
                        location,
                        None,
                        format!("not UTF-8 (byte {} of the line)", e.valid_up_to()),
                    )),
                }
            }
            return Ok((records, skipped));
        }
    };
    let trimmed = text.trim_start();
    if trimmed.is_empty() {
        skipped.push(Skipped::invalid(format!("{shown}"), None, format!("empty file (expected {what})")));
        return Ok((records, skipped));
    }
    if !is_jsonl && trimmed.starts_with('[') {
        let values: Vec<serde_json::Value> = serde_json::from_str(&text)
            .map_err(|source| LoadError::NotJson { path: path.to_owned(), what, source })?;
        for (index, value) in values.into_iter().enumerate() {
            take_record(value, format!("{shown}[{index}]"), what, &mut records, &mut skipped);
        }
        return Ok((records, skipped));
    }
    if !is_jsonl && trimmed.starts_with('{') {
        // A single pretty-printed object (a task folder's task.json) is one record.
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) {
            take_record(value, format!("{shown}:1"), what, &mut records, &mut skipped);
            return Ok((records, skipped));
        }
    }
    for (index, line) in text.lines().enumerate() {
        read_line(line, format!("{shown}:{}", index + 1), what, &mut records, &mut skipped);
    }
    Ok((records, skipped))
}

/// One line of JSON lines: a record, nothing (blank), or a [`Skipped`] entry.
fn read_line<T: serde::de::DeserializeOwned>(
    line: &str,
    location: String,
    what: &'static str,
    records: &mut Vec<(String, T)>,
    skipped: &mut Vec<Skipped>,
) {
    if line.trim().is_empty() {
        return;
    }
    match serde_json::from_str(line) {
        Ok(value) => take_record(value, location, what, records, skipped),
        Err(e) => skipped.push(Skipped::invalid(
            location,
            None,
            format!("expected one JSON object per line ({what}): {e}"),
        )),
    }
}

/// Turns one JSON value into a record, or into a [`Skipped`] entry saying what was expected.
fn take_record<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
    location: String,
    what: &'static str,
    records: &mut Vec<(String, T)>,
    skipped: &mut Vec<Skipped>,
) {
    let id = value.get("instance_id").and_then(|v| v.as_str()).map(str::to_owned);
    match serde_json::from_value::<T>(value) {
        Ok(record) => records.push((location, record)),
        Err(e) => skipped.push(Skipped::invalid(location, id, format!("expected {what}: {e}"))),
    }
}

/// Loads tasks from a JSON/JSONL dataset file, a task folder (`task.json` + `repo.bundle`)
/// or a folder of task folders (such as `issues/`). Duplicate instance ids keep the first.
pub fn load_tasks(path: &Path) -> Result<TaskSet, LoadError> {
    let mut set = TaskSet::default();
    if path.is_dir() {
        let mut folders = Vec::new();
        if path.join(TASK_FILE).is_file() {
            folders.push(path.to_owned());
        } else {
            let entries = std::fs::read_dir(path)
                .map_err(|source| LoadError::Read { path: path.to_owned(), source })?;
            for entry in entries.flatten() {
                if entry.path().join(TASK_FILE).is_file() {
                    folders.push(entry.path());
                }
            }
            folders.sort();
        }
        if folders.is_empty() {
            return Err(LoadError::EmptyFolder { path: path.to_owned(), what: "task folders" });
        }
        for folder in folders {
            // One unreadable task.json is that task's problem, not the whole dataset's.
            let (records, skipped) =
                match read_records::<SweTask>(&folder.join(TASK_FILE), "a SWE-bench instance") {
                    Ok(read) => read,
                    Err(e) => (
                        Vec::new(),
                        vec![Skipped::invalid(
                            folder.join(TASK_FILE).display().to_string(),
                            None,
                            crate::error_chain(&e),
                        )],
                    ),
                };
            set.skipped.extend(skipped);
            let bundle = folder.join(BUNDLE_FILE);
            for (origin, mut task) in records {
                task.origin = origin;
                task.bundle = bundle.is_file().then(|| bundle.clone());
                set.tasks.push(task);
            }
        }
    } else {
        let (records, skipped) = read_records::<SweTask>(path, "a SWE-bench instance")?;
        set.skipped.extend(skipped);
        for (origin, mut task) in records {
            task.origin = origin;
            set.tasks.push(task);
        }
    }
    let mut seen = HashSet::new();
    // Log folder name to the instance that has it: two ids must not share one folder.
    let mut folders: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut kept = Vec::with_capacity(set.tasks.len());
    for task in set.tasks.drain(..) {
        let skip =
            |reason: String| Skipped::invalid(task.origin.clone(), Some(task.instance_id.clone()), reason);
        if let Some(reason) = validate_task(&task) {
            set.skipped.push(skip(reason));
        } else if !seen.insert(task.instance_id.clone()) {
            set.skipped.push(skip("duplicate instance_id (the first one is kept)".into()));
        } else if let Some((other, at)) = folders.get(&safe_name(&task.instance_id)) {
            set.skipped.push(skip(format!(
                "field `instance_id`: {:?} and {other:?} ({at}) would share the log folder `{}`",
                task.instance_id,
                safe_name(&task.instance_id)
            )));
        } else {
            folders.insert(safe_name(&task.instance_id), (task.instance_id.clone(), task.origin.clone()));
            kept.push(task);
        }
    }
    set.tasks = kept;
    Ok(set)
}

/// The folder name an instance's logs get: its id with every character but letters, digits,
/// `-`, `_` and `.` replaced by `_` (loading refuses ids that would share one).
pub fn safe_name(id: &str) -> String {
    id.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect()
}

/// A part of `OWNER/NAME` that stays one folder under `--repos`: letters, digits, `-`, `_`,
/// `.`, not `.` or `..`, not starting with `-` (it also goes into a clone URL).
fn valid_repo_part(part: &str) -> bool {
    !part.is_empty()
        && part != "."
        && part != ".."
        && !part.starts_with('-')
        && part.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

fn validate_task(task: &SweTask) -> Option<String> {
    if task.instance_id.trim().is_empty() {
        return Some("field `instance_id`: expected a non-empty string".into());
    }
    if task.instance_id.contains('@') {
        return Some(format!(
            "field `instance_id`: {:?} holds `@`, which marks a perturbed variant's id (ID@FAMILY#N)",
            task.instance_id
        ));
    }
    if matches!(safe_name(&task.instance_id).as_str(), "." | "..") {
        return Some(format!("field `instance_id`: {:?} cannot name a log folder", task.instance_id));
    }
    if let Err(e) = build_inputs::plain_text("instance_id", &task.instance_id) {
        return Some(e.to_string());
    }
    let repo_ok =
        task.owner_name().is_some_and(|(owner, name)| valid_repo_part(owner) && valid_repo_part(name));
    if !repo_ok {
        return Some(format!(
            "field `repo`: expected OWNER/NAME (letters, digits, `-`, `_`, `.`; not `..`), found {:?}",
            task.repo
        ));
    }
    if let Some(Err(e)) = task.environment.as_ref().map(build_inputs::environment) {
        return Some(e.to_string());
    }
    if task.base_commit.len() < 4 || !task.base_commit.chars().all(|c| c.is_ascii_hexdigit()) {
        return Some(format!(
            "field `base_commit`: expected a commit id in hex, found {:?}",
            task.base_commit
        ));
    }
    if task.fail_to_pass.is_empty() {
        return Some("field `FAIL_TO_PASS`: expected at least one test id".into());
    }
    services::validate(&task.services, &task.service_checks).err().map(|e| e.to_string())
}

/// One prediction, as SWE-bench writes them; extra fields (the full model output, ...) are kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    pub instance_id: String,
    #[serde(default)]
    pub model_name_or_path: Option<String>,
    /// `null` counts as an empty patch.
    #[serde(default)]
    pub model_patch: Option<String>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

impl Prediction {
    pub fn patch(&self) -> &str {
        self.model_patch.as_deref().unwrap_or("")
    }
}

/// Where predictions come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PredictionSource {
    /// The dataset's own patches: a dataset whose gold does not resolve is broken.
    Gold,
    /// No change at all: nothing should resolve.
    Empty,
    File(PathBuf),
}

impl PredictionSource {
    /// `gold`, `empty` or a path.
    pub fn parse(text: &str) -> Self {
        match text {
            "gold" => Self::Gold,
            "empty" => Self::Empty,
            path => Self::File(PathBuf::from(path)),
        }
    }
}

/// Predictions matched to tasks, with what was skipped.
#[derive(Debug, Default)]
pub struct PredictionSet {
    pub by_instance: BTreeMap<String, Prediction>,
    pub skipped: Vec<Skipped>,
}

/// Loads predictions for `tasks`. Predictions for unknown instances, and all but the last
/// line of an instance, are skipped with a reason; tasks without a prediction are reported by the caller.
pub fn load_predictions(source: &PredictionSource, tasks: &[SweTask]) -> Result<PredictionSet, LoadError> {
    let mut set = PredictionSet::default();
    match source {
        PredictionSource::Gold | PredictionSource::Empty => {
            let gold = matches!(source, PredictionSource::Gold);
            for task in tasks {
                set.by_instance.insert(
                    task.instance_id.clone(),
                    Prediction {
                        instance_id: task.instance_id.clone(),
                        model_name_or_path: Some(if gold { "gold" } else { "empty" }.into()),
                        model_patch: Some(if gold { task.patch.clone() } else { String::new() }),
                        extra: BTreeMap::new(),
                    },
                );
            }
        }
        PredictionSource::File(path) => {
            let known: HashSet<&str> = tasks.iter().map(|t| t.instance_id.as_str()).collect();
            let (records, skipped) = read_records::<Prediction>(path, "a prediction")?;
            set.skipped.extend(skipped);
            let mut latest: BTreeMap<String, String> = BTreeMap::new();
            for (location, prediction) in records {
                if !known.contains(prediction.instance_id.as_str()) {
                    set.skipped.push(Skipped::invalid(
                        location,
                        Some(prediction.instance_id.clone()),
                        "prediction for an instance that is not in the dataset".into(),
                    ));
                } else {
                    // A file that was appended to (a resumed `swe infer`) ends with the newest.
                    if let Some(earlier_location) =
                        latest.insert(prediction.instance_id.clone(), location.clone())
                    {
                        set.skipped.push(Skipped::new(
                            earlier_location,
                            Some(prediction.instance_id.clone()),
                            format!("superseded by the later prediction at {location}"),
                        ));
                    }
                    set.by_instance.insert(prediction.instance_id.clone(), prediction);
                }
            }
        }
    }
    Ok(set)
}
