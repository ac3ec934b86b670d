//! GitHub Actions workflows (`.github/workflows/*.yml|yaml`, the files the caller lists).
//!
//! Each job's `run:` steps become its commands, prefixed with `cd DIR && ` when a
//! `working-directory` applies (the step's, else `defaults.run` of the job, else of the
//! workflow). Static `env` of the workflow, job and steps is folded into the job's variables
//! (a later step's value wins, noted); values with a `${{ }}` expression other than `matrix.*`
//! are left out with a note. `actions/checkout` steps are dropped (the tree is already there);
//! `actions/setup-*` steps are dropped with a note (the environment provides the toolchain).
//! `container:` gives the image. The stage is `github`; `needs` orders the jobs.
//!
//! A `strategy.matrix` of plain lists (with `exclude`) is expanded: one job per combination,
//! named as GitHub shows it (`test (3.11, full)`), `${{ matrix.key }}` replaced in commands,
//! variables, directories and the image; a need on the job means all of its combinations. A
//! matrix with `include` or from an expression is not expanded and the job is unsupported.
//!
//! Unsupported: any other `uses:` step, a reusable workflow (`uses:` on the job), `services:`,
//! a `shell:` that is not sh or bash, an expression left in a command, and commands that need
//! the network or Docker. Job names are the workflow's job ids; an id used by two workflow
//! files is qualified with the file's name (`ci.yml/test`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;
use serde_yaml_ng::{Mapping, Value};

use super::{key_line, network_use, parse_yaml, run_order, scalar, string_list, CiConfig, CiError, CiJob};

const MAX_COMBINATIONS: usize = 64;

static MATRIX_REF: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\$\{\{\s*matrix\.([A-Za-z0-9_-]+)\s*\}\}").expect("valid regex"));

type Combination = Vec<(String, String)>;

/// Why a `strategy.matrix` cannot be expanded here (the job is then kept as unsupported).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum MatrixProblem {
    #[error("its matrix comes from an expression")]
    Expression,
    #[error("its matrix uses `include`, which is not expanded")]
    Include,
    #[error("its matrix key `{0}` is not a list of plain values")]
    NotPlainList(String),
    #[error("its matrix has {0} combinations")]
    TooMany(usize),
}

/// Combinations of a `strategy.matrix`: one empty combination without a matrix.
fn combinations(strategy: Option<&Value>) -> Result<Vec<Combination>, MatrixProblem> {
    let Some(matrix) = strategy.and_then(|s| s.get("matrix")) else {
        return Ok(vec![Vec::new()]);
    };
    let Some(matrix) = matrix.as_mapping() else {
        return Err(MatrixProblem::Expression);
    };
    if matrix.contains_key("include") {
        return Err(MatrixProblem::Include);
    }
    let mut combos: Vec<Combination> = vec![Vec::new()];
    for (key, values) in matrix.iter().filter(|(k, _)| k.as_str() != Some("exclude")) {
        let key = scalar(key).unwrap_or_default();
        let values = values.as_sequence().and_then(|v| v.iter().map(scalar).collect::<Option<Vec<_>>>());
        let values = values.ok_or_else(|| MatrixProblem::NotPlainList(key.clone()))?;
        let mut next = Vec::with_capacity(combos.len() * values.len());
        for combo in &combos {
            for value in &values {
                let mut combo = combo.clone();
                combo.push((key.clone(), value.clone()));
                next.push(combo);
            }
        }
        combos = next;
    }
    let excludes = matrix.get("exclude").and_then(Value::as_sequence).map(Vec::as_slice).unwrap_or_default();
    combos.retain(|combo| {
        !excludes.iter().filter_map(Value::as_mapping).any(|exclude| {
            exclude.iter().all(|(k, v)| {
                combo.iter().any(|(ck, cv)| Some(ck.as_str()) == k.as_str() && scalar(v).as_ref() == Some(cv))
            })
        })
    });
    if combos.len() > MAX_COMBINATIONS {
        return Err(MatrixProblem::TooMany(combos.len()));
    }
    Ok(combos)
}

fn substitute(text: &str, combo: &Combination) -> String {
    MATRIX_REF
        .replace_all(text, |caps: &regex::Captures<'_>| {
            combo
                .iter()
                .find(|(k, _)| *k == caps[1])
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| caps[0].to_owned())
        })
        .into_owned()
}

fn working_directory(value: Option<&Value>) -> Option<String> {
    value.and_then(|v| v.get("run")).and_then(|r| r.get("working-directory")).and_then(scalar)
}

fn field_error(file: &str, line: Option<usize>, field: String, message: &str) -> CiError {
    CiError::Field { file: file.to_owned(), line, field, message: message.to_owned() }
}

