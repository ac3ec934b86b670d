//! The cluster side of the pipeline: reaching the cluster a run names, and the hidden
//! `worker` commands a cluster job runs (one unit of a grading, inference or suite run, each
//! record printed as a frame).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::pipeline::{
    create_dir, eval_with, grade_env_lifetime, load_model, EvalPlan, ModelChoice, PipelineError, Session,
};
use crate::executor::{ExecutorSpec, RayExecutor, RaySettings};
use crate::kernel::interrupt;
use crate::repair::infer::{self, InferPlan};
use crate::repair::{self, GradePlan};
use crate::report::Reporter;
use crate::sandbox::images;
use crate::suites;
use crate::tasks::PredictionSource;

/// The cluster `executor` names, reached and its token taken (`None`: run here). Called
/// first, so that a wrong address fails before any image is built or model loaded.
pub(super) fn connect_cluster(
    executor: &Executor,
    out: &Path,
) -> Result<Option<crate::executor::RayRun>, PipelineError> {
    let ExecutorSpec::Ray(url) = &executor.spec else { return Ok(None) };
    let settings = RaySettings {
        url: url.clone(),
        max_inflight: executor.max_inflight,
        retries: executor.retries,
        poll: Duration::from_millis(250),
    };
    let token = crate::env::get(crate::env::RAY_AUTH_TOKEN).map(crate::http::Secret::new);
    let ray = RayExecutor::new(settings, token, crate::executor::run_id(out))?;
    ray.total_slots()?;
    // On a signal, the jobs in flight are stopped before the process exits.
    let (in_flight, client) = (ray.in_flight.clone(), ray.client.clone());
    interrupt::on_stop(move || in_flight.stop_all(&client, Duration::from_secs(10)));
    let exe = std::env::current_exe()
        .map_err(|source| PipelineError::Io { path: "<this executable>".into(), source })?;
    Ok(Some(crate::executor::RayRun { executor: ray, unit_size: executor.unit_size, exe }))
}

/// Where a run's items go, and how they are sent (`--executor`, `--unit-size`,
/// `--max-inflight`, `--retries`).
#[derive(Debug, Clone)]
pub struct Executor {
    pub spec: ExecutorSpec,
    /// Items per job.
    pub unit_size: usize,
    /// Jobs in flight at most (`None`: the cluster's slots).
    pub max_inflight: Option<usize>,
    /// Submissions again of a unit whose node was lost.
    pub retries: u32,
}

impl Executor {
    pub fn local() -> Self {
        Self { spec: ExecutorSpec::Local, unit_size: 1, max_inflight: None, retries: 2 }
    }
}

/// `worker grade`: one unit of a cluster run, on this node. `settings` are the coordinator's
/// (its image and image id, so fingerprints agree); each finished instance goes to standard
/// output as a frame. Its containers go when Ray's supervisor dies (parent-death signal).
pub fn grade_worker(mut plan: GradePlan, only: &[String]) -> Result<(), PipelineError> {
    die_with_parent();
    let session = Session::start(grade_env_lifetime(&plan.settings))?;
    let wanted = plan.settings.image.clone();
    let docker = session.sandbox.docker();
    let present = session
        .runtime
        .block_on(images::image_exists(docker, &wanted))
        .map_err(|source| PipelineError::ImageCheck { image: wanted.clone(), source })?;
    if !present {
        // The coordinator's image is the default one whenever it names no other: build it.
        let (default, _) = session.image(None)?;
        if default != wanted {
            return Err(PipelineError::NodeLacksImage { wanted, built: default });
        }
    }
    // Only the unit's instances: a predictions file of those alone.
    let PredictionSource::File(all) = &plan.predictions else {
        return Err(PipelineError::NoDataset(plan.dataset.clone()));
    };
    let text =
        std::fs::read_to_string(all).map_err(|source| PipelineError::Io { path: all.clone(), source })?;
    let keep: std::collections::BTreeSet<&str> = only.iter().map(String::as_str).collect();
    let unit: String = text
        .lines()
        .filter(|line| {
            serde_json::from_str::<crate::tasks::Prediction>(line)
                .is_ok_and(|p| keep.contains(p.instance_id.as_str()))
        })
        .map(|line| format!("{line}\n"))
        .collect();
    let unit_file = plan.out.join("unit-predictions.jsonl");
    create_dir(&plan.out)?;
    std::fs::write(&unit_file, unit)
        .map_err(|source| PipelineError::Io { path: unit_file.clone(), source })?;
    plan.predictions = PredictionSource::File(unit_file);
    plan.settings.workers = 1;
    plan.force = true;
    let sandbox = Arc::new(session.sandbox.clone());
    let mut frames = repair::remote::worker_frames(plan.out.clone());
    let graded = repair::grade(repair::Grader::Local(sandbox), &plan, &mut frames as &mut dyn Reporter<_>);
    session.runtime.block_on(interrupt::until_stopped(graded))?;
    Ok(())
}

