//! Several containers on one private network: an internal bridge (no egress), each service
//! reachable by its name, started in dependency order, each waited for with a readiness
//! command, and all torn down together. The base for multi-service tasks.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use bollard::models::NetworkCreateRequest;

use super::docker::{DockerEnv, DockerSandbox, Job, JobOutput};
use super::output::OutputSink;
use super::{EnvSpec, ExecRequest, Limits, Sandbox, SandboxError, Verdict};

/// One service of a group.
#[derive(Debug, Clone)]
pub struct ServiceSpec {
    /// Name other containers reach it by (a network alias).
    pub name: String,
    pub image: String,
    /// Its main process.
    pub cmd: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Services that must be ready before this one starts.
    pub depends_on: Vec<String>,
    /// Command run inside the service until it exits 0; `None`: ready once started.
    pub ready: Option<Vec<String>>,
    pub limits: Limits,
}

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("service `{0}` is declared twice")]
    Duplicate(String),
    #[error("service `{service}` depends on `{missing}`, which is not declared")]
    UnknownDependency { service: String, missing: String },
    #[error("services depend on each other in a cycle: {0}")]
    Cycle(String),
    #[error("service `{service}` was not ready within {seconds:.0} s (last check: {last})")]
    NotReady { service: String, seconds: f64, last: String },
    #[error("service `{service}`")]
    Sandbox {
        service: String,
        #[source]
        source: SandboxError,
    },
}

/// The order to start services in: every service after its dependencies, otherwise in the
/// order given.
pub fn start_order(services: &[ServiceSpec]) -> Result<Vec<usize>, ServiceError> {
    let mut index = HashMap::new();
    for (i, s) in services.iter().enumerate() {
        if index.insert(s.name.as_str(), i).is_some() {
            return Err(ServiceError::Duplicate(s.name.clone()));
        }
    }
    for s in services {
        for dep in &s.depends_on {
            if !index.contains_key(dep.as_str()) {
                return Err(ServiceError::UnknownDependency {
                    service: s.name.clone(),
                    missing: dep.clone(),
                });
            }
        }
    }
    let mut order = Vec::new();
    let mut placed = HashSet::new();
    while order.len() < services.len() {
        let next = services.iter().enumerate().find(|(i, s)| {
            !placed.contains(i) && s.depends_on.iter().all(|d| placed.contains(&index[d.as_str()]))
        });
        match next {
            Some((i, _)) => {
                placed.insert(i);
                order.push(i);
            }
            None => {
                let stuck: Vec<&str> = services
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !placed.contains(i))
                    .map(|(_, s)| s.name.as_str())
                    .collect();
                return Err(ServiceError::Cycle(stuck.join(", ")));
            }
        }
    }
    Ok(order)
}

/// A started group of services on its private network. Call [`ServiceGroup::teardown`];
/// if the process dies first, the labels let the next start remove everything.
pub struct ServiceGroup {
    sandbox: DockerSandbox,
    network: String,
    /// (service name, container id), in start order.
    containers: Vec<(String, String)>,
}

impl ServiceGroup {
    /// Creates the network, then starts each service in dependency order, waiting up to
    /// `ready_timeout` for each one's readiness command. On failure everything made so far is
    /// removed.
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
            internal: Some(true),
            labels: Some(sandbox.labels()),
            ..Default::default()
        };
        sandbox
            .call("create network", sandbox.docker().create_network(request))
            .await
            .map_err(|source| ServiceError::Sandbox { service: "(network)".into(), source })?;
        let mut group = Self { sandbox: sandbox.clone(), network, containers: Vec::new() };
        for i in order {
            if let Err(e) = group.start_one(&services[i], ready_timeout).await {
                let _ = group.teardown_inner().await;
                return Err(e);
            }
        }
        Ok(group)
    }

    async fn start_one(
        &mut self,
        service: &ServiceSpec,
        ready_timeout: Duration,
    ) -> Result<(), ServiceError> {
        let wrap = |source| ServiceError::Sandbox { service: service.name.clone(), source };
        let spec = EnvSpec {
            image: service.image.clone(),
            limits: service.limits.clone(),
            workdir: "/workspace".into(),
            env: service.env.clone(),
            user: Default::default(),
        };
        let config = self.sandbox.container_config(
            &spec,
            service.cmd.clone(),
            Some((&self.network, vec![service.name.clone()])),
        );
        let id =
            self.sandbox.create_container(config, &format!("svc-{}-", service.name)).await.map_err(wrap)?;
        self.containers.push((service.name.clone(), id.clone()));
        self.sandbox
            .call("start service", self.sandbox.docker().start_container(&id, None))
            .await
            .map_err(wrap)?;
        let Some(ready) = &service.ready else { return Ok(()) };
        let env = DockerEnv::new(id, &spec, true);
        let started = Instant::now();
        loop {
            let left = ready_timeout.saturating_sub(started.elapsed());
            let request = ExecRequest {
                cmd: ready.clone(),
                timeout: left.min(Duration::from_secs(10)).max(Duration::from_millis(100)),
                workdir: None,
                env: Vec::new(),
            };
            let result = self.sandbox.exec(&env, &request).await.map_err(wrap)?;
            if result.verdict == Verdict::Exit(0) {
                return Ok(());
            }
            if started.elapsed() >= ready_timeout || result.verdict == Verdict::Timeout {
                let detail = format!("{}; {}", result.verdict, result.stderr.trim());
                return Err(ServiceError::NotReady {
                    service: service.name.clone(),
                    seconds: ready_timeout.as_secs_f64(),
                    last: detail,
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The private network's name.
    pub fn network(&self) -> &str {
        &self.network
    }

    /// Container id of a service.
    pub fn container(&self, service: &str) -> Option<&str> {
        self.containers.iter().find(|(n, _)| n == service).map(|(_, id)| id.as_str())
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
    pub async fn teardown(mut self) -> Result<(), SandboxError> {
        self.teardown_inner().await
    }

    async fn teardown_inner(&mut self) -> Result<(), SandboxError> {
        let mut first_error = None;
        while let Some((_, id)) = self.containers.pop() {
            if let Err(e) = self.sandbox.remove_container(&id).await {
                first_error.get_or_insert(e);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn service(name: &str, deps: &[&str]) -> ServiceSpec {
        ServiceSpec {
            name: name.into(),
            image: "x".into(),
            cmd: vec![],
            env: vec![],
            depends_on: deps.iter().map(|d| d.to_string()).collect(),
            ready: None,
            limits: Limits::default(),
        }
    }

    #[test]
    fn dependencies_start_first() {
        let services = [service("web", &["db", "cache"]), service("db", &[]), service("cache", &["db"])];
        let order: Vec<&str> =
            start_order(&services).unwrap().iter().map(|&i| services[i].name.as_str()).collect();
        assert_eq!(order, ["db", "cache", "web"]);
    }

    #[test]
    fn cycles_unknown_and_duplicate_names_are_errors() {
        let cycle = [service("a", &["b"]), service("b", &["a"])];
        assert!(matches!(start_order(&cycle), Err(ServiceError::Cycle(s)) if s == "a, b"));
        let unknown = [service("a", &["nope"])];
        assert!(matches!(start_order(&unknown), Err(ServiceError::UnknownDependency { .. })));
        let twice = [service("a", &[]), service("a", &[])];
        assert!(matches!(start_order(&twice), Err(ServiceError::Duplicate(_))));
    }
}
