//! Tar archives for copying files in and out. Files going in are owned by the sandbox user,
//! so the code under test can change them.

use std::path::Path;

/// Owner of every entry we put into an environment by default (the sandbox user).
const SANDBOX_UID: u64 = 1000;

/// Who owns the entries of an archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// The sandbox user (uid 1000): the code under test may change them.
    Sandbox,
    /// Root: readable by the supervisor alone where the mode says so.
    Root,
}

#[derive(Debug, thiserror::Error)]
#[error("archiving {path}")]
pub struct ArchiveError {
    pub path: std::path::PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// The header every archive of ours uses: the owner's uid and gid, no timestamp.
pub fn header(kind: tar::EntryType, mode: u32, size: u64, owner: Owner) -> tar::Header {
    let uid = match owner {
        Owner::Sandbox => SANDBOX_UID,
        Owner::Root => 0,
    };
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_size(size);
    header.set_mode(mode);
    header.set_uid(uid);
    header.set_gid(uid);
    header.set_mtime(0);
    header
}

/// One in-memory archive entry: a file with its contents, or a directory (`contents: None`).
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    pub path: &'a str,
    pub mode: u32,
    pub contents: Option<&'a [u8]>,
}

/// Archives in-memory entries, in order, all owned by `owner`.
pub fn tar_entries(entries: &[Entry<'_>], owner: Owner) -> Result<Vec<u8>, ArchiveError> {
    let mut builder = tar::Builder::new(Vec::new());
    for entry in entries {
        let (kind, data) = match entry.contents {
            Some(bytes) => (tar::EntryType::Regular, bytes),
            None => (tar::EntryType::Directory, &[][..]),
        };
        let mut h = header(kind, entry.mode, data.len() as u64, owner);
        builder
            .append_data(&mut h, entry.path, data)
            .map_err(|source| ArchiveError { path: entry.path.into(), source })?;
    }
    builder.into_inner().map_err(|source| ArchiveError { path: "archive".into(), source })
}

/// Archives in-memory files (relative path, content, executable?) owned by the sandbox user,
/// for [`super::Sandbox::copy_in`]. Entries with unusable paths (absolute, `..`) are left out.
pub fn tar_files<P: AsRef<str>>(files: &[(P, &[u8], bool)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, content, executable) in files {
        let mode = if *executable { 0o755 } else { 0o644 };
        let mut h = header(tar::EntryType::Regular, mode, content.len() as u64, Owner::Sandbox);
        if let Err(e) = builder.append_data(&mut h, path.as_ref(), *content) {
            tracing::warn!("{}: left out of the archive: {e}", path.as_ref());
        }
    }
    builder.into_inner().unwrap_or_default()
}

/// Archives the contents of `dir` (not the directory itself), following no symlinks.
pub fn tar_dir(dir: &Path) -> Result<Vec<u8>, ArchiveError> {
    fn walk(root: &Path, dir: &Path, builder: &mut tar::Builder<Vec<u8>>) -> Result<(), ArchiveError> {
        let err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ArchiveError { path, source }
        };
        let mut entries: Vec<_> =
            std::fs::read_dir(dir).map_err(err(dir))?.collect::<Result<_, _>>().map_err(err(dir))?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap_or(&path);
            let meta = std::fs::symlink_metadata(&path).map_err(err(&path))?;
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode() & 0o7777;
            if meta.is_dir() {
                let mut h = header(tar::EntryType::Directory, mode | 0o700, 0, Owner::Sandbox);
                builder.append_data(&mut h, rel, std::io::empty()).map_err(err(&path))?;
                walk(root, &path, builder)?;
            } else if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).map_err(err(&path))?;
                let mut h = header(tar::EntryType::Symlink, 0o777, 0, Owner::Sandbox);
                builder.append_link(&mut h, rel, &target).map_err(err(&path))?;
            } else if meta.is_file() {
                let file = std::fs::File::open(&path).map_err(err(&path))?;
                let mut h = header(tar::EntryType::Regular, mode, meta.len(), Owner::Sandbox);
                builder.append_data(&mut h, rel, file).map_err(err(&path))?;
            }
        }
        Ok(())
    }
    let mut builder = tar::Builder::new(Vec::new());
    walk(dir, dir, &mut builder)?;
    builder.into_inner().map_err(|source| ArchiveError { path: dir.to_path_buf(), source })
}

/// The regular files of an archive (as returned by copy out), path and content.
pub fn untar_files(archive: &[u8]) -> Result<Vec<(String, Vec<u8>)>, std::io::Error> {
    use std::io::Read;
    let mut files = Vec::new();
    let mut reader = tar::Archive::new(archive);
    for entry in reader.entries()? {
        let mut entry = entry?;
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let path = entry.path()?.to_string_lossy().into_owned();
        let mut content = Vec::new();
        entry.read_to_end(&mut content)?;
        files.push((path, content));
    }
    Ok(files)
}

/// The first regular file in a tar archive (at most 64 MiB of it), e.g. one file copied out
/// of an environment.
pub fn first_file(bytes: &[u8]) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut archive = tar::Archive::new(bytes);
    for entry in archive.entries().ok()? {
        let mut entry = entry.ok()?;
        if entry.header().entry_type().is_file() {
            let mut out = Vec::new();
            // The results file is small; a huge one is not ours.
            entry.by_ref().take(64 << 20).read_to_end(&mut out).ok()?;
            return Some(out);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_round_trip_owned_by_the_sandbox_user() {
        let archive = tar_files(&[("a.txt", b"hello".as_slice(), false), ("bin/run", b"#!/bin/sh\n", true)]);
        let mut reader = tar::Archive::new(archive.as_slice());
        for entry in reader.entries().unwrap() {
            let entry = entry.unwrap();
            assert_eq!(entry.header().uid().unwrap(), 1000);
        }
        let files = untar_files(&archive).unwrap();
        assert_eq!(
            files,
            vec![("a.txt".into(), b"hello".to_vec()), ("bin/run".into(), b"#!/bin/sh\n".to_vec())]
        );
    }

    #[test]
    fn a_directory_is_archived_with_its_subdirectories() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/x.py"), "print(1)\n").unwrap();
        let files = untar_files(&tar_dir(dir.path()).unwrap()).unwrap();
        assert_eq!(files, vec![("sub/x.py".into(), b"print(1)\n".to_vec())]);
    }
}
