//! Image layers described as values: a Dockerfile, its build context and its parent. A caller
//! says what an environment needs; the sandbox builds what is missing and reuses the rest
//! (tags hash every input, see [`super::images::build_layer`]).

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::time::Instant;

use crate::digest::Sha256Pieces;
use bollard::query_parameters::BuildImageOptionsBuilder;
use bollard::Docker;
use futures_util::StreamExt;

use super::archive::{tar_entries, Entry, Owner};
use super::docker::{LABEL_OWNER, OWNER};
use super::images::{
    api, build_lock, ensure_default_image, image_exists, io_at, spinner, ImageError, LABEL_INPUTS,
    LABEL_LAYER,
};

pub use crate::env::PASSED_BUILD_ARGS;

pub use super::docker::policy::{WORKSPACE_SEED, WORKSPACE_SEED_LABEL};

/// The last steps of a layer that prepared files in `/workspace` (run as root): they move to
/// [`WORKSPACE_SEED`] and `/workspace` is left empty, owned by the sandbox user.
pub fn workspace_seed_steps() -> String {
    format!(
        "RUN mkdir -p {parent} && rm -rf {WORKSPACE_SEED} && mv /workspace {WORKSPACE_SEED} \\\n    \
         && mkdir /workspace && chown sandbox:sandbox /workspace {WORKSPACE_SEED} && chmod 0755 /workspace\n\
         LABEL {WORKSPACE_SEED_LABEL}=1",
        parent = WORKSPACE_SEED.rsplit_once('/').map_or("/", |(p, _)| p),
    )
}

/// One layer to build.
#[derive(Debug, Clone)]
pub struct LayerSpec {
    /// The repository part of the tag: `repairbench/<name>:<inputs hash>`.
    pub name: String,
    /// The Dockerfile (`FROM ${BASE}`) and every other context file, sorted by path.
    pub files: LayerFiles,
    /// A host directory added to the context under `host/` (a toolchain, too big to hold in
    /// memory or to hash on every run).
    pub host_dir: Option<HostDir>,
    pub parent: ParentImage,
}

/// Parts of a host directory for a layer's context, streamed from disk at build time.
#[derive(Debug, Clone)]
pub struct HostDir {
    pub root: std::path::PathBuf,
    /// Paths under `root` (files or directories) to include.
    pub include: Vec<String>,
    /// What identifies the content (a toolchain's version output); the tag hashes this
    /// instead of the bytes.
    pub identity: String,
}

#[derive(Debug, Clone)]
pub enum ParentImage {
    /// The default sandbox image (built when missing).
    Default,
    /// The default image's layer on another Debian suite's base (another Python).
    Suite(super::images::DebianSuite),
    /// An image the engine has.
    Image(String),
    /// Another layer of ours, built first.
    Layer(Box<LayerSpec>),
}

impl LayerSpec {
    pub fn new(name: impl Into<String>, mut files: LayerFiles, parent: ParentImage) -> Self {
        files.sort();
        Self { name: name.into(), files, host_dir: None, parent }
    }

    pub fn with_host_dir(mut self, host_dir: HostDir) -> Self {
        self.host_dir = Some(host_dir);
        self
    }
}

/// Builds `spec` and every parent it needs, unless built; returns the tag.
pub async fn ensure_layer(docker: &Docker, spec: &LayerSpec) -> Result<String, ImageError> {
    let parent = match &spec.parent {
        ParentImage::Default => ensure_default_image(docker).await?,
        ParentImage::Suite(suite) => super::images::ensure_suite_image(docker, *suite).await?,
        ParentImage::Image(image) => image.clone(),
        ParentImage::Layer(parent) => Box::pin(ensure_layer(docker, parent)).await?,
    };
    match &spec.host_dir {
        None => build_layer_sorted(docker, &spec.name, &spec.files, &parent).await,
        Some(host_dir) => build_with_host_dir(docker, spec, host_dir, &parent).await,
    }
}

