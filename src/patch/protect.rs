//! The test infrastructure a model patch may not change: test files, `conftest.py` at any
//! depth, pytest's configuration (`pytest.ini`, `.pytest.ini`, `tox.ini`, the pytest parts of
//! `setup.cfg` and `pyproject.toml`, plugin entry points), and modules that would load before
//! the harness (`sitecustomize`, a `pytest` shadowing the real one). Every such change is put
//! back to the base tree before the tests run, and listed as tampering.
//!
//! The changed paths come from libgit2's diff of the two trees, so a path the patch spelled
//! in a way our own diff reader misses (C-quoted, renamed) is still seen.

use std::collections::BTreeSet;
use std::path::Path;

use git2::{Oid, Repository, Tree};
use serde::{Deserialize, Serialize};

use super::tree::Change;

/// One change of the model patch that was put back, and the rule that protects the path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tampering {
    pub path: String,
    pub rule: String,
}

/// Top-level names Python imports before the harness plugin, or in its place.
const SHADOWING: &[&str] = &[
    "sitecustomize.py",
    "usercustomize.py",
    "pytest.py",
    "pytest",
    "_pytest",
    "pluggy",
    "py.py",
    "iniconfig",
];

/// Top-level module names of Python's standard library (3.9 to 3.13), one per line.
const STDLIB_MODULES: &str = include_str!("../../harness/stdlib_modules.txt");

/// What pytest, its dependencies and the packaging tools import; a module by one of these names
/// at the repository's root would be imported in their place wherever the root comes first.
/// The pytests of older eras (the era environments install them) count too: attrs, toml,
/// pyparsing (packaging before 22), more_itertools, six, wcwidth, atomicwrites,
/// importlib_metadata and zipp (pluggy on old Pythons), typing_extensions.
const HARNESS_MODULES: &[&str] = &[
    "pytest",
    "_pytest",
    "pluggy",
    "iniconfig",
    "py",
    "packaging",
    "exceptiongroup",
    "tomli",
    "pygments",
    "colorama",
    "attr",
    "attrs",
    "toml",
    "pyparsing",
    "more_itertools",
    "six",
    "wcwidth",
    "atomicwrites",
    "importlib_metadata",
    "zipp",
    "typing_extensions",
    "pip",
    "setuptools",
    "pkg_resources",
    "_distutils_hack",
    "wheel",
    "sitecustomize",
    "usercustomize",
];

/// The module a new path at the repository's root provides, and whether it is a folder:
/// `json.py`, `json/__init__.py`, `json.cpython-311-x86_64-linux-gnu.so` all provide `json`;
/// `None` for anything Python would not import by a name.
fn root_module(path: &str) -> Option<(&str, bool)> {
    let (top, rest) = match path.split_once('/') {
        Some((top, rest)) => (top, Some(rest)),
        None => (path, None),
    };
    let name = match rest {
        Some(_) => top,
        None => {
            let (stem, _) = top.split_once('.')?;
            let importable = [".py", ".pyc", ".pyw", ".so", ".pyd"].iter().any(|ext| top.ends_with(ext));
            if !importable {
                return None;
            }
            stem
        }
    };
    let identifier = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    identifier.then_some((name, rest.is_some()))
}

/// What a module name at the repository's root would shadow, if anything: the standard
/// library, the harness and its tools, or a tool of `tools` (the commands the task's CI jobs run).
fn shadowed(name: &str, tools: &BTreeSet<String>) -> Option<&'static str> {
    if STDLIB_MODULES.lines().any(|line| line == name) {
        Some("the standard-library module")
    } else if HARNESS_MODULES.contains(&name) || name.starts_with("repairbench") {
        Some("the harness's module")
    } else if tools.contains(name) {
        Some("the module of a tool the task's CI jobs run")
    } else {
        None
    }
}

/// The changes that add, at the repository's root, a module named after a standard-library
/// module, one the harness imports, or a tool in `tools`: wherever the root comes first on
/// `sys.path` (an older Python, a task's own `PYTHONPATH`) it would run in their place. A
/// module the base tree already had at the root is the project's own and stays allowed. A
/// folder counts through its `__init__.py` (one without is a namespace package, which loses
/// to any real module of its name), or as a whole for a CI tool, which may not be installed.
pub fn shadowing_modules(base: &Tree<'_>, changes: &[Change], tools: &BTreeSet<String>) -> Vec<Tampering> {
    changes
        .iter()
        .filter(|change| change.new.is_some())
        .filter_map(|change| {
            let (name, folder) = root_module(&change.path)?;
            let top = change.path.split('/').next().unwrap_or(&change.path);
            if base.get_name(top).is_some() {
                return None;
            }
            let init = change.path[top.len()..].starts_with("/__init__.");
            if folder && !init && !tools.contains(name) {
                return None;
            }
            let what = shadowed(name, tools)?;
            Some(Tampering { path: change.path.clone(), rule: format!("shadows_module: {what} `{name}`") })
        })
        .collect()
}

