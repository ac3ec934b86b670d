//! `--executor` and its companions, `executor check`, and the hidden `worker` a cluster job
//! runs.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use repairbench::executor::{self, ExecutorSpec};
use repairbench::repair::infer::InferPlan;
use repairbench::repair::remote::InferSettings;
use repairbench::repair::{GradePlan, GradeSettings};
use repairbench::run::pipeline;
use repairbench::tasks::PredictionSource;

/// `local` or `ray:http://HEAD:8265`.
fn parse_executor(text: &str) -> Result<ExecutorSpec, String> {
    ExecutorSpec::from_arg(text)
        .ok_or_else(|| format!("`{text}`: expected `local` or `ray:http://HEAD:8265`"))
}

#[derive(Debug, Args)]
pub struct ExecutorArgs {
    /// Where items are computed: `local`, or `ray:http://HEAD:8265` (a Ray cluster's jobs
    /// API; each worker node needs a Docker engine; see the README's "Scaling out").
    #[arg(long, default_value = "local", value_parser = parse_executor)]
    executor: ExecutorSpec,
    /// Items per cluster job (default: 1 instance for `swe`, 64 items for `eval`).
    #[arg(long)]
    unit_size: Option<usize>,
    /// Cluster jobs in flight at most (default: the cluster's `repairbench` slots).
    #[arg(long)]
    max_inflight: Option<usize>,
    /// Submissions again of a job whose node was lost, before its instances get `error`.
    #[arg(long, default_value_t = 2)]
    retries: u32,
}

impl ExecutorArgs {
    /// The executor, with `default_unit` items per job unless `--unit-size` says.
    pub fn resolve(&self, default_unit: usize) -> anyhow::Result<pipeline::Executor> {
        if self.unit_size == Some(0) {
            anyhow::bail!("--unit-size must be at least 1");
        }
        Ok(pipeline::Executor {
            spec: self.executor.clone(),
            unit_size: self.unit_size.unwrap_or(default_unit),
            max_inflight: self.max_inflight,
            retries: self.retries,
        })
    }
}

#[derive(Debug, Subcommand)]
pub enum ExecutorCommand {
    /// List a Ray cluster's alive nodes, their `repairbench` slots, and whether each node with
    /// slots has a Docker engine, git and a glibc as new as this machine's. Exits 1 if a node
    /// with slots lacks one, or no node has slots.
    Check {
        /// `ray:http://HEAD:8265`
        #[arg(value_parser = parse_executor)]
        executor: ExecutorSpec,
    },
}

pub fn run(cmd: ExecutorCommand) -> anyhow::Result<u8> {
    let ExecutorCommand::Check { executor } = cmd;
    let ExecutorSpec::Ray(url) = executor else {
        anyhow::bail!("`executor check` checks a cluster: give ray:http://HEAD:8265");
    };
    let checks = pipeline::check_cluster(&url)?;
    let mut slots = 0.0;
    let mut ok = true;
    for check in &checks {
        let node = &check.node;
        if !node.alive {
            continue;
        }
        slots += node.slots;
        ok &= check.ok;
        let role = if node.is_head { "head" } else { "worker" };
        let state = if check.ok { "ok" } else { "NOT READY" };
        println!(
            "{state:10} {role:6} {} {} slots={}",
            node.ip,
            &node.node_id[..node.node_id.len().min(12)],
            node.slots
        );
        if let Some(probe) = &check.probe {
            println!("           {probe}");
        }
        match check.image {
            Some(executor::ImageCheck::Same) => println!("           the default image: the same as here"),
            Some(executor::ImageCheck::Missing) => println!(
                "           the default image: MISSING (records are fingerprinted by its content id: `docker save` it here and `docker load` it there; one built there would differ)"
            ),
            Some(executor::ImageCheck::Differs) => println!(
                "           the default image: ANOTHER BUILD (its content id differs from here: `docker save` it here and `docker load` it there)"
            ),
            None => {}
        }
    }
    println!("{} alive nodes, {slots} repairbench slots", checks.iter().filter(|c| c.node.alive).count());
    if slots < 1.0 {
        println!("no node offers slots: start workers with ray start --address=HEAD:6379 --resources='{{\"{}\": SLOTS}}'", executor::SLOT_RESOURCE);
        ok = false;
    }
    Ok(if ok { super::EXIT_OK } else { super::EXIT_ERROR })
}

#[derive(Debug, Subcommand)]
pub enum WorkerCommand {
    /// Grade one unit of a cluster run (what each Ray job runs, inside the run's package).
    Grade(WorkerGradeArgs),
    /// Evaluate one unit of a suite run on a cluster.
    Eval(WorkerEvalArgs),
    /// Generate the predictions of one unit of an inference run on a cluster.
    Infer(WorkerInferArgs),
}

/// The dataset in the package, and where repositories are found, as on the coordinator.
#[derive(Debug, Args)]
pub struct WorkerDatasetArgs {
    #[arg(long)]
    dataset: PathBuf,
    #[arg(long)]
    repos: Option<PathBuf>,
    #[arg(long)]
    url_template: Option<String>,
    /// The coordinator's environment specs (grading only).
    #[arg(long)]
    specs: Option<PathBuf>,
    #[command(flatten)]
    perturb: super::swe::PerturbArgs,
}

