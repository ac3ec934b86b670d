use std::path::PathBuf;

use clap::{Args, Subcommand};
use repairbench::probe::{self, Method, ProbePlan, ProbeSummary, SetSource};
use repairbench::run::pipeline::{self, Completion};

#[derive(Debug, Subcommand)]
pub enum ProbeCommand {
    /// Has the model seen these items before? Scores a target set against a control set
    /// (AUROC with a 95% bootstrap interval); see the README's "Contamination probes".
    Contamination(ContaminationArgs),
}

#[derive(Debug, Args)]
pub struct ContaminationArgs {
    /// mink:K: Min-K% Prob over the K% least likely tokens (and Min-K%++ with a local model);
    /// path-guess, patch-prefix (SWE tasks); ts-guess (multiple-choice suites); guided (any set).
    #[arg(long, default_value = "mink", value_parser = Method::parse_name)]
    pub method: Method,
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub control: ControlArgs,
    /// --suite: its data (a directory or the test file) instead of the suite's own source.
    #[arg(long, requires = "suite")]
    pub data: Option<PathBuf>,
    /// --control-suite: its data.
    #[arg(long, requires = "control_suite")]
    pub control_data: Option<PathBuf>,
    #[command(flatten)]
    pub model: super::ModelArgs,
    /// At most N items of each set, in file order.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Output directory (results.json, samples.jsonl, report.md, junit.xml, report.html,
    /// manifest.json); rerunning resumes.
    #[arg(long)]
    pub out: PathBuf,
    /// Score every item again instead of resuming from what an earlier run left in --out.
    #[arg(long)]
    pub force: bool,
}

/// The target set: exactly one of these.
#[derive(Debug, Args)]
#[group(required = true, multiple = false, id = "target_set")]
pub struct TargetArgs {
    /// JSON lines of {"id": ..., "text": ...}.
    #[arg(long)]
    pub texts: Option<PathBuf>,
    /// A SWE-bench-format dataset or task folders: problem statements and gold patches' added lines.
    #[arg(long)]
    pub dataset: Option<PathBuf>,
    /// A suite (name or file): each item's prompt with its gold answer.
    #[arg(long)]
    pub suite: Option<String>,
}

/// The control set: exactly one of these.
#[derive(Debug, Args)]
#[group(required = true, multiple = false, id = "control_set")]
pub struct ControlArgs {
    /// The control as texts (e.g. written after the model's training cutoff).
    #[arg(long)]
    pub control_texts: Option<PathBuf>,
    /// The control as a dataset (e.g. `tasks harvest --since` after the model's cutoff).
    #[arg(long)]
    pub control_dataset: Option<PathBuf>,
    /// The control as a suite (e.g. one the team wrote).
    #[arg(long)]
    pub control_suite: Option<String>,
}

fn source(
    texts: Option<PathBuf>,
    dataset: Option<PathBuf>,
    suite: Option<String>,
    data: Option<PathBuf>,
) -> SetSource {
    match (texts, dataset, suite) {
        (Some(path), _, _) => SetSource::Texts(path),
        (_, Some(path), _) => SetSource::Dataset(path),
        (_, _, Some(suite)) => SetSource::Suite { suite, data },
        _ => unreachable!("clap requires one source per set"),
    }
}

pub fn run(command: ProbeCommand) -> anyhow::Result<u8> {
    let ProbeCommand::Contamination(args) = command;
    let plan = ProbePlan {
        method: args.method,
        target: source(args.target.texts, args.target.dataset, args.target.suite, args.data),
        control: source(
            args.control.control_texts,
            args.control.control_dataset,
            args.control.control_suite,
            args.control_data,
        ),
        limit: args.limit,
        out: args.out,
        force: args.force,
    };
    let mut model = pipeline::load_model(&args.model.choice())?;
    let summary = probe::probe(&plan, model.as_mut(), &mut repairbench::report::ConsoleProgress::new())?;
    print_summary(&plan, &summary);
    Ok(super::exit_status(Completion::of_probe(&summary)))
}

fn print_summary(plan: &ProbePlan, summary: &ProbeSummary) {
    println!(
        "probe contamination {}: {} text(s), {} scored now, {} kept from an earlier run; results in {}",
        summary.method.label(),
        summary.records.len(),
        summary.computed,
        summary.resumed,
        plan.out.display()
    );
    println!("  target: {}\n  control: {}", plan.target.describe(), plan.control.describe());
    for s in &summary.separations {
        println!(
            "  {:<16} {:<18} target {:.4} ± {:.4} (n={})  control {:.4} ± {:.4} (n={})  AUROC {:.3} [{:.3}, {:.3}]  {}",
            s.statistic,
            s.part,
            s.target.mean,
            s.target.stderr,
            s.target.n,
            s.control.mean,
            s.control.stderr,
            s.control.n,
            s.auroc,
            s.auroc_ci95[0],
            s.auroc_ci95[1],
            s.reading()
        );
    }
    for g in &summary.guided_gains {
        println!(
            "  guided {:<8} {:<18} guided {:.4}  general {:.4}  gain {:.4} [{:.4}, {:.4}]  p {:.4} (n={})  {}",
            g.side.as_str(),
            g.part,
            g.guided_rouge_l,
            g.general_rouge_l,
            g.gain,
            g.gain_ci95[0],
            g.gain_ci95[1],
            g.p_above,
            g.n,
            g.reading()
        );
    }
    if summary.errors > 0 {
        println!("  {} text(s) could not be scored (see report.md)", summary.errors);
    }
    for skipped in &summary.skipped {
        println!("  skipped {}: {}", skipped.location, skipped.reason);
    }
}
