//! Running a run's items elsewhere: on a Ray cluster, one job per unit of items. It knows no
//! domain: the caller gives the package, the units and how a worker is started for a list of
//! items; each record comes back as a frame ([`frame`]) in the job's log, and the caller
//! checks and stores it. A unit whose node died is submitted again for its items that have no
//! record yet; a worker that failed on its own is not. A Kubernetes executor would be the same
//! loop with a pod per unit and the pod's log as the channel.

mod check;
pub mod frame;
pub mod package;
pub mod ray;
mod run;

pub use check::{check, glibc_version, ImageCheck, NodeCheck};
pub use run::{model_flags, run_id, units, worker_entrypoint, Admission, RayRun, Unit, WORKER_EXE};

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use self::package::{Package, PackageError};
use self::ray::{JobInfo, JobRequest, JobStatus, RayClient, RayError};

/// The Ray resource a worker node offers per unit it may run at once.
pub const SLOT_RESOURCE: &str = "repairbench";
/// Metadata keys of our jobs.
const META_RUN: &str = "repairbench_run";
const META_UNIT: &str = "repairbench_unit";
const META_ATTEMPT: &str = "repairbench_attempt";
/// Submission ids tried for one unit before giving up on finding a free one.
const ID_TRIES: u32 = 20;

/// Where a run's items run: here, or on a Ray cluster whose head's jobs API is at the URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecutorSpec {
    Local,
    Ray(String),
}

impl ExecutorSpec {
    /// `local` or `ray:http://HEAD:8265`; `None` for anything else.
    pub fn from_arg(text: &str) -> Option<Self> {
        match text {
            "local" => Some(Self::Local),
            _ => match text.strip_prefix("ray:") {
                Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
                    Some(Self::Ray(url.to_owned()))
                }
                _ => None,
            },
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error(transparent)]
    Ray(#[from] RayError),
    #[error(transparent)]
    Package(#[from] PackageError),
    #[error("the Ray cluster has no alive node offering `{SLOT_RESOURCE}` slots: start each worker with `ray start --address=HEAD:6379 --resources='{{\"{SLOT_RESOURCE}\": SLOTS}}'`")]
    NoSlots,
    #[error("storing a record that came back")]
    Store(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Settings of the Ray executor.
#[derive(Debug, Clone)]
pub struct RaySettings {
    pub url: String,
    /// Jobs in flight at most (`None`: the cluster's total slots).
    pub max_inflight: Option<usize>,
    /// Submissions again of a unit whose node was lost.
    pub retries: u32,
    pub poll: Duration,
}

/// One job as it went, for the manifest.
#[derive(Debug, Clone, Serialize)]
pub struct AttemptRecord {
    pub submission_id: String,
    pub unit: String,
    pub attempt: u32,
    pub items: usize,
    pub node_id: Option<String>,
    pub status: String,
    pub detail: Option<String>,
    /// From submission to the coordinator seeing the job end, and Ray's own start-to-end.
    pub elapsed_s: f64,
    pub ray_s: Option<f64>,
}

/// An item that got no record: why, in a word and in a sentence.
#[derive(Debug, Clone)]
pub struct Unfinished {
    pub key: String,
    /// `executor_lost` (its node died every attempt) or `executor_worker_error`.
    pub reason: &'static str,
    pub detail: String,
}

/// What a dispatch did.
#[derive(Debug, Default, Serialize)]
pub struct DispatchReport {
    pub package: String,
    pub package_uploaded: bool,
    pub jobs_submitted: usize,
    /// Records read from jobs an earlier coordinator of this run submitted.
    pub collected_from_earlier: usize,
    pub attempts: Vec<AttemptRecord>,
    #[serde(skip)]
    pub unfinished: Vec<Unfinished>,
}

/// What the caller does with a job's frames: store one (returning the key it finished, or
/// `None` for a frame it does not want), and start a worker for a list of items.
pub trait UnitWork {
    fn entrypoint(&self, items: &[String]) -> String;
    fn store(&mut self, frame: serde_json::Value) -> Result<Option<String>, ExecutorError>;
}

/// The jobs in flight, shared with whoever must stop them on a signal. Once stopping, no job
/// is submitted any more.
#[derive(Clone, Default)]
pub struct InFlight(Arc<Mutex<(bool, BTreeSet<String>)>>);

impl InFlight {
    /// Registers `id` before it is submitted; `false` once stopping (submit nothing).
    fn begin(&self, id: &str) -> bool {
        let mut state = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if state.0 {
            return false;
        }
        state.1.insert(id.to_owned());
        true
    }
    fn end(&self, id: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).1.remove(id);
    }
    pub fn is_stopping(&self) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).0
    }
    /// Submits nothing more, asks Ray to stop every job in flight, and waits (at most
    /// `limit`) until each stopped.
    pub fn stop_all(&self, client: &RayClient, limit: Duration) {
        let ids: Vec<String> = {
            let mut state = self.0.lock().unwrap_or_else(|e| e.into_inner());
            state.0 = true;
            state.1.iter().cloned().collect()
        };
        for id in &ids {
            if let Err(e) = client.stop(id) {
                tracing::warn!("stopping Ray job {id}: {}", crate::error_chain(&e));
            }
        }
        let started = Instant::now();
        for id in &ids {
            while started.elapsed() < limit {
                match client.job(id) {
                    Ok(info) if !info.status.is_terminal() => std::thread::sleep(Duration::from_millis(200)),
                    _ => break,
                }
            }
        }
    }
}

struct Job {
    submitted: Instant,
    unit: String,
    attempt: u32,
    items: Vec<String>,
    done: BTreeSet<String>,
    reader: frame::FrameReader,
    /// The node its driver runs on, as last seen (a finished job's answer may lack it).
    node_id: Option<String>,
}

/// Why a finished job's unfinished items are not retried: `None` when its node was lost.
fn worker_failure(info: &JobInfo, log: &str) -> Option<String> {
    let lost = info.error_type.as_deref() == Some("JOB_SUPERVISOR_ACTOR_DIED")
        || (info.status == JobStatus::Failed && info.driver_exit_code.is_none())
        || info.status == JobStatus::Stopped;
    if lost {
        return None;
    }
    let tail: Vec<&str> = log.lines().filter(|l| frame::decode(l).is_none()).collect();
    let tail = tail[tail.len().saturating_sub(5)..].join("\n");
    Some(match info.driver_exit_code {
        Some(code) if code != 0 => format!("the worker exited with {code}: {tail}"),
        _ => format!("the worker ended without a record for this item: {tail}"),
    })
}

/// The Ray executor of one run (`run`: the run's id, shown in each job's metadata).
pub struct RayExecutor {
    pub client: RayClient,
    pub settings: RaySettings,
    pub run: String,
    pub in_flight: InFlight,
}

impl RayExecutor {
    pub fn new(
        settings: RaySettings,
        token: Option<crate::http::Secret>,
        run: String,
    ) -> Result<Self, ExecutorError> {
        let client = RayClient::new(&settings.url, token)?;
        Ok(Self { client, settings, run, in_flight: InFlight::default() })
    }

