//! `tasks harvest`: repair tasks from a repository's own history, as SWE-bench mined pull
//! requests. A candidate is a commit (a merge commit by its first-parent diff) that changes
//! both code and tests: test files go to `test_patch`, the rest to `patch`, the parent is the
//! base. Its tests run in the environment built at the base, twice without the fix and twice
//! with it; FAIL_TO_PASS is what failed (or was missing) without and passed with it,
//! PASS_TO_PASS what passed every time, and a test whose outcome changed between two runs of
//! the same tree is flaky and left out of both. Kept candidates become task folders (task.json
//! with its `harvest` origin, and a bundle holding the base commit); every candidate, kept or
//! dropped with the reason, is a record of the run (`harvest.jsonl`, resumable, and
//! `harvest.json` at the end). Candidates come from git history or from a GitLab project's
//! merged merge requests ([`source`]); each carries its dates and a flag when its fix is still
//! verbatim in a later commit ([`decontaminate`]).

pub mod decontaminate;
pub mod source;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::grade::{StatusMap, TestStatus};
use crate::kernel::fingerprint::{Fingerprint, FingerprintBuilder};
use crate::kernel::store::StoredRecord;
use crate::kernel::Kernel;
use crate::report::{self, Fanout, FinalWriter, Reporter, RunRecords};
use crate::sandbox::{EnvSpec, Sandbox};
use crate::tasks::{RepoLocator, SweTask, TaskEnvironment};

use super::{execute, prepare, safe_name, GradeSettings, RunError, WORKSPACE};
use decontaminate::LaterCommit;
pub use source::HarvestError;
use source::{git, Candidate, HarvestSource, MergeRequestOrigin};

/// What to harvest.
#[derive(Debug, Clone)]
pub struct HarvestPlan {
    pub source: HarvestSource,
    /// Only commits (merge requests: merges) at or after this time (seconds since the epoch).
    pub since: Option<i64>,
    /// At most this many candidates (commits that change code and tests), newest first.
    pub limit: Option<usize>,
    pub out: PathBuf,
    pub settings: GradeSettings,
    pub force: bool,
    /// Services every candidate's tests need (a multi-service repository), given to each
    /// task as its `services` and `service_checks`.
    pub services: TaskServices,
    /// The environment every candidate is examined in, and so the one each kept task carries,
    /// with its label: a `--specs` entry, so the lists are derived where they will be graded
    /// (without it, the era rules choose per commit).
    pub environment: Option<(TaskEnvironment, String)>,
}

/// A task's `services` and `service_checks`, as `task.json` writes them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TaskServices {
    #[serde(default)]
    pub services: Vec<crate::tasks::services::TaskService>,
    #[serde(default)]
    pub service_checks: Vec<crate::tasks::services::ServiceCheck>,
}

impl TaskServices {
    /// Reads `path` (`{"services": [...], "service_checks": [...]}`), checked as a task's are.
    pub fn read(path: &Path) -> Result<Self, HarvestError> {
        let file = |source| HarvestError::File { path: path.to_owned(), source };
        let text = std::fs::read_to_string(path).map_err(file)?;
        let found: Self = serde_json::from_str(&text)
            .map_err(|source| HarvestError::NotServices { path: path.to_owned(), source })?;
        crate::tasks::services::validate(&found.services, &found.service_checks)
            .map_err(|source| HarvestError::Services { path: path.to_owned(), source })?;
        Ok(found)
    }
}

/// One candidate, kept or dropped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HarvestRecord {
    pub commit: String,
    pub instance_id: String,
    pub kept: bool,
    /// Why it was dropped: `no test change`, `no code change`, `FAIL_TO_PASS empty`,
    /// `environment failed`, `tests did not run`, `flaky`.
    pub reason: Option<String>,
    pub detail: Option<String>,
    #[serde(rename = "FAIL_TO_PASS")]
    pub fail_to_pass: Vec<String>,
    #[serde(rename = "PASS_TO_PASS")]
    pub pass_to_pass: Vec<String>,
    /// Tests whose outcome changed between two runs of the same tree.
    pub flaky: Vec<String>,
    /// Commit time (seconds since the epoch), for keeping only tasks newer than a model.
    pub committed_unix: i64,
    /// The merge request it comes from (GitLab), with its merge date and closed issues.
    #[serde(default)]
    pub merge_request: Option<MergeRequestOrigin>,
    /// A later commit that still holds the fix verbatim: a model trained on it saw the answer.
    #[serde(default)]
    pub fix_text_at_later_commit: Option<LaterCommit>,
    pub seconds: f64,
    pub fingerprint: Option<Fingerprint>,
}

