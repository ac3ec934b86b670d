//! The image a task's tests run in, planned from the repository itself at the task's
//! `environment_setup_commit` (or base commit): the runner's toolchain, the project installed
//! with its test dependencies, then the task's explicit `environment` extras. The plan is a
//! value ([`LayerSpec`]); the sandbox builds it once per distinct content and every instance
//! that shares it reuses the image. Builds have network; test runs never do.

use std::collections::BTreeMap;

use git2::{Repository, Tree};

use crate::grade::runners::{self, RunnerKind};
use crate::sandbox::layers::workspace_seed_steps;
use crate::sandbox::{LayerSpec, ParentImage};
use crate::shell::{self, NulByte};

use super::prepare::TaskError;
use crate::tasks::{SweTask, TaskEnvironment};

/// The only Python the images have (Debian bookworm's python3).
pub const DEBIAN_PYTHON: &str = "3.11";
/// Where environment layers install a Python project's virtual environment.
const VENV: &str = "/opt/venv";

/// What a task's tests need.
#[derive(Debug, Clone)]
pub struct Environment {
    pub runner: RunnerKind,
    pub image: ImageChoice,
    /// Variables every test run gets (the task's `environment.env` comes on top).
    pub env: Vec<(String, String)>,
    /// The Python chosen for a Python runner, with the reason (`3.11 (the project declares
    /// Python `>=3.8`; ...)`).
    pub python: Option<String>,
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
    let python = match (runner.is_python(), &extras.image) {
        (true, None) => {
            let declared = python::declared_range(
                files.read("pyproject.toml").as_deref(),
                files.read("setup.cfg").as_deref(),
                files.read("setup.py").as_deref(),
            );
            let date = environment_commit_date(repo, task);
            Some(python::choose(extras.python.as_deref(), declared.as_deref(), date.as_deref())?)
        }
        _ => None,
    };
    if let Some(image) = &extras.image {
        // Nothing is built on a given image: what would be built into it is refused, not dropped.
        for (what, asked) in [("pip", &extras.pip), ("apt", &extras.apt), ("install", &extras.install)] {
            if !asked.is_empty() {
                return Err(TaskError::GivenImage { what });
            }
        }
        return Ok(Environment {
            runner,
            image: ImageChoice::Given(image.clone()),
            env: Vec::new(),
            python: None,
        });
    }
    if let Some(wanted) = &extras.python {
        if !(DEBIAN_PYTHON.starts_with(wanted.as_str()) || wanted == "3") {
            return Err(TaskError::PythonVersion { wanted: wanted.clone(), available: DEBIAN_PYTHON });
        }
    }
    let repo_tree = RepoTree {
        tar: crate::patch::tree::tree_tar(repo, tree).map_err(TaskError::git("packing the tree"))?,
        paths: tracked_paths(tree),
    };
    let (layer, env) = match runner {
        RunnerKind::Pytest | RunnerKind::Django | RunnerKind::Sympy => {
            (python_layer(&files, &extras, repo_tree)?, Vec::new())
        }
        RunnerKind::Cargo => (Some(cargo_layer(&extras, repo_tree)?), Vec::new()),
        RunnerKind::Go => (Some(go_layer(&extras, repo_tree)?), Vec::new()),
        RunnerKind::Node => (Some(node_layer(&files, &extras, repo_tree)?), Vec::new()),
        // A JUnit-writing tool brings its own image, or installs through `apt`/`install`.
        RunnerKind::Junit => {
            (Some(repo_layer("env-junit", ParentImage::Default, &extras, repo_tree, &[], &[])?), Vec::new())
        }
    };
    let image = match layer {
        Some(layer) => ImageChoice::Build(layer),
        None => ImageChoice::RunImage,
    };
    Ok(Environment { runner, image, env, python })
}

/// The day (`YYYY-MM-DD`, UTC) of the commit the environment is built from.
fn environment_commit_date(repo: &Repository, task: &SweTask) -> Option<String> {
    let oid = git2::Oid::from_str(task.environment_commit()).ok()?;
    let seconds = repo.find_commit(oid).ok()?.time().seconds();
    Some(chrono::DateTime::from_timestamp(seconds, 0)?.format("%Y-%m-%d").to_string())
}

/// PATH inside our images.
pub(super) const SYSTEM_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Test extras a Python project commonly declares.
const TEST_EXTRAS: &[&str] = &["test", "tests", "testing"];