/// Whether `path` looks like a test file or test configuration, for any language we grade.
pub fn is_test_path(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let in_test_dir = path.split('/').any(|part| matches!(part, "test" | "tests" | "testing"));
    in_test_dir
        || name.starts_with("test_")
        || name.ends_with("_test.py")
        || name.ends_with("_test.go")
        || name == "conftest.py"
        || name == "pytest.ini"
        || name == ".pytest.ini"
        || name == "tox.ini"
}

/// The lines of an INI file's sections whose names `keep` accepts, for comparison.
fn ini_sections(text: &str, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') && trimmed.ends_with(']') {
            inside = keep(trimmed[1..trimmed.len() - 1].trim());
        }
        if inside {
            out.push(line.trim_end().to_owned());
        }
    }
    out
}

/// The values of `pyproject.toml` that configure pytest or register its plugins; `None` when
/// the file does not parse.
fn pyproject_pytest(text: &str) -> Option<Vec<Option<toml::Value>>> {
    let doc: toml::Value = toml::from_str(text).ok()?;
    let at = |keys: &[&str]| {
        let mut value = &doc;
        for key in keys {
            value = value.get(key)?;
        }
        Some(value.clone())
    };
    Some(vec![
        at(&["tool", "pytest"]),
        at(&["project", "entry-points", "pytest11"]),
        at(&["tool", "poetry", "plugins", "pytest11"]),
    ])
}

/// Why the change of `path` from `old` to `new` (texts; `None` when absent) is protected.
fn rule_for(
    path: &str,
    old: Option<&str>,
    new: Option<&str>,
    task_tests: &BTreeSet<String>,
) -> Option<String> {
    let name = path.rsplit('/').next().unwrap_or(path);
    let top = path.split('/').next().unwrap_or(path);
    if task_tests.contains(path) {
        return Some("a test file of the task".into());
    }
    if name == "conftest.py" {
        return Some("pytest conftest".into());
    }
    if matches!(name, "pytest.ini" | ".pytest.ini" | "tox.ini") {
        return Some("pytest configuration".into());
    }
    if is_test_path(path) {
        return Some("test file".into());
    }
    if path == ".gitlab-ci.yml" || path.starts_with(".gitlab-ci/") || path.starts_with(".github/workflows/") {
        return Some("CI configuration".into());
    }
    if SHADOWING.contains(&top) || top.starts_with("repairbench") {
        return Some("module loaded before the harness".into());
    }
    let (old, new) = (old.unwrap_or(""), new.unwrap_or(""));
    match name {
        "setup.cfg" => {
            let pytest_part =
                |text: &str| ini_sections(text, |s| s == "tool:pytest" || s == "options.entry_points");
            (pytest_part(old) != pytest_part(new))
                .then(|| "pytest configuration ([tool:pytest] or entry points in setup.cfg)".into())
        }
        "pyproject.toml" => {
            let changed = match (pyproject_pytest(old), pyproject_pytest(new)) {
                (Some(a), Some(b)) => a != b,
                // Unreadable now: pytest would read whatever it could; keep the base.
                (_, None) => true,
                (None, Some(b)) => b.iter().any(Option::is_some),
            };
            changed.then(|| "pytest configuration ([tool.pytest] or pytest11 entry points)".into())
        }
        "setup.py" => {
            fn plugin_lines(text: &str) -> Vec<&str> {
                text.lines().filter(|l| l.contains("pytest11")).map(str::trim).collect()
            }
            (plugin_lines(old) != plugin_lines(new)).then(|| "pytest11 entry point in setup.py".into())
        }
        _ => None,
    }
}

fn text(repo: &Repository, side: Option<(Oid, i32)>) -> Option<String> {
    let (oid, _) = side?;
    repo.find_blob(oid).ok().map(|b| String::from_utf8_lossy(b.content()).into_owned())
}

