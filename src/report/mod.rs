//! Result events and the reporters that consume them (console progress, JSON/JSONL), and the
//! pieces of the report files (Markdown, JUnit XML, HTML pages with SVG charts).
//!
//! Generic over the record type `R` each finished item carries (a graded SWE instance, a suite
//! item...), so every kind of run reports the same way: a runner emits [`ResultEvent`]s and
//! hands them to [`Reporter`]s; [`JsonlAppender`] makes a run resumable, [`ConsoleProgress`]
//! shows it.

pub mod html;
pub mod index;
pub mod junit;
pub mod markdown;
pub mod svg;

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// What happened in a run, item by item.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ResultEvent<R> {
    RunStarted {
        run: String,
        /// Items this run will work on (not counting those kept from an earlier run).
        total: usize,
        /// Items kept from an earlier run with the same output folder.
        resumed: usize,
        /// Items computed again although an earlier run left a record, by reason
        /// (`model changed`, `infrastructure failure before`, `forced`...).
        #[serde(default)]
        recomputed: BTreeMap<String, usize>,
    },
    /// An item whose record an earlier run left and this run keeps (its fingerprint matched).
    ItemReused {
        id: String,
        record: R,
    },
    ItemStarted {
        id: String,
    },
    ItemFinished {
        id: String,
        /// A short label (`resolved`, `timeout`, `pass`...).
        outcome: String,
        success: bool,
        record: R,
    },
    /// An input record that could not become an item.
    ItemSkipped(Skipped),
    RunFinished {
        counts: BTreeMap<String, usize>,
        /// The same counts in words, saying what was counted (see [`Tally`]).
        #[serde(default)]
        words: String,
        elapsed_s: f64,
    },
}

/// How a run's records add up: counts by outcome for files and reporters, and one sentence
/// for people that says what was counted (`patches: 1 of 11 answers contained a diff (10 had
/// none)`, not `none 10, patch_tags 1`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    pub counts: BTreeMap<String, usize>,
    pub words: String,
}

/// `name` followed by its gloss the first time this process shows it on the console
/// (`empty_patch (the model's answer contained no diff)`), plain `name` after that: a verdict
/// keeps the name it has in the files, and a reader learns it once.
pub fn glossed(name: &str, gloss: &str) -> String {
    static SHOWN: std::sync::Mutex<std::collections::BTreeSet<String>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let first = SHOWN.lock().map(|mut shown| shown.insert(name.to_owned())).unwrap_or(false);
    match first && !gloss.is_empty() {
        true => format!("{name} ({gloss})"),
        false => name.to_owned(),
    }
}

/// An input record that was left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// `file:line`, `file[index]` or an instance id.
    pub location: String,
    pub instance_id: Option<String>,
    pub reason: String,
    /// The input itself was wrong (a record that does not parse, an id that cannot be used, a
    /// prediction for no task): the run exits non-zero for it. Not set for records left out by
    /// design (a superseded prediction, a task without a prediction).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub invalid_input: bool,
}

impl Skipped {
    /// A record left out by design, not because the input was wrong.
    pub fn new(location: String, instance_id: Option<String>, reason: String) -> Self {
        Self { location, instance_id, reason, invalid_input: false }
    }

    /// A record left out because the input was wrong.
    pub fn invalid(location: String, instance_id: Option<String>, reason: String) -> Self {
        Self { location, instance_id, reason, invalid_input: true }
    }

