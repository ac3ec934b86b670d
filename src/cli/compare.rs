//! `compare BASE NEW`: flags into [`CompareOptions`]; the exit status says whether the new run
//! regressed.

use std::path::PathBuf;

use clap::Args;
use repairbench::compare::{self, CompareOptions, Verdict};

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The reference run's output folder (`swe grade` or `eval`).
    pub base: PathBuf,
    /// The run to judge against it, of the same kind.
    pub new: PathBuf,
    /// Metric to compare (default: `resolved` for SWE runs; the suite's pass@1, acc or
    /// exact_match, whichever the samples carry).
    #[arg(long)]
    pub metric: Option<String>,
    /// Significance level.
    #[arg(long, default_value_t = 0.05, value_parser = parse_alpha)]
    pub alpha: f64,
    /// Smallest |new - base| that counts as a change, on the metric's scale.
    #[arg(long, default_value_t = 0.0, value_parser = parse_min_delta)]
    pub min_delta: f64,
    /// Print the comparison as JSON instead of a summary.
    #[arg(long)]
    pub json: bool,
    /// Also write a Markdown summary (for a merge-request note) to FILE.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Also write JUnit XML to FILE: one test per paired item, failing where it regressed.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Also write a self-contained HTML page to FILE: the headline and the flipped items.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Compare even when the runs used different data, suite files, shots or prompt and
    /// grading settings; the differences are listed.
    #[arg(long)]
    pub allow_drift: bool,
}

fn parse_alpha(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(a) if a > 0.0 && a < 1.0 => Ok(a),
        _ => Err(format!("`{text}` is not a significance level between 0 and 1")),
    }
}

fn parse_min_delta(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(d) if d >= 0.0 && d.is_finite() => Ok(d),
        _ => Err(format!("`{text}` is not a difference of 0 or more")),
    }
}

pub fn run(args: CompareArgs) -> anyhow::Result<u8> {
    let options = CompareOptions {
        metric: args.metric,
        alpha: args.alpha,
        min_delta: args.min_delta,
        allow_drift: args.allow_drift,
    };
    let comparison = compare::compare(&args.base, &args.new, &options)?;
    if let Some(path) = &args.markdown {
        compare::write_markdown(&comparison, path)?;
    }
    if let Some(path) = &args.junit {
        compare::write_junit(&comparison, path)?;
    }
    if let Some(path) = &args.html {
        compare::write_html(&comparison, path)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&comparison)?);
    } else {
        print!("{}", compare::summary_text(&comparison));
    }
    Ok(match comparison.verdict {
        Verdict::Regression => super::EXIT_REGRESSION,
        Verdict::Improvement | Verdict::NoSignificantChange => super::EXIT_OK,
    })
}