/// Requirement files installed when present at the root.
const REQUIREMENT_FILES: &[&str] = &[
    "requirements.txt",
    "requirements-test.txt",
    "requirements_test.txt",
    "test-requirements.txt",
    "requirements-dev.txt",
    "dev-requirements.txt",
];

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
    project.requirement_files = REQUIREMENT_FILES.iter().filter(|f| has(f)).map(|f| f.to_string()).collect();
    project.needs_install |= !project.requirement_files.is_empty() || !project.extras.is_empty();
    // A `src/` layout is importable only once installed; extensions only once built.
    project.needs_install |= project.installable && files.is_dir("src") && !has("conftest.py");
    project.needs_install |= project.compiled;
    project
}

/// The layer installing a Python project into a venv, or `None` when the default image runs
/// its tests as they are (nothing declared to install).
fn python_layer(
    files: &TreeFiles<'_>,
    extras: &TaskEnvironment,
    repo_tree: RepoTree,
) -> Result<Option<LayerSpec>, NulByte> {
    let mut project = python_project(files, &files.root_names());
    if repo_tree.paths.iter().any(|p| p.ends_with(".pyx") || p.ends_with(".pxd")) {
        project.compiled = true;
        project.needs_install = true;
    }
    let asked = !extras.pip.is_empty() || !extras.apt.is_empty() || !extras.install.is_empty();
    if !project.needs_install && !asked {
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
        format!("RUN python3 -m venv {VENV} && {VENV}/bin/pip install --no-cache-dir pytest"),
        format!("ENV PATH={VENV}/bin:{SYSTEM_PATH} VIRTUAL_ENV={VENV}"),
        "ADD tree.tar /workspace/".to_owned(),
        "COPY tree-files /tmp/rb-tree-files".to_owned(),
        "WORKDIR /workspace".to_owned(),
        // The tree has no .git: version-from-git build backends get a fixed version instead.
        "ENV SETUPTOOLS_SCM_PRETEND_VERSION=0.0.0 PDM_BUILD_SCM_VERSION=0.0.0".to_owned(),
    ];
    for requirements in &project.requirement_files {
        steps.push(format!("RUN pip install --no-cache-dir -r {requirements}"));
    }
    if project.installable {
        let target = if project.extras.is_empty() {
            ".".to_owned()
        } else {
            format!(".[{}]", project.extras.join(","))
        };
        steps.push(format!("RUN pip install --no-cache-dir -e '{target}'"));
    }
    if !extras.pip.is_empty() {
        steps.push(format!("RUN pip install --no-cache-dir {}", shell::join(&extras.pip)?));
    }
    let (install_steps, install_files) = command_steps(&extras.install);
    steps.extend(install_steps);
    if project.compiled {
        // The build tools stay in the venv, and the extensions are built again in place from
        // the tree under test before each run, with no network.
        let mut tools = vec!["setuptools".to_owned(), "wheel".to_owned()];
        tools.extend(project.build_requires.iter().cloned());
        steps.push(format!("RUN pip install --no-cache-dir {}", shell::join(&tools)?));
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
    files.extend(install_files);
    Ok(Some(LayerSpec::new("env-python", files, ParentImage::Default)))
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
    steps.extend(prepare.iter().cloned());
    let (install_steps, install_files) = command_steps(&extras.install);
    steps.extend(install_steps);
    steps.push(REMOVE_TRACKED.to_owned());
    steps.push(workspace_seed_steps());
    steps.extend(after.iter().cloned());
    steps.push("USER sandbox".to_owned());
    let dockerfile = steps.join("\n") + "\n";
    let mut files = context(dockerfile, repo_tree);
    files.extend(install_files);
    Ok(LayerSpec::new(name, files, parent))
}

/// The toolchain of the host's `rustc` (rustup's, usually), copied into a layer with a C
/// linker from Debian: Debian bookworm's own Rust (1.63) is too old for most crates, and no
/// toolchain download site may be reachable. The tag hashes `rustc -vV` and `cargo -V`.
fn rust_toolchain() -> Result<LayerSpec, TaskError> {
    let run = |program: &str, args: &[&str]| {
        std::process::Command::new(program)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let rustc = crate::env::get(crate::env::RUSTC).unwrap_or_else(|| "rustc".into());
    let sysroot = run(&rustc, &["--print", "sysroot"]).ok_or(TaskError::NoRustc)?;
    let identity = format!(
        "{}\n{}",
        run(&rustc, &["-vV"]).unwrap_or_default(),
        run(&format!("{sysroot}/bin/cargo"), &["-V"]).unwrap_or_default()
    );
    let dockerfile = format!(
        "ARG BASE\nFROM ${{BASE}}\nUSER root\n{}\nCOPY host/ /opt/rust/\nENV PATH=/opt/rust/bin:{SYSTEM_PATH}\nUSER sandbox\n",
        apt_step(&["gcc".into(), "libc6-dev".into(), "ca-certificates".into()], &[])?
    );
    let host_dir = crate::sandbox::layers::HostDir {
        root: sysroot.into(),
        include: vec!["bin/cargo".into(), "bin/rustc".into(), "bin/rustdoc".into(), "lib".into()],
        identity,
    };
    Ok(LayerSpec::new(
        "rust-toolchain",
        vec![("Dockerfile".into(), dockerfile.into_bytes())],
        ParentImage::Default,
    )
    .with_host_dir(host_dir))
}

/// Dependencies fetched with the network (`cargo fetch`), the tests built once so the
/// dependencies are compiled in the kept `target/`; tests then run `--offline`.
fn cargo_layer(extras: &TaskEnvironment, repo_tree: RepoTree) -> Result<LayerSpec, TaskError> {
    let toolchain = rust_toolchain()?;
    let prepare = vec![
        "ENV CARGO_HOME=/workspace/.cargo-home".to_owned(),
        "RUN cargo fetch".to_owned(),
        // The base commit may not build its tests; what compiled is still reused.
        "RUN cargo test --offline --no-run || true".to_owned(),
    ];
    Ok(repo_layer("env-cargo", ParentImage::Layer(Box::new(toolchain)), extras, repo_tree, &prepare, &[])?)
}

/// Debian's Go; modules downloaded with the network (through the host's `GOPROXY` when set),
/// the build cache warmed; tests then run with `GOPROXY=off`.
fn go_layer(extras: &TaskEnvironment, repo_tree: RepoTree) -> Result<LayerSpec, NulByte> {
    let prepare = vec![
        apt_step(&["golang-go".into(), "ca-certificates".into()], &[])?,
        "ENV GOPATH=/workspace/.go GOCACHE=/workspace/.go/cache".to_owned(),
        "RUN if [ -f go.sum ]; then go mod download; fi".to_owned(),
        "RUN go test -count=1 -run '^$' ./... || true".to_owned(),
    ];
    let after = vec!["ENV GOPROXY=off GOFLAGS=-mod=readonly".to_owned()];
    repo_layer("env-go", ParentImage::Default, extras, repo_tree, &prepare, &after)
}

/// Debian's Node; `npm ci` (through the host's `NPM_CONFIG_REGISTRY` when set) only when
/// package.json declares dependencies.
fn node_layer(
    files: &TreeFiles<'_>,
    extras: &TaskEnvironment,
    repo_tree: RepoTree,
) -> Result<LayerSpec, NulByte> {
    let declares_dependencies = files
        .read("package.json")
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .is_some_and(|package| {
            ["dependencies", "devDependencies"]
                .iter()
                .any(|k| package.get(k).and_then(|d| d.as_object()).is_some_and(|d| !d.is_empty()))
        });
    let mut packages = vec!["nodejs".to_owned()];
    let mut prepare = Vec::new();
    if declares_dependencies {
        packages.push("npm".into());
        prepare.push("RUN if [ -f package-lock.json ]; then npm ci; else npm install; fi".to_owned());
    }
    prepare.insert(0, apt_step(&packages, &[])?);
    repo_layer("env-node", ParentImage::Default, extras, repo_tree, &prepare, &[])
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

/// A task's own build commands (`environment.install`, a service's `build.run`): each goes
/// into a file of the build context and runs as `sh -ex FILE` from `/workspace`, so no command
/// is ever Dockerfile text (the task loader also refuses control characters in them).
/// Returns the Dockerfile steps and the files.
pub(super) fn command_steps(commands: &[String]) -> (Vec<String>, crate::sandbox::images::LayerFiles) {
    if commands.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let mut steps = vec!["COPY rb-steps/ /tmp/rb-steps/".to_owned()];
    let mut files = Vec::new();
    for (i, command) in commands.iter().enumerate() {
        files.push((format!("rb-steps/{}.sh", i + 1), format!("{command}\n").into_bytes()));
        steps.push(format!("RUN sh -ex /tmp/rb-steps/{}.sh", i + 1));
    }
    steps.push("RUN rm -rf /tmp/rb-steps".to_owned());
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

#[cfg(test)]
mod tests;
