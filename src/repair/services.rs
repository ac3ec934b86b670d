//! A task's services in grading: their images planned and built as layers (once per distinct
//! content, like environments), then for every test run a fresh group on a private network
//! with the tree under test copied into the services that name it, the checks run after the
//! tests, and each service's log, exit and crash recorded ([`super::execute`] drives it).

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::grade::TestStatus;
use crate::sandbox::services::{ServiceSpec, ServiceState};
use crate::sandbox::{ExecRequest, LayerSpec, Limits, ParentImage, Sandbox};
use crate::tasks::services::{ReadyCheck, TaskService, DEFAULT_READY_TIMEOUT_S};
use crate::tasks::{RepoLocator, SweTask};

use super::environment::{apt_step, command_steps, context_files, HOST_CA_STEPS, SYSTEM_PATH};
use super::prepare::TaskError;

/// Where a service's pip packages go (a venv that also sees Debian's Python packages).
const SERVICE_VENV: &str = "/opt/service-venv";
/// Deadline of one `service_checks` command.
const CHECK_TIMEOUT: Duration = Duration::from_secs(120);

/// What a service did during one test run (`services` of the report).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceOutcome {
    pub name: String,
    /// Seconds from the group's start until it was ready.
    pub ready_after_s: f64,
    /// How it ended, when it ended before it was removed (`exit 1`, `oom`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<String>,
    /// It stopped while the tests ran (services are meant to run until removed).
    pub crashed: bool,
    /// Its log, relative to the instance's log folder.
    pub log: String,
}

/// One `service_checks` entry's result.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckOutcome {
    pub id: String,
    pub status: TestStatus,
    pub detail: String,
}

/// The layer a built service runs from; `None` for a service given as an `image`.
fn service_layer(
    repo: &git2::Repository,
    tree: &git2::Tree<'_>,
    service: &TaskService,
) -> Result<Option<LayerSpec>, TaskError> {
    let Some(build) = &service.build else { return Ok(None) };
    let mut steps = vec!["ARG BASE".to_owned(), "FROM ${BASE}".to_owned()];
    steps.extend(crate::sandbox::layers::PASSED_BUILD_ARGS.iter().map(|a| format!("ARG {a}")));
    steps.push("USER root".to_owned());
    steps.push(HOST_CA_STEPS.to_owned());
    let venv_package = if build.pip.is_empty() { vec![] } else { vec!["python3-venv".to_owned()] };
    if !build.apt.is_empty() || !venv_package.is_empty() {
        steps.push(apt_step(&venv_package, &build.apt)?);
    }
    if !build.pip.is_empty() {
        steps.push(format!(
            "RUN python3 -m venv --system-site-packages {SERVICE_VENV} && {SERVICE_VENV}/bin/pip install --no-cache-dir {}",
            crate::shell::join(&build.pip)?
        ));
        steps.push(format!("ENV PATH={SERVICE_VENV}/bin:{SYSTEM_PATH} VIRTUAL_ENV={SERVICE_VENV}"));
    }
    let mut files = Vec::new();
    for path in &build.copy {
        let copied = repo_files(repo, tree, path)?;
        if copied.is_empty() {
            return Err(TaskError::MissingCopy { service: service.name.clone(), path: path.clone() });
        }
        files.extend(copied.into_iter().map(|(p, content)| (format!("repo/{p}"), content)));
    }
    if !files.is_empty() {
        steps.push("COPY repo/ /workspace/".to_owned());
    }
    steps.push("WORKDIR /workspace".to_owned());
    let (run_steps, run_files) = command_steps("rb-steps", &build.run);
    steps.extend(run_steps);
    steps.push("RUN chown -R sandbox:sandbox /workspace".to_owned());
    steps.push(crate::sandbox::layers::workspace_seed_steps());
    steps.push("USER sandbox".to_owned());
    let mut context = context_files(steps.join("\n") + "\n");
    context.extend(files);
    context.extend(run_files);
    Ok(Some(LayerSpec::new("service", context, ParentImage::Default)))
}