    /// The event reporters show for this record.
    pub fn event<R>(&self) -> ResultEvent<R> {
        ResultEvent::ItemSkipped(self.clone())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot serialize a record for {path}")]
    Serialize {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// Anything that consumes result events.
pub trait Reporter<R>: Send {
    fn report(&mut self, event: &ResultEvent<R>) -> Result<(), ReportError>;
}

/// Appends each finished item's record as one JSON line, flushed and synced before the next
/// item is reported, so a killed run loses at most the line being written.
pub struct JsonlAppender {
    path: PathBuf,
    file: File,
}

impl JsonlAppender {
    pub fn open(path: &Path) -> Result<Self, ReportError> {
        let write_err = |source| ReportError::Write { path: path.to_owned(), source };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(write_err)?;
        }
        let mut file =
            OpenOptions::new().create(true).append(true).read(true).open(path).map_err(write_err)?;
        // A run killed mid-line leaves a partial last line: cut it off, so the next record
        // starts on its own line. A complete record that only lacks its newline is kept.
        let text = std::fs::read(path).map_err(write_err)?;
        if !text.is_empty() && !text.ends_with(b"\n") {
            let start = text.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            if serde_json::from_slice::<serde_json::Value>(&text[start..]).is_ok() {
                file.write_all(b"\n").map_err(write_err)?;
            } else {
                tracing::warn!(path = %path.display(), "dropping a torn last line");
                file.set_len(start as u64).map_err(write_err)?;
            }
        }
        Ok(Self { path: path.to_owned(), file })
    }

    pub fn append<T: Serialize>(&mut self, record: &T) -> Result<(), ReportError> {
        let mut line = serde_json::to_string(record)
            .map_err(|source| ReportError::Serialize { path: self.path.clone(), source })?;
        line.push('\n');
        let write_err = |source| ReportError::Write { path: self.path.clone(), source };
        self.file.write_all(line.as_bytes()).map_err(write_err)?;
        self.file.flush().map_err(write_err)?;
        self.file.sync_data().map_err(write_err)
    }
}

impl<R: Serialize + Send> Reporter<R> for JsonlAppender {
    fn report(&mut self, event: &ResultEvent<R>) -> Result<(), ReportError> {
        if let ResultEvent::ItemFinished { record, .. } = event {
            self.append(record)?;
        }
        Ok(())
    }
}

/// Records read back from a JSONL file, and the lines that could not be read (`file:line: why`).
pub fn read_jsonl<R: DeserializeOwned>(path: &Path) -> (Vec<R>, Vec<String>) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return (Vec::new(), Vec::new());
    };
    let mut records = Vec::new();
    let mut bad = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(record) => records.push(record),
            Err(e) => bad.push(format!("{}:{}: {e}", path.display(), index + 1)),
        }
    }
    (records, bad)
}

/// Writes `value` as pretty JSON through a temporary file and a rename, so readers never see a
/// half-written file.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> Result<(), ReportError> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|source| ReportError::Serialize { path: path.to_owned(), source })?;
    text.push('\n');
    write_text_atomic(path, &text)
}

/// Writes `text` through a temporary file and a rename.
pub fn write_text_atomic(path: &Path, text: &str) -> Result<(), ReportError> {
    let write_err = |source| ReportError::Write { path: path.to_owned(), source };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(write_err)?;
    }
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    std::fs::write(&partial, text).map_err(write_err)?;
    std::fs::rename(&partial, path).map_err(write_err)
}

/// A progress bar on stderr; skipped inputs and the final counts are printed above it.
pub struct ConsoleProgress {
    bar: indicatif::ProgressBar,
    started: Instant,
    quiet: bool,
}

