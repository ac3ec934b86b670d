//! The image a task's tests run in, planned from the repository itself at the task's
//! `environment_setup_commit` (or base commit): the runner's toolchain, the project installed
//! with its test dependencies, then the task's explicit `environment` extras. The plan is a
//! value ([`LayerSpec`]); the sandbox builds it once per distinct content and every instance
//! that shares it reuses the image. Builds have network; test runs never do.

use std::collections::BTreeMap;

use git2::{Repository, Tree};

use crate::grade::runners::{self, RunnerKind};
use crate::sandbox::images::DebianSuite;
use crate::sandbox::layers::workspace_seed_steps;
use crate::sandbox::{LayerSpec, ParentImage};
use crate::shell::{self, NulByte};

use super::prepare::TaskError;
use crate::tasks::{SweTask, TaskEnvironment};

/// Where environment layers install a Python project's virtual environment.
const VENV: &str = "/opt/venv";
/// uv, pinned, in a venv of its own: it resolves packages as of a date (`--exclude-newer`).
const UV: &str = "uv==0.13.9";
const UV_VENV: &str = "/opt/repairbench/uv";
/// The environment layers' one way to install into the venv: uv as of the environment
/// commit's time (the script reads [`PACKAGES_AS_OF_VAR`]).
const PIP_INSTALL: &str = "/opt/repairbench/pip-install";
const PIP_INSTALL_SCRIPT: &str = include_str!("../../../dockerfiles/python-env/pip-install");
/// The pytest the environment installed first, and its dependencies, kept over a project's
/// pins of older ones (pytest 2.8 of a 2015 requirements file cannot run on Python 3.9).
const OVERRIDES: &str = "/opt/repairbench/overrides.txt";
/// The variable holding that time in the image (RFC 3339, UTC); empty means no cutoff.
pub const PACKAGES_AS_OF_VAR: &str = "REPAIRBENCH_PACKAGES_AS_OF";

/// What a task's tests need.
#[derive(Debug, Clone)]
pub struct Environment {
    pub runner: RunnerKind,
    pub image: ImageChoice,
    /// Variables every test run gets (the task's `environment.env` comes on top).
    pub env: Vec<(String, String)>,
    /// The Python chosen for a Python runner, with the reason.
    pub python: Option<PythonChoice>,
    /// For a built Python environment: the time its packages are resolved as of (the
    /// environment commit's, RFC 3339).
    pub packages_as_of: Option<String>,
}

#[derive(Debug, Clone)]
pub enum ImageChoice {
    /// The run's image (`--image` or the default): nothing to install.
    RunImage,
    /// The task's own `environment.image`.
    Given(String),
    /// A layer built from the repository.
    Build(LayerSpec),
}

/// The files of `tree` one level down, and a reader for any file.
struct TreeFiles<'r> {
    repo: &'r Repository,
    tree: &'r Tree<'r>,
}

impl TreeFiles<'_> {
    fn root_names(&self) -> Vec<String> {
        self.tree.iter().filter_map(|e| e.name().ok().map(str::to_owned)).collect()
    }

    fn read(&self, path: &str) -> Option<String> {
        let entry = self.tree.get_path(std::path::Path::new(path)).ok()?;
        let blob = self.repo.find_blob(entry.id()).ok()?;
        String::from_utf8(blob.content().to_vec()).ok()
    }

    fn is_dir(&self, path: &str) -> bool {
        self.tree.get_path(std::path::Path::new(path)).is_ok_and(|e| e.kind() == Some(git2::ObjectType::Tree))
    }

    fn is_file(&self, path: &str) -> bool {
        self.tree.get_path(std::path::Path::new(path)).is_ok_and(|e| e.kind() == Some(git2::ObjectType::Blob))
    }
}