impl HarvestRecord {
    fn new(commit: &str, instance_id: String, committed_unix: i64) -> Self {
        Self {
            commit: commit.to_owned(),
            instance_id,
            kept: false,
            reason: None,
            detail: None,
            fail_to_pass: Vec::new(),
            pass_to_pass: Vec::new(),
            flaky: Vec::new(),
            committed_unix,
            merge_request: None,
            fix_text_at_later_commit: None,
            seconds: 0.0,
            fingerprint: None,
        }
    }
}

impl StoredRecord for HarvestRecord {
    fn key(&self) -> String {
        self.commit.clone()
    }
    fn fingerprint(&self) -> Option<Fingerprint> {
        self.fingerprint.clone()
    }
    fn is_infrastructure_failure(&self) -> bool {
        matches!(self.reason.as_deref(), Some("environment failed" | "tests did not run"))
    }
}

/// Harvests `plan.repo` into `plan.out`.
pub async fn harvest<S: Sandbox + 'static>(
    sandbox: Arc<S>,
    plan: &HarvestPlan,
    reporter: &mut dyn Reporter<HarvestRecord>,
) -> Result<Vec<HarvestRecord>, RunError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| RunError::Report(report::ReportError::Write { path, source })
    };
    let work = plan.out.join(".harvest");
    // A fresh mirror each run, so commits made since the last run are there.
    let _ = std::fs::remove_dir_all(work.join("mirrors"));
    std::fs::create_dir_all(&work).map_err(io(&work))?;
    let source = plan.source.clone();
    let opened = tokio::task::spawn_blocking({
        let work = work.clone();
        move || source::open(&source, &work)
    })
    .await
    .map_err(HarvestError::from)
    .and_then(|opened| opened)
    .map_err(RunError::Harvest)?;
    let name = safe_name(&opened.name);
    let repo_id = format!("local/{name}");
    let locator = Arc::new(RepoLocator::new(None, Some(opened.repo.clone()), work.clone()));
    let probe = task_for(&repo_id, &format!("{name}-HEAD"), &Candidate::default());
    let mirror = locator.locate(&probe).map_err(|e| RunError::Harvest(e.into()))?;
    let found = tokio::task::spawn_blocking({
        let (mirror, since, limit) = (mirror.clone(), plan.since, plan.limit);
        move || opened.candidates(&mirror, since, limit)
    })
    .await
    .map_err(HarvestError::from)
    .and_then(|found| found)
    .map_err(RunError::Harvest)?;

    let out = plan.out.clone();
    let mut harvest_json = FinalWriter::new(|run: &RunRecords<HarvestRecord>| {
        let records: Vec<&HarvestRecord> = run.records.values().collect();
        report::write_json_atomic(&out.join("harvest.json"), &records)
    });
    let mut subscribers = Fanout::new(vec![&mut harvest_json, reporter]);
    let mut kernel =
        Kernel::open("tasks harvest", &plan.out.join("harvest.jsonl"), plan.force, &mut subscribers)
            .map_err(RunError::Report)?;
    let settings_part = (plan.settings.timeout.as_secs_f64(), &plan.settings.limits);
    let todo = kernel
        .plan(found, |c| {
            let mut fingerprint = FingerprintBuilder::new()
                .id("commit", &c.commit)
                .value("settings", &settings_part)
                .value("services", &plan.services);
            // Only when given, so harvests without one keep their fingerprints.
            if let Some((environment, _)) = &plan.environment {
                fingerprint = fingerprint.value("environment", environment);
            }
            (c.commit.clone(), fingerprint.finish())
        })
        .map_err(RunError::Report)?;
    let examiner = Arc::new(Examiner {
        locator,
        settings: plan.settings.clone(),
        out: plan.out.clone(),
        mirror,
        repo_id,
        name,
        services: plan.services.clone(),
        environment: plan.environment.clone(),
    });
    kernel
        .run_concurrently(
            todo,
            plan.settings.workers,
            |c| c.commit.clone(),
            |candidate, fingerprint| {
                let (sandbox, examiner) = (sandbox.clone(), examiner.clone());
                async move {
                    let started = Instant::now();
                    let mut record = examine(&*sandbox, &examiner, &candidate).await;
                    record.seconds = started.elapsed().as_secs_f64();
                    record.fingerprint = Some(fingerprint);
                    record
                }
            },
            |commit, why| HarvestRecord {
                reason: Some("tests did not run".into()),
                detail: Some(why),
                ..HarvestRecord::new(commit, String::new(), 0)
            },
            |r| (r.reason.clone().unwrap_or_else(|| "kept".into()), r.kept),
        )
        .await
        .map_err(RunError::Report)?;
    let run = kernel
        .finish_with(|records| {
            let mut counts = BTreeMap::new();
            for r in records.values() {
                *counts.entry(r.reason.clone().unwrap_or_else(|| "kept".into())).or_default() += 1;
            }
            let kept = counts.get("kept").copied().unwrap_or(0);
            let dropped: Vec<String> = counts
                .iter()
                .filter(|(r, _)| r.as_str() != "kept")
                .map(|(r, n)| format!("{n} {r}"))
                .collect();
            let mut words = format!("{kept} of {} commit(s) became tasks", records.len());
            if !dropped.is_empty() {
                words.push_str(&format!("; left out: {}", dropped.join(", ")));
            }
            crate::report::Tally { counts, words }
        })
        .map_err(RunError::Report)?;
    Ok(run.records.into_values().collect())
}