#[derive(Debug, Args)]
pub struct WorkerInferArgs {
    #[command(flatten)]
    data: WorkerDatasetArgs,
    /// The coordinator's inference settings (JSON).
    #[arg(long)]
    settings: PathBuf,
    #[command(flatten)]
    model: super::ModelArgs,
    /// The coordinator's model hash: a worker whose model differs stops before any item.
    #[arg(long)]
    model_sha256: String,
    /// An instance of the unit (repeated).
    #[arg(long)]
    only: Vec<String>,
}

/// Items per cluster job: one repair instance (minutes each), 64 suite items (seconds each).
pub const SWE_UNIT: usize = 1;
pub const EVAL_UNIT: usize = 64;

#[derive(Debug, Args)]
pub struct WorkerEvalArgs {
    /// The suite file.
    #[arg(long)]
    suite: PathBuf,
    /// The test file (the few-shot file, if any, beside it).
    #[arg(long)]
    data: PathBuf,
    #[arg(long)]
    samples: Option<PathBuf>,
    #[arg(long)]
    canonical: bool,
    #[arg(long, default_value = "lm-eval", value_parser = repairbench::model::Boundary::parse_name)]
    boundary: repairbench::model::Boundary,
    #[arg(long)]
    shots: Option<usize>,
    #[arg(long, value_delimiter = ',')]
    seeds: Vec<u64>,
    #[arg(long)]
    batch: usize,
    #[arg(long)]
    workers: usize,
    #[command(flatten)]
    model: super::ModelArgs,
    /// The coordinator's model hash: a worker whose model differs stops before any item.
    #[arg(long)]
    model_sha256: Option<String>,
    /// An item of the unit, `SEED:DOC_ID` (repeated).
    #[arg(long)]
    only: Vec<String>,
}

#[derive(Debug, Args)]
pub struct WorkerGradeArgs {
    #[command(flatten)]
    data: WorkerDatasetArgs,
    #[arg(long)]
    predictions: PathBuf,
    /// The coordinator's grading settings (JSON).
    #[arg(long)]
    settings: PathBuf,
    /// An instance of the unit (repeated).
    #[arg(long)]
    only: Vec<String>,
}

pub fn run_worker(cmd: WorkerCommand) -> anyhow::Result<u8> {
    let args = match cmd {
        WorkerCommand::Grade(args) => args,
        WorkerCommand::Eval(args) => return run_eval_worker(args),
        WorkerCommand::Infer(args) => return run_infer_worker(args),
    };
    let settings: GradeSettings = read_settings(&args.settings, "grading settings")?;
    let out = std::env::temp_dir().join(format!("repairbench-worker-{}", std::process::id()));
    let plan = GradePlan {
        dataset: args.data.dataset,
        predictions: PredictionSource::File(args.predictions),
        repos: args.data.repos,
        url_template: args.data.url_template,
        cache_dir: repairbench::env::cache_dir(),
        out: out.clone(),
        settings,
        extra_manifest: Default::default(),
        force: true,
        specs: args.data.specs,
        perturb: args.data.perturb.spec(),
    };
    let graded = pipeline::grade_worker(plan, &args.only);
    let _ = std::fs::remove_dir_all(&out);
    graded?;
    Ok(super::EXIT_OK)
}

fn run_eval_worker(args: WorkerEvalArgs) -> anyhow::Result<u8> {
    let out = std::env::temp_dir().join(format!("repairbench-worker-{}", std::process::id()));
    let plan = pipeline::EvalPlan {
        suite: repairbench::suites::Suite::load(&args.suite)?,
        options: repairbench::suites::EvalOptions {
            data: Some(args.data),
            samples: args.samples,
            canonical: args.canonical,
            boundary: args.boundary,
            shots: args.shots,
            seeds: args.seeds,
            code_batch: args.batch.max(1),
            only: Some(args.only.into_iter().collect()),
            perturb: None,
            ..repairbench::suites::EvalOptions::new(&out)
        },
        model: pipeline::ModelChoice { expected_sha256: args.model_sha256, ..args.model.choice() },
        workers: args.workers.max(1),
        executor: pipeline::Executor::local(),
    };
    let evaluated = pipeline::eval_worker(plan);
    let _ = std::fs::remove_dir_all(&out);
    evaluated?;
    Ok(super::EXIT_OK)
}

/// A settings file the coordinator put in the package.
fn read_settings<T: serde::de::DeserializeOwned>(path: &std::path::Path, what: &str) -> anyhow::Result<T> {
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: not {what}: {e}", path.display()))
}

fn run_infer_worker(args: WorkerInferArgs) -> anyhow::Result<u8> {
    let settings: InferSettings = read_settings(&args.settings, "inference settings")?;
    let out = std::env::temp_dir().join(format!("repairbench-worker-{}", std::process::id()));
    let plan = InferPlan {
        dataset: args.data.dataset,
        repos: args.data.repos,
        url_template: args.data.url_template,
        cache_dir: repairbench::env::cache_dir(),
        out: out.join("predictions.jsonl"),
        prompt: settings.prompt,
        max_tokens: settings.max_tokens,
        sampling: settings.sampling,
        force: true,
        only: Some(args.only.into_iter().collect()),
        perturb: args.data.perturb.spec(),
    };
    let model = pipeline::ModelChoice { expected_sha256: Some(args.model_sha256), ..args.model.choice() };
    let inferred = pipeline::infer_worker(plan, &model);
    let _ = std::fs::remove_dir_all(&out);
    inferred?;
    Ok(super::EXIT_OK)
}