    /// Uploads the package unless the cluster has it; returns its `gcs://` URI and whether it
    /// was uploaded.
    fn ensure_package(&self, package: &Package) -> Result<(String, bool), ExecutorError> {
        let name = package.name();
        if self.client.has_package(&name)? {
            return Ok((format!("gcs://{name}"), false));
        }
        let zipped = package.zip()?;
        tracing::info!("uploading package {name} ({} MiB)", zipped.len() >> 20);
        self.client.upload_package(&name, &zipped)?;
        Ok((format!("gcs://{name}"), true))
    }

    /// Reads back what jobs an earlier coordinator of this run left (finished or not), stops
    /// those still going, and returns the next attempt number per unit.
    fn collect_earlier(
        &self,
        fresh: bool,
        work: &mut dyn UnitWork,
        report: &mut DispatchReport,
        stored: &mut BTreeSet<String>,
    ) -> Result<BTreeMap<String, u32>, ExecutorError> {
        let mut next_attempt = BTreeMap::new();
        let prefix = format!("rb-{}-", self.run);
        // By metadata, or by the submission id when Ray lost the metadata.
        let earlier: Vec<JobInfo> = self
            .client
            .jobs()?
            .into_iter()
            .filter(|j| {
                j.metadata.as_ref().and_then(|m| m.get(META_RUN)) == Some(&self.run)
                    || j.submission_id.as_deref().is_some_and(|id| id.starts_with(&prefix))
            })
            .collect();
        for job in earlier {
            let Some(id) = &job.submission_id else { continue };
            let (unit, attempt) = match id.strip_prefix(&prefix).and_then(|rest| rest.rsplit_once('-')) {
                Some((unit, attempt)) => (unit.to_owned(), attempt.parse::<u32>().unwrap_or(0)),
                None => continue,
            };
            let next = next_attempt.entry(unit).or_insert(1);
            *next = (*next).max(attempt + 1);
            if !job.status.is_terminal() {
                let _ = self.client.stop(id);
            }
            if fresh {
                continue;
            }
            let Ok(log) = self.client.logs(id) else { continue };
            for frame in frame::FrameReader::new().read(&log) {
                if let Some(key) = work.store(frame)? {
                    report.collected_from_earlier += 1;
                    stored.insert(key);
                }
            }
        }
        Ok(next_attempt)
    }