/// Puts every protected change back to `base`, returning the new tree and what was put back.
/// `task_tests` are the task's own test files (those `test_patch` touches and its test ids name).
pub fn revert_protected(
    repo: &Repository,
    base: &Tree<'_>,
    patched: Oid,
    changes: &[Change],
    task_tests: &BTreeSet<String>,
) -> Result<(Oid, Vec<Tampering>), git2::Error> {
    let mut tampering = Vec::new();
    let mut removals = Vec::new();
    let mut restores = Vec::new();
    for change in changes {
        let old = text(repo, change.old);
        let new = text(repo, change.new);
        let Some(rule) = rule_for(&change.path, old.as_deref(), new.as_deref(), task_tests) else {
            continue;
        };
        tampering.push(Tampering { path: change.path.clone(), rule });
        match base.get_path(Path::new(&change.path)) {
            Ok(entry) => restores.push((change.path.clone(), entry.id(), entry.filemode())),
            Err(_) => removals.push(change.path.clone()),
        }
    }
    if tampering.is_empty() {
        return Ok((patched, tampering));
    }
    let patched_tree = repo.find_tree(patched)?;
    // Removals first: a file the patch put where a directory was must go before the
    // directory's files come back.
    let mut update = git2::build::TreeUpdateBuilder::new();
    for path in &removals {
        update.remove(path);
    }
    let without = update.create_updated(repo, &patched_tree)?;
    let without = repo.find_tree(without)?;
    let mut update = git2::build::TreeUpdateBuilder::new();
    for (path, oid, mode) in &restores {
        let mode = match *mode {
            0o100755 => git2::FileMode::BlobExecutable,
            0o120000 => git2::FileMode::Link,
            _ => git2::FileMode::Blob,
        };
        update.upsert(path, *oid, mode);
    }
    let tree = update.create_updated(repo, &without)?;
    Ok((tree, tampering))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(path: &str, old: Option<&str>, new: Option<&str>) -> Option<String> {
        rule_for(path, old, new, &BTreeSet::new())
    }

    #[test]
    fn test_infrastructure_is_recognised() {
        assert!(rule("pkg/deep/conftest.py", None, Some("x")).is_some());
        assert!(rule("tox.ini", Some("a"), Some("b")).is_some());
        assert!(rule("sitecustomize.py", None, Some("x")).is_some());
        assert!(rule("pytest.py", None, Some("x")).is_some());
        assert!(rule(".gitlab-ci.yml", Some("a"), Some("b")).is_some());
        assert!(rule(".github/workflows/ci.yml", None, Some("x")).is_some());
        assert!(rule("src/lib.py", Some("a"), Some("b")).is_none());
        assert!(rule("src/lib.py", Some("a"), Some("b")).is_none());
        let tasks: BTreeSet<String> = ["checks/spec_money.py".to_string()].into();
        assert!(rule_for("checks/spec_money.py", Some("a"), Some("b"), &tasks).is_some());
    }

    #[test]
    fn new_root_modules_named_after_the_stdlib_the_harness_or_a_ci_tool_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let blob = repo.blob(b"x").unwrap();
        let mut base = repo.treebuilder(None).unwrap();
        base.insert("json.py", blob, 0o100644).unwrap();
        let base = repo.find_tree(base.write().unwrap()).unwrap();
        let added = |path: &str| Change { path: path.into(), old: None, new: Some((blob, 0o100644)) };
        let changes: Vec<Change> = [
            "hmac.py",
            "hashlib/__init__.py",
            "tempfile.cpython-311-x86_64-linux-gnu.so",
            "pyflakes/__main__.py",
            "pluggy.py",
            "attr/__init__.py",
            "toml.py",
            "json.py",
            "pkg/hmac.py",
            "site/index.html",
            "code/notes.py",
            "README.md",
            "shutil.txt",
            "mymodule.py",
        ]
        .iter()
        .map(|p| added(p))
        .collect();
        let tools: BTreeSet<String> = ["pyflakes".to_string()].into();
        let found: Vec<String> =
            shadowing_modules(&base, &changes, &tools).into_iter().map(|t| t.path).collect();
        // json.py was the project's own at the base; pkg/hmac.py is not at the root; `site/`
        // and `code/` have no __init__.py, so the standard library's modules win over them.
        assert_eq!(
            found,
            [
                "hmac.py",
                "hashlib/__init__.py",
                "tempfile.cpython-311-x86_64-linux-gnu.so",
                "pyflakes/__main__.py",
                "pluggy.py",
                "attr/__init__.py",
                "toml.py"
            ]
        );
        assert!(
            shadowing_modules(&base, &changes[3..4], &BTreeSet::new()).is_empty(),
            "pyflakes only when a job runs it"
        );
    }

    #[test]
    fn only_the_pytest_parts_of_shared_config_files_count() {
        let cfg = "[metadata]\nname = x\n\n[tool:pytest]\ntestpaths = tests\n";
        assert!(rule("setup.cfg", Some(cfg), Some(&cfg.replace("name = x", "name = y"))).is_none());
        assert!(rule("setup.cfg", Some(cfg), Some(&format!("{cfg}addopts = -p evil\n"))).is_some());
        let entry = "[options.entry_points]\npytest11 =\n    evil = pkg.evil\n";
        assert!(rule("setup.cfg", Some(cfg), Some(&format!("{cfg}{entry}"))).is_some());

        let toml = "[project]\nname = \"x\"\nversion = \"1\"\n\n[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n";
        assert!(rule(
            "pyproject.toml",
            Some(toml),
            Some(&toml.replace("version = \"1\"", "version = \"2\""))
        )
        .is_none());
        let addopts = toml.replace("testpaths", "addopts = \"-p evil\"\ntestpaths");
        assert!(rule("pyproject.toml", Some(toml), Some(&addopts)).is_some());
        let plugin = format!("{toml}\n[project.entry-points.pytest11]\nevil = \"pkg.evil\"\n");
        assert!(rule("pyproject.toml", Some(toml), Some(&plugin)).is_some());
        assert!(rule("pyproject.toml", Some(toml), Some("not [ toml")).is_some());

        let setup = "from setuptools import setup\nsetup(name='x')\n";
        let with_plugin =
            "from setuptools import setup\nsetup(name='x', entry_points={'pytest11': ['e = p.e']})\n";
        assert!(rule("setup.py", Some(setup), Some(with_plugin)).is_some());
        assert!(rule("setup.py", Some(setup), Some(&setup.replace("'x'", "'y'"))).is_none());
    }
}
