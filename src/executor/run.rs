//! What one run sends to a cluster and takes back, whatever the domain: the records it
//! admits, its units of items, the worker's command line and model flags, its id.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::{DispatchReport, RayExecutor};

/// Which records that come back a run takes: one per item, and only with the fingerprint
/// the coordinator computed for it, so a worker on other inputs or other code earns nothing.
#[derive(Debug, Default)]
pub struct Admission {
    expected: BTreeMap<String, serde_json::Value>,
    stored: BTreeSet<String>,
}

impl Admission {
    /// `expected`: each item's key and fingerprint (as JSON).
    pub fn new(expected: BTreeMap<String, serde_json::Value>) -> Self {
        Self { expected, stored: BTreeSet::new() }
    }

    /// Whether the record for `key` with `fingerprint` is taken (then it counts as stored).
    pub fn admit(&mut self, key: &str, fingerprint: Option<serde_json::Value>) -> bool {
        if self.stored.contains(key) {
            return false;
        }
        let Some(expected) = self.expected.get(key) else {
            tracing::debug!("{key}: a record this run does not need (kept from before); ignored");
            return false;
        };
        if Some(expected) != fingerprint.as_ref() {
            tracing::warn!(
                "{key}: a worker's record has another fingerprint than the one computed here; ignored"
            );
            return false;
        }
        self.stored.insert(key.to_owned());
        true
    }

    /// The record a worker's `frame` carries, if it parses and [`Self::admit`] takes it.
    pub fn admit_frame<R: crate::kernel::store::StoredRecord>(
        &mut self,
        frame: &serde_json::Value,
    ) -> Option<R> {
        let record = frame.get("record").cloned()?;
        let Ok(record) = serde_json::from_value::<R>(record) else {
            tracing::warn!("a worker sent a record that does not parse; ignored");
            return None;
        };
        let fingerprint = record.fingerprint().map(|f| f.to_json());
        self.admit(&record.key(), fingerprint).then_some(record)
    }

    pub fn is_stored(&self, key: &str) -> bool {
        self.stored.contains(key)
    }

    pub fn expected(&self, key: &str) -> Option<&serde_json::Value> {
        self.expected.get(key)
    }
}

/// A run's Ray side: the executor, how many items one job takes, and the executable the
/// workers run (this one, so every record's code is the coordinator's).
pub struct RayRun {
    pub executor: RayExecutor,
    pub unit_size: usize,
    pub exe: PathBuf,
}

impl RayRun {
    /// The manifest's `executor`: where the run went and how each job went (never part of a
    /// fingerprint or of the settings `compare` checks).
    pub fn manifest_entry(&self, dispatched: &DispatchReport) -> serde_json::Value {
        let nodes: BTreeSet<&str> = dispatched.attempts.iter().filter_map(|a| a.node_id.as_deref()).collect();
        serde_json::json!({
            "kind": "ray",
            "url": self.executor.client.url(),
            "run": self.executor.run,
            "unit_size": self.unit_size,
            "retries": self.executor.settings.retries,
            "package": dispatched.package,
            "package_uploaded": dispatched.package_uploaded,
            "jobs_submitted": dispatched.jobs_submitted,
            "collected_from_earlier": dispatched.collected_from_earlier,
            "nodes": nodes,
            "attempts": dispatched.attempts,
        })
    }
}

/// The run's id on the cluster: its output folder, wherever that is.
pub fn run_id(out: &Path) -> String {
    let absolute = std::path::absolute(out).unwrap_or_else(|_| out.to_owned());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    crate::digest::Sha256Pieces::new()
        .framed(host.as_bytes())
        .framed(absolute.to_string_lossy().as_bytes())
        .hex_prefix(6)
}

/// Units of `unit_size` items in key order; a unit's id is the hash of its items' keys and
/// fingerprints, so the same work gets the same id on a rerun.
pub fn units(mut items: Vec<(String, serde_json::Value)>, unit_size: usize) -> Vec<Unit> {
    items.sort_by(|a, b| a.0.cmp(&b.0));
    items
        .chunks(unit_size.max(1))
        .map(|chunk| {
            let mut hash = crate::digest::Sha256Pieces::new();
            for (key, fingerprint) in chunk {
                hash.framed(key.as_bytes()).framed(serde_json::to_vec(fingerprint).unwrap_or_default());
            }
            Unit { id: hash.hex_prefix(6), items: chunk.iter().map(|(key, _)| key.clone()).collect() }
        })
        .collect()
}

/// The executable's name inside a run's package: the coordinator's own.
pub const WORKER_EXE: &str = "repairbench";

/// A job's command: the package's executable with `args` (starting `./repairbench`), then
/// `--only ITEM` per item.
pub fn worker_entrypoint(args: &[String], items: &[String]) -> String {
    let mut words = args.to_vec();
    for item in items {
        words.push("--only".into());
        words.push(item.clone());
    }
    // Ray's unpacking drops the mode; `exec` makes the worker the child of Ray's job
    // supervisor, so it learns of the supervisor's death (its parent-death signal).
    let command = crate::shell::join(&words).unwrap_or_default();
    format!("chmod +x {WORKER_EXE} && exec {command}")
}

/// The flags with which a worker loads the coordinator's model: its source (a path made
/// absolute, for shared storage; a `pip:`, `hf:` or `openai:` source as given), the model a
/// server was asked for, and the hash the worker's copy must have. The model never travels in
/// the package (a package holds 100 MiB at most).
pub fn model_flags(model: &crate::model::ModelInfo) -> Vec<String> {
    let source = match (&model.served, crate::model::source::ModelSource::parse(&model.source)) {
        (None, Ok(crate::model::source::ModelSource::Path(path))) => {
            std::path::absolute(&path).unwrap_or(path).to_string_lossy().into_owned()
        }
        _ => model.source.clone(),
    };
    let mut flags = vec!["--model".into(), source, "--model-sha256".into(), model.sha256.clone()];
    if let (Some(_), Some(served)) = (&model.served, &model.name) {
        flags.extend(["--served-model".into(), served.clone()]);
    }
    flags
}

/// Some items that share one job.
#[derive(Debug, Clone)]
pub struct Unit {
    /// The same items with the same inputs give the same id.
    pub id: String,
    pub items: Vec<String>,
}
