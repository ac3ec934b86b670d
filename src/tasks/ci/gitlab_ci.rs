//! `.gitlab-ci.yml`: `stages` (default build, test, deploy, with `.pre` first and `.post` last),
//! global `variables` (merged under each job's), `default:` (`before_script`, `image`,
//! `services`; the old top-level forms too) with `inherit:`, `include:` of local files (a
//! string, a list of strings or `- local: path`, nested includes too; merged under the
//! including file, deep for maps), hidden jobs (`.name`) and `extends:` (one or a list; maps
//! merged deeply, later parents win, the job's own keys last, lists such as `script`
//! replaced), YAML merge keys (`<<: *anchor`), `!reference [job, key]` in script lists,
//! `before_script`/`script` as a string or a list (a multi-line string stays one command),
//! `needs` (names or `{job: x}`; an optional need on a missing job is dropped), `image` (a
//! string or `{name: x}`) and `stage` (default `test`).
//!
//! Ignored: `rules`/`only`/`except`/`when` (every job is listed), `after_script`, `cache`,
//! `artifacts`, `parallel` (noted: the job runs once). Unsupported: `services`, an image that
//! is Docker itself (`docker:` or `dind`), scripts that need the network or Docker,
//! `trigger:` jobs and needs on other pipelines. Remote, template, project and component
//! includes are an error: their content is not in the repository.

use std::collections::{BTreeMap, HashMap};

use serde_yaml_ng::{Mapping, Value};

use super::{key_line, network_use, parse_yaml, run_order, scalar, string_list, CiConfig, CiError, CiJob};

const ROOT: &str = ".gitlab-ci.yml";
const GLOBAL_KEYS: [&str; 11] = [
    "stages",
    "variables",
    "default",
    "include",
    "workflow",
    "image",
    "services",
    "before_script",
    "after_script",
    "cache",
    "spec",
];

/// Deep merge: maps merge key by key, anything else in `over` replaces what `base` had.
fn deep_merge(base: &mut Mapping, over: Mapping) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(Value::Mapping(old)), Value::Mapping(new)) => deep_merge(old, new),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

struct Loader<'a> {
    read_file: &'a dyn Fn(&str) -> Option<String>,
    texts: HashMap<String, String>,
    /// Top-level key -> the file that defined it last, for error lines.
    origin: HashMap<String, String>,
}

impl Loader<'_> {
    fn field(&self, key: &str, field: &str, message: impl Into<String>) -> CiError {
        let file = self.origin.get(key).cloned().unwrap_or_else(|| ROOT.to_owned());
        let line = self.texts.get(&file).and_then(|text| key_line(text, key));
        CiError::Field { file, line, field: field.to_owned(), message: message.into() }
    }

    /// The file's mapping with its includes merged under it.
    fn load(&mut self, file: &str, text: String, stack: &mut Vec<String>) -> Result<Mapping, CiError> {
        let mut own = match parse_yaml(file, &text)? {
            Value::Mapping(map) => map,
            Value::Null => Mapping::new(),
            _ => return Err(self.field("", "(top level)", "expected a mapping of keywords and jobs")),
        };
        self.texts.insert(file.to_owned(), text);
        let mut merged = Mapping::new();
        let includes = match own.shift_remove("include") {
            None => Vec::new(),
            Some(Value::Sequence(items)) => items,
            Some(other) => vec![other],
        };
        stack.push(file.to_owned());
        for include in includes {
            let path = match &include {
                Value::String(s) if !s.contains("://") => s.clone(),
                Value::Mapping(m) if m.contains_key("local") => {
                    m.get("local").and_then(Value::as_str).unwrap_or_default().to_owned()
                }
                other => {
                    let include = serde_yaml_ng::to_string(other).unwrap_or_default().trim().to_owned();
                    return Err(CiError::RemoteInclude { file: file.to_owned(), include });
                }
            };
            let path = path.trim_start_matches('/').to_owned();
            if path.is_empty() || path.contains('*') {
                let message = format!("`{path}`: give one file (wildcards cannot be read)");
                return Err(CiError::Field {
                    file: file.to_owned(),
                    line: None,
                    field: "include".into(),
                    message,
                });
            }
            if stack.contains(&path) {
                let message = format!("`{path}` includes itself");
                return Err(CiError::Field {
                    file: file.to_owned(),
                    line: None,
                    field: "include".into(),
                    message,
                });
            }
            let Some(text) = (self.read_file)(&path) else {
                return Err(CiError::Missing { path, included_by: Some(file.to_owned()) });
            };
            let included = self.load(&path, text, stack)?;
            deep_merge(&mut merged, included);
        }
        stack.pop();
        for key in own.keys().filter_map(Value::as_str) {
            self.origin.insert(key.to_owned(), file.to_owned());
        }
        deep_merge(&mut merged, own);
        Ok(merged)
    }

    fn resolve(&self, root: &Mapping, name: &str, chain: &mut Vec<String>) -> Result<Mapping, CiError> {
        let own = match root.get(name) {
            Some(Value::Mapping(own)) => own,
            Some(_) if chain.is_empty() => return Err(self.field(name, name, "expected a job (a mapping)")),
            _ => {
                let culprit = chain.last().map(String::as_str).unwrap_or(name);
                let message = format!("`{name}` is not a defined job");
                return Err(self.field(culprit, &format!("{culprit}.extends"), message));
            }
        };
        if chain.iter().any(|c| c == name) || chain.len() > 10 {
            return Err(self.field(
                name,
                &format!("{name}.extends"),
                "extends itself (or nests deeper than 11)",
            ));
        }
        let mut own = own.clone();
        let parents = match own.shift_remove("extends") {
            None => Vec::new(),
            Some(value) => string_list(&value).ok_or_else(|| {
                self.field(name, &format!("{name}.extends"), "expected a job name or a list")
            })?,
        };
        chain.push(name.to_owned());
        let mut job = Mapping::new();
        for parent in parents {
            deep_merge(&mut job, self.resolve(root, &parent, chain)?);
        }
        chain.pop();
        deep_merge(&mut job, own);
        Ok(job)
    }
}

