//! `tasks harvest`: flags resolved into a plan for [`pipeline::harvest`].

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use repairbench::http::Secret;
use repairbench::repair::harvest::source::{GitLabSource, HarvestSource};
use repairbench::repair::harvest::{HarvestPlan, TaskServices};
use repairbench::repair::GradeSettings;
use repairbench::run::pipeline;

#[derive(Debug, Subcommand)]
pub enum TasksCommand {
    /// Make repair tasks from a repository's history (commits that change code and tests) or
    /// from a GitLab project's merged merge requests, with FAIL_TO_PASS/PASS_TO_PASS derived by
    /// running the tests before and after. Writes one task folder per kept candidate and
    /// OUT/harvest.json (every candidate, kept or dropped with the reason); rerunning into the
    /// same OUT resumes.
    Harvest(HarvestArgs),
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("source").required(true).args(["repo", "gitlab"]))]
pub struct HarvestArgs {
    /// A git repository: a path, or a URL the git CLI can clone.
    #[arg(long, conflicts_with_all = ["gitlab", "project"])]
    repo: Option<String>,
    /// Only these commits (repeatable; with --repo); default: first-parent history from HEAD.
    #[arg(long = "commit", requires = "repo")]
    commits: Vec<String>,
    /// A GitLab instance (https://gitlab.example.com): harvest its project's merge requests.
    #[arg(long, requires = "project")]
    gitlab: Option<String>,
    /// The GitLab project: numeric id or full path (group/project).
    #[arg(long, requires = "gitlab")]
    project: Option<String>,
    /// Environment variable holding the GitLab token (read, never written anywhere).
    #[arg(long, default_value = repairbench::env::GITLAB_TOKEN, requires = "gitlab")]
    token_env: String,
    /// Merge requests in this state; only merged ones put a fix on the target branch.
    #[arg(long, default_value = "merged", value_parser = ["merged"], requires = "gitlab")]
    state: String,
    /// CA certificates (PEM) to trust for a self-hosted GitLab, instead of the built-in roots.
    #[arg(long, requires = "gitlab")]
    ca_cert: Option<PathBuf>,
    /// Only commits (merge requests: merges) made on or after this day (YYYY-MM-DD, UTC): keep
    /// tasks newer than a model's training cutoff.
    #[arg(long, value_parser = repairbench::dates::parse_day)]
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
    /// Services every candidate's tests need, for a multi-service repository: a JSON file
    /// `{"services": [...], "service_checks": [...]}` in task.json's format (issues/README.md);
    /// each kept task gets them.
    #[arg(long)]
    services: Option<PathBuf>,
    /// A specs file (`swe specs import`): with --spec, every candidate is examined in that
    /// entry's environment and each kept task carries it, so FAIL_TO_PASS/PASS_TO_PASS are
    /// derived where `swe grade --specs` will grade them.
    #[arg(long, requires = "spec")]
    specs: Option<PathBuf>,
    /// The entry of --specs to use, as REPO@VERSION (`psf/requests@2.9`).
    #[arg(long, requires = "specs")]
    spec: Option<String>,
    /// Examine every candidate again instead of resuming.
    #[arg(long)]
    force: bool,
    #[arg(long)]
    out: PathBuf,
}

pub fn run(cmd: TasksCommand) -> anyhow::Result<u8> {
    let TasksCommand::Harvest(args) = cmd;
    if args.workers == 0 {
        anyhow::bail!("--workers must be at least 1");
    }
    let mut settings = GradeSettings::new(String::new());
    settings.workers = args.workers;
    settings.timeout = args.timeout;
    let source = match (args.repo, args.gitlab, args.project) {
        (Some(repo), _, _) => HarvestSource::Git { repo, commits: args.commits },
        (None, Some(url), Some(project)) => {
            let token = repairbench::env::get(&args.token_env).map(Secret::new);
            if token.is_none() {
                tracing::info!(variable = %args.token_env, "no GitLab token set: only public projects can be read");
            }
            HarvestSource::GitLab(GitLabSource {
                url,
                project,
                token,
                state: args.state,
                ca_cert: args.ca_cert,
            })
        }
        _ => anyhow::bail!("give --repo, or --gitlab with --project"),
    };
    let environment = match (&args.specs, &args.spec) {
        (Some(path), Some(spec)) => {
            let Some((repo, version)) = spec.rsplit_once('@') else {
                anyhow::bail!("--spec `{spec}`: expected REPO@VERSION, like psf/requests@2.9");
            };
            let specs = repairbench::tasks::specs::SpecsFile::load(path)?;
            let Some(found) = specs.entry(repo, version) else {
                let known = specs.versions(repo);
                if known.is_empty() {
                    anyhow::bail!("{}: no entry for the repository {repo}", path.display());
                }
                anyhow::bail!(
                    "{}: {repo} has no version {version} (it has {})",
                    path.display(),
                    known.join(", ")
                );
            };
            Some(found)
        }
        _ => None,
    };
    let plan = HarvestPlan {
        environment,
        source,
        since: args.since,
        limit: args.limit,
        out: args.out.clone(),
        settings,
        force: args.force,
        services: match &args.services {
            Some(path) => TaskServices::read(path)?,
            None => TaskServices::default(),
        },
    };
    let records = pipeline::harvest(plan)?;
    let kept = records.iter().filter(|r| r.kept).count();
    for record in &records {
        let mut state =
            if record.kept { "kept".to_owned() } else { record.reason.clone().unwrap_or_default() };
        if let Some(later) = &record.fix_text_at_later_commit {
            state.push_str(&format!(
                " (fix still verbatim at {})",
                &later.commit[..later.commit.len().min(12)]
            ));
        }
        let mr = record.merge_request.as_ref().map(|mr| format!("!{}", mr.iid)).unwrap_or_default();
        println!(
            "{:<14} {mr:<6} {:<24} {state}",
            &record.commit[..record.commit.len().min(12)],
            record.instance_id
        );
    }
    println!(
        "{kept} task(s) kept of {} candidate(s); {}",
        records.len(),
        args.out.join("harvest.json").display()
    );
    Ok(super::EXIT_OK)
}