impl ConsoleProgress {
    pub fn new() -> Self {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {elapsed} {wide_msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        Self { bar, started: Instant::now(), quiet: false }
    }

    /// A reporter that draws nothing (for tests and `--quiet`).
    pub fn hidden() -> Self {
        Self { bar: indicatif::ProgressBar::hidden(), started: Instant::now(), quiet: true }
    }
}

impl ConsoleProgress {
    /// A line above the bar; on stderr as it is when the bar is hidden (not a terminal), where
    /// the bar would drop it.
    fn say(&self, line: String) {
        if self.bar.is_hidden() {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }
}

impl Default for ConsoleProgress {
    fn default() -> Self {
        Self::new()
    }
}

impl<R: Send> Reporter<R> for ConsoleProgress {
    fn report(&mut self, event: &ResultEvent<R>) -> Result<(), ReportError> {
        match event {
            ResultEvent::RunStarted { run, total, resumed, recomputed } => {
                self.started = Instant::now();
                self.bar.set_prefix(run.clone());
                self.bar.set_length(*total as u64);
                if *resumed > 0 {
                    self.say(format!("{resumed} finished item(s) kept from the earlier run"));
                }
                for (reason, n) in recomputed {
                    self.say(format!("{n} item(s) computed again: {reason}"));
                }
            }
            ResultEvent::ItemReused { .. } => {}
            ResultEvent::ItemStarted { id } => self.bar.set_message(id.clone()),
            ResultEvent::ItemFinished { id, outcome, .. } => {
                self.bar.inc(1);
                self.bar.set_message(format!("{id}: {outcome}"));
            }
            ResultEvent::ItemSkipped(Skipped { instance_id, location, reason, .. }) => {
                let id = instance_id.as_deref().map(|i| format!(" ({i})")).unwrap_or_default();
                self.say(format!("skipped {location}{id}: {reason}"));
            }
            ResultEvent::RunFinished { counts, words, elapsed_s } => {
                self.bar.finish_and_clear();
                if self.quiet {
                    return Ok(());
                }
                match (counts.is_empty(), words.is_empty()) {
                    (true, _) => eprintln!("done in {elapsed_s:.1}s: nothing to do"),
                    (false, false) => eprintln!("done in {elapsed_s:.1}s: {words}"),
                    (false, true) => {
                        let parts: Vec<String> = counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
                        eprintln!("done in {elapsed_s:.1}s: {}", parts.join(", "))
                    }
                }
            }
        }
        Ok(())
    }
}

/// Sends each event to several reporters, in order; the first error is returned after all have
/// seen it.
pub struct Fanout<'a, R> {
    pub reporters: Vec<&'a mut dyn Reporter<R>>,
}

impl<'a, R> Fanout<'a, R> {
    pub fn new(reporters: Vec<&'a mut dyn Reporter<R>>) -> Self {
        Self { reporters }
    }
}

impl<R: Send> Reporter<R> for Fanout<'_, R> {
    fn report(&mut self, event: &ResultEvent<R>) -> Result<(), ReportError> {
        let mut first = None;
        for reporter in &mut self.reporters {
            if let Err(e) = reporter.report(event) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

/// Everything a run ended with: every record by key (kept from an earlier run or new) and the
/// inputs that were left out.
#[derive(Debug)]
pub struct RunRecords<R> {
    pub records: BTreeMap<String, R>,
    pub skipped: Vec<Skipped>,
    pub counts: BTreeMap<String, usize>,
    pub elapsed_s: f64,
}

/// The subscriber that writes a run's final file (`report.json`, `results.json`): it gathers
/// records from the event stream and, when the run finishes, hands them all to `write`.
pub struct FinalWriter<R, F> {
    records: BTreeMap<String, R>,
    skipped: Vec<Skipped>,
    write: F,
}

impl<R, F> FinalWriter<R, F>
where
    F: FnMut(&RunRecords<R>) -> Result<(), ReportError>,
{
    pub fn new(write: F) -> Self {
        Self { records: BTreeMap::new(), skipped: Vec::new(), write }
    }
}

impl<R: Clone + Send, F> Reporter<R> for FinalWriter<R, F>
where
    F: FnMut(&RunRecords<R>) -> Result<(), ReportError> + Send,
{
    fn report(&mut self, event: &ResultEvent<R>) -> Result<(), ReportError> {
        match event {
            ResultEvent::RunStarted { .. } => {
                self.records.clear();
                self.skipped.clear();
            }
            ResultEvent::ItemReused { id, record } | ResultEvent::ItemFinished { id, record, .. } => {
                self.records.insert(id.clone(), record.clone());
            }
            ResultEvent::ItemSkipped(skipped) => self.skipped.push(skipped.clone()),
            ResultEvent::ItemStarted { .. } => {}
            ResultEvent::RunFinished { counts, elapsed_s, .. } => {
                let done = RunRecords {
                    records: std::mem::take(&mut self.records),
                    skipped: std::mem::take(&mut self.skipped),
                    counts: counts.clone(),
                    elapsed_s: *elapsed_s,
                };
                (self.write)(&done)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appended_records_survive_a_torn_last_line() {
        let dir = std::env::temp_dir().join(format!("rb-report-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("results.jsonl");
        let mut out = JsonlAppender::open(&path).unwrap();
        out.append(&serde_json::json!({"id": "a"})).unwrap();
        drop(out);
        // A run killed while writing its second line.
        std::fs::write(&path, format!("{}{}", std::fs::read_to_string(&path).unwrap(), "{\"id\": \"b"))
            .unwrap();
        let mut out = JsonlAppender::open(&path).unwrap();
        out.append(&serde_json::json!({"id": "c"})).unwrap();
        let (records, bad): (Vec<serde_json::Value>, _) = read_jsonl(&path);
        assert_eq!(records.iter().map(|r| r["id"].as_str().unwrap()).collect::<Vec<_>>(), ["a", "c"]);
        assert!(bad.is_empty(), "the torn line was cut off: {bad:?}");
        // A complete last record without its newline is kept.
        std::fs::write(&path, format!("{}{}", std::fs::read_to_string(&path).unwrap(), "{\"id\": \"d\"}"))
            .unwrap();
        let mut out = JsonlAppender::open(&path).unwrap();
        out.append(&serde_json::json!({"id": "e"})).unwrap();
        let (records, _): (Vec<serde_json::Value>, _) = read_jsonl(&path);
        assert_eq!(records.len(), 4);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
