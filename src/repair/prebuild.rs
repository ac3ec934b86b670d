//! An instance's environment image ([`environment_image`]), and `images build --dataset`: every
//! environment (and service image) a dataset needs built before any grading, at
//! most `workers` at once, with a progress bar. Instances that share an environment share its
//! image (the build of a tag already made or under way is not repeated).

use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use crate::kernel::scheduler::run_pool;
use crate::sandbox::Sandbox;
use crate::tasks::{RepoLocator, SweTask};

use super::services::environment_and_services;
use super::{safe_name, GradeSettings};

/// One instance's environment.
#[derive(Debug, Clone, Serialize)]
pub struct PrebuiltEnvironment {
    pub instance_id: String,
    /// The image its tests run in.
    pub image: Option<String>,
    pub runner: Option<crate::grade::runners::RunnerKind>,
    /// Why there is none (`environment_build_failed: ...`).
    pub error: Option<String>,
}

/// Builds the environment of every task; build logs of failures go to
/// `log_root/INSTANCE/environment_build.log`.
pub async fn prebuild<S: Sandbox + 'static>(
    sandbox: Arc<S>,
    tasks: Vec<SweTask>,
    locator: Arc<RepoLocator>,
    settings: &GradeSettings,
    log_root: &Path,
) -> Vec<PrebuiltEnvironment> {
    let bar = indicatif::ProgressBar::new(tasks.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("environments [{bar:30}] {pos}/{len} {elapsed} {wide_msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let ids: Vec<String> = tasks.iter().map(|t| t.instance_id.clone()).collect();
    let settings = Arc::new(settings.clone());
    let log_root = Arc::new(log_root.to_owned());
    let done = run_pool(
        tasks,
        settings.workers,
        |_, task: SweTask| {
            let (sandbox, locator, settings, log_root) =
                (sandbox.clone(), locator.clone(), settings.clone(), log_root.clone());
            async move {
                let log_dir = log_root.join(safe_name(&task.instance_id));
                // The task's service images too, so grading builds nothing.
                let built = environment_and_services(&*sandbox, &locator, &settings, &task, &log_dir).await;
                Ok::<_, std::convert::Infallible>(match built {
                    Ok((super::EnvironmentImage { image, runner, .. }, _)) => PrebuiltEnvironment {
                        instance_id: task.instance_id,
                        image: Some(image),
                        runner: Some(runner),
                        error: None,
                    },
                    Err((reason, why)) => PrebuiltEnvironment {
                        instance_id: task.instance_id,
                        image: None,
                        runner: None,
                        error: Some(format!("{reason}: {why}")),
                    },
                })
            }
        },
        |_, row| {
            bar.inc(1);
            if let Ok(row) = row {
                bar.set_message(row.instance_id.clone());
            }
        },
    )
    .await;
    bar.finish_and_clear();
    done.into_iter()
        .zip(ids)
        .map(|(row, instance_id)| match row {
            Ok(row) => row,
            Err(e) => PrebuiltEnvironment {
                instance_id,
                image: None,
                runner: None,
                error: Some(format!("internal error: {e}")),
            },
        })
        .collect()
}

/// The image an instance's tests run in, its runner, and for a Python runner the Python chosen
/// with the reason.
pub struct EnvironmentImage {
    pub image: String,
    pub runner: crate::grade::runners::RunnerKind,
    pub python: Option<String>,
    /// The time a built Python environment's packages are resolved as of.
    pub packages_as_of: Option<String>,
}

/// Plans `task`'s environment and makes sure its image exists (building it when needed); a
/// failure is a reason (`environment_unknown`, `environment_build_failed`) and its detail.
pub async fn environment_image<S: Sandbox>(
    sandbox: &S,
    locator: &Arc<RepoLocator>,
    settings: &GradeSettings,
    task: &SweTask,
    log_dir: &Path,
) -> Result<EnvironmentImage, (&'static str, String)> {
    let planned = {
        let (locator, task) = (locator.clone(), task.clone());
        tokio::task::spawn_blocking(move || super::prepare::plan_environment(&locator, &task)).await
    };
    let environment = match planned {
        Ok(Ok(environment)) => environment,
        Ok(Err(why)) => return Err(("environment_unknown", crate::error_chain(&why))),
        Err(e) => return Err(("environment_unknown", format!("internal error while planning: {e}"))),
    };
    let found = |image| EnvironmentImage {
        image,
        runner: environment.runner,
        python: environment.python.as_ref().map(ToString::to_string),
        packages_as_of: environment.packages_as_of.clone(),
    };
    match environment.image {
        super::environment::ImageChoice::RunImage => Ok(found(settings.image.clone())),
        super::environment::ImageChoice::Given(ref image) => Ok(found(image.clone())),
        super::environment::ImageChoice::Build(ref layer) => match sandbox.ensure_layer(layer).await {
            Ok(tag) => Ok(found(tag)),
            Err(e) => {
                if let crate::sandbox::ImageError::Build { log, .. } = &e {
                    let _ = std::fs::create_dir_all(log_dir);
                    let _ = std::fs::write(log_dir.join("environment_build.log"), log);
                }
                Err(("environment_build_failed", crate::error_chain(&e)))
            }
        },
    }
}
