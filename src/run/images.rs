//! `images` and `sandbox`: the commands that work the Docker engine directly, each one call
//! from the CLI. A plan goes in, what happened comes out; printing stays in the CLI.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::pipeline::{PipelineError, Session};
use crate::kernel::interrupt;
use crate::repair::prebuild::{self, PrebuiltEnvironment};
use crate::repair::GradeSettings;
use crate::sandbox::archive::{self, ArchiveError};
use crate::sandbox::docker::Reaped;
use crate::sandbox::images::{self, ImageError, ImageRow, PruneReport};
use crate::sandbox::output::OutputChunk;
use crate::sandbox::{EnvSpec, ExecResult, Job, Limits};

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error("images")]
    Image(#[from] ImageError),
    #[error("--copy-in {0}: not a folder")]
    CopyInNotAFolder(PathBuf),
    #[error("--copy-in")]
    CopyIn(#[from] ArchiveError),
    #[error("{0}")]
    Setting(&'static str),
}

/// What `images build` makes.
#[derive(Debug, Clone)]
pub enum ImageBuild {
    /// The default image: the Debian base, then the Python layer.
    Default,
    /// A layer folder (a Dockerfile with `FROM ${BASE}`) on `parent` (default: the default image).
    Layer { dir: PathBuf, name: String, parent: Option<String> },
}

/// `images build --dataset`: every environment (and service image) a dataset needs, built
/// before grading.
#[derive(Debug, Clone)]
pub struct EnvironmentBuildPlan {
    pub dataset: PathBuf,
    /// Repositories, as for `swe grade --repos`.
    pub repos: Option<PathBuf>,
    /// Environment specs, as for `swe grade --specs`.
    pub specs: Option<PathBuf>,
    pub url_template: Option<String>,
    pub cache_dir: PathBuf,
    /// Environments built at once.
    pub workers: usize,
}

/// repairbench's images, newest first.
pub fn list_images() -> Result<Vec<ImageRow>, ToolError> {
    let Session { runtime, sandbox } = Session::connect()?;
    Ok(runtime.block_on(images::list_images(sandbox.docker()))?)
}

/// Builds what is missing of `what`; returns its tag.
pub fn build_image(what: ImageBuild) -> Result<String, ToolError> {
    let Session { runtime, sandbox } = Session::connect()?;
    let docker = sandbox.docker();
    Ok(runtime.block_on(interrupt::until_stopped(async {
        match what {
            ImageBuild::Default => images::ensure_default_image(docker).await,
            ImageBuild::Layer { dir, name, parent } => {
                let parent = match parent {
                    Some(p) => p,
                    None => images::ensure_default_image(docker).await?,
                };
                images::build_layer_from_dir(docker, &name, &dir, &parent).await
            }
        }
    }))?)
}

/// Removes repairbench images that are no longer current (all of them with `all`).
pub fn prune_images(all: bool) -> Result<PruneReport, ToolError> {
    let Session { runtime, sandbox } = Session::connect()?;
    Ok(runtime.block_on(images::prune_images(sandbox.docker(), all))?)
}

/// Builds the environment of every instance of `plan.dataset`, `plan.workers` at once.
pub fn build_environments(plan: EnvironmentBuildPlan) -> Result<Vec<PrebuiltEnvironment>, ToolError> {
    if plan.workers == 0 {
        return Err(ToolError::Setting("--workers must be at least 1"));
    }
    let mut settings = GradeSettings::new(String::new());
    settings.workers = plan.workers;
    let session = Session::start(settings.timeout + Duration::from_secs(30 * 60))?;
    (settings.image, settings.image_id) = session.image(None)?;
    let mut tasks = crate::tasks::load_tasks(&plan.dataset)
        .map_err(|e| PipelineError::Swe(crate::repair::RunError::Dataset(e)))?;
    if let Some(path) = &plan.specs {
        let specs = crate::tasks::specs::SpecsFile::load(path)
            .map_err(|e| PipelineError::Swe(crate::repair::RunError::Specs(e)))?;
        specs.apply(&mut tasks.tasks);
    }
    for skipped in &tasks.skipped {
        tracing::warn!("skipped {}: {}", skipped.location, skipped.reason);
    }
    let locator =
        Arc::new(crate::tasks::RepoLocator::new(plan.repos, plan.url_template, plan.cache_dir.clone()));
    let sandbox = Arc::new(session.sandbox.clone());
    let logs = plan.cache_dir.join("logs").join("environments");
    let built = prebuild::prebuild(sandbox, tasks.tasks, locator, &settings, &logs);
    Ok(session.runtime.block_on(interrupt::until_stopped(built)))
}

/// `sandbox run`: one command in the hardened sandbox.
#[derive(Debug, Clone)]
pub struct SandboxRun {
    /// `None`: the default image, built when missing.
    pub image: Option<String>,
    pub limits: Limits,
    pub timeout: Duration,
    /// A folder copied into /workspace before the command.
    pub copy_in: Option<PathBuf>,
    pub cmd: Vec<String>,
}

/// Runs `run`, handing its output to `on_output` as it comes when given; returns the image it
/// ran in and the result.
pub fn run_in_sandbox(
    run: SandboxRun,
    on_output: Option<Box<dyn FnMut(OutputChunk) + Send>>,
) -> Result<(String, ExecResult), ToolError> {
    if !(run.limits.cpus.is_finite() && run.limits.cpus > 0.0) {
        return Err(ToolError::Setting("--cpus must be positive"));
    }
    let files_in = match &run.copy_in {
        Some(dir) if !dir.is_dir() => return Err(ToolError::CopyInNotAFolder(dir.clone())),
        Some(dir) => Some(archive::tar_dir(dir)?),
        None => None,
    };
    let Session { runtime, sandbox } = Session::connect()?;
    runtime.block_on(async {
        let image = match run.image {
            Some(image) => image,
            None => images::ensure_default_image(sandbox.docker()).await?,
        };
        let mut spec = EnvSpec::new(image.clone());
        spec.limits = run.limits;
        let job = Job {
            cmd: run.cmd,
            timeout: run.timeout,
            files_in,
            copy_out: None,
            copy_out_after_timeout: false,
        };
        let (sink, mut chunks) = tokio::sync::mpsc::unbounded_channel::<OutputChunk>();
        let printer = on_output.map(|mut on_output| {
            tokio::spawn(async move {
                while let Some(chunk) = chunks.recv().await {
                    on_output(chunk);
                }
            })
        });
        let sink = printer.is_some().then_some(sink);
        let outcome = interrupt::until_stopped(sandbox.run_job(&spec, &job, sink)).await;
        if let Some(printer) = printer {
            let _ = printer.await;
        }
        let output = outcome.map_err(PipelineError::from)?;
        Ok((image, output.result))
    })
}

/// Removes what crashed runs left (connecting does it) and says what that was.
pub fn reap() -> Result<Reaped, ToolError> {
    Ok(Session::connect()?.sandbox.reaped_at_connect().clone())
}
