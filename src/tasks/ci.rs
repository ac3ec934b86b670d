//! A repository's CI jobs (`.gitlab-ci.yml`, GitHub Actions workflows), read so they can run as
//! grading steps in the sandbox, which has no network.
//!
//! Files are read through a `read_file(path)` callback at the commit being graded, so local
//! includes work without a checkout. Jobs come back in run order (stage order, then `needs`),
//! each with its commands, variables and image, and with the reason it cannot run in the
//! sandbox when it cannot (services, docker, network use, an action we cannot reproduce).
//! What is read and what is ignored is listed in [`gitlab_ci`] and [`actions`].

mod actions;
mod gitlab_ci;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;
use serde_yaml_ng::Value;

pub use actions::github;
pub use gitlab_ci::gitlab;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CiJob {
    pub name: String,
    pub stage: String,
    /// before_script then script, in order (GitHub: the `run` steps).
    pub commands: Vec<String>,
    pub variables: BTreeMap<String, String>,
    pub needs: Vec<String>,
    /// The image the job asked for (mapped onto the task's environment by the caller).
    pub image: Option<String>,
    /// Why this job cannot run in the sandbox, if it cannot.
    pub unsupported: Option<String>,
    /// What was left out on purpose (an `actions/setup-*` step, a non-static variable).
    pub notes: Vec<String>,
    /// "gitlab" or "github:<workflow file>".
    pub source: String,
}

