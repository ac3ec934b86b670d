//! Whether two runs measured the same thing. The model, its sampling and the seeds are what a
//! comparison compares, so they never count; what does is the yardstick: the data, the suite
//! file (prompt template, extraction, generation limits), the few-shot count, the repair
//! prompt settings and how patches were graded.

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::Value;

use super::load::{RunDir, RunKind};

/// One difference between the runs' settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Drift {
    /// The file the field was read from (`manifest.json`, `report.json`).
    pub file: String,
    /// Dotted path of the field in that file.
    pub field: String,
    pub base: Value,
    pub new: Value,
}

impl std::fmt::Display for Drift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: base {}, new {}", self.file, self.field, self.base, self.new)
    }
}

/// `value` at a dotted `path`; `None` when absent or null (an older manifest, or a setting
/// this kind of run does not have), so only what both runs recorded is compared.
fn at<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(value, |v, key| v.get(key)).filter(|v| !v.is_null())
}

struct Differences(Vec<Drift>);

impl Differences {
    fn push(&mut self, file: &str, field: String, base: &Value, new: &Value) {
        if base != new {
            self.0.push(Drift { file: file.into(), field, base: base.clone(), new: new.clone() });
        }
    }

    /// The manifest field `path` where both runs recorded it; objects leaf by leaf, so a key
    /// one version added does not count.
    fn manifest_field(&mut self, base: &Value, new: &Value, path: &str) {
        match (at(base, path), at(new, path)) {
            (Some(Value::Object(b)), Some(Value::Object(n))) => {
                for key in b.keys().filter(|k| n.contains_key(*k)) {
                    self.manifest_field(base, new, &format!("{path}.{key}"));
                }
            }
            (Some(b), Some(n)) => self.push("manifest.json", path.to_owned(), b, n),
            _ => {}
        }
    }
}

/// Where a SWE manifest keeps the repair prompt settings: `swe run` under `inference.prompt`,
/// `run` in its run configuration.
fn prompt_settings(manifest: &Value) -> Option<(&'static str, &Value)> {
    at(manifest, "inference.prompt")
        .map(|v| ("inference.prompt", v))
        .or_else(|| at(manifest, "run_config.repair").map(|v| ("run_config.repair", v)))
}

const PROMPT_KEYS: [&str; 3] = ["retrieval", "max_files", "max_file_chars"];

/// The differences between `base` and `new` that make their numbers incomparable; `paired`
/// are the items both runs hold.
pub(super) fn find(base: &RunDir, new: &RunDir, paired: &BTreeSet<String>) -> Vec<Drift> {
    let mut d = Differences(Vec::new());
    let (bm, nm) = (&base.manifest, &new.manifest);
    match base.kind() {
        RunKind::Suite => {
            d.manifest_field(bm, nm, "suite");
            d.manifest_field(bm, nm, "fingerprint.suite_sha256");
            d.manifest_field(bm, nm, "fingerprint.shots");
            // Variants differ with the families, their seed and the families' version.
            d.manifest_field(bm, nm, "perturb");
            // The test file, then the few-shot file when there is one.
            let hashes = |m: &Value| {
                at(m, "data")
                    .and_then(Value::as_array)
                    .map(|files| files.iter().map(|f| f["sha256"].clone()).collect::<Vec<_>>())
            };
            if let (Some(b), Some(n)) = (hashes(bm), hashes(nm)) {
                if b.len() == n.len() {
                    for (i, (b, n)) in b.iter().zip(&n).enumerate() {
                        d.push("manifest.json", format!("data.{i}.sha256"), b, n);
                    }
                } else {
                    d.push("manifest.json", "data".into(), &Value::from(b), &Value::from(n));
                }
            }
        }
        RunKind::Swe => {
            let sha = "dataset.sha256";
            if at(bm, sha).is_some() && at(nm, sha).is_some() {
                d.manifest_field(bm, nm, sha);
            } else {
                // A folder of tasks has no file hash; each graded task's content hash stands in.
                let (b, n) = (base.task_hashes(), new.task_hashes());
                for id in paired {
                    if let (Some(bt), Some(nt)) = (b.get(id), n.get(id)) {
                        let field = format!("instances.{id}.fingerprint.parts.task");
                        d.push("report.json", field, &Value::from(bt.as_str()), &Value::from(nt.as_str()));
                    }
                }
            }
            // The repository snapshots tasks bring along.
            for id in paired {
                let bundle =
                    |m: &Value| m.get("dataset")?.get("bundles")?.get(id).filter(|v| !v.is_null()).cloned();
                if let (Some(b), Some(n)) = (bundle(bm), bundle(nm)) {
                    d.push("manifest.json", format!("dataset.bundles.{id}"), &b, &n);
                }
            }
            if let (Some((bp, b)), Some((np, n))) = (prompt_settings(bm), prompt_settings(nm)) {
                for key in PROMPT_KEYS {
                    if let (Some(bv), Some(nv)) = (b.get(key), n.get(key)) {
                        let field =
                            if bp == np { format!("{bp}.{key}") } else { format!("{bp}.{key} / {np}.{key}") };
                        d.push("manifest.json", field, bv, nv);
                    }
                }
            }
            // Variants differ with the families, their seed and the families' version.
            d.manifest_field(bm, nm, "perturb");
            // How patches were judged: a shorter deadline or fewer reruns changes verdicts.
            d.manifest_field(bm, nm, "settings.timeout_s");
            d.manifest_field(bm, nm, "settings.flaky_reruns");
            d.manifest_field(bm, nm, "settings.limits");
        }
    }
    d.0
}
