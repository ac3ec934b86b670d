//! The tree a test run sees: the base commit, the prediction applied, every change it made to
//! the test infrastructure put back, and test_patch applied, all as git trees in memory. The
//! host's file system is never written: the tree goes to the sandbox as a tar of its blobs.

use std::collections::BTreeSet;

use crate::patch::{self, protect::Tampering, ApplyMethod};
use crate::tasks::{repos, RepoLocator, SweTask};

/// A prepared tree to test.
pub struct Prepared {
    /// The tree as a tar for the workspace (each run adds its harness files separately).
    pub tar: Vec<u8>,
    pub apply_method: Option<ApplyMethod>,
    pub tampering: Vec<Tampering>,
    pub apply_log: Vec<String>,
}

pub enum PrepareError {
    /// The prediction does not apply, or is refused (`reason`: `unsafe_path` when it names a
    /// path it may not touch, `shadows_module` when it adds a module that would run in place
    /// of the standard library's or a tool's, each listed in `tampering`).
    Apply { why: String, reason: Option<&'static str>, tampering: Vec<Tampering> },
    /// The task (repository, commit, test_patch) is broken.
    Task(TaskError),
}

/// Why a task's repository could not give what grading needs: its trees, its environment, its
/// services' images or its CI jobs.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error(transparent)]
    Repository(#[from] repos::RepoError),
    #[error("{what}")]
    Git {
        what: &'static str,
        #[source]
        source: git2::Error,
    },
    #[error("test_patch does not apply to {commit}")]
    TestPatch {
        commit: String,
        #[source]
        source: patch::PatchError,
    },
    #[error(
        "cannot tell which test runner this repository uses (no Cargo.toml, go.mod, package.json \
         or Python project file); set `environment.runner`"
    )]
    UnknownRunner,
    #[error(
        "`environment.python` is `{wanted}`, which is not a Python 3 version such as `3.9`; the \
         images have {available}"
    )]
    PythonVersion { wanted: String, available: &'static str },
    #[error(
        "the project declares Python `{declared}`, which none of the images' Pythons ({available}) \
         satisfies; give an `environment.image` that has a Python in that range"
    )]
    PythonRange { declared: String, available: &'static str },
    #[error(
        "`environment.image` is used as it is, so `environment.{what}` cannot be applied; install \
         it in that image, or drop `environment.image` to have one built"
    )]
    GivenImage { what: &'static str },
    #[error("`environment.{what}` is for Python projects, and this task's runner is {runner:?}")]
    NotForRunner { what: &'static str, runner: crate::grade::runners::RunnerKind },
    #[error("the `cargo` runner copies the host's Rust toolchain, but `rustc` is not on PATH")]
    NoRustc,
    #[error("service `{service}`: `build.copy` names {path}, which the repository does not have")]
    MissingCopy { service: String, path: String },
    #[error(transparent)]
    Shell(#[from] crate::shell::NulByte),
    #[error(transparent)]
    Ci(#[from] crate::tasks::ci::CiError),
    #[error("the task selects CI jobs, but the repository has no .gitlab-ci.yml or GitHub workflow")]
    NoCiConfig,
}

impl TaskError {
    /// A failed read of the repository's objects, saying what was being read.
    pub fn git(what: &'static str) -> impl FnOnce(git2::Error) -> Self {
        move |source| Self::Git { what, source }
    }
}

/// The test files of a task: those test_patch touches and those its test ids name.
pub fn task_test_files(task: &SweTask) -> BTreeSet<String> {
    let mut files: BTreeSet<String> = patch::files_touched(&task.test_patch).into_iter().collect();
    for id in task.fail_to_pass.iter().chain(&task.pass_to_pass) {
        // A Rust unit test's id names the source file it lives in (`src/lib.rs::tests::x`),
        // which the fix may need to change; only files that are tests by their path count.
        if let Some((file, _)) = id.split_once("::") {
            if file.ends_with(".py") || crate::patch::protect::is_test_path(file) {
                files.insert(file.to_owned());
            }
        }
    }
    files
}

/// Builds the tree to test. `prediction_patch` of `None` is the base with test_patch only.
/// `tools`: the Python modules the task's CI jobs run, which the prediction may not shadow.
pub fn prepare(
    locator: &RepoLocator,
    task: &SweTask,
    prediction_patch: Option<&str>,
    tools: &BTreeSet<String>,
) -> Result<Prepared, PrepareError> {
    let task_err = |what: &'static str| move |e: git2::Error| PrepareError::Task(TaskError::git(what)(e));
    let source = locator.locate(task).map_err(|e| PrepareError::Task(e.into()))?;
    let (repo, commit) = repos::open_commit(&source, &task.repo, &task.base_commit)
        .map_err(|e| PrepareError::Task(e.into()))?;
    let base_commit = repo.find_commit(commit).map_err(task_err("reading the base commit"))?;
    let base = base_commit.tree().map_err(task_err("reading the base tree"))?;
    let mut apply_log = Vec::new();
    let mut apply_method = None;
    let mut tampering = Vec::new();
    let mut tree = base.id();
    if let Some(patch_text) = prediction_patch {
        let applied = patch::apply(&repo, &base, patch_text).map_err(|e| PrepareError::Apply {
            why: crate::error_chain(&e),
            reason: matches!(e, patch::PatchError::Unsafe(_)).then_some("unsafe_path"),
            tampering: Vec::new(),
        })?;
        apply_log.extend(applied.log.iter().cloned());
        apply_method = Some(applied.method);
        let shadowing = patch::protect::shadowing_modules(&base, &applied.changes, tools);
        if !shadowing.is_empty() {
            let named: Vec<String> = shadowing.iter().map(|t| format!("{} ({})", t.path, t.rule)).collect();
            return Err(PrepareError::Apply {
                why: format!(
                    "the patch adds modules at the repository's root that would shadow others: {}",
                    named.join(", ")
                ),
                reason: Some("shadows_module"),
                tampering: shadowing,
            });
        }
        // The tests decide the grade, so the prediction's edits to them are undone.
        let (reverted, put_back) = patch::protect::revert_protected(
            &repo,
            &base,
            applied.tree,
            &applied.changes,
            &task_test_files(task),
        )
        .map_err(task_err("putting back test files"))?;
        for t in &put_back {
            apply_log.push(format!("put back {} ({})", t.path, t.rule));
        }
        tampering = put_back;
        tree = reverted;
    }
    let start = repo.find_tree(tree).map_err(task_err("reading the patched tree"))?;
    let with_tests = patch::apply(&repo, &start, &task.test_patch).map_err(|source| {
        PrepareError::Task(TaskError::TestPatch { commit: task.base_commit.clone(), source })
    })?;
    apply_log.push(format!("test_patch applied with {}", with_tests.method.as_str()));
    let tree = repo.find_tree(with_tests.tree).map_err(task_err("reading the tree to test"))?;
    let tar = patch::tree::tree_tar(&repo, &tree).map_err(task_err("packing the tree"))?;
    Ok(Prepared { tar, apply_method, tampering, apply_log })
}

/// Plans the environment of `task` from its repository at the environment commit.
pub fn plan_environment(
    locator: &RepoLocator,
    task: &SweTask,
) -> Result<super::environment::Environment, TaskError> {
    at_environment_commit(locator, task, |repo, tree| super::environment::plan(repo, tree, task))
}

/// Runs `plan` on `task`'s repository and its tree at the environment commit.
pub fn at_environment_commit<T>(
    locator: &RepoLocator,
    task: &SweTask,
    plan: impl FnOnce(&git2::Repository, &git2::Tree<'_>) -> Result<T, TaskError>,
) -> Result<T, TaskError> {
    let source = locator.locate(task)?;
    let (repo, commit) = repos::open_commit(&source, &task.repo, task.environment_commit())?;
    let tree = repo
        .find_commit(commit)
        .and_then(|c| c.tree())
        .map_err(TaskError::git("reading the environment commit"))?;
    plan(&repo, &tree)
}

/// The CI jobs `task` selects, read from its base commit (so the prediction cannot change
/// what they run), in run order.
pub fn ci_jobs(locator: &RepoLocator, task: &SweTask) -> Result<Vec<crate::tasks::ci::CiJob>, TaskError> {
    use crate::tasks::ci;
    if task.ci_jobs.is_empty() {
        return Ok(Vec::new());
    }
    let source = locator.locate(task)?;
    let (repo, commit) = repos::open_commit(&source, &task.repo, &task.base_commit)?;
    let commit = commit.to_string();
    let read =
        |path: &str| repos::read_at_commit(&repo, &commit, path).and_then(|b| String::from_utf8(b).ok());
    let workflows: Vec<String> = repos::list_files(&repo, &commit)
        .into_iter()
        .filter(|f| f.starts_with(".github/workflows/") && (f.ends_with(".yml") || f.ends_with(".yaml")))
        .collect();
    let mut jobs = Vec::new();
    if let Some(config) = ci::gitlab(&read)? {
        jobs.extend(config.jobs);
    }
    if let Some(config) = ci::github(&read, &workflows)? {
        jobs.extend(config.jobs);
    }
    if jobs.is_empty() {
        return Err(TaskError::NoCiConfig);
    }
    Ok(ci::select(&ci::CiConfig { jobs }, &task.ci_jobs)?)
}
