//! Environment specs per (repository, version), SWE-bench's way: `swe specs import` reads
//! SWE-bench's own table (`MAP_REPO_VERSION_TO_SPECS`, shipped in `swebench` 4.x) and writes it
//! as task `environment`s, which `swe grade --specs` gives every task of that repository and
//! version that has no `environment` of its own. The mapping is made once, at import, into the
//! fields a task can hold, so a specs file is read and checked like a task.
//!
//! What maps where:
//! - `python` → `environment.python` (the nearest the images have is used, as for any task);
//! - `packages` → `environment.requirements` when it is `requirements.txt` (the repository's
//!   requirement files, as SWE-bench lists them), `environment.pip` when it is a list of
//!   packages; a conda `environment.yml` cannot be, and the version is skipped;
//! - `pip_packages` → `environment.pip`;
//! - `pre_install`, and the `eval_commands` that are not `export`s → `environment.pre_install`
//!   (build time, as root, before the project is installed); `export NAME=VALUE` lines →
//!   `environment.env`;
//! - `test_cmd` → `environment.runner` (Django's `runtests.py`, SymPy's `bin/test`, pytest);
//!   never a command, since results count only through the runners' own channels;
//! - packages are resolved as SWE-bench resolves them, with no date (`packages_as_of: latest`);
//! - `install` is not used: the environment installs the project editable itself, so the
//!   tests import the tree under test. Other fields are counted as ignored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{build_inputs, SweTask, TaskEnvironment};
use crate::grade::runners::RunnerKind;

/// The `format` of a specs file.
pub const FORMAT: &str = "repairbench-specs/1";

/// A specs file: for each repository and version, the environment its tasks get.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpecsFile {
    pub format: String,
    /// Where the specs came from (`swebench 4.1.0`).
    pub source: String,
    pub repos: BTreeMap<String, BTreeMap<String, TaskEnvironment>>,
}