fn task_for(repo_id: &str, instance_id: &str, c: &Candidate) -> SweTask {
    let text = serde_json::json!({
        "repo": repo_id,
        "instance_id": instance_id,
        "base_commit": c.parent,
        "test_patch": "",
        "problem_statement": c.problem_statement.as_deref().unwrap_or(&c.message),
        "hints_text": c.hints_text,
        "FAIL_TO_PASS": [],
    });
    serde_json::from_value(text).expect("a well-formed task")
}

/// What every candidate is examined with.
struct Examiner {
    locator: Arc<RepoLocator>,
    settings: GradeSettings,
    out: PathBuf,
    mirror: PathBuf,
    repo_id: String,
    name: String,
    services: TaskServices,
    environment: Option<(TaskEnvironment, String)>,
}

async fn examine<S: Sandbox>(sandbox: &S, examiner: &Examiner, c: &Candidate) -> HarvestRecord {
    let Examiner { locator, settings, out, mirror, repo_id, name, services, environment } = examiner;
    let short = &c.commit[..c.commit.len().min(12)];
    let mut record = HarvestRecord {
        merge_request: c.merge_request.clone(),
        ..HarvestRecord::new(&c.commit, format!("{name}-{short}"), c.committed_unix)
    };
    let drop = |mut record: HarvestRecord, reason: &str, detail: Option<String>| {
        record.reason = Some(reason.to_owned());
        record.detail = detail;
        record
    };
    if c.test_files.is_empty() {
        return drop(record, "no test change", None);
    }
    if c.code_files.is_empty() {
        return drop(record, "no code change", None);
    }
    let diff = |files: &[String]| {
        let mut args = vec![
            "diff",
            "--no-color",
            "--full-index",
            "--binary",
            c.parent.as_str(),
            c.commit.as_str(),
            "--",
        ];
        args.extend(files.iter().map(String::as_str));
        git(mirror, &args)
    };
    let (patch, test_patch) = match (diff(&c.code_files), diff(&c.test_files)) {
        (Ok(p), Ok(t)) => (p, t),
        (Err(e), _) | (_, Err(e)) => return drop(record, "tests did not run", Some(crate::error_chain(&e))),
    };
    let mut task = task_for(repo_id, &record.instance_id, c);
    task.patch = patch.clone();
    task.test_patch = test_patch;
    task.services = services.services.clone();
    task.service_checks = services.service_checks.clone();
    if let Some((environment, label)) = environment {
        task.environment = Some(environment.clone());
        task.environment_spec = Some(label.clone());
    }
    let log_dir = out.join(".harvest").join("logs").join(&record.instance_id);
    // The services' images are built into `running`; the task written keeps their declarations.
    let (super::EnvironmentImage { image, runner, .. }, running) =
        match super::services::environment_and_services(sandbox, locator, settings, &task, &log_dir).await {
            Ok(found) => found,
            Err((_, why)) => return drop(record, "environment failed", Some(why)),
        };
    let spec = EnvSpec {
        image,
        limits: settings.limits.clone(),
        workdir: WORKSPACE.into(),
        env: vec![("PYTHONDONTWRITEBYTECODE".into(), "1".into())],
        user: Default::default(),
    };
    let test_files: Vec<String> = prepare::task_test_files(&task)
        .into_iter()
        .filter(|f| !runner.is_python() || f.ends_with(".py"))
        .collect();
    let plan = execute::TestPlan {
        spec: &spec,
        task: &running,
        test_files: &test_files,
        timeout: settings.timeout,
        runner,
        ci_jobs: &[],
        log_dir: &log_dir,
    };
    // Two runs of each tree: without the fix (base + test_patch), then with it.
    let runs_started = Instant::now();
    let mut maps: Vec<StatusMap> = Vec::new();
    for with_fix in [false, false, true, true] {
        let prepared = {
            let (locator, task, patch) = (locator.clone(), task.clone(), patch.clone());
            tokio::task::spawn_blocking(move || {
                prepare::prepare(&locator, &task, with_fix.then_some(patch.as_str()), &Default::default())
            })
            .await
        };
        let tar = match prepared {
            Ok(Ok(prepared)) => prepared.tar,
            Ok(Err(prepare::PrepareError::Apply { why, .. })) => {
                return drop(record, "tests did not run", Some(why))
            }
            Ok(Err(prepare::PrepareError::Task(e))) => {
                return drop(record, "tests did not run", Some(crate::error_chain(&e)))
            }
            Err(e) => return drop(record, "tests did not run", Some(e.to_string())),
        };
        match plan.run(sandbox, &tar).await {
            Ok(run) => match run.results {
                Ok((map, _)) => maps.push(map),
                // No trustworthy statuses without the fix (a missing module, say) means every
                // test counts as not passing there.
                Err(_) if !with_fix => maps.push(StatusMap::new()),
                Err(e) => return drop(record, "tests did not run", Some(e.to_string())),
            },
            Err(e) => return drop(record, "tests did not run", Some(crate::error_chain(&e))),
        }
    }
    if maps[2].is_empty() {
        return drop(
            record,
            "tests did not run",
            Some("no test ran with the fix (a collection error?)".into()),
        );
    }
    let (fail_to_pass, pass_to_pass, flaky) = derive_lists(&maps[0], &maps[1], &maps[2], &maps[3]);
    record.fail_to_pass = fail_to_pass;
    record.pass_to_pass = pass_to_pass;
    record.flaky = flaky;
    if record.fail_to_pass.is_empty() {
        let reason = if record.flaky.is_empty() { "FAIL_TO_PASS empty" } else { "flaky" };
        return drop(record, reason, None);
    }
    task.fail_to_pass = record.fail_to_pass.clone();
    task.pass_to_pass = record.pass_to_pass.clone();
    record.fix_text_at_later_commit = decontaminate::fix_text_at_later_commit(mirror, &patch, &c.commit);
    let runs = TestRuns {
        runner: runner.as_str(),
        test_files: &test_files,
        seconds: runs_started.elapsed().as_secs_f64(),
    };
    match write_task(out, mirror, &task, c, &record, &runs) {
        Ok(()) => record.kept = true,
        Err(e) => {
            let why = format!("writing the task: {}", crate::error_chain(&e));
            return drop(record, "tests did not run", Some(why));
        }
    }
    record
}

