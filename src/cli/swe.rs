//! `swe grade`, `swe infer`, `swe run`, `swe validate`, `swe specs import`: flags resolved into
//! plans for [`pipeline`].

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use repairbench::grade::Verdict;
use repairbench::model::Sampling;
use repairbench::repair::infer::InferPlan;
use repairbench::repair::{self, GradePlan, GradeReport, GradeSettings};
use repairbench::run::pipeline::{self, Completion, SweRunPlan};
use repairbench::sandbox::Limits;
use repairbench::tasks::prompt::{PromptSettings, Retrieval};
use repairbench::tasks::{specs, PredictionSource};

#[derive(Debug, Subcommand)]
pub enum SweCommand {
    /// Grade predictions (a SWE-bench predictions file, `gold` or `empty`) in the sandbox.
    Grade(GradeArgs),
    /// Ask a model for a patch per task; write a SWE-bench predictions file.
    Infer(InferArgs),
    /// Infer, then grade: OUT/predictions.jsonl, then the grade outputs in OUT.
    Run(RunArgs),
    /// Check that each instance is a fair task: gold resolves it, and without a patch every
    /// FAIL_TO_PASS test fails while PASS_TO_PASS passes. Writes OUT/validation.json (and the
    /// two grading runs under OUT/gold and OUT/unpatched); exits 5 if any instance is invalid.
    Validate(ValidateArgs),
    /// Environment specs per repository and version.
    #[command(subcommand)]
    Specs(SpecsCommand),
}

#[derive(Debug, Subcommand)]
pub enum SpecsCommand {
    /// Write SWE-bench's per-(repository, version) specs as a specs file for `--specs`: from the
    /// `swebench` package installed for PYTHON (4.x ships them), or from a JSON export.
    Import(SpecsImportArgs),
}

#[derive(Debug, Args)]
pub struct SpecsImportArgs {
    /// The Python whose installed `swebench` package is read.
    #[arg(long, default_value = "python3", conflicts_with = "from")]
    python: String,
    /// A JSON export instead: `{"specs": MAP_REPO_VERSION_TO_SPECS, "requirement_paths":
    /// MAP_REPO_TO_REQS_PATHS, "source": "..."}`, or the bare table.
    #[arg(long)]
    from: Option<PathBuf>,
    /// The specs file to write.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    data: DatasetArgs,
    #[command(flatten)]
    options: GradeOptions,
    #[arg(long)]
    out: PathBuf,
}

#[derive(Debug, Args)]
pub struct DatasetArgs {
    /// SWE-bench instances (JSON or JSONL), a task folder, or a folder of task folders (`issues/`).
    #[arg(long)]
    dataset: PathBuf,
    /// Repositories as DIR/OWNER/NAME (bare or not) or DIR/OWNER/NAME.bundle.
    #[arg(long)]
    repos: Option<PathBuf>,
    /// URL for repositories not found locally; {repo}, {owner} and {name} are replaced
    /// (default: GitHub over https, cloned with the git CLI into the cache).
    #[arg(long, env = repairbench::env::REPO_URL_TEMPLATE)]
    url_template: Option<String>,
    /// Compute every item again instead of resuming from what an earlier run into the same
    /// output left.
    #[arg(long)]
    force: bool,
    /// Environments per repository and version (`swe specs import` writes one), for the tasks
    /// that have no `environment` of their own.
    #[arg(long)]
    specs: Option<PathBuf>,
    #[command(flatten)]
    perturb: PerturbArgs,
}

/// A repair run's task perturbations; a cluster worker takes the same flags.
#[derive(Debug, Args)]
pub struct PerturbArgs {
    /// Variants of each task beside it, comma-separated: statement.typo, statement.case,
    /// context.order (README: Robustness). Each variant is keyed ID@FAMILY#N.
    #[arg(long, value_delimiter = ',', value_parser = repair::perturb::parse_family)]
    perturb: Vec<repair::perturb::SweFamily>,
    /// Seed of the variants, apart from the sampling seed, so every model sees the same ones.
    #[arg(long, default_value_t = 0, requires = "perturb")]
    perturb_seed: u64,
    /// Variants per task and family.
    #[arg(long, default_value_t = 1, requires = "perturb", value_parser = clap::value_parser!(u64).range(1..))]
    variants: u64,
}

impl PerturbArgs {
    /// The run's task perturbations, if any.
    pub fn spec(&self) -> Option<repair::perturb::SwePerturbSpec> {
        (!self.perturb.is_empty()).then(|| repair::perturb::SwePerturbSpec {
            families: self.perturb.clone(),
            seed: self.perturb_seed,
            variants: self.variants as usize,
        })
    }
}