struct JobReader<'a> {
    file: &'a str,
    text: &'a str,
    combo: &'a Combination,
    job: CiJob,
}

impl JobReader<'_> {
    /// Reads one job (one matrix combination of it) of the `workflow`.
    fn read(mut self, id: &str, job: &Mapping, workflow: &Mapping) -> Result<CiJob, CiError> {
        if let Some(uses) = job.get("uses").and_then(Value::as_str) {
            self.unsupported(format!("calls the reusable workflow `{uses}`"));
        }
        if let Some(services) = job.get("services").and_then(Value::as_mapping) {
            let list: Vec<String> = services.keys().filter_map(scalar).collect();
            self.unsupported(format!("needs services ({})", list.join(", ")));
        }
        let container = job.get("container").map(|c| c.get("image").unwrap_or(c));
        self.job.image = container.and_then(scalar).map(|image| substitute(&image, self.combo));
        self.fold_env(workflow.get("env"));
        self.fold_env(job.get("env"));
        let dir =
            working_directory(job.get("defaults")).or_else(|| working_directory(workflow.get("defaults")));
        let steps = job.get("steps").and_then(Value::as_sequence).map(Vec::as_slice).unwrap_or_default();
        for step in steps {
            let step = step.as_mapping().ok_or_else(|| {
                field_error(
                    self.file,
                    key_line(self.text, id),
                    format!("jobs.{id}.steps"),
                    "expected a list of steps",
                )
            })?;
            self.step(step, dir.as_deref());
        }
        if self.job.unsupported.is_none() {
            self.job.unsupported = self.job.commands.iter().find_map(|c| network_use(c));
        }
        Ok(self.job)
    }

    fn unsupported(&mut self, why: String) {
        self.job.unsupported.get_or_insert(why);
    }

    fn fold_env(&mut self, env: Option<&Value>) {
        let Some(env) = env else {
            return;
        };
        let Some(env) = env.as_mapping() else {
            self.job.notes.push("an `env` given as an expression is left out".into());
            return;
        };
        for (key, value) in env {
            let (Some(key), Some(value)) = (scalar(key), scalar(value)) else {
                continue;
            };
            let value = substitute(&value, self.combo);
            if value.contains("${{") {
                self.job
                    .notes
                    .push(format!("variable {key} is left out: `{value}` is evaluated by GitHub only"));
            } else if let Some(old) = self.job.variables.insert(key.clone(), value.clone()) {
                if old != value {
                    self.job.notes.push(format!("variable {key} is `{value}` for all steps (was `{old}`)"));
                }
            }
        }
    }

    fn step(&mut self, step: &Mapping, default_dir: Option<&str>) {
        if let Some(uses) = step.get("uses").and_then(Value::as_str) {
            let action = uses.split('@').next().unwrap_or(uses);
            if action.starts_with("actions/setup-") {
                self.job.notes.push(format!("`{uses}` is skipped: the environment provides the toolchain"));
            } else if action != "actions/checkout" {
                self.unsupported(format!("uses the action `{uses}`"));
            }
            return;
        }
        let Some(run) = step.get("run").and_then(scalar).map(|r| r.trim_end().to_owned()) else {
            return;
        };
        let shell = step.get("shell").and_then(Value::as_str).unwrap_or("bash");
        if !(shell.starts_with("bash") || shell.starts_with("sh")) {
            self.unsupported(format!("has a `{shell}` shell step"));
        }
        self.fold_env(step.get("env"));
        let run = substitute(&run, self.combo);
        if let Some(start) = run.find("${{") {
            let end = run[start..].find("}}").map(|e| start + e + 2).unwrap_or(run.len());
            self.unsupported(format!(
                "runs the expression `{}`, which only GitHub evaluates",
                &run[start..end]
            ));
        }
        let dir = step.get("working-directory").and_then(scalar).or(default_dir.map(String::from));
        let command = match dir.map(|d| substitute(&d, self.combo)) {
            Some(dir) if dir != "." => match crate::shell::quote(&dir) {
                Ok(dir) => format!("cd {dir} && {run}"),
                Err(e) => {
                    self.unsupported(format!("its working-directory {e}"));
                    run
                }
            },
            _ => run,
        };
        self.job.commands.push(command);
    }
}