/// `!reference [job, key, ...]` entries of a script list, looked up in the merged file.
fn expand_references(value: &Value, root: &Mapping) -> Value {
    match value {
        Value::Sequence(items) => Value::Sequence(items.iter().map(|i| expand_references(i, root)).collect()),
        Value::Tagged(tagged) if tagged.tag == "reference" => {
            let path = tagged.value.as_sequence().map(Vec::as_slice).unwrap_or_default();
            let mut keys = path.iter();
            let mut current = keys.next().and_then(|key| root.get(key));
            for key in keys {
                current = current.and_then(|value| value.get(key));
            }
            current.map(|value| expand_references(value, root)).unwrap_or(Value::Null)
        }
        other => other.clone(),
    }
}

/// Whether `inherit:<what>` lets `key` through (true, false or a list of names).
fn inherits(job: &Mapping, what: &str, key: &str) -> bool {
    match job.get("inherit").and_then(|i| i.get(what)) {
        Some(Value::Bool(b)) => *b,
        Some(Value::Sequence(keys)) => keys.iter().any(|k| k.as_str() == Some(key)),
        _ => true,
    }
}

fn image_name(value: &Value) -> Option<String> {
    match value {
        Value::Mapping(m) => m.get("name").and_then(scalar),
        other => scalar(other),
    }
}

/// What every job of the pipeline shares.
struct Pipeline<'a> {
    loader: Loader<'a>,
    root: Mapping,
    stages: Vec<String>,
    default: Mapping,
    variables: BTreeMap<String, String>,
}