/// The files at or under `path` in `tree`, with their paths.
fn repo_files(
    repo: &git2::Repository,
    tree: &git2::Tree<'_>,
    path: &str,
) -> Result<Vec<(String, Vec<u8>)>, TaskError> {
    let Ok(entry) = tree.get_path(Path::new(path)) else { return Ok(Vec::new()) };
    let read = |id| {
        repo.find_blob(id).map(|b| b.content().to_vec()).map_err(TaskError::git("reading a file to copy"))
    };
    match entry.kind() {
        Some(git2::ObjectType::Blob) => Ok(vec![(path.to_owned(), read(entry.id())?)]),
        Some(git2::ObjectType::Tree) => {
            let sub = repo.find_tree(entry.id()).map_err(TaskError::git("reading a folder to copy"))?;
            let mut blobs = Vec::new();
            let _ = sub.walk(git2::TreeWalkMode::PreOrder, |dir, e| {
                if e.kind() == Some(git2::ObjectType::Blob) {
                    blobs.push((format!("{path}/{dir}{}", e.name().unwrap_or_default()), e.id()));
                }
                git2::TreeWalkResult::Ok
            });
            blobs.into_iter().map(|(p, id)| Ok((p, read(id)?))).collect()
        }
        _ => Ok(Vec::new()),
    }
}

/// Each service's layer (or `None` for a given image), planned from the repository at the
/// task's environment commit.
pub fn plan_layers(locator: &RepoLocator, task: &SweTask) -> Result<Vec<Option<LayerSpec>>, TaskError> {
    super::prepare::at_environment_commit(locator, task, |repo, tree| {
        task.services.iter().map(|service| service_layer(repo, tree, service)).collect()
    })
}

/// `task` with every service's image built (each `build` replaced by the image's tag). A
/// failed build's log goes to `services/NAME.build.log`. Errors are `(reason, detail)`.
pub async fn resolve<S: Sandbox>(
    sandbox: &S,
    locator: &std::sync::Arc<RepoLocator>,
    task: &SweTask,
    log_dir: &Path,
) -> Result<SweTask, (&'static str, String)> {
    if task.services.iter().all(|s| s.build.is_none()) {
        return Ok(task.clone());
    }
    let planned = {
        let (locator, task) = (locator.clone(), task.clone());
        tokio::task::spawn_blocking(move || plan_layers(&locator, &task)).await
    };
    let layers = match planned {
        Ok(Ok(layers)) => layers,
        Ok(Err(why)) => return Err(("environment_unknown", crate::error_chain(&why))),
        Err(e) => {
            return Err(("environment_unknown", format!("internal error while planning services: {e}")))
        }
    };
    let mut resolved = task.clone();
    for (service, layer) in resolved.services.iter_mut().zip(layers) {
        let Some(layer) = layer else { continue };
        match sandbox.ensure_layer(&layer).await {
            Ok(tag) => {
                service.image = Some(tag);
                service.build = None;
            }
            Err(e) => {
                if let crate::sandbox::ImageError::Build { log, .. } = &e {
                    let dir = log_dir.join("services");
                    let _ = std::fs::create_dir_all(&dir);
                    let _ = std::fs::write(dir.join(format!("{}.build.log", service.name)), log);
                }
                let why = format!("service `{}`: {}", service.name, crate::error_chain(&e));
                return Err(("environment_build_failed", why));
            }
        }
    }
    Ok(resolved)
}

/// [`super::environment_image`], then the images of the task's services: the task returned has
/// each service's image built ([`resolve`]).
pub async fn environment_and_services<S: Sandbox>(
    sandbox: &S,
    locator: &std::sync::Arc<RepoLocator>,
    settings: &super::GradeSettings,
    task: &SweTask,
    log_dir: &Path,
) -> Result<(super::EnvironmentImage, SweTask), (&'static str, String)> {
    let found = super::environment_image(sandbox, locator, settings, task, log_dir).await?;
    Ok((found, resolve(sandbox, locator, task, log_dir).await?))
}