/// One workflow file's jobs, named by job id (and matrix combination), needs resolved to
/// those names.
fn workflow(file: &str, text: &str) -> Result<Vec<CiJob>, CiError> {
    let root = match parse_yaml(file, text)? {
        Value::Mapping(root) => root,
        Value::Null => return Ok(Vec::new()),
        _ => return Err(field_error(file, None, "(top level)".into(), "expected a mapping")),
    };
    let Some(jobs) = root.get("jobs").and_then(Value::as_mapping) else {
        return Err(field_error(file, key_line(text, "jobs"), "jobs".into(), "expected a mapping of jobs"));
    };
    let mut out = Vec::new();
    let mut names: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (id, job) in jobs {
        let id = scalar(id).unwrap_or_default();
        let job = job.as_mapping().ok_or_else(|| {
            field_error(file, key_line(text, &id), format!("jobs.{id}"), "expected a mapping")
        })?;
        let (combos, matrix_problem) = match combinations(job.get("strategy")) {
            Ok(combos) => (combos, None),
            Err(why) => (vec![Vec::new()], Some(why.to_string())),
        };
        for combo in &combos {
            let values: Vec<&str> = combo.iter().map(|(_, v)| v.as_str()).collect();
            let name = if combo.is_empty() { id.clone() } else { format!("{id} ({})", values.join(", ")) };
            let empty = CiJob {
                name: name.clone(),
                stage: "github".into(),
                commands: Vec::new(),
                variables: BTreeMap::new(),
                needs: job.get("needs").and_then(string_list).unwrap_or_default(),
                image: None,
                unsupported: matrix_problem.clone(),
                notes: Vec::new(),
                source: format!("github:{file}"),
            };
            out.push(JobReader { file, text, combo, job: empty }.read(&id, job, &root)?);
            names.entry(id.clone()).or_default().push(name);
        }
    }
    // A need on a matrix job waits for all of its combinations.
    for job in &mut out {
        let needs = std::mem::take(&mut job.needs);
        job.needs =
            needs.iter().flat_map(|n| names.get(n).cloned().unwrap_or_else(|| vec![n.clone()])).collect();
    }
    Ok(out)
}

