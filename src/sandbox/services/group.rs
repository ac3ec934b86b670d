//! A started group of services: its private network, its containers and their logs. Each
//! service starts as soon as everything it depends on is ready, so independent services start
//! and warm up side by side.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::models::NetworkCreateRequest;
use bollard::query_parameters::AttachContainerOptionsBuilder;
use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;

use super::super::archive::{self, Entry};
use super::super::docker::policy::{self, WORKSPACE_SEED};
use super::super::docker::{DockerEnv, DockerSandbox, Job, JobOutput};
use super::super::output::{CappedOutput, OutputSink};
use super::super::{EnvSpec, ExecRequest, ExecResult, Sandbox, SandboxError, Verdict};
use super::{start_order, ServiceError, ServiceSpec, ServiceState};

/// Written into a service's workspace after its files, which its command waits for.
const FILES_IN_MARKER: &str = ".rb-files-in";

/// The bridge driver's option that leaves the bridge without an IPv4 address on the host.
const INHIBIT_IPV4: &str = "com.docker.network.bridge.inhibit_ipv4";
/// Lines of a service's log an error shows.
const LOG_TAIL_LINES: usize = 20;
/// Seconds one readiness check may take.
const READY_CHECK_LIMIT_S: u64 = 5;
/// Pause between two readiness checks.
const READY_POLL: Duration = Duration::from_millis(200);

/// One service's container.
struct Started {
    name: String,
    id: String,
    spec: EnvSpec,
    log: Arc<Mutex<CappedOutput>>,
    reader: Option<tokio::task::JoinHandle<()>>,
    ready_after_s: f64,
}

/// A started group of services on its private network. Call [`ServiceGroup::teardown`];
/// if the process dies first, the labels let the next start remove everything.
pub struct ServiceGroup {
    sandbox: DockerSandbox,
    network: String,
    started_at: Instant,
    /// In the order they were created.
    containers: Mutex<Vec<Started>>,
}

/// The last `lines` non-empty lines of `text`.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

impl ServiceGroup {
    /// Creates the network, then starts the services, each once its dependencies are ready,
    /// waiting for each one's readiness command (its own timeout, else `ready_timeout`). The
    /// whole group gets `ready_timeout` from its start, whatever the services' own timeouts
    /// say, so no declared timeout can hold a run longer. On failure everything made so far is
    /// removed and the first failure returned.
    pub async fn start(
        sandbox: &DockerSandbox,
        services: &[ServiceSpec],
        ready_timeout: Duration,
    ) -> Result<Self, ServiceError> {
        let order = start_order(services)?;
        let network = sandbox.next_name("net");
        let request = NetworkCreateRequest {
            name: network.clone(),
            driver: Some("bridge".into()),
            // `internal` drops forwarding out of the bridge, but Docker still gives the bridge an
            // address on the host and the containers a default route to it, so the host itself
            // (every address it has, not only the gateway) stays reachable. With no address on
            // the bridge the host is not on this network at all: the containers reach each
            // other and nothing else.
            internal: Some(true),
            options: Some(HashMap::from([(INHIBIT_IPV4.to_owned(), "true".to_owned())])),
            labels: Some(sandbox.labels()),
            ..Default::default()
        };
        sandbox
            .call("create network", sandbox.docker().create_network(request))
            .await
            .map_err(|source| ServiceError::Sandbox { service: "(network)".into(), source })?;
        let group = Self {
            sandbox: sandbox.clone(),
            network,
            started_at: Instant::now(),
            containers: Mutex::new(Vec::new()),
        };
        let failure = group.start_all(services, &order, ready_timeout).await;
        match failure {
            None => Ok(group),
            Some(e) => {
                if let Err(removal) = group.teardown_inner().await {
                    tracing::warn!("removing a failed service group: {}", crate::error_chain(&removal));
                }
                Err(e)
            }
        }
    }

