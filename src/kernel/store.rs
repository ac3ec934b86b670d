//! The one result store every run writes: an append-only JSONL file, one record per finished
//! item, synced before the next item is reported. Reading it back, a torn last line (a run
//! killed mid-write) is skipped and the last record per key wins. Resume reuses a record only
//! when its fingerprint matches and its outcome was not an infrastructure failure; every other
//! item is recomputed, and [`ResumeSummary`] says why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::fingerprint::Fingerprint;
use crate::report::{self, JsonlAppender, ReportError};

/// A record the store can key, fingerprint and judge.
pub trait StoredRecord: Serialize + DeserializeOwned {
    /// The item this record is for (instance id; seed and document id).
    fn key(&self) -> String;
    /// What the record was made from; `None` for records of older versions.
    fn fingerprint(&self) -> Option<Fingerprint>;
    /// Whether the outcome says more about the infrastructure than the item (an environment
    /// error, a harness failure): such records are recomputed on resume.
    fn is_infrastructure_failure(&self) -> bool;
}

/// Why an item is computed (again).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Recompute {
    /// No earlier record.
    New,
    /// `--force`.
    Forced,
    /// The earlier record's inputs differ in these parts (`code`, `model`, `prompt`...).
    Changed(Vec<String>),
    /// The earlier record was an infrastructure failure.
    InfrastructureFailure,
}

impl std::fmt::Display for Recompute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Recompute::New => f.write_str("new"),
            Recompute::Forced => f.write_str("forced"),
            Recompute::Changed(parts) if parts.is_empty() => f.write_str("recorded without a fingerprint"),
            Recompute::Changed(parts) => write!(f, "{} changed", parts.join(", ")),
            Recompute::InfrastructureFailure => f.write_str("infrastructure failure before"),
        }
    }
}

/// How many records were reused, and how many items are recomputed for which reason.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeSummary {
    pub reused: usize,
    /// Reason (as text) to count; new items count under `new`.
    pub recomputed: BTreeMap<String, usize>,
    /// Lines of the store that could not be read (`file:line: why`).
    pub unreadable: Vec<String>,
}

impl ResumeSummary {
    /// Items computed again although an earlier record existed, by reason (new items left out).
    pub fn recomputed_again(&self) -> BTreeMap<String, usize> {
        self.recomputed
            .iter()
            .filter(|(reason, _)| reason.as_str() != "new")
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }
}

/// What to do with one item.
pub enum Resume<R> {
    Reuse(R),
    Recompute(Recompute),
}

/// The store of one run's output folder.
pub struct ResultStore<R> {
    path: PathBuf,
    appender: JsonlAppender,
    earlier: BTreeMap<String, R>,
    force: bool,
    summary: ResumeSummary,
}