/// Reads the given workflow files. None when there are none.
pub fn github(
    read_file: &dyn Fn(&str) -> Option<String>,
    workflow_files: &[String],
) -> Result<Option<CiConfig>, CiError> {
    if workflow_files.is_empty() {
        return Ok(None);
    }
    let mut per_file = Vec::new();
    for file in workflow_files {
        let text =
            read_file(file).ok_or_else(|| CiError::Missing { path: file.clone(), included_by: None })?;
        per_file.push((file, workflow(file, &text)?));
    }
    let mut seen = BTreeSet::new();
    let shared: BTreeSet<String> = per_file
        .iter()
        .flat_map(|(_, jobs)| jobs.iter().map(|j| j.name.clone()).collect::<BTreeSet<_>>())
        .filter(|name| !seen.insert(name.clone()))
        .collect();
    let mut jobs = Vec::new();
    for (file, file_jobs) in per_file {
        let stem = file.rsplit('/').next().unwrap_or(file);
        let qualify =
            |name: &String| if shared.contains(name) { format!("{stem}/{name}") } else { name.clone() };
        for mut job in file_jobs {
            job.name = qualify(&job.name);
            job.needs = job.needs.iter().map(qualify).collect();
            jobs.push(job);
        }
    }
    let file = workflow_files.join(", ");
    Ok(Some(CiConfig { jobs: run_order(jobs, |_| 0, &file)? }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CI: &str = r#"name: CI
on:
  push:
    branches: [main]
  pull_request:
env:
  PYTHONUNBUFFERED: "1"
  TOKEN: ${{ secrets.TOKEN }}
defaults:
  run:
    working-directory: backend
jobs:
  lint:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.12"
      - run: ruff check .
  test:
    needs: lint
    runs-on: ubuntu-latest
    strategy:
      fail-fast: false
      matrix:
        python: ["3.11", "3.12"]
        extras: [minimal, full]
        exclude:
          - python: "3.11"
            extras: full
    env:
      EXTRAS: ${{ matrix.extras }}
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: ${{ matrix.python }}
      - name: Test
        run: |
          python -m pytest -q -k "not slow"
        env:
          PYTEST_ADDOPTS: "-ra"
      - name: Frontend tests
        working-directory: frontend app
        run: node --test
  docs:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - uses: peaceiris/actions-gh-pages@v3
        with:
          publish_dir: ./site
  db:
    needs: [test]
    runs-on: ubuntu-latest
    container: python:3.12
    services:
      postgres:
        image: postgres:16
    steps:
      - run: pytest tests/db
"#;

    const RELEASE: &str =
        "on: push\njobs:\n  lint:\n    runs-on: ubuntu-latest\n    steps:\n      - run: make lint\n\
                           \x20 publish:\n    needs: lint\n    uses: ./.github/workflows/reusable.yml\n";

    fn read(path: &str) -> Option<String> {
        match path {
            ".github/workflows/ci.yml" => Some(CI.to_owned()),
            ".github/workflows/release.yaml" => Some(RELEASE.to_owned()),
            _ => None,
        }
    }

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_realistic_workflow() {
        let config = github(&read, &strings(&[".github/workflows/ci.yml"])).unwrap().unwrap();
        let names: Vec<&str> = config.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(
            names,
            ["lint", "test (3.11, minimal)", "test (3.12, minimal)", "test (3.12, full)", "docs", "db"]
        );
        let job = |name: &str| config.jobs.iter().find(|j| j.name == name).unwrap();

        let lint = job("lint");
        assert_eq!(lint.commands, strings(&["cd backend && ruff check ."]));
        assert_eq!(lint.stage, "github");
        assert_eq!(lint.source, "github:.github/workflows/ci.yml");
        assert_eq!(lint.unsupported, None);
        let notes = lint.notes.join("\n");
        assert!(notes.contains("`actions/setup-python@v5` is skipped"), "{notes}");
        assert!(notes.contains("variable TOKEN is left out"), "{notes}");

        let test = job("test (3.12, full)");
        assert_eq!(
            test.commands,
            strings(&[
                "cd backend && python -m pytest -q -k \"not slow\"",
                "cd 'frontend app' && node --test"
            ])
        );
        let vars: Vec<(&str, &str)> = test.variables.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(vars, [("EXTRAS", "full"), ("PYTEST_ADDOPTS", "-ra"), ("PYTHONUNBUFFERED", "1")]);
        assert_eq!(test.needs, strings(&["lint"]));
        assert_eq!(test.unsupported, None);

        assert_eq!(
            job("docs").unsupported.as_deref(),
            Some("uses the action `peaceiris/actions-gh-pages@v3`")
        );
        let db = job("db");
        assert_eq!(db.unsupported.as_deref(), Some("needs services (postgres)"));
        assert_eq!(db.image.as_deref(), Some("python:3.12"));
        assert_eq!(db.needs, strings(&["test (3.11, minimal)", "test (3.12, minimal)", "test (3.12, full)"]));
    }

    #[test]
    fn job_ids_shared_by_two_workflows_are_qualified() {
        let files = strings(&[".github/workflows/ci.yml", ".github/workflows/release.yaml"]);
        let config = github(&read, &files).unwrap().unwrap();
        let job = |name: &str| config.jobs.iter().find(|j| j.name == name);
        assert!(job("lint").is_none());
        assert_eq!(job("ci.yml/lint").unwrap().commands, strings(&["cd backend && ruff check ."]));
        assert_eq!(job("test (3.11, minimal)").unwrap().needs, strings(&["ci.yml/lint"]));
        let publish = job("publish").unwrap();
        assert_eq!(publish.needs, strings(&["release.yaml/lint"]));
        assert_eq!(publish.source, "github:.github/workflows/release.yaml");
        assert!(publish.unsupported.as_deref().unwrap().starts_with("calls the reusable workflow"));
        assert!(github(&read, &[]).unwrap().is_none());
    }

    #[test]
    fn what_cannot_be_reproduced_is_unsupported() {
        let workflow = "jobs:\n  a:\n    strategy:\n      matrix:\n        include:\n          - os: linux\n    \
                        steps:\n      - run: make\n  b:\n    steps:\n      - run: print('hi')\n        shell: python\n  \
                        c:\n    steps:\n      - run: pytest ${{ github.event.inputs.args }}\n  \
                        d:\n    steps:\n      - run: |\n          pip install -r requirements.txt\n          pytest\n";
        let read = |_: &str| Some(workflow.to_owned());
        let config = github(&read, &strings(&["w.yml"])).unwrap().unwrap();
        let why: Vec<&str> = config.jobs.iter().map(|j| j.unsupported.as_deref().unwrap_or("")).collect();
        assert_eq!(
            why,
            [
                "its matrix uses `include`, which is not expanded",
                "has a `python` shell step",
                "runs the expression `${{ github.event.inputs.args }}`, which only GitHub evaluates",
                "runs `pip install` (the sandbox has no network)",
            ]
        );
    }

    #[test]
    fn errors_name_the_file_and_the_job() {
        let read = |path: &str| (path == "w.yml").then(|| "on: push\njobs:\n  build: [1, 2]\n".to_owned());
        let err = github(&read, &strings(&["w.yml"])).unwrap_err();
        assert_eq!(err.to_string(), "w.yml line 3: jobs.build: expected a mapping");
        let err = github(&read, &strings(&["gone.yml"])).unwrap_err();
        assert_eq!(err.to_string(), "gone.yml does not exist at this commit");
        let read = |_: &str| Some("jobs:\n  a:\n    needs: zzz\n    steps: []\n".to_owned());
        let err = github(&read, &strings(&["w.yml"])).unwrap_err();
        assert_eq!(err.to_string(), "w.yml: a.needs: job `zzz` is not defined");
    }
}
