//! What a result depends on, hashed part by part: a record carries the hash of every input that
//! changes it (model, sampling, prompt, data, image, repairbench's own code...), so resume can
//! reuse exactly the records whose inputs are unchanged and say which input changed for the rest.

use std::collections::BTreeMap;

use crate::digest::Sha256Pieces;
use serde::{Deserialize, Serialize};

/// The git commit this binary was built from, `-dirty` when the work tree differed.
pub const BUILD_COMMIT: &str = env!("REPAIRBENCH_BUILD_COMMIT");

/// Per-part hashes and their combined hash.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    pub hash: String,
    pub parts: BTreeMap<String, String>,
}

/// The first 12 bytes of the SHA-256, in hex.
fn short_hash(bytes: &[u8]) -> String {
    crate::digest::sha256_hex(bytes)[..24].to_owned()
}

/// Builds a [`Fingerprint`]; the code version is always one of the parts.
#[derive(Debug, Clone)]
pub struct FingerprintBuilder {
    parts: BTreeMap<String, String>,
}

impl Default for FingerprintBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl FingerprintBuilder {
    pub fn new() -> Self {
        let mut parts = BTreeMap::new();
        parts.insert("code".to_owned(), BUILD_COMMIT.to_owned());
        Self { parts }
    }

    /// Adds a part from any serializable value (its JSON form is hashed).
    pub fn value(mut self, name: &str, value: &impl Serialize) -> Self {
        let json = serde_json::to_vec(value).unwrap_or_default();
        self.parts.insert(name.to_owned(), short_hash(&json));
        self
    }

    /// Adds a part from raw bytes (a file's content, a patch).
    pub fn bytes(mut self, name: &str, bytes: &[u8]) -> Self {
        self.parts.insert(name.to_owned(), short_hash(bytes));
        self
    }

    /// Adds a part that is already an identifier (a sha256, an image id).
    pub fn id(mut self, name: &str, id: &str) -> Self {
        self.parts.insert(name.to_owned(), id.to_owned());
        self
    }

    pub fn finish(self) -> Fingerprint {
        let mut hasher = Sha256Pieces::new();
        for (name, value) in &self.parts {
            hasher.raw(name).raw([0u8]).raw(value).raw([0u8]);
        }
        Fingerprint { hash: hasher.hex_prefix(16), parts: self.parts }
    }
}

impl Fingerprint {
    /// As JSON, the form in which records travel back from a cluster's workers.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    /// The parts that differ from `earlier` (added, removed or changed), by name.
    pub fn changed_parts(&self, earlier: &Fingerprint) -> Vec<String> {
        let mut names: Vec<String> = self
            .parts
            .iter()
            .filter(|(name, value)| earlier.parts.get(*name) != Some(value))
            .map(|(name, _)| name.clone())
            .collect();
        names.extend(earlier.parts.keys().filter(|name| !self.parts.contains_key(*name)).cloned());
        names.sort();
        names.dedup();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_parts_are_named() {
        let a = FingerprintBuilder::new().id("model", "m1").value("sampling", &0.5).finish();
        let b = FingerprintBuilder::new().id("model", "m2").value("sampling", &0.5).finish();
        assert_ne!(a.hash, b.hash);
        assert_eq!(b.changed_parts(&a), ["model"]);
        assert_eq!(a.changed_parts(&a), Vec::<String>::new());
        assert_eq!(a.parts["code"], BUILD_COMMIT);
        let c = FingerprintBuilder::new().id("model", "m1").finish();
        assert_eq!(c.changed_parts(&a), ["sampling"]);
    }
}