/// Plans the environment of `task`, whose environment commit has tree `tree` in `repo`.
pub fn plan(repo: &Repository, tree: &Tree<'_>, task: &SweTask) -> Result<Environment, TaskError> {
    let files = TreeFiles { repo, tree };
    let extras = task.environment.clone().unwrap_or_default();
    let root = files.root_names();
    let test_files = crate::patch::files_touched(&task.test_patch);
    let runner = match extras.runner {
        Some(runner) => runner,
        None => match runners::detect(&test_files, &root).ok_or(TaskError::UnknownRunner)? {
            RunnerKind::Pytest => runners::python_runner(|path| files.read(path).is_some()),
            runner => runner,
        },
    };
    // The Python: chosen (and a range the images cannot meet refused) before anything is built.
    // Read once: it picks the Python's era and the packages' cutoff.
    let commit_time = environment_commit_time(repo, task);
    let python = match (runner.is_python(), &extras.image) {
        (true, None) => {
            let project_files = ["pyproject.toml", "setup.cfg", "setup.py"].map(|f| files.read(f));
            let [pyproject, setup_cfg, setup_py] = project_files.each_ref().map(Option::as_deref);
            let declared = python::Declared {
                range: python::declared_range(pyproject, setup_cfg, setup_py),
                classifiers: project_files
                    .iter()
                    .flatten()
                    .flat_map(|t| python::classifier_versions(t))
                    .collect(),
            };
            let date = commit_time.map(|t| t.format("%Y-%m-%d").to_string());
            Some(python::choose(extras.python.as_deref(), &declared, date.as_deref())?)
        }
        _ => None,
    };
    if let Some(image) = &extras.image {
        // Nothing is built on a given image: what would be built into it is refused, not dropped.
        for (what, asked) in [
            ("pip", extras.pip.as_slice()),
            ("apt", &extras.apt),
            ("install", &extras.install),
            ("pre_install", &extras.pre_install),
            ("requirements", extras.requirements.as_deref().unwrap_or_default()),
        ] {
            if !asked.is_empty() {
                return Err(TaskError::GivenImage { what });
            }
        }
        return Ok(Environment {
            runner,
            image: ImageChoice::Given(image.clone()),
            env: Vec::new(),
            python: None,
            packages_as_of: None,
        });
    }
    let repo_tree = RepoTree {
        tar: crate::patch::tree::tree_tar(repo, tree).map_err(TaskError::git("packing the tree"))?,
        paths: tracked_paths(tree),
    };
    if !runner.is_python() && extras.requirements.is_some() {
        return Err(TaskError::NotForRunner { what: "requirements", runner });
    }
    // The task's own cutoff (`latest`: none), else the environment commit's time, but never
    // before the chosen Python's packages caught up with it; then the project's pins of older
    // test tools are relaxed too.
    let resolution = match (extras.packages_as_of.as_deref(), &python) {
        (Some("latest"), _) | (None, None) => Resolution::default(),
        (Some(when), _) => Resolution { as_of: Some(when.to_owned()), relax_pins: false },
        (None, Some(python)) => commit_time.map_or_else(Resolution::default, |time| {
            let floor = python.packages_floor();
            Resolution {
                as_of: Some(time.max(floor).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
                relax_pins: time < floor,
            }
        }),
    };
    let (layer, env) = match runner {
        RunnerKind::Pytest | RunnerKind::Django | RunnerKind::Sympy => {
            let suite = python.as_ref().map_or(DebianSuite::DEFAULT, |p| p.suite);
            (python_layer(&files, &extras, repo_tree, (suite, &resolution))?, Vec::new())
        }
        RunnerKind::Cargo => (Some(cargo_layer(&extras, repo_tree)?), Vec::new()),
        RunnerKind::Go => (Some(go_layer(&extras, repo_tree)?), Vec::new()),
        RunnerKind::Node => (Some(node_layer(&files, &extras, repo_tree)?), Vec::new()),
        // A JUnit-writing tool brings its own image, or installs through `apt`/`install`.
        RunnerKind::Junit => {
            (Some(repo_layer("env-junit", ParentImage::Default, &extras, repo_tree, &[], &[])?), Vec::new())
        }
    };
    let (image, packages_as_of) = match layer {
        Some(layer) => (ImageChoice::Build(layer), resolution.as_of),
        None => (ImageChoice::RunImage, None),
    };
    Ok(Environment { runner, image, env, python, packages_as_of })
}

/// When the commit the environment is built from was made (its committer time).
fn environment_commit_time(repo: &Repository, task: &SweTask) -> Option<chrono::DateTime<chrono::Utc>> {
    let oid = git2::Oid::from_str(task.environment_commit()).ok()?;
    chrono::DateTime::from_timestamp(repo.find_commit(oid).ok()?.time().seconds(), 0)
}

/// PATH inside our images.
pub(super) const SYSTEM_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Test extras a Python project commonly declares.
const TEST_EXTRAS: &[&str] = &["test", "tests", "testing"];

/// Requirement files installed when present: at the root, and the test files of a
/// `requirements/` folder (pip-tools' layout: Flask's `requirements/tests.txt` holds the
/// python-dotenv its CLI tests need).
const REQUIREMENT_FILES: &[&str] = &[
    "requirements.txt",
    "requirements-test.txt",
    "requirements_test.txt",
    "test-requirements.txt",
    "requirements-dev.txt",
    "dev-requirements.txt",
    "requirements/test.txt",
    "requirements/tests.txt",
    "requirements/testing.txt",
];

/// How a Python environment's packages are resolved.
#[derive(Debug, Default)]
struct Resolution {
    /// The time (RFC 3339) packages are resolved as of; none: the newest.
    as_of: Option<String>,
    /// The commit predates the chosen Python's packages: the project's pins of older test
    /// tools (pytest, its dependencies and plugins) give way to those of `as_of`.
    relax_pins: bool,
}

/// What installing a Python project involves.
#[derive(Debug, Default, PartialEq)]
struct PythonProject {
    /// `pip install -e .` works (pyproject with a build system or [project], setup.py, setup.cfg).
    installable: bool,
    /// The extras to install with it.
    extras: Vec<String>,
    requirement_files: Vec<String>,
    /// Something must be installed for the tests to import the code.
    needs_install: bool,
    /// C, C++ or Cython extension modules: a compiler and Python's headers are needed, and the
    /// extensions are built again from the tree under test before each run.
    compiled: bool,
    /// `[build-system] requires`, installed into the venv so the rebuild needs no network.
    build_requires: Vec<String>,
}

/// A script in the image run before the tests, when the environment has one: it rebuilds a
/// project's compiled extensions from the tree under test (the image holds those of the
/// environment commit). Root-owned in a read-only root, so a patch cannot change it.
pub const BEFORE_TESTS: &str = "/opt/repairbench/before-tests";

/// Build backends and tools whose projects compile extension modules.
const COMPILING_BUILD_REQUIRES: &[&str] = &["cython", "pybind11", "scikit-build", "meson-python", "cffi"];

fn python_project(files: &TreeFiles<'_>, root: &[String]) -> PythonProject {
    let mut project = PythonProject::default();
    let has = |name: &str| root.iter().any(|f| f == name);
    let mut extras_declared: Vec<String> = Vec::new();
    if let Some(text) = files.read("pyproject.toml") {
        if let Ok(doc) = text.parse::<toml::Table>() {
            let table = doc.get("project").and_then(|p| p.as_table());
            project.installable |= table.is_some() || doc.contains_key("build-system");
            let requires = doc.get("build-system").and_then(|b| b.get("requires")).and_then(|r| r.as_array());
            project.build_requires =
                requires.into_iter().flatten().filter_map(|r| r.as_str().map(str::to_owned)).collect();
            project.compiled |= project.build_requires.iter().any(|r| {
                let r = r.to_ascii_lowercase();
                COMPILING_BUILD_REQUIRES.iter().any(|tool| r.starts_with(tool))
            }) || text.contains("ext-modules");
            if let Some(table) = table {
                let deps = table.get("dependencies").and_then(|d| d.as_array()).map_or(0, Vec::len);
                project.needs_install |= deps > 0;
                if let Some(optional) = table.get("optional-dependencies").and_then(|o| o.as_table()) {
                    extras_declared.extend(optional.keys().cloned());
                }
            }
        }
    }
    if let Some(text) = files.read("setup.cfg") {
        project.installable |= text.contains("[metadata]") || text.contains("[options]");
        project.needs_install |= text.contains("install_requires");
        extras_declared
            .extend(TEST_EXTRAS.iter().filter(|e| text.contains(&format!("\n{e} ="))).map(|e| e.to_string()));
    }
    if let Some(text) = files.read("setup.py") {
        project.installable = true;
        project.needs_install |= text.contains("install_requires");
        project.compiled |= ["Extension(", "ext_modules", "cythonize"].iter().any(|m| text.contains(m));
        extras_declared.extend(
            TEST_EXTRAS
                .iter()
                .filter(|e| text.contains(&format!("\"{e}\"")) || text.contains(&format!("'{e}'")))
                .map(|e| e.to_string()),
        );
    }
    project.extras = TEST_EXTRAS
        .iter()
        .filter(|e| extras_declared.iter().any(|d| d == *e))
        .map(|e| e.to_string())
        .collect();
    project.requirement_files =
        REQUIREMENT_FILES.iter().filter(|f| files.is_file(f)).map(|f| f.to_string()).collect();
    project.needs_install |= !project.requirement_files.is_empty() || !project.extras.is_empty();
    // A `src/` layout is importable only once installed; extensions only once built.
    project.needs_install |= project.installable && files.is_dir("src") && !has("conftest.py");
    project.needs_install |= project.compiled;
    project
}

/// The layer installing a Python project into a venv on the image of `suite` (its Python), or
/// `None` when the default image runs its tests as they are (its Python, nothing declared to
/// install).
fn python_layer(
    files: &TreeFiles<'_>,
    extras: &TaskEnvironment,
    repo_tree: RepoTree,
    (suite, resolution): (DebianSuite, &Resolution),
) -> Result<Option<LayerSpec>, NulByte> {
    let mut project = python_project(files, &files.root_names());
    if repo_tree.paths.iter().any(|p| p.ends_with(".pyx") || p.ends_with(".pxd")) {
        project.compiled = true;
        project.needs_install = true;
    }
    // The requirement files the task names, else those at the root.
    let requirement_files = extras.requirements.clone().unwrap_or_else(|| project.requirement_files.clone());
    let asked = [&extras.pip, &extras.apt, &extras.install, &extras.pre_install, &requirement_files]
        .iter()
        .any(|asked| !asked.is_empty());
    if !project.needs_install && !asked && suite == DebianSuite::DEFAULT {
        return Ok(None);
    }
    let mut steps = vec![
        "ARG BASE".to_owned(),
        "FROM ${BASE}".to_owned(),
        "ARG PIP_INDEX_URL".to_owned(),
        "ARG PIP_EXTRA_INDEX_URL".to_owned(),
        "ARG PIP_TRUSTED_HOST".to_owned(),
        "USER root".to_owned(),
        HOST_CA_STEPS.to_owned(),
        apt_step(&python_packages(project.compiled), &extras.apt)?,
        format!(
            "RUN python3 -m venv {VENV} && python3 -m venv {UV_VENV} && {UV_VENV}/bin/pip install --no-cache-dir {UV}"
        ),
        format!("COPY pip-install {PIP_INSTALL}"),
        format!("RUN chmod 755 {PIP_INSTALL}"),
        format!("ENV PATH={VENV}/bin:{SYSTEM_PATH} VIRTUAL_ENV={VENV}"),
        // Packages as of the environment commit's time: the date is part of this Dockerfile,
        // so of the image's content key.
        format!("ENV {PACKAGES_AS_OF_VAR}={}", resolution.as_of.as_deref().unwrap_or_default()),
        format!("RUN {PIP_INSTALL} pytest"),
    ];
    if resolution.relax_pins {
        // pytest and what it needs are the harness's: a project's pins of older ones, which
        // cannot run on this Python, are overridden.
        steps.push(format!(
            "RUN {UV_VENV}/bin/uv pip freeze --python {VENV}/bin/python | grep -viE '^(pip|setuptools|wheel)==' > {OVERRIDES}"
        ));
        steps.push(format!("ENV REPAIRBENCH_OVERRIDES={OVERRIDES}"));
    }
    steps.extend([
        "ADD tree.tar /workspace/".to_owned(),
        "COPY tree-files /tmp/rb-tree-files".to_owned(),
        "WORKDIR /workspace".to_owned(),
        // The tree has no .git: version-from-git build backends get a fixed version instead.
        "ENV SETUPTOOLS_SCM_PRETEND_VERSION=0.0.0 PDM_BUILD_SCM_VERSION=0.0.0".to_owned(),
    ]);
    let (pre_install_steps, pre_install_files) = command_steps("rb-pre", &extras.pre_install);
    steps.extend(pre_install_steps);
    // pytest plugins go with the harness's pytest: a requirement file's pin of one (pytest-cov
    // 1.6 of 2015 breaks pytest 6) is relaxed to the version of the cutoff.
    let plugins = pytest_plugins(requirement_files.iter().filter_map(|f| files.read(f)));
    if resolution.relax_pins && !plugins.is_empty() {
        steps.push(format!("RUN printf '%s\\n' {} >> {OVERRIDES}", shell::join(&plugins)?));
    }
    for requirements in &requirement_files {
        steps.push(format!("RUN {PIP_INSTALL} -r {}", shell::quote(requirements)?));
    }
    if project.installable {
        let target = if project.extras.is_empty() {
            ".".to_owned()
        } else {
            format!(".[{}]", project.extras.join(","))
        };
        steps.push(format!("RUN {PIP_INSTALL} -e '{target}'"));
    }
    if !extras.pip.is_empty() {
        // The task's own packages are taken as written, with no date: a pin it names is meant.
        steps.push(format!(
            "RUN {PACKAGES_AS_OF_VAR}= REPAIRBENCH_OVERRIDES= {PIP_INSTALL} {}",
            shell::join(&extras.pip)?
        ));
    }
    let (install_steps, install_files) = command_steps("rb-steps", &extras.install);
    steps.extend(install_steps);
    if project.compiled {
        // The build tools stay in the venv, and the extensions are built again in place from
        // the tree under test before each run, with no network.
        let mut tools = vec!["setuptools".to_owned(), "wheel".to_owned()];
        tools.extend(project.build_requires.iter().cloned());
        steps.push(format!("RUN {PIP_INSTALL} {}", shell::join(&tools)?));
        let rebuild = if files.read("setup.py").is_some() {
            "python3 setup.py --quiet build_ext --inplace --force"
        } else {
            "pip install --quiet --no-deps --no-build-isolation --no-index -e ."
        };
        steps.push(format!(
            "RUN mkdir -p {dir} && printf '#!/bin/sh\\nset -e\\ncd /workspace\\n{rebuild}\\n' > {BEFORE_TESTS} && chmod 755 {BEFORE_TESTS}",
            dir = BEFORE_TESTS.rsplit_once('/').map_or("/", |(d, _)| d),
        ));
    }
    // What was installed is in the build log; the workspace is emptied, since every test run
    // gets the tree under test copied into a fresh one.
    steps.push("RUN pip freeze --all".to_owned());
    steps.push(REMOVE_TRACKED.to_owned());
    steps.push(workspace_seed_steps());
    steps.push("USER sandbox".to_owned());
    let dockerfile = steps.join("\n") + "\n";
    let mut files = context(dockerfile, repo_tree);
    files.extend(pre_install_files);
    files.extend(install_files);
    files.push(("pip-install".into(), PIP_INSTALL_SCRIPT.as_bytes().to_vec()));
    let parent = if suite == DebianSuite::DEFAULT { ParentImage::Default } else { ParentImage::Suite(suite) };
    Ok(Some(LayerSpec::new("env-python", files, parent)))
}

/// A layer holding the repository at its environment commit with `prepare` run in it (network
/// on), then the task's extras; then the tree's own files are removed ([`REMOVE_TRACKED`]).
/// `after` sets the environment tests run with.
fn repo_layer(
    name: &str,
    parent: ParentImage,
    extras: &TaskEnvironment,
    repo_tree: RepoTree,
    prepare: &[String],
    after: &[String],
) -> Result<LayerSpec, NulByte> {
    let mut steps = vec!["ARG BASE".to_owned(), "FROM ${BASE}".to_owned()];
    steps.extend(crate::sandbox::layers::PASSED_BUILD_ARGS.iter().map(|a| format!("ARG {a}")));
    steps.push("USER root".to_owned());
    steps.push(HOST_CA_STEPS.to_owned());
    // `environment.pip` outside a Python project (a linter a CI job runs, a JUnit-writing tool):
    // a venv of its own, first on PATH.
    let venv = if extras.pip.is_empty() { Vec::new() } else { vec!["python3-venv".to_owned()] };
    if !extras.apt.is_empty() || !venv.is_empty() {
        steps.push(apt_step(&venv, &extras.apt)?);
    }
    if !extras.pip.is_empty() {
        steps.push(format!(
            "RUN python3 -m venv {VENV} && {VENV}/bin/pip install --no-cache-dir {} && {VENV}/bin/pip freeze --all",
            shell::join(&extras.pip)?
        ));
        steps.push(format!("ENV PATH={VENV}/bin:$PATH VIRTUAL_ENV={VENV}"));
    }
    steps.push("ADD tree.tar /workspace/".to_owned());
    steps.push("COPY tree-files /tmp/rb-tree-files".to_owned());
    steps.push("WORKDIR /workspace".to_owned());
    let (pre_install_steps, pre_install_files) = command_steps("rb-pre", &extras.pre_install);
    steps.extend(pre_install_steps);
    steps.extend(prepare.iter().cloned());
    let (install_steps, install_files) = command_steps("rb-steps", &extras.install);
    steps.extend(install_steps);
    steps.push(REMOVE_TRACKED.to_owned());
    steps.push(workspace_seed_steps());
    steps.extend(after.iter().cloned());
    steps.push("USER sandbox".to_owned());
    let dockerfile = steps.join("\n") + "\n";
    let mut files = context(dockerfile, repo_tree);
    files.extend(pre_install_files);
    files.extend(install_files);
    Ok(LayerSpec::new(name, files, parent))
}

/// Where layers put the host's certificate authorities, and the variables that make pip,
/// cargo, Go, Node and git trust them while the layer is built: a host behind a proxy that
/// re-signs TLS reaches the package index only with its own CA bundle.
pub(super) const HOST_CA_STEPS: &str = "COPY host-ca.pem /etc/ssl/certs/repairbench-host-ca.pem\n\
ENV PIP_CERT=/etc/ssl/certs/repairbench-host-ca.pem SSL_CERT_FILE=/etc/ssl/certs/repairbench-host-ca.pem \\\n    \
CARGO_HTTP_CAINFO=/etc/ssl/certs/repairbench-host-ca.pem NODE_EXTRA_CA_CERTS=/etc/ssl/certs/repairbench-host-ca.pem \\\n    \
GIT_SSL_CAINFO=/etc/ssl/certs/repairbench-host-ca.pem REQUESTS_CA_BUNDLE=/etc/ssl/certs/repairbench-host-ca.pem";

/// The host's CA bundle: `SSL_CERT_FILE`, pip's `PIP_CERT`, or Debian's bundle.
fn host_ca_bundle() -> Vec<u8> {
    crate::env::HOST_CA_BUNDLE
        .iter()
        .filter_map(|v| crate::env::get(v))
        .chain(["/etc/ssl/certs/ca-certificates.crt".to_owned()])
        .find_map(|path| std::fs::read(path).ok())
        .unwrap_or_default()
}

/// A layer's build context: its Dockerfile, the tree and the list of its files, the host's
/// CA bundle.
fn context(dockerfile: String, tree: RepoTree) -> crate::sandbox::images::LayerFiles {
    let mut files = context_files(dockerfile);
    files.push(("tree-files".into(), tree.paths.join("\0").into_bytes()));
    files.push(("tree.tar".into(), tree.tar));
    files
}

/// A task's own build commands (`environment.install` and `pre_install`, a service's
/// `build.run`): each goes into a file of the build context under `folder/` and runs as
/// `sh -ex FILE` from `/workspace`, so no command is ever Dockerfile text (the task loader also
/// refuses control characters in them). Returns the Dockerfile steps and the files.
pub(super) fn command_steps(
    folder: &str,
    commands: &[String],
) -> (Vec<String>, crate::sandbox::images::LayerFiles) {
    if commands.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let mut steps = vec![format!("COPY {folder}/ /tmp/{folder}/")];
    let mut files = Vec::new();
    for (i, command) in commands.iter().enumerate() {
        files.push((format!("{folder}/{}.sh", i + 1), format!("{command}\n").into_bytes()));
        // As root, with the admin tools on PATH a root shell has (`locale-gen`).
        steps.push(format!(
            "RUN PATH=\"$PATH:/usr/local/sbin:/usr/sbin:/sbin\" sh -ex /tmp/{folder}/{}.sh",
            i + 1
        ));
    }
    steps.push(format!("RUN rm -rf /tmp/{folder}"));
    (steps, files)
}

/// The start of every layer's build context: its Dockerfile and the host's CA bundle
/// ([`HOST_CA_STEPS`] installs it).
pub(super) fn context_files(dockerfile: String) -> crate::sandbox::images::LayerFiles {
    vec![("Dockerfile".into(), dockerfile.into_bytes()), ("host-ca.pem".into(), host_ca_bundle())]
}

/// The repository tree an environment is built from.
struct RepoTree {
    tar: Vec<u8>,
    /// Every file and link the tree holds.
    paths: Vec<String>,
}

fn tracked_paths(tree: &Tree<'_>) -> Vec<String> {
    let mut paths = Vec::new();
    let _ = tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
        if entry.kind() == Some(git2::ObjectType::Blob) {
            if let Ok(name) = entry.name() {
                paths.push(format!("{dir}{name}"));
            }
        }
        git2::TreeWalkResult::Ok
    });
    paths
}

