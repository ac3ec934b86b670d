//! Sandbox images, built locally in layers and tagged by a hash of their inputs so an
//! unchanged layer is never rebuilt:
//!
//! 1. base: a Debian rootfs made by `debootstrap` and imported through the API (no registry);
//! 2. environment layers, e.g. the default Python image, built from `dockerfiles/` with the
//!    parent tag as build argument `BASE`;
//! 3. task layers, the same way, from a caller's directory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::digest::Sha256Pieces;
use bollard::query_parameters::{
    CreateImageOptionsBuilder, ListImagesOptionsBuilder, RemoveImageOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::io::AsyncReadExt;

use super::apt;
use super::docker::{LABEL_OWNER, OWNER};
use super::layers::layer_inputs_hash;
pub use super::layers::{build_layer, build_layer_from_dir, read_layer_dir, LayerFiles};

/// Label naming the layer kind of one of our images (`base`, `python`, or a caller's name).
pub const LABEL_LAYER: &str = "repairbench.layer";
/// Label holding the hash of the inputs an image was built from.
pub const LABEL_INPUTS: &str = "repairbench.inputs";

const BASE_REPO: &str = "repairbench/base";

/// A Debian release a base is bootstrapped from: each brings its own Python 3, so a task's
/// Python is chosen by choosing its suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DebianSuite {
    Bullseye,
    Bookworm,
    Trixie,
}

impl DebianSuite {
    /// Oldest first.
    pub const ALL: [DebianSuite; 3] = [DebianSuite::Bullseye, DebianSuite::Bookworm, DebianSuite::Trixie];
    /// The suite of the default image.
    pub const DEFAULT: DebianSuite = DebianSuite::Bookworm;

    pub fn codename(self) -> &'static str {
        match self {
            DebianSuite::Bullseye => "bullseye",
            DebianSuite::Bookworm => "bookworm",
            DebianSuite::Trixie => "trixie",
        }
    }

    /// The version of the suite's `python3` package.
    pub fn python(self) -> (u32, u32, u32) {
        match self {
            DebianSuite::Bullseye => (3, 9, 2),
            DebianSuite::Bookworm => (3, 11, 2),
            DebianSuite::Trixie => (3, 13, 5),
        }
    }
}

const BASE_PACKAGES: &[&str] = &["python3", "python3-pytest", "git"];
/// Bump when the way the base is made changes, so the old one is not reused.
const BASE_RECIPE: &str = "debootstrap minbase v1";

/// The default Python layer, embedded so an installed binary needs no source tree.
const PYTHON_DOCKERFILE: &str = include_str!("../../dockerfiles/python/Dockerfile");
const PYTHON_LAYER: &str = "python";

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("Docker API call `{op}` failed")]
    Api {
        op: &'static str,
        #[source]
        source: bollard::errors::Error,
    },
    #[error(
        "no Debian mirror to bootstrap the base image from: none serves suite `{suite}` in \
         /etc/apt/sources.list or /etc/apt/sources.list.d/, and {var} is not set"
    )]
    NoMirror { suite: &'static str, var: &'static str },
    #[error("`debootstrap` is not installed; install it (e.g. `apt-get install debootstrap`) to bootstrap the base image")]
    NoDebootstrap,
    #[error("bootstrapping the base image needs root (debootstrap creates device nodes and chowns files)")]
    NotRoot,
    #[error("`{command}` failed ({status}); last output:\n{tail}")]
    Command { command: String, status: String, tail: String },
    #[error("I/O on {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("building layer `{layer}` failed{}: {message}", step.as_deref().map(|s| format!(" at `{s}`")).unwrap_or_default())]
    Build {
        layer: String,
        /// The Dockerfile instruction that failed (`RUN pip install ...`), when known.
        step: Option<String>,
        message: String,
        /// The whole build output (capped), for the instance's logs.
        log: String,
    },
    #[error("layer directory {0} has no Dockerfile")]
    NoDockerfile(PathBuf),
}

pub(crate) fn api(op: &'static str) -> impl FnOnce(bollard::errors::Error) -> ImageError {
    move |source| ImageError::Api { op, source }
}

pub(crate) fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> ImageError + '_ {
    move |source| ImageError::Io { path: path.to_path_buf(), source }
}