/// FAIL_TO_PASS, PASS_TO_PASS and flaky tests from two runs without the fix and two with it.
pub fn derive_lists(
    before_1: &StatusMap,
    before_2: &StatusMap,
    after_1: &StatusMap,
    after_2: &StatusMap,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    let passed = |map: &StatusMap, test: &str| map.get(test) == Some(&TestStatus::Passed);
    let mut tests: Vec<&String> =
        after_1.keys().chain(after_2.keys()).chain(before_1.keys()).chain(before_2.keys()).collect();
    tests.sort();
    tests.dedup();
    let (mut f2p, mut p2p, mut flaky) = (Vec::new(), Vec::new(), Vec::new());
    for test in tests {
        let before = (passed(before_1, test), passed(before_2, test));
        let after = (passed(after_1, test), passed(after_2, test));
        if before.0 != before.1 || after.0 != after.1 {
            flaky.push(test.clone());
        } else if after.0 && !before.0 {
            f2p.push(test.clone());
        } else if after.0 && before.0 {
            p2p.push(test.clone());
        }
    }
    (f2p, p2p, flaky)
}

/// How a kept candidate's lists were derived, for its `harvest` origin.
struct TestRuns<'a> {
    runner: &'static str,
    test_files: &'a [String],
    seconds: f64,
}

