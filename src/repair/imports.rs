//! The import order of every Python process in a test run or CI job. Python puts the folder it
//! starts from first on `sys.path` (the repository root for `python -m pytest`), so a module
//! that a patch adds there (`hmac.py`, `pyflakes/`) would be imported in place of the standard
//! library's or a tool's, inside the harness's own process. Commands run with
//! `PYTHONSAFEPATH=1` instead, and a harness `sitecustomize` puts that folder back at the end
//! of `sys.path`, followed by the task's own `PYTHONPATH`, so the project still imports as its
//! tests expect while the standard library and installed packages come first.
//!
//! The `sitecustomize` sits in a folder of the workspace with a random name the patch cannot
//! know. It runs when an interpreter starts, before any code of the repository; the tested
//! code could change it only for interpreters it starts itself, whose results it decides anyway.
//! (It is the sandbox user's like the rest of the workspace: a root-owned folder there breaks
//! commands that touch every file, such as the cargo runner's.)

use crate::sandbox::archive::{self, Entry, Owner};

/// The harness's `sitecustomize`, shipped inside the binary.
pub const SITECUSTOMIZE: &str = include_str!("../../harness/sitecustomize.py");

/// One run's import order: where its `sitecustomize` goes.
pub struct ImportOrder {
    dir: String,
}

impl ImportOrder {
    pub fn new(workspace: &str) -> Self {
        let token = crate::grade::channel::random_token();
        Self { dir: format!("{}/.rb-site-{token}", workspace.trim_end_matches('/')) }
    }

    /// The folder's name inside the workspace.
    fn name(&self) -> &str {
        self.dir.rsplit('/').next().unwrap_or(&self.dir)
    }

    /// The archive to copy into the workspace: the folder holding the `sitecustomize` and the
    /// task's `PYTHONPATH` entries, which come after everything else.
    pub fn files(&self, task_pythonpath: Option<&str>) -> Vec<u8> {
        let after: String = task_pythonpath
            .unwrap_or_default()
            .split(':')
            .filter(|entry| !entry.is_empty())
            .map(|entry| format!("{entry}\n"))
            .collect();
        let name = self.name();
        let (module, list) = (format!("{name}/sitecustomize.py"), format!("{name}/path-after"));
        let entries = [
            Entry { path: name, mode: 0o755, contents: None },
            Entry { path: &module, mode: 0o644, contents: Some(SITECUSTOMIZE.as_bytes()) },
            Entry { path: &list, mode: 0o644, contents: Some(after.as_bytes()) },
        ];
        archive::tar_entries(&entries, Owner::Sandbox).expect("archiving in memory")
    }

    /// The variables that set the order; `first` (the results plugin's folder) is importable
    /// too. Every other `PYTHONPATH` goes through [`ImportOrder::files`].
    pub fn env(&self, first: Option<&str>) -> Vec<(String, String)> {
        let path = match first {
            Some(first) => format!("{}:{first}", self.dir),
            None => self.dir.clone(),
        };
        vec![("PYTHONSAFEPATH".into(), "1".into()), ("PYTHONPATH".into(), path)]
    }
}

/// The task's variables for a command, with its `PYTHONPATH` taken out (returned apart, for
/// [`ImportOrder::files`]) and the import order's variables added.
pub fn command_env(
    task_env: Option<&std::collections::BTreeMap<String, String>>,
    order: &ImportOrder,
    first: Option<&str>,
) -> (Vec<(String, String)>, Option<String>) {
    let mut env: Vec<(String, String)> = task_env
        .map(|e| {
            e.iter().filter(|(k, _)| !is_order_variable(k)).map(|(k, v)| (k.clone(), v.clone())).collect()
        })
        .unwrap_or_default();
    let pythonpath = task_env.and_then(|e| e.get("PYTHONPATH")).cloned();
    env.extend(order.env(first));
    (env, pythonpath)
}

/// The variables only the harness sets.
fn is_order_variable(name: &str) -> bool {
    matches!(name, "PYTHONPATH" | "PYTHONSAFEPATH" | "PYTHONNOUSERSITE" | "PYTHONSTARTUP" | "PYTHONHOME")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_path_comes_last_and_the_harness_variables_win() {
        let order = ImportOrder::new("/workspace");
        let task_env = std::collections::BTreeMap::from([
            ("PYTHONPATH".to_string(), "src:/opt/extra".to_string()),
            ("PYTHONSAFEPATH".to_string(), "".to_string()),
            ("APP_MODE".to_string(), "test".to_string()),
        ]);
        let (env, pythonpath) = command_env(Some(&task_env), &order, Some("/workspace/.rb-plugin"));
        assert_eq!(pythonpath.as_deref(), Some("src:/opt/extra"));
        let get = |k: &str| env.iter().filter(|(n, _)| n == k).map(|(_, v)| v.clone()).collect::<Vec<_>>();
        assert_eq!(get("PYTHONSAFEPATH"), ["1"]);
        assert_eq!(get("PYTHONPATH"), [format!("{}:/workspace/.rb-plugin", order.dir)]);
        assert_eq!(get("APP_MODE"), ["test"]);

        let tar = order.files(pythonpath.as_deref());
        let mut archive = tar::Archive::new(&tar[..]);
        let mut seen = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let header = entry.header().clone();
            assert_eq!((header.uid().unwrap(), header.gid().unwrap()), (1000, 1000));
            let mut text = String::new();
            std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
            seen.push((entry.path().unwrap().display().to_string(), header.mode().unwrap(), text));
        }
        assert_eq!(seen[0].1, 0o755);
        assert!(seen[1].0.ends_with("/sitecustomize.py") && seen[1].1 == 0o644);
        assert_eq!(seen[2].2, "src\n/opt/extra\n");
    }
}