/// The readiness command run inside the service.
fn ready_command(service: &TaskService, ready: &ReadyCheck) -> Vec<String> {
    let argv = |words: &[&str]| words.iter().map(|w| w.to_string()).collect();
    if let Some(cmd) = &ready.cmd {
        return cmd.clone();
    }
    if let Some(port) = ready.tcp {
        // python3 where the image has it, else bash's /dev/tcp.
        let script = format!(
            "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2).close()' 2>/dev/null \
             || bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}'"
        );
        return argv(&["sh", "-c", &script]);
    }
    let path = ready.http.as_deref().unwrap_or("/");
    let port = service.ports.first().copied().unwrap_or(80);
    // The URL is an argument, never part of the script's text.
    let script = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)";
    argv(&["python3", "-c", script, &format!("http://127.0.0.1:{port}{path}")])
}

/// The sandbox's view of `task`'s services (images already resolved), with `tree_tar` for
/// those that take the tree under test.
pub fn specs(task: &SweTask, tree_tar: &[u8], limits: &Limits) -> Vec<ServiceSpec> {
    task.services
        .iter()
        .map(|service| {
            let mut spec = ServiceSpec::new(
                &service.name,
                service.image.clone().unwrap_or_default(),
                service.command.clone(),
            );
            // Unbuffered output, so the log holds everything up to a crash.
            spec.env =
                vec![("PYTHONUNBUFFERED".into(), "1".into()), ("PYTHONDONTWRITEBYTECODE".into(), "1".into())];
            spec.env.extend(service.env.iter().map(|(k, v)| (k.clone(), v.clone())));
            spec.depends_on = service.depends_on.clone();
            spec.ready = service.ready.as_ref().map(|ready| ready_command(service, ready));
            let timeout_s =
                service.ready.as_ref().and_then(|r| r.timeout_s).unwrap_or(DEFAULT_READY_TIMEOUT_S);
            spec.ready_timeout = Some(Duration::from_secs(timeout_s));
            spec.limits = limits.clone();
            spec.files_in = service.repo.then(|| tree_tar.to_vec());
            spec.data_dirs = service.data_dirs.clone();
            spec
        })
        .collect()
}

/// Runs the command checks inside their services (the group still up); log checks are
/// judged later from the logs ([`finish_checks`]). Returns one entry per command check.
pub async fn run_command_checks<S: Sandbox>(
    sandbox: &S,
    group: &S::Services,
    task: &SweTask,
) -> Vec<CheckOutcome> {
    let mut outcomes = Vec::new();
    for check in &task.service_checks {
        let Some(cmd) = &check.cmd else { continue };
        let request =
            ExecRequest { cmd: cmd.clone(), timeout: CHECK_TIMEOUT, workdir: None, env: Vec::new() };
        let (status, detail) = match sandbox.exec_in_service(group, &check.service, &request).await {
            Ok(result) => {
                let passed = result.verdict == crate::sandbox::Verdict::Exit(0);
                let status = if passed { TestStatus::Passed } else { TestStatus::Failed };
                let output =
                    crate::sandbox::services::tail(&format!("{}\n{}", result.stdout, result.stderr), 10);
                (status, format!("{}\n{output}", result.verdict))
            }
            Err(e) => (TestStatus::Failed, crate::error_chain(&e)),
        };
        outcomes.push(CheckOutcome { id: check.id(), status, detail });
    }
    outcomes
}

/// Every check's outcome: the command checks already run, then the log checks judged on
/// `states`' logs, in the task's order.
pub fn finish_checks(task: &SweTask, ran: Vec<CheckOutcome>, states: &[ServiceState]) -> Vec<CheckOutcome> {
    let mut ran = ran.into_iter();
    let mut outcomes = Vec::new();
    for check in &task.service_checks {
        if check.cmd.is_some() {
            outcomes.extend(ran.next());
            continue;
        }
        let needle = check.log_excludes.as_deref().unwrap_or_default();
        let log = states.iter().find(|s| s.name == check.service).map(|s| s.log.as_str()).unwrap_or_default();
        let hits: Vec<&str> = log.lines().filter(|l| l.contains(needle)).collect();
        let (status, detail) = match hits.first() {
            None => (TestStatus::Passed, format!("no line contains {needle:?}")),
            Some(first) => {
                (TestStatus::Failed, format!("{} lines contain {needle:?}; first: {first}", hits.len()))
            }
        };
        outcomes.push(CheckOutcome { id: check.id(), status, detail });
    }
    outcomes
}