/// Builds a layer whose context holds a host directory: the context tar is written to a
/// temporary file and streamed to the engine.
async fn build_with_host_dir(
    docker: &Docker,
    spec: &LayerSpec,
    host_dir: &HostDir,
    parent: &str,
) -> Result<String, ImageError> {
    // The tag hashes what identifies the host directory, not its bytes.
    let mut marker = spec.files.clone();
    marker.push(("host/.identity".into(), host_dir.identity.clone().into_bytes()));
    marker.push(("host/.include".into(), host_dir.include.join("\n").into_bytes()));
    let (tag, inputs, _lock) = match claim(docker, &spec.name, &marker, parent).await? {
        Claim::Built(tag) => return Ok(tag),
        Claim::Build { tag, inputs, lock } => (tag, inputs, lock),
    };
    let dir = crate::env::cache_dir().join("contexts");
    std::fs::create_dir_all(&dir).map_err(io_at(&dir))?;
    let path = dir.join(format!("{}-{}.tar", spec.name, std::process::id()));
    let written = {
        let (path, files, host_dir) = (path.clone(), spec.files.clone(), host_dir.clone());
        tokio::task::spawn_blocking(move || write_context(&path, &files, &host_dir))
            .await
            .map_err(|e| ImageError::Io { path: dir.clone(), source: std::io::Error::other(e) })?
    };
    let result = match written {
        Ok(()) => match tokio::fs::File::open(&path).await {
            Ok(file) => {
                let body = super::images::chunks(file);
                run_build(docker, &spec.name, &tag, &inputs, parent, body).await
            }
            Err(e) => Err(ImageError::Io { path: path.clone(), source: e }),
        },
        Err(e) => Err(e),
    };
    let _ = std::fs::remove_file(&path);
    result
}

fn write_context(path: &Path, files: &LayerFiles, host_dir: &HostDir) -> Result<(), ImageError> {
    let file = std::fs::File::create(path).map_err(io_at(path))?;
    let mut builder = tar::Builder::new(std::io::BufWriter::new(file));
    builder.follow_symlinks(false);
    let io = |source| ImageError::Io { path: path.to_owned(), source };
    for (name, content) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder.append_data(&mut header, name, content.as_slice()).map_err(io)?;
    }
    for part in &host_dir.include {
        let source = host_dir.root.join(part);
        let name = format!("host/{part}");
        if source.is_dir() {
            builder.append_dir_all(&name, &source).map_err(io)?;
        } else {
            builder.append_path_with_name(&source, &name).map_err(io)?;
        }
    }
    builder.into_inner().map_err(io)?.into_inner().map_err(|e| io(e.into_error()))?.sync_all().map_err(io)
}

/// The files of a layer's build context, relative path and content, sorted by path.
pub type LayerFiles = Vec<(String, Vec<u8>)>;