/// Holds an exclusive lock on `<cache>/locks/<tag>.lock` so that two repairbench processes
/// (say, two test binaries) never build the same image at once; the second waits, then finds
/// the image built. Released when the file is dropped.
pub(crate) async fn build_lock(tag: &str) -> Result<std::fs::File, ImageError> {
    let dir = crate::env::cache_dir().join("locks");
    std::fs::create_dir_all(&dir).map_err(io_at(&dir))?;
    let path = dir.join(format!("{}.lock", tag.replace(['/', ':'], "_")));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io_at(&path))?;
    tokio::task::spawn_blocking(move || file.lock().map(|()| file))
        .await
        .map_err(|e| ImageError::Io { path: path.clone(), source: std::io::Error::other(e) })?
        .map_err(io_at(&path))
}

pub(crate) fn spinner(message: String) -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(message);
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// A reader as a stream of 1 MiB chunks, for request bodies too big to hold in memory.
pub(crate) fn chunks(
    reader: impl tokio::io::AsyncRead + Unpin + Send + 'static,
) -> impl futures_util::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send + 'static {
    futures_util::stream::unfold(reader, |mut reader| async move {
        let mut buf = vec![0u8; 1 << 20];
        match reader.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(bytes::Bytes::from(buf)), reader))
            }
            Err(e) => Some((Err(e), reader)),
        }
    })
}

/// Whether an image with this reference exists locally.
pub async fn image_exists(docker: &Docker, reference: &str) -> Result<bool, ImageError> {
    match docker.inspect_image(reference).await {
        Ok(_) => Ok(true),
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => Ok(false),
        Err(e) => Err(ImageError::Api { op: "inspect image", source: e }),
    }
}

/// The tag the base of `suite` gets: a hash of everything that decides its content (not the
/// mirror).
pub fn base_tag(suite: DebianSuite) -> String {
    let mut hasher = Sha256Pieces::new();
    hasher.raw(BASE_RECIPE).raw(suite.codename());
    for package in BASE_PACKAGES {
        hasher.raw([0u8]).raw(package);
    }
    format!("{BASE_REPO}:{}", hasher.hex_prefix(8))
}

