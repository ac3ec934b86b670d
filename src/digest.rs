//! SHA-256 in hex: the one helper behind content keys, fingerprints and the hashes recorded in
//! manifests.

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

/// The SHA-256 of `bytes`, as 64 lower-case hex digits.
pub fn sha256_hex(bytes: impl AsRef<[u8]>) -> String {
    hex::encode(Sha256::digest(bytes.as_ref()))
}

/// SHA-256 over several pieces fed in order: the one incremental hasher, for keys made of
/// many inputs (image tags, fingerprints, shuffles). Each caller fixes its own byte layout, and
/// changing it changes every key already made from it.
#[derive(Clone, Default)]
pub struct Sha256Pieces(Sha256);

impl Sha256Pieces {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `bytes` as they are.
    pub fn raw(&mut self, bytes: impl AsRef<[u8]>) -> &mut Self {
        self.0.update(bytes.as_ref());
        self
    }

    /// Adds `bytes` after their length (u64, little-endian), so no two different sequences of
    /// pieces collide by concatenation.
    pub fn framed(&mut self, bytes: impl AsRef<[u8]>) -> &mut Self {
        let bytes = bytes.as_ref();
        self.0.update((bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
        self
    }

    /// The first `n` bytes of the digest, in hex (`n` ≤ 32).
    pub fn hex_prefix(&self, n: usize) -> String {
        hex::encode(&self.0.clone().finalize()[..n])
    }

    /// The first 8 bytes of the digest as a little-endian number.
    pub fn first_u64(&self) -> u64 {
        let digest = self.0.clone().finalize();
        u64::from_le_bytes(digest[..8].try_into().expect("sha256 has 32 bytes"))
    }
}

/// The SHA-256 of a file's content, read in 1 MiB pieces (a model file can be gigabytes).
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// 64 bits from SHA-256 of the parts (each length-prefixed so ("ab","c") ≠ ("a","bc")).
pub fn stable_hash(parts: &[&[u8]]) -> u64 {
    let mut h = Sha256Pieces::new();
    for p in parts {
        h.framed(p);
    }
    h.first_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digests() {
        let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        assert_eq!(sha256_hex(b""), empty);
        assert_eq!(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("empty"), b"").unwrap();
        assert_eq!(sha256_file(&dir.path().join("empty")).unwrap(), empty);
    }

    #[test]
    fn pieces_are_framed_or_raw() {
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(Sha256Pieces::new().raw("a").raw("bc").hex_prefix(32), abc);
        assert_eq!(Sha256Pieces::new().raw("abc").hex_prefix(4), abc[..8]);
        let framed = |parts: &[&str]| {
            let mut h = Sha256Pieces::new();
            parts.iter().for_each(|p| {
                h.framed(p);
            });
            h.first_u64()
        };
        assert_ne!(framed(&["ab", "c"]), framed(&["a", "bc"]));
        let mut manual = (2u64).to_le_bytes().to_vec();
        manual.extend(b"ab");
        assert_eq!(framed(&["ab"]), Sha256Pieces::new().raw(manual).first_u64());
    }
}
