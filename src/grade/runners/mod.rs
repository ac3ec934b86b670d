//! Test runners beyond pytest (placeholder until the parsers land).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunnerKind {
    Pytest,
    Cargo,
    Go,
    Node,
    Junit,
}

impl RunnerKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Pytest => "pytest",
            Self::Cargo => "cargo",
            Self::Go => "go",
            Self::Node => "node",
            Self::Junit => "junit",
        }
    }
}

pub fn detect(test_patch_files: &[String], root_files: &[String]) -> Option<RunnerKind> {
    let ext = |f: &String, e: &str| f.ends_with(e);
    for f in test_patch_files {
        if ext(f, ".rs") {
            return Some(RunnerKind::Cargo);
        }
        if ext(f, "_test.go") {
            return Some(RunnerKind::Go);
        }
        if ext(f, ".js") || ext(f, ".mjs") || ext(f, ".cjs") {
            return Some(RunnerKind::Node);
        }
        if ext(f, ".py") {
            return Some(RunnerKind::Pytest);
        }
    }
    let has = |name: &str| root_files.iter().any(|f| f == name);
    if has("Cargo.toml") {
        Some(RunnerKind::Cargo)
    } else if has("go.mod") {
        Some(RunnerKind::Go)
    } else if has("package.json") {
        Some(RunnerKind::Node)
    } else if ["pyproject.toml", "setup.py", "setup.cfg", "pytest.ini", "tox.ini"].iter().any(|f| has(f)) {
        Some(RunnerKind::Pytest)
    } else {
        None
    }
}
