//! `tasks harvest`: flags resolved into a plan for [`pipeline::harvest`].

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use repairbench::run::pipeline;
use repairbench::run::swe::harvest::HarvestPlan;
use repairbench::run::swe::GradeSettings;

#[derive(Debug, Subcommand)]
pub enum TasksCommand {
    /// Make repair tasks from a repository's history: commits that change code and tests, with
    /// FAIL_TO_PASS/PASS_TO_PASS derived by running the tests before and after. Writes one
    /// task folder per kept commit and OUT/harvest.json (every candidate, kept or dropped
    /// with the reason); rerunning into the same OUT resumes.
    Harvest(HarvestArgs),
}

#[derive(Debug, Args)]
pub struct HarvestArgs {
    /// A git repository: a path, or a URL the git CLI can clone.
    #[arg(long)]
    repo: String,
    /// Only these commits (repeatable); default: first-parent history from HEAD.
    #[arg(long = "commit")]
    commits: Vec<String>,
    /// Only commits made on or after this day (YYYY-MM-DD, UTC).
    #[arg(long, value_parser = parse_day)]
    since: Option<i64>,
    /// At most this many candidates, newest first.
    #[arg(long)]
    limit: Option<usize>,
    /// Candidates examined at once.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Deadline for one test run, in seconds.
    #[arg(long, default_value = "600", value_parser = repairbench::deadline::parse_timeout)]
    timeout: Duration,
    /// Examine every candidate again instead of resuming.
    #[arg(long)]
    force: bool,
    #[arg(long)]
    out: PathBuf,
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

fn parse_day(text: &str) -> Result<i64, String> {
    let parts: Vec<i64> = text
        .split('-')
        .map(|p| p.parse().map_err(|_| ()))
        .collect::<Result<_, _>>()
        .map_err(|_| format!("`{text}` is not a date like 2024-05-31"))?;
    match parts.as_slice() {
        [y, m, d] if (1..=12).contains(m) && (1..=31).contains(d) => Ok(days_from_civil(*y, *m, *d) * 86_400),
        _ => Err(format!("`{text}` is not a date like 2024-05-31")),
    }
}

pub fn run(cmd: TasksCommand) -> anyhow::Result<u8> {
    let TasksCommand::Harvest(args) = cmd;
    if args.workers == 0 {
        anyhow::bail!("--workers must be at least 1");
    }
    let mut settings = GradeSettings::new(String::new());
    settings.workers = args.workers;
    settings.timeout = args.timeout;
    let plan = HarvestPlan {
        repo: args.repo,
        commits: args.commits,
        since: args.since,
        limit: args.limit,
        out: args.out.clone(),
        settings,
        force: args.force,
    };
    let records = pipeline::harvest(plan)?;
    let kept = records.iter().filter(|r| r.kept).count();
    for record in &records {
        let state = if record.kept { "kept".to_owned() } else { record.reason.clone().unwrap_or_default() };
        println!("{:<14} {:<24} {state}", &record.commit[..record.commit.len().min(12)], record.instance_id);
    }
    println!(
        "{kept} task(s) kept of {} candidate(s); {}",
        records.len(),
        args.out.join("harvest.json").display()
    );
    Ok(super::EXIT_OK)
}

#[cfg(test)]
mod tests {
    #[test]
    fn days_are_counted_from_the_epoch() {
        assert_eq!(super::parse_day("1970-01-01"), Ok(0));
        assert_eq!(super::parse_day("2024-03-01"), Ok(1_709_251_200));
        assert!(super::parse_day("2024-13-01").is_err());
    }
}