impl Pipeline<'_> {
    /// A `default:` keyword (or its old top-level form) unless the job's `inherit:` refuses it.
    fn inherited(&self, job: &Mapping, key: &str) -> Option<&Value> {
        if !inherits(job, "default", key) {
            return None;
        }
        self.default.get(key).or_else(|| self.root.get(key))
    }

    fn variables(
        &self,
        key: &str,
        field: &str,
        value: Option<&Value>,
    ) -> Result<BTreeMap<String, String>, CiError> {
        let mut out = BTreeMap::new();
        for (name, value) in value.and_then(Value::as_mapping).into_iter().flatten() {
            // `NAME: {value: x, description: y}` is the documented long form.
            let (Some(name), Some(value)) = (name.as_str(), scalar(value.get("value").unwrap_or(value)))
            else {
                return Err(self.loader.field(key, field, "expected names mapped to strings"));
            };
            out.insert(name.to_owned(), value);
        }
        Ok(out)
    }

    fn job(&self, name: &str) -> Result<CiJob, CiError> {
        let job = self.loader.resolve(&self.root, name, &mut Vec::new())?;
        let field = |key: &str, message: &str| self.loader.field(name, &format!("{name}.{key}"), message);
        let commands_of = |key: &str, value: &Value| {
            string_list(&expand_references(value, &self.root))
                .ok_or_else(|| field(key, "expected a string or a list of strings"))
        };
        let mut commands = Vec::new();
        if let Some(before) = job.get("before_script").or_else(|| self.inherited(&job, "before_script")) {
            commands.extend(commands_of("before_script", before)?);
        }
        let trigger = job.contains_key("trigger");
        match job.get("script") {
            Some(script) => commands.extend(commands_of("script", script)?),
            None if trigger => {}
            None => return Err(field("script", "a job needs `script` (or `trigger`)")),
        }
        let stage = job.get("stage").map(scalar).unwrap_or(Some("test".into()));
        let stage = stage.ok_or_else(|| field("stage", "expected a stage name"))?;
        if !self.stages.contains(&stage) {
            let message = format!("`{stage}` is not one of the stages: {}", self.stages.join(", "));
            return Err(field("stage", &message));
        }
        let mut variables = self.variables.clone();
        variables.retain(|k, _| inherits(&job, "variables", k));
        variables.extend(self.variables(name, &format!("{name}.variables"), job.get("variables"))?);
        let mut other_pipeline = false;
        let mut needs = Vec::new();
        for need in job.get("needs").and_then(Value::as_sequence).into_iter().flatten() {
            let optional = need.get("optional").and_then(Value::as_bool).unwrap_or(false);
            match need.as_str().or_else(|| need.get("job").and_then(Value::as_str)) {
                Some(other) if optional && !self.root.contains_key(other) => {}
                Some(other) => needs.push(other.to_owned()),
                None if need.get("pipeline").is_some() || need.get("project").is_some() => {
                    other_pipeline = true
                }
                None => return Err(field("needs", "expected job names or `{job: name}`")),
            }
        }
        let image = job.get("image").or_else(|| self.inherited(&job, "image")).and_then(image_name);
        let services: Vec<String> = (job.get("services").or_else(|| self.inherited(&job, "services")))
            .and_then(Value::as_sequence)
            .map(|list| list.iter().filter_map(image_name).collect())
            .unwrap_or_default();
        // `docker:24`, `registry/group/docker:24-dind`: Docker itself, which needs an engine.
        let docker_image = image.as_deref().filter(|image| {
            let base = image.rsplit('/').next().unwrap_or(image);
            base == "docker" || base.starts_with("docker:") || image.contains("dind")
        });
        let unsupported = if trigger {
            Some("triggers a downstream pipeline".to_owned())
        } else if !services.is_empty() {
            Some(format!("needs services ({})", services.join(", ")))
        } else if let Some(image) = docker_image {
            Some(format!("runs in the Docker image `{image}` (no Docker engine in the sandbox)"))
        } else if other_pipeline {
            Some("needs a job of another pipeline".to_owned())
        } else {
            commands.iter().find_map(|c| network_use(c))
        };
        let mut notes = Vec::new();
        if job.contains_key("parallel") {
            notes.push("`parallel` is ignored: the job runs once".to_owned());
        }
        let source = "gitlab".to_owned();
        Ok(CiJob {
            name: name.to_owned(),
            stage,
            commands,
            variables,
            needs,
            image,
            unsupported,
            notes,
            source,
        })
    }
}