    /// Starts every service as soon as its dependencies are ready; the first failure stops
    /// further starts and cuts the other readiness waits short.
    async fn start_all(
        &self,
        services: &[ServiceSpec],
        order: &[usize],
        ready_timeout: Duration,
    ) -> Option<ServiceError> {
        let abort = AtomicBool::new(false);
        let mut ready: HashSet<&str> = HashSet::new();
        let mut launched = vec![false; services.len()];
        let mut running = FuturesUnordered::new();
        let mut failure = None;
        loop {
            if failure.is_none() {
                for &i in order {
                    let waiting = services[i].depends_on.iter().any(|d| !ready.contains(d.as_str()));
                    if !launched[i] && !waiting {
                        launched[i] = true;
                        let starting = self.start_one(&services[i], ready_timeout, &abort);
                        running.push(async move { (i, starting.await) });
                    }
                }
            }
            match running.next().await {
                None => break,
                Some((i, Ok(()))) => {
                    ready.insert(services[i].name.as_str());
                }
                Some((_, Err(e))) => {
                    abort.store(true, Ordering::SeqCst);
                    failure.get_or_insert(e);
                }
            }
        }
        failure
    }

    async fn start_one(
        &self,
        service: &ServiceSpec,
        default_timeout: Duration,
        abort: &AtomicBool,
    ) -> Result<(), ServiceError> {
        let wrap = |source| ServiceError::Sandbox { service: service.name.clone(), source };
        let spec = EnvSpec {
            image: service.image.clone(),
            limits: service.limits.clone(),
            workdir: "/workspace".into(),
            env: service.env.clone(),
            user: Default::default(),
        };
        let cmd = self.main_command(service).await.map_err(wrap)?;
        let mut config = self.sandbox.container_config(
            &spec,
            cmd,
            Some((&self.network, vec![service.name.clone()])),
            policy::Workspace::Memory,
        );
        policy::add_data_dirs(&mut config, &service.data_dirs);
        let id =
            self.sandbox.create_container(config, &format!("svc-{}-", service.name)).await.map_err(wrap)?;
        let log = Arc::new(Mutex::new(CappedOutput::new(spec.limits.output_cap_bytes)));
        let index = {
            let mut containers = self.containers.lock().unwrap_or_else(|e| e.into_inner());
            containers.push(Started {
                name: service.name.clone(),
                id: id.clone(),
                spec: spec.clone(),
                log: log.clone(),
                reader: None,
                ready_after_s: 0.0,
            });
            containers.len() - 1
        };
        // Attached before the start, so the log has the service's first line too.
        let options = AttachContainerOptionsBuilder::default().stream(true).stdout(true).stderr(true).build();
        let attached =
            self.sandbox.call("attach", self.sandbox.docker().attach_container(&id, Some(options))).await;
        let mut output = attached.map_err(wrap)?.output;
        let sink = log.clone();
        let reader = tokio::spawn(async move {
            while let Some(Ok(chunk)) = output.next().await {
                sink.lock().unwrap_or_else(|e| e.into_inner()).push(&chunk.into_bytes());
            }
        });
        self.with_started(index, |s| s.reader = Some(reader));
        self.sandbox
            .call("start service", self.sandbox.docker().start_container(&id, None))
            .await
            .map_err(wrap)?;
        // The memory-backed workspace exists from the start on: the service's command waits
        // (see `main_command`) until its files are in, the marker last.
        if let Some(tar) = &service.files_in {
            self.sandbox.upload(&id, &spec.workdir, tar.clone()).await.map_err(wrap)?;
            let marker = Entry { path: FILES_IN_MARKER, mode: 0o644, contents: Some(&[]) };
            let marker =
                archive::tar_entries(&[marker], archive::Owner::Sandbox).expect("archiving in memory");
            self.sandbox.upload(&id, &spec.workdir, marker).await.map_err(wrap)?;
        }
        let env = DockerEnv::new(id.clone(), &spec, true);
        let left = default_timeout.saturating_sub(self.started_at.elapsed());
        let timeout = service.ready_timeout.unwrap_or(default_timeout).min(left);
        self.wait_ready(service, &env, &log, timeout, abort).await?;
        let ready_after_s = self.started_at.elapsed().as_secs_f64();
        tracing::debug!("service `{}` ready after {ready_after_s:.2} s", service.name);
        self.with_started(index, |s| s.ready_after_s = ready_after_s);
        Ok(())
    }