impl<R: StoredRecord> ResultStore<R> {
    /// Opens (creating) `path`, reading what an earlier run left. With `force`, nothing is reused.
    pub fn open(path: &Path, force: bool) -> Result<Self, ReportError> {
        let (records, unreadable): (Vec<R>, Vec<String>) = report::read_jsonl(path);
        for line in &unreadable {
            tracing::warn!("ignoring unreadable earlier record {line}");
        }
        let mut earlier = BTreeMap::new();
        for record in records {
            earlier.insert(record.key(), record);
        }
        let appender = JsonlAppender::open(path)?;
        let summary = ResumeSummary { unreadable, ..ResumeSummary::default() };
        Ok(Self { path: path.to_owned(), appender, earlier, force, summary })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Decides whether the item `key`, whose inputs now hash to `fingerprint`, can take its
    /// earlier record, and counts the decision.
    pub fn resume(&mut self, key: &str, fingerprint: &Fingerprint) -> Resume<R> {
        let decision = match self.earlier.remove(key) {
            None => Resume::Recompute(Recompute::New),
            Some(_) if self.force => Resume::Recompute(Recompute::Forced),
            Some(old) => match old.fingerprint() {
                None => Resume::Recompute(Recompute::Changed(Vec::new())),
                Some(f) if f.hash != fingerprint.hash => {
                    Resume::Recompute(Recompute::Changed(fingerprint.changed_parts(&f)))
                }
                Some(_) if old.is_infrastructure_failure() => {
                    Resume::Recompute(Recompute::InfrastructureFailure)
                }
                Some(_) => Resume::Reuse(old),
            },
        };
        match &decision {
            Resume::Reuse(_) => self.summary.reused += 1,
            Resume::Recompute(why) => *self.summary.recomputed.entry(why.to_string()).or_default() += 1,
        }
        decision
    }

    /// Appends a finished record (synced before returning).
    pub fn append(&mut self, record: &R) -> Result<(), ReportError> {
        self.appender.append(record)
    }

    pub fn summary(&self) -> &ResumeSummary {
        &self.summary
    }
}

/// The store is the first subscriber of every run: it keeps each finished record.
impl<R: StoredRecord + Send> report::Reporter<R> for ResultStore<R> {
    fn report(&mut self, event: &report::ResultEvent<R>) -> Result<(), ReportError> {
        if let report::ResultEvent::ItemFinished { record, .. } = event {
            self.append(record)?;
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::kernel::fingerprint::FingerprintBuilder;

    /// A record for kernel and store tests.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub(crate) struct Item {
        pub(crate) id: String,
        pub(crate) value: u32,
        pub(crate) failed_infra: bool,
        pub(crate) fingerprint: Option<Fingerprint>,
    }

    impl StoredRecord for Item {
        fn key(&self) -> String {
            self.id.clone()
        }
        fn fingerprint(&self) -> Option<Fingerprint> {
            self.fingerprint.clone()
        }
        fn is_infrastructure_failure(&self) -> bool {
            self.failed_infra
        }
    }

    #[test]
    fn last_record_wins_and_changes_are_recomputed_with_their_reason() {
        let dir = tempfile_dir();
        let path = dir.join("results.jsonl");
        let model_a = FingerprintBuilder::new().id("model", "a").finish();
        let model_b = FingerprintBuilder::new().id("model", "b").finish();
        let item = |id: &str, value, failed_infra, f: &Fingerprint| Item {
            id: id.into(),
            value,
            failed_infra,
            fingerprint: Some(f.clone()),
        };
        {
            let mut store: ResultStore<Item> = ResultStore::open(&path, false).unwrap();
            store.append(&item("x", 1, false, &model_a)).unwrap();
            store.append(&item("x", 2, false, &model_a)).unwrap();
            store.append(&item("y", 1, true, &model_a)).unwrap();
            store.append(&item("z", 1, false, &model_a)).unwrap();
        }
        // A torn last line from a killed run.
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("{text}{{\"id\": \"w\", \"val")).unwrap();

        let mut store: ResultStore<Item> = ResultStore::open(&path, false).unwrap();
        match store.resume("x", &model_a) {
            Resume::Reuse(record) => assert_eq!(record.value, 2, "the last record per key wins"),
            Resume::Recompute(why) => panic!("x recomputed: {why}"),
        }
        assert!(matches!(store.resume("y", &model_a), Resume::Recompute(Recompute::InfrastructureFailure)));
        assert!(
            matches!(store.resume("z", &model_b), Resume::Recompute(Recompute::Changed(p)) if p == ["model"])
        );
        assert!(matches!(store.resume("w", &model_a), Resume::Recompute(Recompute::New)));
        let summary = store.summary();
        assert_eq!(summary.reused, 1);
        assert_eq!(summary.recomputed["model changed"], 1);
        assert_eq!(summary.unreadable.len(), 1);

        let mut forced: ResultStore<Item> = ResultStore::open(&path, true).unwrap();
        assert!(matches!(forced.resume("x", &model_a), Resume::Recompute(Recompute::Forced)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "rb-store-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
