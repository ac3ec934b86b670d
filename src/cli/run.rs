//! `repairbench run`: the default evaluation end to end (code repair and a HumanEval slice),
//! from a run configuration (embedded `harness/run.toml` unless --config is given).

use std::path::PathBuf;

use clap::Args;
use repairbench::run::config::RunConfig;
use repairbench::run::pipeline::{self, Completion};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Run configuration (TOML, as harness/run.toml); default: the embedded one.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Output folder (default: the configuration's `out`). Reusing it resumes.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the resolved configuration and exit.
    #[arg(long)]
    show_config: bool,
}

pub fn run(args: RunArgs) -> anyhow::Result<u8> {
    let config = match &args.config {
        Some(path) => RunConfig::load(path)?,
        None => RunConfig::embedded(),
    };
    if args.show_config {
        println!("{}", toml::to_string_pretty(&config)?);
        return Ok(super::EXIT_OK);
    }
    let out = args.out.clone().unwrap_or_else(|| config.out.clone());
    eprintln!("repairbench run: model {}, results in {}", config.model, out.display());
    let report = pipeline::run_default(&config, &out, repairbench::env::sandbox_workers()?)?;
    println!("== code repair ({})", config.repair.dataset.display());
    super::swe::print_summary(&report.repair, &report.repair_out);
    println!("== HumanEval (first {} problems)", config.humaneval.limit);
    super::eval::print_summary(&report.humaneval);
    Ok(super::exit_status(Completion::of_grade(&report.repair).and(Completion::of_eval(&report.humaneval))))
}