#[derive(Debug, Args)]
pub struct GradeOptions {
    /// Instances graded at once (default: REPAIRBENCH_SANDBOX_WORKERS, else one per two cores).
    #[arg(long)]
    workers: Option<usize>,
    /// Deadline for one test run, in seconds.
    #[arg(long, default_value = "1800", value_parser = repairbench::deadline::parse_timeout)]
    timeout: Duration,
    /// Reruns of failing PASS_TO_PASS tests before they count against the patch.
    #[arg(long, default_value_t = 2)]
    reruns: usize,
    /// Memory limit per test container, e.g. 2g.
    #[arg(long, default_value = "2g", value_parser = super::sandbox::parse_size)]
    memory: u64,
    /// Size cap of each container's /workspace (memory-backed, within --memory), e.g. 1g.
    #[arg(long, default_value = "1g", value_parser = super::sandbox::parse_size)]
    workspace_size: u64,
    /// Bytes of a test run's stdout (and of its stderr) kept: the first half and the last
    /// half, so the runner's closing summary survives a long log; the middle is cut and flagged.
    #[arg(long, default_value = "1m", value_parser = super::sandbox::parse_size)]
    output_cap: u64,
    /// Image for tasks without their own `environment.image` (default: the Python image).
    #[arg(long)]
    image: Option<String>,
}

