//! The image a task's tests run in, planned from the repository itself at the task's
//! `environment_setup_commit` (or base commit): the runner's toolchain, the project installed
//! with its test dependencies, then the task's explicit `environment` extras. The plan is a
//! value ([`LayerSpec`]); the sandbox builds it once per distinct content and every instance
//! that shares it reuses the image. Builds have network; test runs never do.

use std::collections::BTreeMap;

use git2::{Repository, Tree};

use crate::grade::runners::{self, RunnerKind};
use crate::sandbox::{LayerSpec, ParentImage};
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
pub fn plan(repo: &Repository, tree: &Tree<'_>, task: &SweTask) -> Result<Environment, String> {
    let files = TreeFiles { repo, tree };
    let extras = task.environment.clone().unwrap_or_default();
    let root = files.root_names();
    let test_files = crate::patch::files_touched(&task.test_patch);
    let runner = match extras.runner {
        Some(runner) => runner,
        None => runners::detect(&test_files, &root).ok_or_else(|| {
            "cannot tell which test runner this repository uses (no Cargo.toml, go.mod, package.json \
             or Python project file); set `environment.runner`"
                .to_owned()
        })?,
    };
    if let Some(image) = &extras.image {
        return Ok(Environment { runner, image: ImageChoice::Given(image.clone()), env: Vec::new() });
    }
    if let Some(wanted) = &extras.python {
        if !(DEBIAN_PYTHON.starts_with(wanted.as_str()) || wanted == "3") {
            return Err(format!(
                "the task wants Python {wanted}, but the images have only Debian's python3 \
                 ({DEBIAN_PYTHON}); give an `environment.image` that has it"
            ));
        }
    }
    let tree_tar =
        crate::patch::tree::tree_tar(repo, tree).map_err(|e| format!("packing the tree: {}", e.message()))?;
    let (layer, env) = match runner {
        RunnerKind::Pytest => (python_layer(&files, &extras, tree_tar), Vec::new()),
        other => return Err(format!("the `{}` runner has no environment recipe yet", other.as_str())),
    };
    let image = match layer {
        Some(layer) => ImageChoice::Build(layer),
        None => ImageChoice::RunImage,
    };
    Ok(Environment { runner, image, env })
}

/// PATH inside our images.
const SYSTEM_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

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
}

