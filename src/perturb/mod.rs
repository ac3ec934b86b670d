//! What every perturbation shares, whatever it perturbs (a suite's row, a repair task's
//! statement): the key a variant's record is stored under, the seed its edits draw from, and
//! the seeded prose edits. The families themselves live with what they perturb
//! (`suites::perturb`, `repair::perturb`).

pub mod text;

use crate::digest::stable_hash;

/// The seed of one variant's edits of `what` (a field name, `options`...): from the family,
/// the variant's index, `--perturb-seed` and the document, never from a sampling seed, so
/// every model sees byte-identical variants.
pub fn variant_seed(family: &str, what: &[u8], index: usize, seed: u64, doc_id: &str) -> u64 {
    stable_hash(&[
        b"perturb",
        family.as_bytes(),
        what,
        &(index as u64).to_le_bytes(),
        &seed.to_le_bytes(),
        doc_id.as_bytes(),
    ])
}

/// What every variant key of `family` adds to its original's key before its index.
pub fn key_prefix(family: &str) -> String {
    format!("@{family}#")
}

/// The suffix variant `index` of `family` adds to its original's key (`@text.typo#2`).
pub fn key_suffix(family: &str, index: usize) -> String {
    format!("{}{index}", key_prefix(family))
}

/// A variant key split into (original key, family, index); `None` for an original's key.
pub fn split_key(key: &str) -> Option<(&str, &str, usize)> {
    let (original, rest) = key.rsplit_once('@')?;
    let (family, index) = rest.rsplit_once('#')?;
    Some((original, family, index.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_keys_split_back() {
        let key = format!("django__django-1{}", key_suffix("statement.typo", 3));
        assert_eq!(key, "django__django-1@statement.typo#3");
        assert_eq!(split_key(&key), Some(("django__django-1", "statement.typo", 3)));
        assert_eq!(split_key("django__django-1"), None);
        assert_eq!(split_key("a@b#x"), None);
    }
}
