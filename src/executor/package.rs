//! The one package a run sends to its workers (Ray's `working_dir`): named by the hash of its
//! contents, so a second run of the same binary on the same inputs finds it on the cluster
//! and uploads nothing. The zip is made only when the cluster lacks it.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::digest::Sha256Pieces;

/// Ray's dashboard takes request bodies (the package upload) of at most 100 MiB.
pub const RAY_PACKAGE_LIMIT: u64 = 100 << 20;

#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error("reading {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the package would be {size_mib} MiB, over the cluster's limit of {limit_mib} MiB: {why}")]
    TooLarge { size_mib: u64, limit_mib: u64, why: String },
    #[error("zipping the package")]
    Zip(#[source] zip::result::ZipError),
}

enum Content {
    Bytes(Vec<u8>),
    File(PathBuf),
}

/// Files by their path inside the package, in the order added.
pub struct Package {
    files: Vec<(String, Content, bool)>,
    hash: Sha256Pieces,
    size: u64,
}

impl Default for Package {
    fn default() -> Self {
        Self::new()
    }
}

impl Package {
    pub fn new() -> Self {
        Self { files: Vec::new(), hash: Sha256Pieces::new(), size: 0 }
    }

    fn add(&mut self, name: String, content: Content, executable: bool, bytes: &[u8]) {
        self.hash.framed(name.as_bytes()).framed([u8::from(executable)]).framed(bytes);
        self.size += bytes.len() as u64;
        self.files.push((name, content, executable));
    }

    pub fn add_bytes(&mut self, name: &str, bytes: Vec<u8>) {
        let copy = bytes.clone();
        self.add(name.to_owned(), Content::Bytes(bytes), false, &copy);
    }

    /// Adds the file at `path` as `name`; `executable` marks a program (the zip keeps the
    /// mode, though Ray's unpacking drops it: entrypoints run `chmod +x` first).
    pub fn add_file(&mut self, name: &str, path: &Path, executable: bool) -> Result<(), PackageError> {
        let bytes =
            std::fs::read(path).map_err(|source| PackageError::Read { path: path.to_owned(), source })?;
        self.add(name.to_owned(), Content::File(path.to_owned()), executable, &bytes);
        Ok(())
    }

    /// Adds every file under `dir` as `prefix/RELATIVE`, in name order.
    pub fn add_dir(&mut self, prefix: &str, dir: &Path) -> Result<(), PackageError> {
        self.add_dir_except(prefix, dir, &|_| false)
    }

    /// Adds every file under `dir` as `prefix/RELATIVE`, in name order, but those `skip` names.
    pub fn add_dir_except(
        &mut self,
        prefix: &str,
        dir: &Path,
        skip: &dyn Fn(&Path) -> bool,
    ) -> Result<(), PackageError> {
        let read = |path: &Path| {
            std::fs::read_dir(path).map_err(|source| PackageError::Read { path: path.to_owned(), source })
        };
        let mut entries: Vec<_> = read(dir)?.filter_map(Result::ok).map(|e| e.path()).collect();
        entries.sort();
        for path in entries {
            let name = format!("{prefix}/{}", path.file_name().unwrap_or_default().to_string_lossy());
            if path.is_dir() {
                self.add_dir_except(&name, &path, skip)?;
            } else if path.is_file() && !skip(&path) {
                self.add_file(&name, &path, false)?;
            }
        }
        Ok(())
    }

    /// The bytes of the files (before compression).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// `_ray_pkg_HASH.zip`: the name Ray's own clients give a content-addressed package.
    pub fn name(&self) -> String {
        format!("_ray_pkg_{}.zip", self.hash.hex_prefix(16))
    }

    /// The zip, with fixed times so the same files give the same bytes; refused over
    /// [`RAY_PACKAGE_LIMIT`].
    pub fn zip(&self) -> Result<Vec<u8>, PackageError> {
        let zipped = self.zip_any_size()?;
        if zipped.len() as u64 > RAY_PACKAGE_LIMIT {
            return Err(PackageError::TooLarge {
                size_mib: zipped.len() as u64 >> 20,
                limit_mib: RAY_PACKAGE_LIMIT >> 20,
                why: "its executable and inputs are too large to travel".into(),
            });
        }
        Ok(zipped)
    }

    /// Whether the zip stays within [`RAY_PACKAGE_LIMIT`]: by the stored bytes when they are
    /// under it (deflate never grows them by much), else by zipping.
    pub fn fits(&self) -> Result<bool, PackageError> {
        if self.size + (1 << 20) <= RAY_PACKAGE_LIMIT {
            return Ok(true);
        }
        Ok(self.zip_any_size()?.len() as u64 <= RAY_PACKAGE_LIMIT)
    }

    fn zip_any_size(&self) -> Result<Vec<u8>, PackageError> {
        let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        for (name, content, executable) in &self.files {
            let options = zip::write::SimpleFileOptions::default()
                .compression_method(zip::CompressionMethod::Deflated)
                .compression_level(Some(1))
                .last_modified_time(zip::DateTime::default())
                .unix_permissions(if *executable { 0o755 } else { 0o644 })
                .large_file(true);
            writer.start_file(name.as_str(), options).map_err(PackageError::Zip)?;
            let bytes = match content {
                Content::Bytes(bytes) => std::borrow::Cow::Borrowed(bytes),
                Content::File(path) => std::borrow::Cow::Owned(
                    std::fs::read(path)
                        .map_err(|source| PackageError::Read { path: path.clone(), source })?,
                ),
            };
            writer.write_all(&bytes).map_err(|e| PackageError::Zip(e.into()))?;
        }
        Ok(writer.finish().map_err(PackageError::Zip)?.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_follows_the_contents_and_the_zip_is_reproducible() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("d/sub")).unwrap();
        std::fs::write(dir.path().join("d/sub/b.txt"), "b").unwrap();
        std::fs::write(dir.path().join("d/a.txt"), "a").unwrap();
        let make = |extra: &str| {
            let mut package = Package::new();
            package.add_dir("data", &dir.path().join("d")).unwrap();
            package.add_bytes("unit.json", extra.as_bytes().to_vec());
            package
        };
        let (one, two, other) = (make("x"), make("x"), make("y"));
        assert_eq!(one.name(), two.name());
        assert_ne!(one.name(), other.name());
        assert!(one.name().starts_with("_ray_pkg_") && one.name().ends_with(".zip"));
        assert_eq!(one.zip().unwrap(), two.zip().unwrap());
        let mut archive = zip::ZipArchive::new(std::io::Cursor::new(one.zip().unwrap())).unwrap();
        let names: Vec<String> =
            (0..archive.len()).map(|i| archive.by_index(i).unwrap().name().to_owned()).collect();
        assert_eq!(names, ["data/a.txt", "data/sub/b.txt", "unit.json"]);
    }
}