/// The mirror for the base of `suite`: `REPAIRBENCH_DEBIAN_MIRROR`, else the host's apt
/// configuration (a Debian mirror serves every suite, so one configured for another is used).
pub fn debian_mirror(suite: DebianSuite) -> Result<String, ImageError> {
    if let Some(mirror) = crate::env::get(crate::env::DEBIAN_MIRROR) {
        if !mirror.trim().is_empty() {
            return Ok(mirror.trim().to_string());
        }
    }
    let sources = apt::host_sources(Path::new("/etc/apt"));
    apt::mirror_for_suite(&sources, suite.codename())
        .or_else(|| apt::debian_mirror(&sources))
        .ok_or(ImageError::NoMirror { suite: suite.codename(), var: crate::env::DEBIAN_MIRROR })
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = crate::env::get_os(crate::env::PATH)?;
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

/// Makes sure the base image of `suite` exists, bootstrapping and importing it when missing
/// (about a minute). Returns its tag.
pub async fn ensure_base(docker: &Docker, suite: DebianSuite) -> Result<String, ImageError> {
    let tag = base_tag(suite);
    if image_exists(docker, &tag).await? {
        return Ok(tag);
    }
    let _lock = build_lock(&tag).await?;
    if image_exists(docker, &tag).await? {
        return Ok(tag);
    }
    let mirror = debian_mirror(suite)?;
    let debootstrap = find_on_path("debootstrap").ok_or(ImageError::NoDebootstrap)?;
    if !running_as_root() {
        return Err(ImageError::NotRoot);
    }
    tracing::info!(
        target: crate::PROGRESS,
        "repairbench: base image {tag} is missing; bootstrapping Debian {} from {mirror} \
         (takes about a minute, done once)",
        suite.codename()
    );
    let started = Instant::now();
    let work = crate::env::cache_dir().join("bootstrap").join(format!(
        "{}-{}",
        suite.codename(),
        std::process::id()
    ));
    if work.exists() {
        std::fs::remove_dir_all(&work).map_err(io_at(&work))?;
    }
    std::fs::create_dir_all(&work).map_err(io_at(&work))?;
    let result = bootstrap_and_import(docker, &debootstrap, (suite, &mirror), &work, &tag).await;
    if let Err(e) = std::fs::remove_dir_all(&work) {
        tracing::warn!("could not remove bootstrap directory {}: {e}", work.display());
    }
    result?;
    tracing::info!(target: crate::PROGRESS, "repairbench: base image {tag} ready in {:.0} s", started.elapsed().as_secs_f64());
    Ok(tag)
}

async fn bootstrap_and_import(
    docker: &Docker,
    debootstrap: &Path,
    (suite, mirror): (DebianSuite, &str),
    work: &Path,
    tag: &str,
) -> Result<(), ImageError> {
    let rootfs = work.join("rootfs");
    let bar = spinner(format!("debootstrap {} (minbase + {})", suite.codename(), BASE_PACKAGES.join(", ")));
    let mut child = tokio::process::Command::new(debootstrap)
        .arg("--variant=minbase")
        .arg(format!("--include={}", BASE_PACKAGES.join(",")))
        .arg(suite.codename())
        .arg(&rootfs)
        .arg(mirror)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(io_at(debootstrap))?;
    let mut tail: Vec<String> = Vec::new();
    let mut stderr = child.stderr.take();
    let stderr_task = tokio::spawn(async move {
        let mut text = String::new();
        if let Some(err) = stderr.as_mut() {
            let _ = err.read_to_string(&mut text).await;
        }
        text
    });
    if let Some(stdout) = child.stdout.take() {
        use tokio::io::AsyncBufReadExt;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            bar.set_message(format!("debootstrap: {}", line.trim()));
            tail.push(line);
            if tail.len() > 20 {
                tail.remove(0);
            }
        }
    }
    let status = child.wait().await.map_err(io_at(debootstrap))?;
    let stderr_text = stderr_task.await.unwrap_or_default();
    bar.finish_and_clear();
    if !status.success() {
        tail.extend(
            stderr_text.lines().rev().take(20).map(str::to_string).collect::<Vec<_>>().into_iter().rev(),
        );
        return Err(ImageError::Command {
            command: format!("debootstrap {}", suite.codename()),
            status: status.to_string(),
            tail: tail.join("\n"),
        });
    }
    // Downloaded packages and index files are dead weight in the image.
    for dir in ["var/cache/apt/archives", "var/lib/apt/lists"] {
        if let Ok(entries) = std::fs::read_dir(rootfs.join(dir)) {
            for entry in entries.flatten() {
                if entry.path().is_file() {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
    }

    let bar = spinner(format!("importing the root filesystem as {tag}"));
    let mut tar = tokio::process::Command::new("tar")
        .args(["--numeric-owner", "--xattrs", "-C"])
        .arg(&rootfs)
        .args(["-c", "."])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(io_at(Path::new("tar")))?;
    let stdout = tar.stdout.take().ok_or_else(|| ImageError::Command {
        command: "tar".into(),
        status: "no stdout".into(),
        tail: String::new(),
    })?;
    let body = chunks(stdout);
    let (repo, tag_part) = tag.split_once(':').unwrap_or((tag, "latest"));
    let options = CreateImageOptionsBuilder::default()
        .from_src("-")
        .repo(repo)
        .tag(tag_part)
        .changes(vec![
            format!("LABEL {LABEL_OWNER}={OWNER} {LABEL_LAYER}=base {LABEL_INPUTS}={tag_part}"),
            "ENV LANG=C.UTF-8".to_string(),
            "CMD [\"/bin/bash\"]".to_string(),
        ])
        .build();
    let mut progress = docker.create_image(Some(options), Some(bollard::body_try_stream(body)), None);
    while let Some(item) = progress.next().await {
        item.map_err(api("import base image"))?;
    }
    let status = tar.wait().await.map_err(io_at(Path::new("tar")))?;
    bar.finish_and_clear();
    if !status.success() {
        return Err(ImageError::Command {
            command: "tar".into(),
            status: status.to_string(),
            tail: String::new(),
        });
    }
    Ok(())
}

/// Makes sure the default sandbox image (Debian base with python3, pytest and git, user
/// `sandbox` uid 1000, `/workspace` owned by it) exists, building what is missing, and
/// returns its tag. Cheap when everything is built: two image inspections.
pub async fn ensure_default_image(docker: &Docker) -> Result<String, ImageError> {
    ensure_suite_image(docker, DebianSuite::DEFAULT).await
}

/// The default image's layer on the base of `suite`: the same user and workspace, that
/// suite's Python.
pub async fn ensure_suite_image(docker: &Docker, suite: DebianSuite) -> Result<String, ImageError> {
    let base = ensure_base(docker, suite).await?;
    build_layer(
        docker,
        PYTHON_LAYER,
        vec![("Dockerfile".into(), PYTHON_DOCKERFILE.as_bytes().to_vec())],
        &base,
    )
    .await
}

/// One of our images, as `images list` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ImageRow {
    pub id: String,
    pub tags: Vec<String>,
    pub layer: String,
    pub size_bytes: i64,
    pub created: i64,
}

/// Every image carrying our owner label, newest first.
pub async fn list_images(docker: &Docker) -> Result<Vec<ImageRow>, ImageError> {
    let filters = HashMap::from([("label", vec![format!("{LABEL_OWNER}={OWNER}")])]);
    let options = ListImagesOptionsBuilder::default().filters(&filters).build();
    let mut rows: Vec<ImageRow> = docker
        .list_images(Some(options))
        .await
        .map_err(api("list images"))?
        .into_iter()
        .map(|s| ImageRow {
            id: s.id,
            tags: s.repo_tags.into_iter().filter(|t| t != "<none>:<none>").collect(),
            layer: s.labels.get(LABEL_LAYER).cloned().unwrap_or_default(),
            size_bytes: s.size,
            created: s.created,
        })
        .collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.created));
    Ok(rows)
}