#[derive(Debug, Args)]
pub struct GradeArgs {
    #[command(flatten)]
    data: DatasetArgs,
    /// Predictions file (JSON/JSONL with instance_id, model_name_or_path, model_patch), or
    /// `gold` / `empty`.
    #[arg(long)]
    predictions: String,
    #[command(flatten)]
    options: GradeOptions,
    #[command(flatten)]
    executor: super::executor::ExecutorArgs,
    /// Output folder: report.json, results.jsonl, manifest.json, logs/. Reusing it resumes.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Debug, Args)]
pub struct ModelOptions {
    #[command(flatten)]
    model: super::ModelArgs,
    /// How files are chosen for the prompt: bm25 (from the issue text) or oracle (the files
    /// the gold patch touches).
    #[arg(long, default_value = "bm25")]
    retrieval: Retrieval,
    /// Files in the prompt at most.
    #[arg(long, default_value_t = 3)]
    max_files: usize,
    /// Characters of file text in the prompt at most.
    #[arg(long, default_value_t = 6000)]
    max_file_chars: usize,
    #[arg(long, default_value_t = 768)]
    max_tokens: usize,
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

#[derive(Debug, Args)]
pub struct InferArgs {
    #[command(flatten)]
    data: DatasetArgs,
    #[command(flatten)]
    model: ModelOptions,
    /// Predictions file to write (JSONL; appended to: a rerun keeps the lines whose model,
    /// sampling, token limit, prompt and code are unchanged).
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    executor: super::executor::ExecutorArgs,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    data: DatasetArgs,
    #[command(flatten)]
    model: ModelOptions,
    #[command(flatten)]
    options: GradeOptions,
    /// Where the patches are graded (the model runs here).
    #[command(flatten)]
    executor: super::executor::ExecutorArgs,
    #[arg(long)]
    out: PathBuf,
}

pub fn run(cmd: SweCommand) -> anyhow::Result<u8> {
    match cmd {
        SweCommand::Specs(SpecsCommand::Import(args)) => {
            let source = match &args.from {
                Some(path) => specs::SpecsSource::Export(path.clone()),
                None => specs::SpecsSource::Installed(args.python.clone()),
            };
            let imported = specs::import(&source)?;
            imported.file.write(&args.out)?;
            let versions: usize = imported.file.repos.values().map(|v| v.len()).sum();
            println!(
                "wrote {} ({}): {versions} versions of {} repositories",
                args.out.display(),
                imported.file.source,
                imported.file.repos.len()
            );
            for skipped in &imported.skipped {
                println!("  skipped {skipped}");
            }
            if !imported.ignored.is_empty() {
                let fields: Vec<String> =
                    imported.ignored.iter().map(|(f, n)| format!("{f} ({n})")).collect();
                println!("  fields not used: {}", fields.join(", "));
            }
            Ok(super::EXIT_OK)
        }
        SweCommand::Grade(args) => {
            let plan =
                grade_plan(&args.data, PredictionSource::parse(&args.predictions), &args.options, &args.out)?;
            let executor = args.executor.resolve(super::executor::SWE_UNIT)?;
            let report = pipeline::grade(plan, &executor)?;
            print_summary(&report, &args.out);
            Ok(super::exit_status(Completion::of_grade(&report)))
        }
        SweCommand::Infer(args) => {
            let plan = infer_plan(&args.data, &args.model, &args.out);
            let executor = args.executor.resolve(super::executor::SWE_UNIT)?;
            let choice = args.model.model.choice();
            let mut model = pipeline::load_model(&choice)?;
            let summary =
                pipeline::infer_on(model.as_mut(), &plan, &executor, &pipeline::model_worker_flags(&choice))?;
            println!(
                "wrote {} predictions to {} ({} kept from before, {} empty patches)",
                summary.written,
                args.out.display(),
                summary.kept,
                summary.empty_patches
            );
            for skip in &summary.skipped {
                println!("  skipped {}: {}", skip.location, skip.reason);
            }
            let invalid = summary.skipped.iter().any(|s| s.invalid_input);
            Ok(if invalid { super::EXIT_INVALID_DATASET } else { super::EXIT_OK })
        }
        SweCommand::Validate(args) => {
            let plan = grade_plan(&args.data, PredictionSource::Gold, &args.options, &args.out)?;
            let report = pipeline::validate(plan)?;
            for instance in &report.instances {
                let state = if instance.valid { "valid" } else { "INVALID" };
                println!("{state:8} {}", instance.instance_id);
                for problem in &instance.problems {
                    println!("         {problem}");
                }
            }
            println!(
                "{} valid, {} invalid; report: {}",
                report.valid,
                report.invalid,
                args.out.join("validation.json").display()
            );
            if report.invalid_input > 0 {
                println!(
                    "{} dataset records skipped as invalid (see {})",
                    report.invalid_input,
                    args.out.join("gold/report.json").display()
                );
            }
            let invalid = report.invalid + report.invalid_input;
            Ok(if invalid > 0 { super::EXIT_INVALID_DATASET } else { super::EXIT_OK })
        }
        SweCommand::Run(args) => {
            let predictions = args.out.join("predictions.jsonl");
            let plan = SweRunPlan {
                model: args.model.model.choice(),
                infer: infer_plan(&args.data, &args.model, &predictions),
                grade: grade_plan(&args.data, PredictionSource::File(predictions), &args.options, &args.out)?,
                executor: args.executor.resolve(super::executor::SWE_UNIT)?,
            };
            let report = pipeline::swe_run(plan)?;
            print_summary(&report, &args.out);
            Ok(super::exit_status(Completion::of_grade(&report)))
        }
    }
}

fn grade_plan(
    data: &DatasetArgs,
    predictions: PredictionSource,
    options: &GradeOptions,
    out: &std::path::Path,
) -> anyhow::Result<GradePlan> {
    if options.workers == Some(0) {
        anyhow::bail!("--workers must be at least 1");
    }
    let mut settings = GradeSettings::new(options.image.clone().unwrap_or_default());
    settings.timeout = options.timeout;
    settings.flaky_reruns = options.reruns;
    settings.workers = match options.workers {
        Some(n) => n,
        None => repairbench::env::sandbox_workers()?.unwrap_or_else(repair::default_workers),
    };
    if options.workspace_size > options.memory {
        anyhow::bail!("--workspace-size must not exceed --memory (the workspace is held in memory)");
    }
    settings.limits = Limits {
        memory_bytes: options.memory,
        workspace_bytes: options.workspace_size,
        output_cap_bytes: options.output_cap as usize,
        ..Limits::default()
    };
    Ok(GradePlan {
        dataset: data.dataset.clone(),
        predictions,
        repos: data.repos.clone(),
        url_template: data.url_template.clone(),
        cache_dir: repairbench::env::cache_dir(),
        out: out.to_owned(),
        settings,
        extra_manifest: Default::default(),
        force: data.force,
        specs: data.specs.clone(),
        perturb: data.perturb.spec(),
    })
}

fn infer_plan(data: &DatasetArgs, options: &ModelOptions, out: &std::path::Path) -> InferPlan {
    let sampling = Sampling { temperature: options.temperature, seed: options.seed, ..Sampling::GREEDY };
    InferPlan {
        dataset: data.dataset.clone(),
        repos: data.repos.clone(),
        url_template: data.url_template.clone(),
        cache_dir: repairbench::env::cache_dir(),
        out: out.to_owned(),
        prompt: PromptSettings {
            retrieval: options.retrieval,
            max_files: options.max_files,
            max_file_chars: options.max_file_chars,
        },
        max_tokens: options.max_tokens,
        sampling,
        force: data.force,
        only: None,
        perturb: data.perturb.spec(),
    }
}

pub(super) fn print_summary(report: &GradeReport, out: &std::path::Path) {
    let s = &report.summary;
    let (low, high) = repairbench::stats::wilson_95(s.resolved, s.total);
    println!(
        "{} instances: {} resolved ({:.1}%, 95% interval {:.1}–{:.1}%)",
        s.total,
        s.resolved,
        100.0 * s.resolved_rate,
        100.0 * low,
        100.0 * high
    );
    for verdict in Verdict::ALL {
        match s.verdicts.get(verdict.as_str()) {
            Some(count) if *count > 0 => {
                println!("  {count:>4} {}", repairbench::report::glossed(verdict.as_str(), verdict.gloss()))
            }
            _ => {}
        }
    }
    if !s.apply_methods.is_empty() {
        let methods: Vec<String> = s.apply_methods.iter().map(|(m, n)| format!("{m} {n}")).collect();
        println!("  patches applied by: {}", methods.join(", "));
    }
    if s.flaky_tests > 0 {
        println!("  flaky tests (passed on rerun): {}", s.flaky_tests);
    }
    for skip in &report.skipped {
        println!("  skipped {}: {}", skip.location, skip.reason);
    }
    println!("report: {}", out.join("report.json").display());
}