/// The logs of one test run's services and its checks' outcomes, written by the grader into
/// a folder per attempt ([`write_logs`]).
#[derive(Debug, Clone, Default)]
pub struct ServiceLogs {
    /// (service, log)
    pub logs: Vec<(String, String)>,
    pub checks: Vec<CheckOutcome>,
}

/// What each service did, and their logs with the checks' outcomes.
pub fn record(states: &[ServiceState], checks: Vec<CheckOutcome>) -> (Vec<ServiceOutcome>, ServiceLogs) {
    let mut logs = ServiceLogs { logs: Vec::new(), checks };
    let outcomes = states
        .iter()
        .map(|state| {
            let mut log = state.log.clone();
            if state.log_truncated {
                log.push_str("\n[repairbench: the middle of the log was cut by the output cap]\n");
            }
            logs.logs.push((state.name.clone(), log));
            ServiceOutcome {
                name: state.name.clone(),
                ready_after_s: state.ready_after_s,
                exit: state.exit.as_ref().map(ToString::to_string),
                crashed: !state.running,
                log: format!("{FIRST_RUN_LOGS}/{}.log", state.name),
            }
        })
        .collect();
    (outcomes, logs)
}

/// Where the first test run's service logs go, relative to the instance's log folder; the
/// other runs get folders below it (`rerun-N`, `without-prediction`).
pub const FIRST_RUN_LOGS: &str = "services";

/// Writes each service's log to `dir/NAME.log` and the checks to `dir/checks.log`.
pub fn write_logs(dir: &Path, logs: &ServiceLogs) {
    if logs.logs.is_empty() {
        return;
    }
    let _ = std::fs::create_dir_all(dir);
    for (name, log) in &logs.logs {
        let _ = std::fs::write(dir.join(format!("{name}.log")), log);
    }
    if !logs.checks.is_empty() {
        let text: String =
            logs.checks.iter().map(|c| format!("== {} ({:?})\n{}\n", c.id, c.status, c.detail)).collect();
        let _ = std::fs::write(dir.join("checks.log"), text);
    }
}