/// Reads `.gitlab-ci.yml` (and its local includes). None when the repository has none.
pub fn gitlab(read_file: &dyn Fn(&str) -> Option<String>) -> Result<Option<CiConfig>, CiError> {
    let Some(text) = read_file(ROOT) else {
        return Ok(None);
    };
    let mut loader = Loader { read_file, texts: HashMap::new(), origin: HashMap::new() };
    let root = loader.load(ROOT, text, &mut Vec::new())?;
    let mut stages: Vec<String> = match root.get("stages") {
        Some(value) => {
            string_list(value).ok_or_else(|| loader.field("stages", "stages", "expected a list"))?
        }
        None => ["build", "test", "deploy"].map(String::from).to_vec(),
    };
    stages.insert(0, ".pre".into());
    stages.push(".post".into());
    let default = root.get("default").and_then(Value::as_mapping).cloned().unwrap_or_default();
    let mut pipeline = Pipeline { loader, root, stages, default, variables: BTreeMap::new() };
    pipeline.variables = pipeline.variables("variables", "variables", pipeline.root.get("variables"))?;
    let mut jobs = Vec::new();
    for name in pipeline.root.keys().filter_map(Value::as_str) {
        if !name.starts_with('.') && !GLOBAL_KEYS.contains(&name) {
            jobs.push(pipeline.job(name)?);
        }
    }
    let rank = |job: &CiJob| pipeline.stages.iter().position(|s| *s == job.stage).unwrap_or(usize::MAX);
    Ok(Some(CiConfig { jobs: run_order(jobs, rank, ROOT)? }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAIN: &str = r#"include:
  - local: ci/templates.yml
  - '/ci/lint.yml'

stages:
  - lint
  - build
  - test
  - release

variables:
  PIP_CACHE_DIR: "$CI_PROJECT_DIR/.cache/pip"
  PYTHONUNBUFFERED: "1"
  RETRIES: 3

default:
  image: python:3.11-slim
  before_script:
    - python -V
    - export PATH="$HOME/.local/bin:$PATH"

build-wheel:
  stage: build
  script:
    - python -m build --no-isolation --wheel
  artifacts:
    paths: [dist/]

unit-tests:
  extends: .pytest
  needs: [build-wheel]
  variables:
    PYTEST_ADDOPTS: "-x"
  script:
    - pytest -q tests/unit
    - |
      if [ -f coverage.xml ]; then
        echo "coverage written"
      fi

integration:
  extends: .pytest
  services:
    - name: postgres:15
      alias: db
  variables:
    POSTGRES_DB: app
  script: pytest -q tests/integration

docker-image:
  stage: release
  image: docker:24.0.5
  services:
    - docker:24.0.5-dind
  before_script: []
  script:
    - docker build -t app .
  rules:
    - if: $CI_COMMIT_TAG

docs:
  stage: release
  needs:
    - job: unit-tests
    - job: coverage-report
      optional: true
  script:
    - wget -q "$DOCS_ARCHIVE" -O docs.tar.gz
"#;

    const TEMPLATES: &str = r#".pytest:
  stage: test
  image: python:3.12
  variables:
    PYTEST_ADDOPTS: "-ra"
    COVERAGE: "1"
  before_script:
    - pip install --no-index --find-links=wheels -e .
  script:
    - pytest
"#;

    const LINT: &str =
        "lint:\n  stage: lint\n  inherit:\n    default: false\n  image:\n    name: python:3.11\n  \
                        script:\n    - ruff check .\n    - mypy src\n";

    fn repo<'a>(files: &'a [(&'static str, String)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |path| files.iter().find(|(p, _)| *p == path).map(|(_, text)| text.clone())
    }

    fn config(main: &str) -> Result<Option<CiConfig>, CiError> {
        let files = [
            (ROOT, main.to_owned()),
            ("ci/templates.yml", TEMPLATES.to_owned()),
            ("ci/lint.yml", LINT.to_owned()),
        ];
        let read = repo(&files);
        gitlab(&read)
    }

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_realistic_pipeline() {
        let config = config(MAIN).unwrap().unwrap();
        let names: Vec<&str> = config.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["lint", "build-wheel", "unit-tests", "integration", "docker-image", "docs"]);
        let job = |name: &str| config.jobs.iter().find(|j| j.name == name).unwrap();

        let lint = job("lint");
        assert_eq!(lint.commands, strings(&["ruff check .", "mypy src"]), "inherit: default: false");
        assert_eq!(lint.image.as_deref(), Some("python:3.11"));
        assert_eq!(lint.variables.get("RETRIES").map(String::as_str), Some("3"));
        assert_eq!(lint.source, "gitlab");

        let build = job("build-wheel");
        let build_commands =
            ["python -V", "export PATH=\"$HOME/.local/bin:$PATH\"", "python -m build --no-isolation --wheel"];
        assert_eq!(build.commands, strings(&build_commands));
        assert_eq!(build.image.as_deref(), Some("python:3.11-slim"));
        assert_eq!(build.unsupported, None);

        let unit = job("unit-tests");
        let unit_commands = [
            "pip install --no-index --find-links=wheels -e .",
            "pytest -q tests/unit",
            "if [ -f coverage.xml ]; then\n  echo \"coverage written\"\nfi",
        ];
        assert_eq!(
            unit.commands,
            strings(&unit_commands),
            "template before_script, own script replaces the list"
        );
        assert_eq!(unit.stage, "test");
        assert_eq!(unit.image.as_deref(), Some("python:3.12"));
        assert_eq!(unit.needs, strings(&["build-wheel"]));
        let vars: Vec<(&str, &str)> = unit.variables.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            vars,
            [
                ("COVERAGE", "1"),
                ("PIP_CACHE_DIR", "$CI_PROJECT_DIR/.cache/pip"),
                ("PYTEST_ADDOPTS", "-x"),
                ("PYTHONUNBUFFERED", "1"),
                ("RETRIES", "3"),
            ]
        );
        assert_eq!(unit.unsupported, None, "pip install --no-index needs no network");

        assert_eq!(job("integration").unsupported.as_deref(), Some("needs services (postgres:15)"));
        assert_eq!(
            job("integration").commands.last().map(String::as_str),
            Some("pytest -q tests/integration")
        );
        let dind = job("docker-image");
        assert_eq!(dind.unsupported.as_deref(), Some("needs services (docker:24.0.5-dind)"));
        assert_eq!(
            dind.commands,
            strings(&["docker build -t app ."]),
            "an empty before_script replaces the default"
        );
        let docs = job("docs");
        assert_eq!(docs.needs, strings(&["unit-tests"]), "the optional need on a missing job is dropped");
        assert_eq!(docs.unsupported.as_deref(), Some("runs `wget` (the sandbox has no network)"));
    }

    #[test]
    fn keywords_are_not_jobs_and_there_may_be_no_file() {
        let config = config(
            "image: python:3.12\nworkflow:\n  rules:\n    - when: always\ncache:\n  paths: [.cache]\n\
                             after_script:\n  - echo bye\ntest:\n  script: make test\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(config.jobs.len(), 1);
        assert_eq!(config.jobs[0].image.as_deref(), Some("python:3.12"), "the old top-level image");
        assert_eq!(config.jobs[0].stage, "test");
        assert!(gitlab(&|_: &str| None).unwrap().is_none());
    }

    #[test]
    fn docker_images_triggers_references_and_anchors() {
        let main = ".setup: &setup\n  before_script:\n    - make deps-offline\n\
                    build:\n  stage: build\n  image: docker:24-dind\n  script: docker info\n\
                    deploy:\n  stage: deploy\n  trigger:\n    project: group/deployer\n\
                    test:\n  <<: *setup\n  script:\n    - !reference [.setup, before_script]\n    - make test\n";
        let config = config(main).unwrap().unwrap();
        let job = |name: &str| config.jobs.iter().find(|j| j.name == name).unwrap();
        assert!(job("build").unsupported.as_deref().unwrap().contains("Docker image `docker:24-dind`"));
        assert_eq!(job("deploy").unsupported.as_deref(), Some("triggers a downstream pipeline"));
        assert_eq!(job("test").commands, strings(&["make deps-offline", "make deps-offline", "make test"]));
    }

    #[test]
    fn errors_name_the_file_the_field_and_the_line() {
        let err = config("include:\n  - remote: 'https://example.invalid/ci.yml'\n").unwrap_err();
        assert!(matches!(err, CiError::RemoteInclude { .. }), "{err}");
        assert!(err.to_string().contains("only local includes are supported"), "{err}");
        let err = config("include:\n  - template: Python.gitlab-ci.yml\n").unwrap_err();
        assert!(matches!(err, CiError::RemoteInclude { .. }), "{err}");

        let err = config("stages: [build]\n\ntest:\n  extends: .missing\n  script: x\n").unwrap_err();
        assert_eq!(err.to_string(), ".gitlab-ci.yml line 3: test.extends: `.missing` is not a defined job");
        let err = config("stages: [build]\n\ntest:\n  script: x\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            ".gitlab-ci.yml line 3: test.stage: `test` is not one of the stages: .pre, build, .post"
        );
        // The job came from an included file: that file and its line are named.
        let err = config("include: ci/lint.yml\nstages: [build]\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "ci/lint.yml line 1: lint.stage: `lint` is not one of the stages: .pre, build, .post"
        );
        let err = config("test:\n  script:\n    key: value\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            ".gitlab-ci.yml line 1: test.script: expected a string or a list of strings"
        );
        let err = config("test:\n  script: [a\n").unwrap_err();
        assert!(matches!(err, CiError::Yaml { line: Some(_), .. }), "{err}");
        assert!(err.to_string().starts_with(".gitlab-ci.yml line "), "{err}");
        let err = config("include: ci/nowhere.yml\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "ci/nowhere.yml does not exist at this commit (included by .gitlab-ci.yml)"
        );
        let err = config("a:\n  script: x\n  needs: [b]\nb:\n  script: y\n  needs: [a]\n").unwrap_err();
        assert!(matches!(&err, CiError::NeedsCycle { jobs, .. } if jobs == &strings(&["a", "b"])), "{err}");
    }
}