    /// The service's command (the image's own when it gives none) under coreutils' `timeout`,
    /// so a service outlives a killed run by at most the sandbox's environment lifetime. When
    /// the image has a prepared workspace or the service gets files, a shell first copies the
    /// seed into the fresh workspace and waits for the files' marker.
    async fn main_command(&self, service: &ServiceSpec) -> Result<Vec<String>, SandboxError> {
        let mut cmd = service.cmd.clone();
        if cmd.is_empty() {
            let inspect = self.sandbox.docker().inspect_image(&service.image);
            let image = match self.sandbox.raw_call("inspect image", inspect).await? {
                Ok(image) => image,
                Err(_) => return Err(SandboxError::ImageNotFound(service.image.clone())),
            };
            let config = image.config.unwrap_or_default();
            cmd = config.entrypoint.unwrap_or_default();
            cmd.extend(config.cmd.unwrap_or_default());
        }
        let lifetime = self.sandbox.env_lifetime().as_secs().max(1).to_string();
        let mut wrapped = vec!["timeout".to_string(), "-s".into(), "KILL".into(), lifetime];
        let seeded = self.sandbox.has_workspace_seed(&service.image).await?;
        if seeded || service.files_in.is_some() {
            let mut script = String::new();
            if seeded {
                script.push_str(&format!("cp -a {WORKSPACE_SEED}/. /workspace/ || exit 125\n"));
            }
            if service.files_in.is_some() {
                script.push_str(&format!(
                    "while [ ! -e /workspace/{FILES_IN_MARKER} ]; do sleep 0.05; done\nrm -f /workspace/{FILES_IN_MARKER}\n"
                ));
            }
            script.push_str("exec \"$@\"\n");
            wrapped.extend(["sh".to_string(), "-c".into(), script, "sh".into()]);
        }
        wrapped.extend(cmd);
        Ok(wrapped)
    }

    fn with_started(&self, index: usize, update: impl FnOnce(&mut Started)) {
        let mut containers = self.containers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(started) = containers.get_mut(index) {
            update(started);
        }
    }