fn python_project(files: &TreeFiles<'_>, root: &[String]) -> PythonProject {
    let mut project = PythonProject::default();
    let has = |name: &str| root.iter().any(|f| f == name);
    let mut extras_declared: Vec<String> = Vec::new();
    if let Some(text) = files.read("pyproject.toml") {
        if let Ok(doc) = text.parse::<toml::Table>() {
            let table = doc.get("project").and_then(|p| p.as_table());
            project.installable |= table.is_some() || doc.contains_key("build-system");
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
    // A `src/` layout is importable only once installed.
    project.needs_install |= project.installable && files.is_dir("src") && !has("conftest.py");
    project
}

fn shell_words(words: &[String]) -> String {
    words.iter().map(|w| format!("'{}'", w.replace('\'', r"'\''"))).collect::<Vec<_>>().join(" ")
}

/// The layer installing a Python project into a venv, or `None` when the default image runs
/// its tests as they are (nothing declared to install).
fn python_layer(files: &TreeFiles<'_>, extras: &TaskEnvironment, tree_tar: Vec<u8>) -> Option<LayerSpec> {
    let project = python_project(files, &files.root_names());
    let asked = !extras.pip.is_empty() || !extras.apt.is_empty() || !extras.install.is_empty();
    if !project.needs_install && !asked {
        return None;
    }
    let mut steps = vec![
        "ARG BASE".to_owned(),
        "FROM ${BASE}".to_owned(),
        "ARG PIP_INDEX_URL".to_owned(),
        "ARG PIP_EXTRA_INDEX_URL".to_owned(),
        "ARG PIP_TRUSTED_HOST".to_owned(),
        "USER root".to_owned(),
        apt_step(&["python3-venv".to_owned()], &extras.apt),
        format!("RUN python3 -m venv {VENV} && {VENV}/bin/pip install --no-cache-dir pytest"),
        format!("ENV PATH={VENV}/bin:{SYSTEM_PATH} VIRTUAL_ENV={VENV}"),
        "ADD tree.tar /workspace/".to_owned(),
        "WORKDIR /workspace".to_owned(),
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
        steps.push(format!("RUN pip install --no-cache-dir {}", shell_words(&extras.pip)));
    }
    for command in &extras.install {
        steps.push(format!("RUN {command}"));
    }
    // What was installed is in the build log; the workspace is emptied, since every test run
    // gets the tree under test copied into a fresh one.
    steps.push("RUN pip freeze --all".to_owned());
    steps.push("RUN find /workspace -mindepth 1 -delete".to_owned());
    steps.push("USER sandbox".to_owned());
    let dockerfile = steps.join("\n") + "\n";
    Some(LayerSpec::new(
        "env-python",
        vec![("Dockerfile".into(), dockerfile.into_bytes()), ("tree.tar".into(), tree_tar)],
        ParentImage::Default,
    ))
}

fn apt_step(always: &[String], asked: &[String]) -> String {
    let packages: Vec<String> = always.iter().chain(asked).cloned().collect();
    format!(
        "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {} \
         && rm -rf /var/lib/apt/lists/*",
        shell_words(&packages)
    )
}

/// The task's variables for the tests.
pub fn task_env(task: &SweTask) -> BTreeMap<String, String> {
    task.environment.as_ref().map(|e| e.env.clone()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository holding `files` in one commit; returns the repo and the tree id.
    fn repo_with(files: &[(&str, &str)]) -> (tempfile::TempDir, Repository, git2::Oid) {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let mut index = repo.index().unwrap();
        for (path, text) in files {
            let blob = repo.blob(text.as_bytes()).unwrap();
            let entry = git2::IndexEntry {
                ctime: git2::IndexTime::new(0, 0),
                mtime: git2::IndexTime::new(0, 0),
                dev: 0,
                ino: 0,
                mode: 0o100644,
                uid: 0,
                gid: 0,
                file_size: text.len() as u32,
                id: blob,
                flags: 0,
                flags_extended: 0,
                path: path.as_bytes().to_vec(),
            };
            index.add(&entry).unwrap();
        }
        let tree = index.write_tree().unwrap();
        (dir, repo, tree)
    }

    fn task(test_patch_file: &str, environment: Option<TaskEnvironment>) -> SweTask {
        let text = serde_json::json!({
            "repo": "acme/x", "instance_id": "x-1", "base_commit": "0",
            "test_patch": format!("diff --git a/{f} b/{f}\n--- a/{f}\n+++ b/{f}\n@@ -1 +1 @@\n-a\n+b\n", f = test_patch_file),
            "FAIL_TO_PASS": [],
        });
        let mut task: SweTask = serde_json::from_value(text).unwrap();
        task.environment = environment;
        task
    }

    fn dockerfile(environment: &Environment) -> Option<String> {
        match &environment.image {
            ImageChoice::Build(layer) => Some(
                String::from_utf8(layer.files.iter().find(|(p, _)| p == "Dockerfile").unwrap().1.clone())
                    .unwrap(),
            ),
            _ => None,
        }
    }

    #[test]
    fn a_self_contained_python_project_runs_in_the_run_image() {
        let (_dir, repo, tree) = repo_with(&[
            ("pyproject.toml", "[project]\nname = \"x\"\nversion = \"1\"\n"),
            ("x/__init__.py", ""),
            ("tests/test_x.py", "def test(): pass\n"),
        ]);
        let tree = repo.find_tree(tree).unwrap();
        let environment = plan(&repo, &tree, &task("tests/test_x.py", None)).unwrap();
        assert_eq!(environment.runner, RunnerKind::Pytest);
        assert!(matches!(environment.image, ImageChoice::RunImage), "{environment:?}");
    }

    #[test]
    fn dependencies_src_layout_and_extras_are_installed() {
        let (_dir, repo, tree) = repo_with(&[
            (
                "pyproject.toml",
                "[build-system]\nrequires = [\"setuptools>=61\"]\n[project]\nname = \"x\"\nversion = \"1\"\n\
                 dependencies = [\"packaging>=23\"]\n[project.optional-dependencies]\ntest = [\"pytest\"]\ndocs = [\"sphinx\"]\n",
            ),
            ("src/x/__init__.py", ""),
            ("requirements-dev.txt", "hypothesis\n"),
        ]);
        let tree = repo.find_tree(tree).unwrap();
        let extras = TaskEnvironment {
            pip: vec!["pyflakes==3.2.0".into()],
            apt: vec!["libpq-dev".into()],
            ..Default::default()
        };
        let environment = plan(&repo, &tree, &task("tests/test_x.py", Some(extras))).unwrap();
        let dockerfile = dockerfile(&environment).expect("a layer is built");
        assert!(dockerfile.contains("pip install --no-cache-dir -e '.[test]'"), "{dockerfile}");
        assert!(dockerfile.contains("-r requirements-dev.txt"), "{dockerfile}");
        assert!(dockerfile.contains("'pyflakes==3.2.0'"), "{dockerfile}");
        assert!(dockerfile.contains("'python3-venv' 'libpq-dev'"), "{dockerfile}");
        assert!(!dockerfile.contains("docs"), "only test extras: {dockerfile}");
        // The workspace is emptied: each run copies the tree under test into a fresh one.
        assert!(dockerfile.contains("find /workspace -mindepth 1 -delete"));
    }

    #[test]
    fn a_python_the_images_lack_is_an_error_and_a_given_image_is_used_as_is() {
        let (_dir, repo, tree) = repo_with(&[("setup.py", "from setuptools import setup\nsetup()\n")]);
        let tree = repo.find_tree(tree).unwrap();
        let old = TaskEnvironment { python: Some("3.8".into()), ..Default::default() };
        let err = plan(&repo, &tree, &task("tests/test_x.py", Some(old))).unwrap_err();
        assert!(err.contains("Python 3.8") && err.contains("environment.image"), "{err}");
        let given = TaskEnvironment {
            image: Some("team/py38:1".into()),
            python: Some("3.8".into()),
            ..Default::default()
        };
        let environment = plan(&repo, &tree, &task("tests/test_x.py", Some(given))).unwrap();
        assert!(matches!(environment.image, ImageChoice::Given(ref i) if i == "team/py38:1"));
    }
}