/// Reads a layer directory (its Dockerfile and every other file) into memory.
pub fn read_layer_dir(dir: &Path) -> Result<LayerFiles, ImageError> {
    fn walk(root: &Path, dir: &Path, out: &mut LayerFiles) -> Result<(), ImageError> {
        for entry in std::fs::read_dir(dir).map_err(io_at(dir))? {
            let path = entry.map_err(io_at(dir))?.path();
            if path.is_dir() {
                walk(root, &path, out)?;
            } else {
                let mut content = Vec::new();
                std::fs::File::open(&path)
                    .and_then(|mut f| f.read_to_end(&mut content))
                    .map_err(io_at(&path))?;
                let rel = path.strip_prefix(root).unwrap_or(&path).to_string_lossy().replace('\\', "/");
                out.push((rel, content));
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    walk(dir, dir, &mut files)?;
    if !files.iter().any(|(p, _)| p == "Dockerfile") {
        return Err(ImageError::NoDockerfile(dir.to_path_buf()));
    }
    files.sort();
    Ok(files)
}

/// Builds (unless already built) a layer from `dir` on top of `parent` (tag or id), tagged
/// `repairbench/<name>:<hash>`. Returns the tag.
pub async fn build_layer_from_dir(
    docker: &Docker,
    name: &str,
    dir: &Path,
    parent: &str,
) -> Result<String, ImageError> {
    let files = read_layer_dir(dir)?;
    build_layer(docker, name, files, parent).await
}

/// Builds (unless already built) a layer from in-memory context files on top of `parent`.
/// The tag hashes the Dockerfile, every context file and the parent's image id, so a changed
/// parent rebuilds its children and nothing else does.
pub async fn build_layer(
    docker: &Docker,
    name: &str,
    mut files: LayerFiles,
    parent: &str,
) -> Result<String, ImageError> {
    files.sort();
    build_layer_sorted(docker, name, &files, parent).await
}

/// Whether a layer must be built.
enum Claim {
    /// It exists (perhaps built by another process while we waited for its lock).
    Built(String),
    /// Ours to build; the lock keeps other processes off this tag until the build ends.
    Build { tag: String, inputs: String, lock: std::fs::File },
}

/// The tag of the layer whose inputs are `files` on `parent`, and whether it still has to be
/// built. A tag that failed to build earlier in this process fails again without a build.
async fn claim(docker: &Docker, name: &str, files: &LayerFiles, parent: &str) -> Result<Claim, ImageError> {
    let parent_id =
        docker.inspect_image(parent).await.map_err(api("inspect parent image"))?.id.unwrap_or_default();
    let inputs = layer_inputs_hash(&parent_id, files);
    let tag = format!("repairbench/{name}:{inputs}");
    if let Some(failure) = failed_before(&tag) {
        return Err(failure);
    }
    if image_exists(docker, &tag).await? {
        return Ok(Claim::Built(tag));
    }
    let lock = build_lock(&tag).await?;
    if image_exists(docker, &tag).await? {
        return Ok(Claim::Built(tag));
    }
    Ok(Claim::Build { tag, inputs, lock })
}

/// [`build_layer`] for files already sorted by path.
pub(crate) async fn build_layer_sorted(
    docker: &Docker,
    name: &str,
    files: &LayerFiles,
    parent: &str,
) -> Result<String, ImageError> {
    let (tag, inputs, _lock) = match claim(docker, name, files, parent).await? {
        Claim::Built(tag) => return Ok(tag),
        Claim::Build { tag, inputs, lock } => (tag, inputs, lock),
    };

    let entries: Vec<Entry<'_>> =
        files.iter().map(|(path, content)| Entry { path, mode: 0o644, contents: Some(content) }).collect();
    let context =
        tar_entries(&entries, Owner::Root).map_err(|e| ImageError::Io { path: e.path, source: e.source })?;
    let body = futures_util::stream::once(async move { Ok(bytes::Bytes::from(context)) });
    run_build(docker, name, &tag, &inputs, parent, body).await
}

/// Sends one build to the engine and follows it to the end.
/// Builds that failed in this process, by tag: a failing environment shared by many instances
/// (or graded twice, as `swe validate` does) is tried once, not once per instance.
static FAILED_BUILDS: std::sync::Mutex<Vec<(String, FailedBuild)>> = std::sync::Mutex::new(Vec::new());

#[derive(Clone)]
struct FailedBuild {
    layer: String,
    step: Option<String>,
    message: String,
    log: String,
}

fn failed_before(tag: &str) -> Option<ImageError> {
    let failed = FAILED_BUILDS.lock().unwrap_or_else(|e| e.into_inner());
    failed.iter().find(|(t, _)| t == tag).map(|(_, f)| {
        let f = f.clone();
        ImageError::Build { layer: f.layer, step: f.step, message: f.message, log: f.log }
    })
}

async fn run_build(
    docker: &Docker,
    name: &str,
    tag: &str,
    inputs: &str,
    parent: &str,
    context: impl futures_util::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send + 'static,
) -> Result<String, ImageError> {
    let built = build_once(docker, name, tag, inputs, parent, context).await;
    if let Err(ImageError::Build { layer, step, message, log }) = &built {
        let failure = FailedBuild {
            layer: layer.clone(),
            step: step.clone(),
            message: message.clone(),
            log: log.clone(),
        };
        FAILED_BUILDS.lock().unwrap_or_else(|e| e.into_inner()).push((tag.to_owned(), failure));
    }
    built
}

async fn build_once(
    docker: &Docker,
    name: &str,
    tag: &str,
    inputs: &str,
    parent: &str,
    context: impl futures_util::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send + 'static,
) -> Result<String, ImageError> {
    tracing::info!(target: crate::PROGRESS, "repairbench: building image layer {tag} (from {parent})");
    let started = Instant::now();
    let bar = spinner(format!("building {tag}"));
    let labels = HashMap::from([
        (LABEL_OWNER.to_string(), OWNER.to_string()),
        (LABEL_LAYER.to_string(), name.to_string()),
        (LABEL_INPUTS.to_string(), inputs.to_string()),
    ]);
    let options = BuildImageOptionsBuilder::default()
        .dockerfile("Dockerfile")
        .t(tag)
        .rm(true)
        .forcerm(true)
        .buildargs(&build_args(parent))
        .labels(&labels)
        .build();
    let mut stream = docker.build_image(options, None, Some(bollard::body_try_stream(context)));
    let mut log = BuildLog::default();
    let failed = |log: &BuildLog, message: String| ImageError::Build {
        layer: name.to_string(),
        step: log.step.clone(),
        message: format!("{}\nlast output:\n{}", strip_ansi_escapes::strip_str(&message), log.tail(15)),
        log: log.text.clone(),
    };
    while let Some(item) = stream.next().await {
        let info = match item {
            Ok(info) => info,
            Err(e) => {
                bar.finish_and_clear();
                return Err(failed(&log, e.to_string()));
            }
        };
        if let Some(error) = info.error_detail.and_then(|d| d.message) {
            bar.finish_and_clear();
            log.push(&error);
            return Err(failed(&log, error));
        }
        if let Some(line) = info.stream {
            tracing::debug!(target: "repairbench::build", "{}", line.trim_end());
            if !line.trim().is_empty() {
                bar.set_message(format!("building {tag}: {}", line.trim()));
            }
            log.push(&line);
        }
    }
    bar.finish_and_clear();
    if !image_exists(docker, tag).await? {
        return Err(failed(&log, "the engine reported no error, but the image is missing".into()));
    }
    tracing::info!(target: crate::PROGRESS, "repairbench: image {tag} built in {:.1} s", started.elapsed().as_secs_f64());
    Ok(tag.to_string())
}

/// `BASE` (the parent) and the host settings layers may use ([`super::layers::PASSED_BUILD_ARGS`]).
fn build_args(parent: &str) -> HashMap<String, String> {
    let mut args = HashMap::from([("BASE".to_string(), parent.to_string())]);
    for name in super::layers::PASSED_BUILD_ARGS {
        if let Some(value) = crate::env::get(name) {
            args.insert(name.to_string(), value);
        }
    }
    args
}

/// The output of one image build, kept whole up to a cap, and the instruction running last.
#[derive(Default)]
struct BuildLog {
    text: String,
    step: Option<String>,
}

impl BuildLog {
    const CAP: usize = 4 << 20;

    fn tail(&self, lines: usize) -> String {
        let all: Vec<&str> = self.text.lines().filter(|l| !l.trim().is_empty()).collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    fn push(&mut self, line: &str) {
        let line = &strip_ansi_escapes::strip_str(line);
        // The classic builder announces each instruction as `Step N/M : INSTRUCTION`.
        if let Some((_, instruction)) = line.trim().strip_prefix("Step ").and_then(|l| l.split_once(" : ")) {
            self.step = Some(instruction.to_string());
        }
        if self.text.len() < Self::CAP {
            self.text.push_str(line);
        }
    }
}

/// Hash of a layer's inputs: the parent image id and every context file (path and content,
/// length-prefixed so no two different inputs collide by concatenation).
pub(crate) fn layer_inputs_hash(parent_id: &str, files: &LayerFiles) -> String {
    let mut hasher = Sha256Pieces::new();
    hasher.raw(parent_id);
    for (path, content) in files {
        hasher.framed(path).framed(content);
    }
    hasher.hex_prefix(8)
}
