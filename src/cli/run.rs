//! `repairbench run`: the default evaluation end to end (code repair and a HumanEval slice), from a run configuration (embedded
//! `harness/run.toml` unless --config is given).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use repairbench::model::Sampling;
use repairbench::run::config::RunConfig;
use repairbench::run::swe::{GradePlan, GradeSettings};
use repairbench::run::swe_infer::InferPlan;
use repairbench::tasks::prompt::PromptSettings;
use repairbench::tasks::PredictionSource;

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
    if !config.repair.dataset.exists() {
        anyhow::bail!(
            "repair dataset {} not found (run from the repository root, or set [repair] dataset in a --config file)",
            config.repair.dataset.display()
        );
    }
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let sampling = Sampling { seed: config.seed, ..Sampling::GREEDY };

    eprintln!("repairbench run: model {}, results in {}", config.model, out.display());
    let mut model = super::swe::load_model(Some(&config.model))?;
    let info = model.info().clone();

    // 1. The model writes a patch for each sample issue.
    let repair_out = out.join("repair");
    std::fs::create_dir_all(&repair_out).with_context(|| format!("creating {}", repair_out.display()))?;
    let predictions = repair_out.join("predictions.jsonl");
    let infer_plan = InferPlan {
        dataset: config.repair.dataset.clone(),
        repos: None,
        url_template: None,
        cache_dir: repairbench::env::cache_dir(),
        out: predictions.clone(),
        prompt: PromptSettings {
            retrieval: config.repair.retrieval,
            max_files: config.repair.max_files,
            max_file_chars: config.repair.max_file_chars,
        },
        max_tokens: config.repair.max_tokens,
        sampling,
        force: false,
    };
    super::swe::infer(model.as_mut(), &infer_plan)?;

    // 2. The same model solves a slice of HumanEval; completions run in the sandbox.
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let runner = repairbench::suites::docker_runner(&runtime, 2)?;
    let humaneval = repairbench::suites::humaneval_slice(
        model.as_mut(),
        &runner,
        config.humaneval.limit,
        &out.join("humaneval"),
    )?;
    drop((runner, runtime, model));

    // 3. Each patch is graded in the sandbox.
    let mut settings = GradeSettings::new(String::new());
    settings.timeout = Duration::from_secs_f64(config.repair.timeout_s);
    let mut plan = GradePlan {
        dataset: config.repair.dataset.clone(),
        predictions: PredictionSource::File(predictions),
        repos: None,
        url_template: None,
        cache_dir: repairbench::env::cache_dir(),
        out: repair_out.clone(),
        settings,
        extra_manifest: Default::default(),
        force: false,
    };
    plan.extra_manifest.insert("model".into(), serde_json::to_value(&info)?);
    plan.extra_manifest.insert("run_config".into(), serde_json::to_value(&config)?);
    let report = super::swe::grade(plan)?;

    println!("== code repair ({})", config.repair.dataset.display());
    super::swe::print_summary(&report, &repair_out);
    println!("== HumanEval (first {} problems)", config.humaneval.limit);
    super::eval::print_summary(&humaneval);
    Ok(super::EXIT_OK)
}