/// `OUT/ID/task.json` with its origin, and `OUT/ID/repo.bundle` holding the base commit.
fn write_task(
    out: &Path,
    mirror: &Path,
    task: &SweTask,
    c: &Candidate,
    record: &HarvestRecord,
    runs: &TestRuns,
) -> Result<(), HarvestError> {
    let dir = out.join(&task.instance_id);
    std::fs::create_dir_all(&dir).map_err(|source| HarvestError::File { path: dir.clone(), source })?;
    let base_ref = format!("refs/heads/harvest/{}", task.instance_id);
    git(mirror, &["update-ref", &base_ref, &c.parent])?;
    // Absolute: git runs in the mirror, and `out` may be relative to where we were started.
    let bundle = std::path::absolute(dir.join(crate::tasks::BUNDLE_FILE))
        .map_err(|source| HarvestError::File { path: dir.clone(), source })?;
    git(mirror, &["bundle", "create", "--quiet", &bundle.display().to_string(), &base_ref])?;
    let mut value = serde_json::to_value(task).expect("a task serializes");
    value["environment_setup_commit"] = c.parent.clone().into();
    let created = c.merge_request.as_ref().and_then(|mr| mr.merged_unix).unwrap_or(c.committed_unix);
    value["created_at"] = created.to_string().into();
    value["harvest"] = serde_json::json!({
        "source": if c.merge_request.is_some() { "gitlab" } else { "git" },
        "source_commit": c.commit,
        "committed_unix": c.committed_unix,
        "merge_request": c.merge_request,
        "fix_text_at_later_commit": record.fix_text_at_later_commit,
        "code_files": c.code_files,
        "test_files": c.test_files,
        "runner": runs.runner,
        "tests_run": runs.test_files,
        "runs": "twice without the fix (base + test_patch), twice with it, each in a fresh container",
        "runs_seconds": (runs.seconds * 10.0).round() / 10.0,
        "flaky": record.flaky,
        "environment_spec": task.environment_spec,
    });
    let text = serde_json::to_string_pretty(&value).expect("JSON values serialize") + "\n";
    let path = dir.join(crate::tasks::TASK_FILE);
    std::fs::write(&path, text).map_err(|source| HarvestError::File { path, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, TestStatus)]) -> StatusMap {
        entries.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn lists_follow_swe_bench_and_flaky_tests_are_left_out() {
        use TestStatus::*;
        let before =
            map(&[("t::old", Passed), ("t::new", Failed), ("t::coin", Passed), ("t::broken", Failed)]);
        let before_again =
            map(&[("t::old", Passed), ("t::new", Failed), ("t::coin", Failed), ("t::broken", Failed)]);
        let after = map(&[
            ("t::old", Passed),
            ("t::new", Passed),
            ("t::coin", Passed),
            ("t::added", Passed),
            ("t::broken", Failed),
        ]);
        let (f2p, p2p, flaky) = derive_lists(&before, &before_again, &after, &after);
        assert_eq!(f2p, ["t::added", "t::new"], "missing before counts as not passing");
        assert_eq!(p2p, ["t::old"]);
        assert_eq!(flaky, ["t::coin"]);
    }
}
