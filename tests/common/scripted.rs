//! Scripted repository histories for tests: commits at a fixed date, and patches as diffs.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A repository being scripted, whose commits all carry `date` (RFC 3339).
pub struct ScriptedRepo {
    pub dir: PathBuf,
    pub date: String,
}

impl ScriptedRepo {
    /// `git init` in `dir` (made first), branch `main`.
    pub fn init(dir: &Path, date: &str) -> ScriptedRepo {
        std::fs::create_dir_all(dir).unwrap();
        let repo = ScriptedRepo { dir: dir.to_owned(), date: date.to_owned() };
        repo.git(&["init", "-q"]);
        repo
    }

    pub fn git(&self, args: &[&str]) -> String {
        let output = Command::new("git")
            .args([
                "-c",
                "user.name=Test",
                "-c",
                "user.email=test@example.com",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(["-c", "commit.gpgsign=false"])
            .args(args)
            .current_dir(&self.dir)
            .env("GIT_AUTHOR_DATE", &self.date)
            .env("GIT_COMMITTER_DATE", &self.date)
            .output()
            .unwrap();
        assert!(output.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap()
    }

    pub fn write(&self, files: &[(&str, String)]) {
        for (path, text) in files {
            let path = self.dir.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }

    /// Writes `files`, commits them, and returns the commit's id.
    pub fn commit(&self, files: &[(&str, String)], message: &str) -> String {
        self.write(files);
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", message]);
        self.git(&["rev-parse", "HEAD"]).trim().to_owned()
    }

    /// `files` written over `base` as a diff against it; the tree goes back to `base`.
    pub fn diff(&self, base: &str, files: &[(&str, String)]) -> String {
        self.write(files);
        self.git(&["add", "-A"]);
        let patch = self.git(&["diff", "--cached", "--full-index", base]);
        self.git(&["reset", "-q", "--hard", base]);
        patch
    }

    /// A task folder `dataset/` holding the repository as a bundle and `task` as task.json.
    pub fn task_folder(&self, dataset: &Path, task: &serde_json::Value) {
        std::fs::create_dir_all(dataset).unwrap();
        self.git(&["bundle", "create", "-q", dataset.join("repo.bundle").to_str().unwrap(), "HEAD", "main"]);
        std::fs::write(dataset.join("task.json"), serde_json::to_string_pretty(task).unwrap()).unwrap();
    }
}