/// One line naming every service that crashed during the tests, if any did.
pub fn crash_note(outcomes: &[ServiceOutcome]) -> Option<String> {
    let crashed: Vec<String> = outcomes
        .iter()
        .filter(|o| o.crashed)
        .map(|o| format!("`{}` ({}; see {})", o.name, o.exit.as_deref().unwrap_or("stopped"), o.log))
        .collect();
    (!crashed.is_empty()).then(|| format!("services crashed during the tests: {}", crashed.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::Verdict;

    fn task() -> SweTask {
        serde_json::from_value(serde_json::json!({
            "repo": "acme/x", "instance_id": "x-1", "base_commit": "abcd", "test_patch": "",
            "FAIL_TO_PASS": ["t.py::f"],
            "services": [
                {"name": "db", "image": "pg:1", "ready": {"tcp": 5432}, "data_dirs": ["/data"]},
                {"name": "api", "image": "api:1", "command": ["serve"], "ports": [8080], "repo": true,
                 "ready": {"http": "/health", "timeout_s": 7}, "depends_on": ["db"], "env": {"MODE": "test"}}
            ],
            "service_checks": [
                {"service": "api", "name": "clean-log", "log_excludes": "ERROR"},
                {"service": "db", "name": "migrated", "cmd": ["true"]}
            ]
        }))
        .unwrap()
    }

    fn state(name: &str, running: bool, log: &str) -> ServiceState {
        ServiceState {
            name: name.into(),
            running,
            exit: (!running).then_some(Verdict::Exit(3)),
            ready_after_s: 1.0,
            log: log.into(),
            log_truncated: false,
        }
    }

    #[test]
    fn specs_carry_readiness_tree_and_data_dirs() {
        let specs = specs(&task(), b"TAR", &Limits::default());
        let (db, api) = (&specs[0], &specs[1]);
        assert!(db.ready.as_ref().unwrap().join(" ").contains("127.0.0.1/5432"), "{:?}", db.ready);
        assert_eq!(db.files_in, None);
        assert_eq!(db.data_dirs, ["/data"]);
        assert_eq!(db.ready_timeout, Some(Duration::from_secs(DEFAULT_READY_TIMEOUT_S)));
        assert_eq!(api.ready.as_ref().unwrap()[3], "http://127.0.0.1:8080/health", "{:?}", api.ready);
        assert_eq!(api.ready_timeout, Some(Duration::from_secs(7)));
        assert_eq!(api.files_in.as_deref(), Some(b"TAR".as_slice()));
        assert_eq!(api.depends_on, ["db"]);
        assert!(api.env.contains(&("MODE".into(), "test".into())));
    }

    #[test]
    fn build_commands_reach_the_build_as_files_never_as_dockerfile_text() {
        // The loader refuses control characters; even one that got past it stays a command.
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        let tree = repo.find_tree(repo.treebuilder(None).unwrap().write().unwrap()).unwrap();
        let injected = "true\nADD http://127.0.0.1:9/secret /workspace/secret\nFROM evil";
        let service: TaskService = serde_json::from_value(serde_json::json!({
            "name": "db", "command": ["db"], "build": {"run": ["make db", injected], "apt": ["postgresql"]}
        }))
        .unwrap();
        let layer = service_layer(&repo, &tree, &service).unwrap().unwrap();
        let file = |name: &str| {
            let (_, content) =
                layer.files.iter().find(|(path, _)| path == name).unwrap_or_else(|| panic!("{name}"));
            String::from_utf8(content.clone()).unwrap()
        };
        let dockerfile = file("Dockerfile");
        assert!(!dockerfile.contains("http://") && !dockerfile.contains("evil"), "{dockerfile}");
        assert_eq!(dockerfile.lines().filter(|l| l.starts_with("FROM ")).count(), 1, "{dockerfile}");
        assert!(dockerfile.contains(" sh -ex /tmp/rb-steps/2.sh"), "{dockerfile}");
        assert_eq!(file("rb-steps/1.sh"), "make db\n");
        assert_eq!(file("rb-steps/2.sh"), format!("{injected}\n"));
    }

    #[test]
    fn checks_keep_the_task_order_and_logs_are_judged_line_by_line() {
        let ran = vec![CheckOutcome {
            id: "service:db::migrated".into(),
            status: TestStatus::Passed,
            detail: "".into(),
        }];
        let states = [state("db", true, ""), state("api", false, "ok\nERROR: boom\nERROR: again\n")];
        let checks = finish_checks(&task(), ran, &states);
        let ids: Vec<&str> = checks.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["service:api::clean-log", "service:db::migrated"]);
        assert_eq!(checks[0].status, TestStatus::Failed);
        assert!(
            checks[0].detail.starts_with("2 lines contain \"ERROR\"; first: ERROR: boom"),
            "{}",
            checks[0].detail
        );

        let dir = tempfile::tempdir().unwrap();
        let (outcomes, logs) = record(&states, checks);
        write_logs(&dir.path().join(FIRST_RUN_LOGS), &logs);
        assert!(!outcomes[0].crashed && outcomes[1].crashed);
        assert_eq!(std::fs::read_to_string(dir.path().join(&outcomes[1].log)).unwrap(), states[1].log);
        assert!(std::fs::read_to_string(dir.path().join("services/checks.log"))
            .unwrap()
            .contains("clean-log"));
        let note = crash_note(&outcomes).unwrap();
        assert_eq!(note, "services crashed during the tests: `api` (exit 3; see services/api.log)");
    }
}