/// The last step of every environment layer: the tree's own files are removed, since each
/// test run copies the tree under test into a fresh workspace; what the build made stays (a
/// warm `target/`, `node_modules`, a version file written at install time, built extensions).
const REMOVE_TRACKED: &str = "RUN xargs -0 rm -f -- < /tmp/rb-tree-files && rm /tmp/rb-tree-files \\\n    \
&& find /workspace -mindepth 1 -type d -empty -delete && chown -R sandbox:sandbox /workspace";

/// The pytest plugins (`pytest-cov`, `pytest_httpbin`) the requirement files `texts` name.
fn pytest_plugins(texts: impl Iterator<Item = String>) -> Vec<String> {
    let mut plugins: Vec<String> = texts
        .flat_map(|text| {
            text.lines()
                .filter_map(|line| {
                    let line = line.split('#').next().unwrap_or("").trim();
                    let end = line
                        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
                        .unwrap_or(line.len());
                    let name = line[..end].to_ascii_lowercase();
                    (name.starts_with("pytest-") || name.starts_with("pytest_")).then_some(name)
                })
                .collect::<Vec<_>>()
        })
        .collect();
    plugins.sort();
    plugins.dedup();
    plugins
}

/// Debian packages a Python environment needs: the venv module, and for compiled extensions a
/// C compiler and Python's headers.
fn python_packages(compiled: bool) -> Vec<String> {
    let mut packages = vec!["python3-venv"];
    if compiled {
        packages.extend(["gcc", "g++", "libc6-dev", "python3-dev"]);
    }
    packages.into_iter().map(str::to_owned).collect()
}

pub(super) fn apt_step(always: &[String], asked: &[String]) -> Result<String, NulByte> {
    let packages: Vec<String> = always.iter().chain(asked).cloned().collect();
    Ok(format!(
        "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {} \
         && rm -rf /var/lib/apt/lists/*",
        shell::join(&packages)?
    ))
}

/// The task's variables for the tests.
pub fn task_env(task: &SweTask) -> BTreeMap<String, String> {
    task.environment.as_ref().map(|e| e.env.clone()).unwrap_or_default()
}

mod python;
pub use python::PythonChoice;
mod toolchains;
use toolchains::{cargo_layer, go_layer, node_layer};

#[cfg(test)]
mod tests;