/// How long `executor check` waits for its probe jobs. A node that has just joined can take
/// most of a minute to start its first job on a loaded machine (its agents start after the
/// node registers), and a check that gives up too early reports a node as not ready.
const PROBE_WAIT: Duration = Duration::from_secs(180);

/// `executor check`: the cluster's nodes, each with slots probed by a job on it.
pub fn check_cluster(url: &str) -> Result<Vec<crate::executor::NodeCheck>, PipelineError> {
    let token = crate::env::get(crate::env::RAY_AUTH_TOKEN).map(crate::http::Secret::new);
    let client =
        crate::executor::ray::RayClient::new(url, token).map_err(crate::executor::ExecutorError::from)?;
    // The coordinator's glibc: the executable the workers run was linked against it.
    let glibc = std::process::Command::new("ldd")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| crate::executor::glibc_version(String::from_utf8_lossy(&o.stdout).lines().next()?));
    // The default image built here, if any: each node must hold the very same one.
    let image = match Session::connect() {
        Ok(session) => session
            .runtime
            .block_on(images::built_default_image(session.sandbox.docker()))
            .map_err(PipelineError::DefaultImage)?,
        Err(e) => {
            tracing::warn!(
                "no Docker engine here, so the nodes' images are not compared: {}",
                crate::error_chain(&e)
            );
            None
        }
    };
    Ok(crate::executor::check(&client, PROBE_WAIT, glibc, image.as_ref())?)
}

/// Asks the kernel to send this process SIGTERM when its parent dies (Linux), so a worker
/// whose Ray supervisor was killed still removes its containers.
fn die_with_parent() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
    }
}

/// `worker infer`: one unit of a cluster inference run (`plan.only`), generated again whatever
/// `plan.out` holds; each prediction goes to standard output as a frame.
pub fn infer_worker(mut plan: InferPlan, model: &ModelChoice) -> Result<(), PipelineError> {
    die_with_parent();
    plan.force = true;
    let mut model = load_model(model)?;
    let mut frames = crate::executor::frame::FrameWriter::new(|_: &crate::tasks::Prediction| None);
    infer::infer(model.as_mut(), &plan, &mut frames)?;
    Ok(())
}

/// A worker's model flags besides the model itself: how `choice` drives it.
pub fn model_worker_flags(choice: &ModelChoice) -> Vec<String> {
    vec![
        "--decode-batch".into(),
        choice.batch.to_string(),
        "--concurrency".into(),
        choice.remote.concurrency.to_string(),
        "--request-timeout".into(),
        choice.remote.timeout.as_secs().max(1).to_string(),
    ]
}

/// The flags a cluster worker needs to evaluate as `plan` does (the files travel apart).
pub(super) fn eval_worker_args(plan: &EvalPlan) -> Vec<String> {
    let options = &plan.options;
    let seeds: Vec<String> = options.seeds.iter().map(u64::to_string).collect();
    let mut args = vec!["--seeds".into(), seeds.join(","), "--batch".into(), options.code_batch.to_string()];
    args.extend(["--workers".into(), plan.workers.to_string()]);
    args.extend(model_worker_flags(&plan.model));
    if let Some(shots) = options.shots {
        args.extend(["--shots".into(), shots.to_string()]);
    }
    if options.canonical {
        args.push("--canonical".into());
    }
    args.extend(["--boundary".into(), options.boundary.as_str().into()]);
    args
}

/// `worker eval`: one unit of a cluster run (`plan.options.only`), on this node, computed
/// again whatever its folder holds; each record goes to standard output as a frame.
pub fn eval_worker(mut plan: EvalPlan) -> Result<(), PipelineError> {
    die_with_parent();
    plan.options.force = true;
    let mut frames = crate::executor::frame::FrameWriter::new(|_: &suites::SampleRecord| None);
    eval_with(&plan, &mut frames, None).map(drop)
}