#[derive(Debug, thiserror::Error)]
pub enum SpecsError {
    #[error("cannot read or write {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not valid JSON of its kind at line {line}: {message}")]
    Parse { path: PathBuf, line: usize, message: String },
    #[error("{path}: `format` is `{found}`, expected `{FORMAT}`")]
    Format { path: PathBuf, found: String },
    #[error("{path}: repos.{repo}.{version}: {problem}")]
    Field { path: PathBuf, repo: String, version: String, problem: String },
    #[error("SWE-bench's specs: {0}")]
    Swebench(String),
    #[error("running `{python}` to read the installed swebench package")]
    Python {
        python: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{python}` could not read SWE-bench's specs from the installed swebench package: {stderr}")]
    Package { python: String, stderr: String },
}

/// A JSON file read as `T`, an error naming the file and line.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, SpecsError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| SpecsError::Read { path: path.to_owned(), source })?;
    serde_json::from_str(&text).map_err(|e| SpecsError::Parse {
        path: path.to_owned(),
        line: e.line(),
        message: e.to_string(),
    })
}

impl SpecsFile {
    /// Reads and checks a specs file: every environment as a task's is checked.
    pub fn load(path: &Path) -> Result<Self, SpecsError> {
        let file: SpecsFile = read_json(path)?;
        if file.format != FORMAT {
            return Err(SpecsError::Format { path: path.to_owned(), found: file.format });
        }
        for (repo, versions) in &file.repos {
            for (version, environment) in versions {
                build_inputs::environment(environment).map_err(|e| SpecsError::Field {
                    path: path.to_owned(),
                    repo: repo.clone(),
                    version: version.clone(),
                    problem: e.to_string(),
                })?;
            }
        }
        Ok(file)
    }

    /// Gives each task without an `environment` of its own the one of its repository and
    /// version; returns how many got one. The task records which (`environment_spec`).
    pub fn apply(&self, tasks: &mut [SweTask]) -> usize {
        let mut applied = 0;
        for task in tasks.iter_mut().filter(|t| t.environment.is_none()) {
            let Some(version) = task.version.clone() else { continue };
            if let Some((environment, label)) = self.entry(&task.repo, &version) {
                task.environment = Some(environment);
                task.environment_spec = Some(label);
                applied += 1;
            }
        }
        applied
    }

    /// The environment of `repo` at `version`, with its label (`REPO VERSION (SOURCE)`).
    pub fn entry(&self, repo: &str, version: &str) -> Option<(TaskEnvironment, String)> {
        let environment = self.repos.get(repo)?.get(version)?;
        Some((environment.clone(), format!("{repo} {version} ({})", self.source)))
    }

    /// The versions listed for `repo`, for an error that names them.
    pub fn versions(&self, repo: &str) -> Vec<&str> {
        self.repos.get(repo).map(|v| v.keys().map(String::as_str).collect()).unwrap_or_default()
    }
}

/// What an import made, and what it could not use.
#[derive(Debug)]
pub struct Imported {
    pub file: SpecsFile,
    /// `repo version: why` for each version left out.
    pub skipped: Vec<String>,
    /// Fields of SWE-bench's specs that have no use here, with how many versions had each.
    pub ignored: BTreeMap<String, usize>,
}

/// Maps SWE-bench's `MAP_REPO_VERSION_TO_SPECS` (`specs`) and `MAP_REPO_TO_REQS_PATHS`
/// (`requirement_paths`, may be null) into a specs file. Only Python specs (those naming a
/// `python`) are taken.
pub fn from_swebench(source: &str, specs: &Value, requirement_paths: &Value) -> Result<Imported, SpecsError> {
    let repos =
        specs.as_object().ok_or_else(|| SpecsError::Swebench("expected an object of repositories".into()))?;
    let mut imported = Imported {
        file: SpecsFile { format: FORMAT.into(), source: source.into(), repos: BTreeMap::new() },
        skipped: Vec::new(),
        ignored: BTreeMap::new(),
    };
    for (repo, versions) in repos {
        let versions = versions
            .as_object()
            .ok_or_else(|| SpecsError::Swebench(format!("{repo}: expected an object of versions")))?;
        let paths: Vec<String> = requirement_paths
            .get(repo)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|p| p.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        for (version, spec) in versions {
            let Some(spec) = spec.as_object().filter(|s| s.get("python").is_some_and(Value::is_string))
            else {
                continue;
            };
            match environment_of(spec, &paths, &mut imported.ignored) {
                Ok(environment) => {
                    build_inputs::environment(&environment)
                        .map_err(|e| SpecsError::Swebench(format!("{repo} {version}: {e}")))?;
                    imported.file.repos.entry(repo.clone()).or_default().insert(version.clone(), environment);
                }
                Err(why) => imported.skipped.push(format!("{repo} {version}: {why}")),
            }
        }
    }
    Ok(imported)
}

/// The strings of a field that is a string or a list of strings.
fn strings(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items.iter().filter_map(|i| i.as_str().map(str::to_owned)).collect(),
        _ => Vec::new(),
    }
}

/// Why a version's spec cannot be a task environment.
#[derive(Debug, thiserror::Error)]
enum Unusable {
    #[error("its packages are a conda environment.yml")]
    Conda,
    #[error("its packages cannot be read: {0}")]
    Packages(String),
}

/// One version's spec as a task environment.
fn environment_of(
    spec: &serde_json::Map<String, Value>,
    requirement_paths: &[String],
    ignored: &mut BTreeMap<String, usize>,
) -> Result<TaskEnvironment, Unusable> {
    // Exactly the requirement files the spec names (none: the root's are not installed either,
    // as SWE-bench installs none), and packages with no date.
    let mut environment = TaskEnvironment {
        packages_as_of: Some("latest".into()),
        requirements: Some(Vec::new()),
        ..Default::default()
    };
    let requirements = environment.requirements.get_or_insert_with(Vec::new);
    for (key, value) in spec {
        match key.as_str() {
            "python" => environment.python = value.as_str().map(str::to_owned),
            "packages" => {
                let packages = value.as_str().unwrap_or_default().trim();
                match packages {
                    "environment.yml" => return Err(Unusable::Conda),
                    "requirements.txt" if requirement_paths.is_empty() => {
                        requirements.push("requirements.txt".into())
                    }
                    "requirements.txt" => requirements.extend(requirement_paths.iter().cloned()),
                    words => environment
                        .pip
                        .extend(shlex::split(words).ok_or_else(|| Unusable::Packages(words.to_owned()))?),
                }
            }
            "pip_packages" => environment.pip.extend(strings(value)),
            "pre_install" => environment.pre_install.extend(strings(value)),
            "eval_commands" => {
                for command in strings(value) {
                    match command.trim().strip_prefix("export ").and_then(|a| a.split_once('=')) {
                        Some((name, quoted)) => {
                            let value = shlex::split(quoted)
                                .map(|w| w.join(" "))
                                .unwrap_or_else(|| quoted.to_owned());
                            environment.env.insert(name.trim().to_owned(), value);
                        }
                        None => environment.pre_install.push(command),
                    }
                }
            }
            "test_cmd" => {
                let command = strings(value).join(" ");
                environment.runner = if command.contains("runtests.py") {
                    Some(RunnerKind::Django)
                } else if command.contains("bin/test") {
                    Some(RunnerKind::Sympy)
                } else if command.contains("pytest") || command.contains("tox") {
                    Some(RunnerKind::Pytest)
                } else {
                    None
                };
            }
            other => *ignored.entry(other.to_owned()).or_default() += 1,
        }
    }
    // SWE-bench's images have a C toolchain (packages without wheels build from source) and the
    // locales its commands generate; ours get the packages.
    environment.apt.extend(["build-essential".to_owned(), "python3-dev".to_owned()]);
    if environment.pre_install.iter().any(|c| c.contains("locale-gen")) {
        environment.apt.push("locales".into());
    }
    Ok(environment)
}

/// The script `read_installed` runs: SWE-bench's tables as JSON.
const READ_SWEBENCH: &str = "import json, sys, importlib.metadata as m
import swebench.harness.constants as c
specs = getattr(c, 'MAP_REPO_VERSION_TO_SPECS', None)
if specs is None:
    sys.exit('swebench ' + m.version('swebench') + ' does not ship MAP_REPO_VERSION_TO_SPECS (4.1.0 does)')
reqs = getattr(c, 'MAP_REPO_TO_REQS_PATHS', None)
if reqs is None:
    import swebench.harness.constants.python as p
    reqs = getattr(p, 'MAP_REPO_TO_REQS_PATHS', {})
json.dump({'source': 'swebench ' + m.version('swebench'), 'specs': specs, 'requirement_paths': reqs}, sys.stdout, default=str)
";

/// SWE-bench's tables from the `swebench` package installed for `python`, as
/// `{source, specs, requirement_paths}`; the same shape is accepted as a JSON export.
pub fn read_installed(python: &str) -> Result<Value, SpecsError> {
    let output = std::process::Command::new(python)
        .args(["-c", READ_SWEBENCH])
        .output()
        .map_err(|source| SpecsError::Python { python: python.to_owned(), source })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("(no output)");
        return Err(SpecsError::Package { python: python.to_owned(), stderr: last.to_owned() });
    }
    serde_json::from_slice(&output.stdout)
        .map_err(|e| SpecsError::Swebench(format!("unreadable output: {e}")))
}

/// Where `swe specs import` reads SWE-bench's specs.
#[derive(Debug, Clone)]
pub enum SpecsSource {
    /// The `swebench` package installed for this Python.
    Installed(String),
    /// A JSON export.
    Export(PathBuf),
}

/// SWE-bench's specs read from `source` and mapped into a specs file.
pub fn import(source: &SpecsSource) -> Result<Imported, SpecsError> {
    match source {
        SpecsSource::Installed(python) => import_export(&read_installed(python)?),
        SpecsSource::Export(path) => import_export(&read_json(path)?),
    }
}

impl SpecsFile {
    /// Writes the file (pretty JSON), replacing it whole.
    pub fn write(&self, path: &Path) -> Result<(), SpecsError> {
        let text = serde_json::to_string_pretty(self).expect("a specs file serializes");
        let partial = path.with_extension("partial");
        std::fs::write(&partial, text + "\n")
            .and_then(|()| std::fs::rename(&partial, path))
            .map_err(|source| SpecsError::Read { path: path.to_owned(), source })
    }
}

/// An export (`{source, specs, requirement_paths}`, or a bare table of repositories) imported.
fn import_export(export: &Value) -> Result<Imported, SpecsError> {
    match export.get("specs") {
        Some(specs) => from_swebench(
            export.get("source").and_then(Value::as_str).unwrap_or("a SWE-bench specs export"),
            specs,
            export.get("requirement_paths").unwrap_or(&Value::Null),
        ),
        None => from_swebench("a SWE-bench specs export", export, &Value::Null),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn swebench_like() -> Value {
        serde_json::json!({
            "django/django": {
                "3.0": {
                    "python": "3.6", "packages": "requirements.txt", "install": "python -m pip install -e .",
                    "eval_commands": ["sed -i '/en_US.UTF-8/s/^# //g' /etc/locale.gen && locale-gen",
                                      "export LANG=en_US.UTF-8", "export LANGUAGE='en_US:en'"],
                    "test_cmd": "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1",
                },
            },
            "pallets/flask": {"2.0": {"python": "3.9", "packages": "requirements.txt",
                                      "pip_packages": ["Werkzeug==2.3.7"], "test_cmd": "pytest -rA"}},
            "sympy/sympy": {"1.1": {"python": "3.9", "packages": "mpmath flake8", "pip_packages": ["mpmath==1.3.0"],
                                    "test_cmd": ["PYTHONWARNINGS='ignore::UserWarning' bin/test -C --verbose"],
                                    "nano_cpus": 2}},
            "astropy/astropy": {"4.3": {"python": "3.9", "packages": "environment.yml", "test_cmd": "pytest"}},
            "mui/material-ui": {"5.0": {"docker_specs": {"node_version": "18"}, "install": ["npm ci"]}},
        })
    }

    #[test]
    fn swebench_specs_map_into_task_environments() {
        let paths = serde_json::json!({"django/django": ["tests/requirements/py3.txt"]});
        let imported = from_swebench("swebench 4.1.0", &swebench_like(), &paths).unwrap();
        let django = &imported.file.repos["django/django"]["3.0"];
        assert_eq!(django.python.as_deref(), Some("3.6"));
        assert_eq!(django.requirements.as_deref(), Some(&["tests/requirements/py3.txt".to_owned()][..]));
        assert_eq!(django.runner, Some(RunnerKind::Django));
        assert_eq!(django.env["LANG"], "en_US.UTF-8");
        assert_eq!(django.env["LANGUAGE"], "en_US:en");
        assert_eq!(django.pre_install.len(), 1);
        assert_eq!(django.apt, ["build-essential", "python3-dev", "locales"]);
        assert_eq!(django.packages_as_of.as_deref(), Some("latest"));
        let flask = &imported.file.repos["pallets/flask"]["2.0"];
        assert_eq!(
            (flask.requirements.as_deref().unwrap_or_default(), flask.pip.as_slice()),
            (&["requirements.txt".to_owned()][..], &["Werkzeug==2.3.7".to_owned()][..])
        );
        let sympy = &imported.file.repos["sympy/sympy"]["1.1"];
        assert_eq!(sympy.pip, ["mpmath", "flake8", "mpmath==1.3.0"]);
        assert_eq!(sympy.runner, Some(RunnerKind::Sympy));
        // A conda environment cannot be had; a spec without a Python is not a Python project's.
        assert_eq!(imported.skipped, ["astropy/astropy 4.3: its packages are a conda environment.yml"]);
        assert!(!imported.file.repos.contains_key("mui/material-ui"));
        assert_eq!(
            imported.ignored,
            BTreeMap::from([("install".to_owned(), 1), ("nano_cpus".to_owned(), 1)])
        );
    }

    #[test]
    fn a_specs_file_is_checked_like_a_task_and_applied_to_tasks_without_an_environment() {
        let dir = tempfile::tempdir().unwrap();
        let imported = from_swebench("swebench 4.1.0", &swebench_like(), &Value::Null).unwrap();
        let path = dir.path().join("specs.json");
        std::fs::write(&path, serde_json::to_string_pretty(&imported.file).unwrap()).unwrap();
        let file = SpecsFile::load(&path).unwrap();
        assert_eq!(file, imported.file);
        let task = |id: &str, version: &str| -> SweTask {
            serde_json::from_value(serde_json::json!({
                "repo": "pallets/flask", "instance_id": id, "base_commit": "0", "version": version,
                "test_patch": "", "FAIL_TO_PASS": [],
            }))
            .unwrap()
        };
        let mut own = task("own", "2.0");
        own.environment = Some(TaskEnvironment { python: Some("3.11".into()), ..Default::default() });
        let mut tasks = vec![task("a", "2.0"), task("b", "9.9"), own];
        assert_eq!(file.apply(&mut tasks), 1);
        assert_eq!(tasks[0].environment.as_ref().unwrap().pip, ["Werkzeug==2.3.7"]);
        assert_eq!(tasks[0].environment_spec.as_deref(), Some("pallets/flask 2.0 (swebench 4.1.0)"));
        assert!(tasks[1].environment.is_none());
        assert_eq!(tasks[2].environment.as_ref().unwrap().python.as_deref(), Some("3.11"));

        // Hostile entries are refused naming the repository, version and field.
        let mut bad = imported.file.clone();
        bad.repos.get_mut("pallets/flask").unwrap().get_mut("2.0").unwrap().pre_install =
            vec!["true\nADD http://127.0.0.1/x /x".into()];
        std::fs::write(&path, serde_json::to_string(&bad).unwrap()).unwrap();
        let err = SpecsFile::load(&path).unwrap_err().to_string();
        assert!(
            err.contains("repos.pallets/flask.2.0") && err.contains("environment.pre_install[0]"),
            "{err}"
        );
        std::fs::write(&path, "{\"format\": \"other\", \"source\": \"x\", \"repos\": {}}").unwrap();
        assert!(SpecsFile::load(&path).unwrap_err().to_string().contains("expected `repairbench-specs/1`"));
    }
}