impl CiJob {
    /// The Python modules the job's commands run as tools: each command's program (`pyflakes`,
    /// `flake8` as `flake8`, `black`) and each `python -m MODULE`, by top-level name. A
    /// repository may not gain a module by one of these names at its root.
    pub fn tool_modules(&self) -> BTreeSet<String> {
        let mut tools = BTreeSet::new();
        for command in &self.commands {
            for segment in command.split(['\n', ';', '|', '&', '(', ')', '`']) {
                let words: Vec<&str> = segment
                    .split_whitespace()
                    .skip_while(|w| w.contains('=') && !w.starts_with('-'))
                    .collect();
                let Some(program) = words.first().map(|w| w.rsplit('/').next().unwrap_or(w)) else {
                    continue;
                };
                let python = program.starts_with("python") || program == "coverage";
                let module = match words.iter().position(|w| *w == "-m") {
                    Some(i) if python => words.get(i + 1).copied(),
                    _ => Some(program),
                };
                if let Some(module) = module {
                    let top = module.split('.').next().unwrap_or(module).replace('-', "_");
                    let identifier = top.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                        && top.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                    if identifier && !top.starts_with("python") {
                        tools.insert(top);
                    }
                }
            }
        }
        tools
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CiConfig {
    /// In run order: stage order, then `needs` respected.
    pub jobs: Vec<CiJob>,
}

fn at(line: &Option<usize>) -> String {
    line.map(|l| format!(" line {l}")).unwrap_or_default()
}

#[derive(Debug, thiserror::Error)]
pub enum CiError {
    #[error("{file}{}: not valid YAML", at(.line))]
    Yaml {
        file: String,
        line: Option<usize>,
        #[source]
        source: serde_yaml_ng::Error,
    },
    /// `line` is where the job (or key) holding the field starts, when it can be found.
    #[error("{file}{}: {field}: {message}", at(.line))]
    Field { file: String, line: Option<usize>, field: String, message: String },
    #[error("{file}: include {include}: only local includes are supported")]
    RemoteInclude { file: String, include: String },
    /// `included_by` is the file whose `include:` named it.
    #[error("{path} does not exist at this commit{}", included_by.as_ref().map(|f| format!(" (included by {f})")).unwrap_or_default())]
    Missing { path: String, included_by: Option<String> },
    #[error("{file}: jobs {} need each other in a cycle", jobs.join(", "))]
    NeedsCycle { file: String, jobs: Vec<String> },
    #[error("unknown CI job `{name}`; known jobs: {}", known.join(", "))]
    UnknownJob { name: String, known: Vec<String> },
}

/// Jobs selected by a task's `ci_jobs` (job names, or `["all"]`), with the jobs they need
/// (transitively), in run order. Jobs that cannot run are returned too, `unsupported` set:
/// the caller reports them rather than silently dropping a step the task asked for.
pub fn select(config: &CiConfig, wanted: &[String]) -> Result<Vec<CiJob>, CiError> {
    if wanted.iter().any(|w| w == "all") {
        return Ok(config.jobs.clone());
    }
    let mut chosen = BTreeSet::new();
    let mut todo: Vec<&str> = Vec::new();
    for name in wanted {
        if !config.jobs.iter().any(|j| &j.name == name) {
            let known = config.jobs.iter().map(|j| j.name.clone()).collect();
            return Err(CiError::UnknownJob { name: name.clone(), known });
        }
        todo.push(name);
    }
    while let Some(name) = todo.pop() {
        if chosen.insert(name.to_owned()) {
            if let Some(job) = config.jobs.iter().find(|j| j.name == name) {
                todo.extend(job.needs.iter().map(String::as_str));
            }
        }
    }
    Ok(config.jobs.iter().filter(|j| chosen.contains(&j.name)).cloned().collect())
}

/// Sorts by `rank` (stable, so file order stays within a rank), then moves each job after the
/// jobs it needs. `file` names the configuration in errors.
fn run_order(
    mut jobs: Vec<CiJob>,
    rank: impl Fn(&CiJob) -> usize,
    file: &str,
) -> Result<Vec<CiJob>, CiError> {
    let names: BTreeSet<String> = jobs.iter().map(|j| j.name.clone()).collect();
    for job in &jobs {
        if let Some(missing) = job.needs.iter().find(|n| !names.contains(*n)) {
            return Err(CiError::Field {
                file: file.to_owned(),
                line: None,
                field: format!("{}.needs", job.name),
                message: format!("job `{missing}` is not defined"),
            });
        }
    }
    jobs.sort_by_key(|j| rank(j));
    let mut placed: BTreeSet<String> = BTreeSet::new();
    let mut ordered = Vec::with_capacity(jobs.len());
    while !jobs.is_empty() {
        let Some(next) = jobs.iter().position(|j| j.needs.iter().all(|n| placed.contains(n))) else {
            return Err(CiError::NeedsCycle {
                file: file.to_owned(),
                jobs: jobs.iter().map(|j| j.name.clone()).collect(),
            });
        };
        let job = jobs.remove(next);
        placed.insert(job.name.clone());
        ordered.push(job);
    }
    Ok(ordered)
}

static NETWORK_USE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?:^|[\s;&|(`])(",
        r"docker(?:-compose)?|curl|wget|git\s+(?:clone|fetch|pull)|",
        r"(?:python3?\s+-m\s+)?pip3?\s+install|npm\s+(?:install|ci|i)|yarn\s+install|",
        r"apt-get\s+install|apt\s+install",
        r")(?:\s|$)"
    ))
    .expect("valid regex")
});

/// Why a command cannot run without network or a Docker engine, if it cannot. `pip install
/// --no-index` installs from local files and is allowed.
fn network_use(command: &str) -> Option<String> {
    command.lines().find_map(|line| {
        let found = NETWORK_USE.captures_iter(line).map(|c| c[1].to_owned()).find(|word| {
            !(word.ends_with("install") && word.contains("pip") && line.contains("--no-index"))
        })?;
        let word = found.split_whitespace().collect::<Vec<_>>().join(" ");
        Some(if word.starts_with("docker") {
            format!("runs `{word}` (no Docker engine in the sandbox)")
        } else {
            format!("runs `{word}` (the sandbox has no network)")
        })
    })
}

fn parse_yaml(file: &str, text: &str) -> Result<Value, CiError> {
    let yaml_error = |source: serde_yaml_ng::Error| CiError::Yaml {
        file: file.to_owned(),
        line: source.location().map(|l| l.line()),
        source,
    };
    let mut value: Value = serde_yaml_ng::from_str(text).map_err(yaml_error)?;
    // `<<: *template` merge keys, common in CI files.
    value.apply_merge().map_err(yaml_error)?;
    Ok(value)
}

/// Line (1-based) of the first line that defines `key` (`key:`, quoted or not).
fn key_line(text: &str, key: &str) -> Option<usize> {
    let forms = [format!("{key}:"), format!("\"{key}\":"), format!("'{key}':")];
    text.lines()
        .position(|line| forms.iter().any(|f| line.trim_start().starts_with(f.as_str())))
        .map(|i| i + 1)
}

/// A scalar as the string CI would see; None for sequences and mappings.
fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => Some(String::new()),
        _ => None,
    }
}

/// A string or a list of strings, trailing newlines of block scalars dropped; nested lists
/// (from YAML anchors) are flattened.
fn string_list(value: &Value) -> Option<Vec<String>> {
    match value {
        Value::Sequence(items) => {
            let mut out = Vec::new();
            for item in items {
                match item {
                    Value::Sequence(_) => out.extend(string_list(item)?),
                    Value::Null => {}
                    Value::String(s) => out.push(s.trim_end().to_owned()),
                    _ => out.push(scalar(item)?),
                }
            }
            Some(out)
        }
        Value::String(s) => Some(vec![s.trim_end().to_owned()]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_modules_are_the_programs_and_python_dash_m_modules_a_job_runs() {
        let mut lint = job("lint", "lint", &[]);
        lint.commands = vec![
            "python3 -m pyflakes src".into(),
            "LANG=C flake8 --max-line-length=100 && /usr/bin/black --check .".into(),
            "coverage run -m pytest.main -q | tee out.txt".into(),
            "python3.11 -c 'print(1)'".into(),
        ];
        let tools: Vec<String> = lint.tool_modules().into_iter().collect();
        assert_eq!(tools, ["black", "flake8", "pyflakes", "pytest", "tee"]);
    }

    fn job(name: &str, stage: &str, needs: &[&str]) -> CiJob {
        CiJob {
            name: name.into(),
            stage: stage.into(),
            commands: vec![format!("make {name}")],
            variables: BTreeMap::new(),
            needs: needs.iter().map(|n| n.to_string()).collect(),
            image: None,
            unsupported: None,
            notes: Vec::new(),
            source: "gitlab".into(),
        }
    }

    fn names(jobs: &[CiJob]) -> Vec<&str> {
        jobs.iter().map(|j| j.name.as_str()).collect()
    }

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn run_order_follows_stages_then_needs() {
        let rank = |j: &CiJob| ["build", "test"].iter().position(|s| *s == j.stage).unwrap();
        // `unit` needs `fixtures`, listed after it in the same stage.
        let jobs = vec![
            job("unit", "test", &["fixtures"]),
            job("compile", "build", &[]),
            job("fixtures", "test", &[]),
        ];
        assert_eq!(names(&run_order(jobs, rank, "ci").unwrap()), ["compile", "fixtures", "unit"]);
    }

    #[test]
    fn select_adds_needed_jobs_and_names_unknown_ones() {
        let config = CiConfig {
            jobs: vec![
                job("compile", "build", &[]),
                job("lint", "test", &[]),
                job("unit", "test", &["compile"]),
            ],
        };
        assert_eq!(names(&select(&config, &strings(&["unit"])).unwrap()), ["compile", "unit"]);
        assert_eq!(
            names(&select(&config, &strings(&["unit", "lint"])).unwrap()),
            ["compile", "lint", "unit"]
        );
        assert_eq!(names(&select(&config, &strings(&["all"])).unwrap()), ["compile", "lint", "unit"]);
        assert!(select(&config, &[]).unwrap().is_empty());
        let err = select(&config, &strings(&["lint", "e2e"])).unwrap_err();
        assert_eq!(err.to_string(), "unknown CI job `e2e`; known jobs: compile, lint, unit");
    }

    #[test]
    fn network_and_docker_use_is_found_in_any_line() {
        assert_eq!(network_use("make test"), None);
        assert_eq!(network_use("echo 'curling is a sport'"), None);
        assert_eq!(network_use("./scripts/docker-entrypoint.sh"), None);
        assert_eq!(network_use("pip install --no-index --find-links wheels ."), None);
        assert_eq!(
            network_use("set -e\ncd app && npm ci"),
            Some("runs `npm ci` (the sandbox has no network)".into())
        );
        assert_eq!(
            network_use("python -m  pip install -e ."),
            Some("runs `python -m pip install` (the sandbox has no network)".into())
        );
        assert_eq!(
            network_use("git fetch origin main"),
            Some("runs `git fetch` (the sandbox has no network)".into())
        );
        assert_eq!(
            network_use("sudo apt-get install -y libpq-dev"),
            Some("runs `apt-get install` (the sandbox has no network)".into())
        );
        assert_eq!(network_use("$(curl -s $URL)"), Some("runs `curl` (the sandbox has no network)".into()));
        assert_eq!(
            network_use("docker compose up -d"),
            Some("runs `docker` (no Docker engine in the sandbox)".into())
        );
    }
}