    /// Runs the readiness command until it exits 0, the service exits, time runs out, or
    /// another service of the group failed.
    async fn wait_ready(
        &self,
        service: &ServiceSpec,
        env: &DockerEnv,
        log: &Mutex<CappedOutput>,
        timeout: Duration,
        abort: &AtomicBool,
    ) -> Result<(), ServiceError> {
        let log_tail = || tail(&log.lock().unwrap_or_else(|e| e.into_inner()).text(), LOG_TAIL_LINES);
        let Some(ready) = &service.ready else { return Ok(()) };
        let started = Instant::now();
        loop {
            if abort.load(Ordering::SeqCst) {
                return Err(ServiceError::NotReady {
                    service: service.name.clone(),
                    seconds: started.elapsed().as_secs_f64(),
                    last: "stopped waiting: another service failed".into(),
                    log_tail: log_tail(),
                });
            }
            // The check ends itself (coreutils' `timeout`): an exec we time out kills its
            // container, which must never happen to a service that is merely slow.
            let mut cmd =
                vec!["timeout".to_string(), "-s".into(), "KILL".into(), READY_CHECK_LIMIT_S.to_string()];
            cmd.extend(ready.iter().cloned());
            let request = ExecRequest {
                cmd,
                timeout: Duration::from_secs(READY_CHECK_LIMIT_S + 10),
                workdir: None,
                env: Vec::new(),
            };
            let last = match self.sandbox.exec(env, &request).await {
                Ok(result) if result.verdict == Verdict::Exit(0) => return Ok(()),
                Ok(result) => format!("{}; {}", result.verdict, tail(&result.stderr, 3)),
                Err(e) => crate::error_chain(&e),
            };
            if let Some(exit) = self.exited(&env.id).await {
                // Give the log reader a moment to take the last lines.
                tokio::time::sleep(Duration::from_millis(100)).await;
                return Err(ServiceError::Exited {
                    service: service.name.clone(),
                    exit: exit.to_string(),
                    log_tail: log_tail(),
                });
            }
            if started.elapsed() >= timeout {
                return Err(ServiceError::NotReady {
                    service: service.name.clone(),
                    seconds: timeout.as_secs_f64(),
                    last,
                    log_tail: log_tail(),
                });
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }

    /// How the container's main process ended, or `None` while it runs (or cannot be read).
    async fn exited(&self, id: &str) -> Option<Verdict> {
        let inspect = self.sandbox.call("inspect", self.sandbox.docker().inspect_container(id, None)).await;
        let state = inspect.ok()?.state?;
        if state.running == Some(true) {
            return None;
        }
        Some(if state.oom_killed == Some(true) {
            Verdict::Oom
        } else {
            Verdict::Exit(state.exit_code.unwrap_or(-1))
        })
    }

    /// The private network's name.
    pub fn network(&self) -> &str {
        &self.network
    }

    /// Container id of a service.
    pub fn container(&self, service: &str) -> Option<String> {
        let containers = self.containers.lock().unwrap_or_else(|e| e.into_inner());
        containers.iter().find(|s| s.name == service).map(|s| s.id.clone())
    }

    /// Runs a command inside a service (a check after the tests). A service that is gone
    /// gives an error result, not an infrastructure failure.
    pub async fn exec(&self, service: &str, request: &ExecRequest) -> Result<ExecResult, SandboxError> {
        let found = {
            let containers = self.containers.lock().unwrap_or_else(|e| e.into_inner());
            containers.iter().find(|s| s.name == service).map(|s| (s.id.clone(), s.spec.clone()))
        };
        let Some((id, spec)) = found else {
            return Ok(ExecResult::error(format!("no service `{service}` in this group")));
        };
        if let Some(exit) = self.exited(&id).await {
            return Ok(ExecResult::error(format!("service `{service}` is not running ({exit})")));
        }
        self.sandbox.exec(&DockerEnv::new(id, &spec, true), request).await
    }

    /// Every service's state and log so far.
    pub async fn states(&self) -> Vec<ServiceState> {
        let started: Vec<(String, String, f64, Arc<Mutex<CappedOutput>>)> = {
            let containers = self.containers.lock().unwrap_or_else(|e| e.into_inner());
            containers
                .iter()
                .map(|s| (s.name.clone(), s.id.clone(), s.ready_after_s, s.log.clone()))
                .collect()
        };
        let mut states = Vec::new();
        for (name, id, ready_after_s, log) in started {
            let exit = self.exited(&id).await;
            let log = log.lock().unwrap_or_else(|e| e.into_inner());
            states.push(ServiceState {
                name,
                running: exit.is_none(),
                exit,
                ready_after_s,
                log: log.text(),
                log_truncated: log.truncated(),
            });
        }
        states
    }

    /// Runs a job (the code under test) on the group's network, reachable as `alias`.
    pub async fn run_job(
        &self,
        spec: &EnvSpec,
        job: &Job,
        sink: Option<OutputSink>,
        alias: &str,
    ) -> Result<JobOutput, SandboxError> {
        self.sandbox.run_job_on(spec, job, sink, Some((&self.network, vec![alias.to_string()]))).await
    }

    /// Creates an environment on the group's network (see [`Sandbox::create`]).
    pub async fn create_env(&self, spec: &EnvSpec, alias: &str) -> Result<DockerEnv, SandboxError> {
        self.sandbox.create_on(spec, Some((&self.network, vec![alias.to_string()]))).await
    }

    /// Removes every service container (last started first) and the network.
    pub async fn teardown(self) -> Result<(), SandboxError> {
        self.teardown_inner().await
    }

    async fn teardown_inner(&self) -> Result<(), SandboxError> {
        let mut first_error = None;
        let containers = std::mem::take(&mut *self.containers.lock().unwrap_or_else(|e| e.into_inner()));
        for started in containers.into_iter().rev() {
            if let Err(e) = self.sandbox.remove_container(&started.id).await {
                first_error.get_or_insert(e);
            }
            if let Some(reader) = started.reader {
                reader.abort();
            }
        }
        let removal = self.sandbox.docker().remove_network(&self.network);
        match self.sandbox.raw_call("remove network", removal).await {
            Ok(Ok(())) => {}
            Ok(Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. })) => {}
            Ok(Err(e)) => {
                first_error
                    .get_or_insert(SandboxError::Backend { op: "remove network", source: Box::new(e) });
            }
            Err(deadline) => {
                first_error.get_or_insert(deadline);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