/// What `prune` removed and what it had to keep.
#[derive(Debug, Default)]
pub struct PruneReport {
    pub removed: Vec<String>,
    /// Image and why it stayed (e.g. a container still uses it).
    pub kept: Vec<(String, String)>,
}

/// Removes our images that are no longer current: untagged ones, and base or default layers
/// whose tag is not the one today's inputs give. With `all`, removes every image of ours.
/// Images of other owners are never touched.
pub async fn prune_images(docker: &Docker, all: bool) -> Result<PruneReport, ImageError> {
    let mut current = Vec::new();
    for suite in DebianSuite::ALL {
        let base = base_tag(suite);
        if image_exists(docker, &base).await? {
            // The default layer's tag depends on the base id, so only compute it when the base exists.
            if let Ok(tag) = ensure_default_layer_tag(docker, &base).await {
                current.push(tag);
            }
        }
        current.push(base);
    }
    let mut report = PruneReport::default();
    // Children first (newest first), so parents are free when their turn comes.
    for row in list_images(docker).await? {
        let is_current = row.tags.iter().any(|t| current.contains(t));
        let ours_to_judge = row.layer == "base" || row.layer == PYTHON_LAYER || row.tags.is_empty();
        if !all && (is_current || !ours_to_judge) {
            continue;
        }
        let options = RemoveImageOptionsBuilder::default().force(false).build();
        let names = if row.tags.is_empty() { vec![row.id.clone()] } else { row.tags.clone() };
        for name in names {
            match docker.remove_image(&name, Some(options.clone()), None).await {
                Ok(_) => report.removed.push(name),
                Err(e) => report.kept.push((name, e.to_string())),
            }
        }
    }
    Ok(report)
}

/// The default image's tag and content id when this engine has it built (nothing is built).
pub async fn built_default_image(docker: &Docker) -> Result<Option<(String, String)>, ImageError> {
    let base = base_tag(DebianSuite::DEFAULT);
    if !image_exists(docker, &base).await? {
        return Ok(None);
    }
    let tag = ensure_default_layer_tag(docker, &base).await?;
    match docker.inspect_image(&tag).await {
        Ok(image) => Ok(image.id.map(|id| (tag, id))),
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => Ok(None),
        Err(e) => Err(ImageError::Api { op: "inspect image", source: e }),
    }
}

/// The tag the default layer would have on `base`, without building it.
async fn ensure_default_layer_tag(docker: &Docker, base: &str) -> Result<String, ImageError> {
    let parent_id =
        docker.inspect_image(base).await.map_err(api("inspect base image"))?.id.unwrap_or_default();
    let files = vec![("Dockerfile".to_string(), PYTHON_DOCKERFILE.as_bytes().to_vec())];
    Ok(format!("repairbench/{PYTHON_LAYER}:{}", layer_inputs_hash(&parent_id, &files)))
}