    /// The `repairbench` slots of the cluster's alive nodes (none: an error). Asking also
    /// proves, before a run spends time on anything else, that the head answers and takes
    /// the token.
    pub fn total_slots(&self) -> Result<usize, ExecutorError> {
        let slots: f64 = self.client.nodes()?.iter().filter(|n| n.alive).map(|n| n.slots).sum();
        if slots < 1.0 {
            return Err(ExecutorError::NoSlots);
        }
        Ok(slots as usize)
    }

    /// Runs `units` on the cluster with `package` as every job's working folder; `work` stores
    /// each record as it comes. Items left without a record are in the report's `unfinished`.
    /// Records that jobs of an earlier coordinator of this run left are stored first, unless
    /// `fresh` (everything computed again).
    pub fn dispatch(
        &self,
        fresh: bool,
        package: &Package,
        units: Vec<Unit>,
        work: &mut dyn UnitWork,
    ) -> Result<DispatchReport, ExecutorError> {
        let mut report = DispatchReport { package: package.name(), ..Default::default() };
        if units.is_empty() {
            return Ok(report);
        }
        let max_inflight = match self.settings.max_inflight {
            Some(n) => n.max(1),
            None => self.total_slots()?,
        };
        // Items whose record came back; a unit is submitted for the rest of its items only.
        let mut stored_keys = BTreeSet::new();
        let mut next_attempt = self.collect_earlier(fresh, work, &mut report, &mut stored_keys)?;
        let mut queue: VecDeque<(String, Vec<String>, u32)> = VecDeque::new();
        let left = |items: &[String], done: &BTreeSet<String>| -> Vec<String> {
            items.iter().filter(|k| !done.contains(*k)).cloned().collect()
        };
        if report.collected_from_earlier > 0 {
            tracing::info!(
                "collected {} records from jobs an earlier coordinator of this run submitted",
                report.collected_from_earlier
            );
        }
        for unit in units {
            let attempt = next_attempt.remove(&unit.id).unwrap_or(1);
            queue.push_back((unit.id, unit.items, attempt));
        }
        if queue.is_empty() {
            return Ok(report);
        }
        let (uri, uploaded) = self.ensure_package(package)?;
        report.package_uploaded = uploaded;
        let mut jobs: BTreeMap<String, Job> = BTreeMap::new();
        loop {
            while jobs.len() < max_inflight {
                let Some((unit, items, mut attempt)) = queue.pop_front() else { break };
                let items = left(&items, &stored_keys);
                if items.is_empty() {
                    continue;
                }
                let submission_id = loop {
                    let submission_id = format!("rb-{}-{}-{attempt}", self.run, unit);
                    let request = JobRequest {
                        entrypoint: work.entrypoint(&items),
                        submission_id: submission_id.clone(),
                        runtime_env: serde_json::json!({ "working_dir": uri }),
                        metadata: BTreeMap::from([
                            (META_RUN.into(), self.run.clone()),
                            (META_UNIT.into(), unit.clone()),
                            (META_ATTEMPT.into(), attempt.to_string()),
                        ]),
                        entrypoint_resources: BTreeMap::from([(SLOT_RESOURCE.into(), 1.0)]),
                    };
                    if !self.in_flight.begin(&submission_id) {
                        return Ok(report);
                    }
                    match self.client.submit(&request) {
                        Ok(()) => break submission_id,
                        // An id Ray still holds from before (a job it lost track of): the next.
                        Err(RayError::Status { body, .. })
                            if body.contains("already exists") && attempt < ID_TRIES =>
                        {
                            self.in_flight.end(&submission_id);
                            attempt += 1;
                        }
                        Err(e) => return Err(e.into()),
                    }
                };
                report.jobs_submitted += 1;
                tracing::info!("submitted {submission_id} ({} items)", items.len());
                jobs.insert(
                    submission_id,
                    Job {
                        submitted: Instant::now(),
                        unit,
                        attempt,
                        items,
                        done: BTreeSet::new(),
                        reader: frame::FrameReader::new(),
                        node_id: None,
                    },
                );
            }
            if jobs.is_empty() || self.in_flight.is_stopping() {
                break;
            }
            std::thread::sleep(self.settings.poll);
            let ids: Vec<String> = jobs.keys().cloned().collect();
            for id in ids {
                let info = self.client.job(&id)?;
                // After its node died a job's log can no longer be read: what was read stays.
                let log = self.client.logs(&id).unwrap_or_default();
                let job = jobs.get_mut(&id).expect("listed above");
                if info.driver_node_id.is_some() {
                    job.node_id.clone_from(&info.driver_node_id);
                }
                for frame in job.reader.read(&log) {
                    if let Some(key) = work.store(frame)? {
                        job.done.insert(key.clone());
                        stored_keys.insert(key);
                    }
                }
                if !info.status.is_terminal() {
                    continue;
                }
                let job = jobs.remove(&id).expect("listed above");
                self.in_flight.end(&id);
                let remaining = left(&job.items, &job.done);
                let failure = (!remaining.is_empty()).then(|| worker_failure(&info, &log)).flatten();
                report.attempts.push(AttemptRecord {
                    submission_id: id.clone(),
                    unit: job.unit.clone(),
                    attempt: job.attempt,
                    items: job.items.len(),
                    node_id: job.node_id.clone(),
                    status: format!("{:?}", info.status).to_lowercase(),
                    detail: info.message.clone().filter(|_| !remaining.is_empty()),
                    elapsed_s: job.submitted.elapsed().as_secs_f64(),
                    ray_s: info
                        .start_time
                        .zip(info.end_time)
                        .map(|(s, e)| e.saturating_sub(s) as f64 / 1000.0),
                });
                // Finished jobs stay on the cluster: deleting one while Ray's supervisor is still
                // ending writes it back, failed and without its metadata.
                if remaining.is_empty() {
                    continue;
                }
                match failure {
                    Some(why) => {
                        tracing::warn!("{id}: {why}");
                        report.unfinished.extend(remaining.into_iter().map(|key| Unfinished {
                            key,
                            reason: "executor_worker_error",
                            detail: why.clone(),
                        }));
                    }
                    None if job.attempt <= self.settings.retries => {
                        tracing::warn!(
                            "{id}: its node was lost ({}); submitting its {} unfinished items again",
                            info.message.as_deref().unwrap_or("no message"),
                            remaining.len()
                        );
                        queue.push_back((job.unit, remaining, job.attempt + 1));
                    }
                    None => {
                        let why = format!(
                            "its node was lost on each of {} attempts (last: {})",
                            job.attempt,
                            info.message.as_deref().unwrap_or("no message")
                        );
                        report.unfinished.extend(remaining.into_iter().map(|key| Unfinished {
                            key,
                            reason: "executor_lost",
                            detail: why.clone(),
                        }));
                    }
                }
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(status: JobStatus, error_type: Option<&str>, exit: Option<i64>) -> JobInfo {
        JobInfo {
            submission_id: Some("j".into()),
            status,
            message: None,
            error_type: error_type.map(str::to_owned),
            driver_exit_code: exit,
            driver_node_id: None,
            start_time: None,
            end_time: None,
            metadata: None,
        }
    }

    #[test]
    fn a_lost_node_is_retried_and_a_failing_worker_is_not() {
        let lost = job(JobStatus::Failed, Some("JOB_SUPERVISOR_ACTOR_DIED"), None);
        assert_eq!(worker_failure(&lost, ""), None);
        assert_eq!(worker_failure(&job(JobStatus::Failed, None, None), ""), None, "no exit code: lost");
        assert_eq!(worker_failure(&job(JobStatus::Stopped, None, None), ""), None);
        let log = format!(
            "Running entrypoint\nerror: no Docker engine\n{}\n",
            frame::encode(&serde_json::json!({}))
        );
        let failed = worker_failure(&job(JobStatus::Failed, None, Some(1)), &log).unwrap();
        assert!(
            failed.starts_with("the worker exited with 1") && failed.contains("no Docker engine"),
            "{failed}"
        );
        assert!(!failed.contains("repairbench-frame"), "frames are not shown: {failed}");
        let silent = worker_failure(&job(JobStatus::Succeeded, None, Some(0)), "").unwrap();
        assert!(silent.contains("without a record"), "{silent}");
    }

    #[test]
    fn executor_arguments_and_glibc_versions() {
        assert_eq!(ExecutorSpec::from_arg("local"), Some(ExecutorSpec::Local));
        assert_eq!(
            ExecutorSpec::from_arg("ray:http://h:8265"),
            Some(ExecutorSpec::Ray("http://h:8265".into()))
        );
        assert_eq!(ExecutorSpec::from_arg("ray:h:8265"), None);
        assert_eq!(ExecutorSpec::from_arg("k8s"), None);
        assert_eq!(glibc_version("ldd (Debian GLIBC 2.36-9+deb12u14) 2.36"), Some((2, 36)));
        assert_eq!(glibc_version("docker 20.10; git version 2.47.3; ldd (GNU libc) 2.39"), Some((2, 39)));
        assert_eq!(glibc_version("docker 20.10; git version 2.47.3"), None);
    }
}
