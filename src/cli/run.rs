//! `repairbench run`: the main job end to end (a harness check, then the model on code repair
//! and a HumanEval slice), from a run configuration (embedded `harness/run.toml` unless
//! --config is given).

use std::path::PathBuf;

use clap::Args;
use repairbench::run::config::RunConfig;
use repairbench::run::main_job::{self, HarnessCheck};
use repairbench::run::pipeline::Completion;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Run configuration (TOML, as harness/run.toml); default: the embedded one.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The model instead of the configuration's: a GGUF path, hf:OWNER/REPO/FILE,
    /// pip:PACKAGE/PATH-IN-WHEEL, or openai:BASE_URL for a served one.
    #[arg(long)]
    model: Option<String>,
    /// Output folder (default: the configuration's `out`). Reusing it resumes.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the resolved configuration and exit.
    #[arg(long)]
    show_config: bool,
}

pub fn run(args: RunArgs) -> anyhow::Result<u8> {
    let mut config = match &args.config {
        Some(path) => RunConfig::load(path)?,
        None => RunConfig::embedded(),
    };
    if let Some(model) = &args.model {
        config.model = model.clone();
    }
    if args.show_config {
        println!("{}", toml::to_string_pretty(&config)?);
        return Ok(super::EXIT_OK);
    }
    let out = args.out.clone().unwrap_or_else(|| config.out.clone());
    eprintln!("repairbench run: model {}, results in {}", config.model, out.display());
    let report = main_job::main_job(&config, &out, repairbench::env::sandbox_workers()?, &mut print_check)?;
    println!("== code repair ({})", config.repair.dataset.display());
    super::swe::print_summary(&report.repair, &report.repair_out);
    println!("== HumanEval (first {} problems)", config.humaneval.limit);
    super::eval::print_summary(&report.humaneval);
    let completion = Completion::of_grade(&report.repair).and(Completion::of_eval(&report.humaneval));
    Ok(match report.check.ok() {
        true => super::exit_status(completion),
        false => super::EXIT_INFRASTRUCTURE,
    })
}

/// `harness check: gold 11/11 resolved, no-patch 0/11 resolved, canonical 5/5 passed: OK`, and
/// when it fails, each instance or problem that did not come out as it must.
fn print_check(check: &HarnessCheck) {
    println!(
        "== harness check (the same tasks with their gold patches, with no patch, and HumanEval's canonical solutions)"
    );
    let line = check.summary();
    if check.ok() {
        println!("harness check: {line}: OK");
        return;
    }
    println!("harness check FAILED: {line}");
    for failure in check.failures() {
        println!("  {failure}");
    }
    println!("  (the harness is broken here, so the model's results below do not measure the model)");
}
