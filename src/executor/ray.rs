//! A client of Ray's job submission API (plain HTTP on the head's dashboard port, 8265 by
//! default): packages, jobs, their logs, and the cluster's nodes. With `RAY_AUTH_TOKEN` set,
//! every request carries it as a bearer token (a cluster started with `RAY_AUTH_MODE=token`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::http::Secret;

/// Requests give up after this long; an unreachable head fails well within 10 s.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// An upload may take a while (the package holds the executable).
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Debug, thiserror::Error)]
pub enum RayError {
    #[error(
        "the Ray cluster at {url} cannot be reached (is the head running, and its dashboard port open?)"
    )]
    Unreachable {
        url: String,
        #[source]
        source: Box<ureq::Error>,
    },
    #[error("the Ray cluster at {url} refused the request (401): set RAY_AUTH_TOKEN to the cluster's token")]
    Unauthorized { url: String },
    #[error("the Ray cluster at {url} answered {status}: {body}")]
    Status { url: String, status: u16, body: String },
    #[error("the Ray cluster at {url} sent an answer that is not what its jobs API sends")]
    Answer {
        url: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("`{0}` is not a Ray address: expected ray:http://HEAD:8265")]
    Address(String),
}

/// A job's state, as Ray names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum JobStatus {
    Pending,
    Running,
    Stopped,
    Succeeded,
    Failed,
}

impl JobStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Stopped | Self::Succeeded | Self::Failed)
    }
}

/// What Ray tells of one job.
#[derive(Debug, Clone, Deserialize)]
pub struct JobInfo {
    pub submission_id: Option<String>,
    pub status: JobStatus,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub error_type: Option<String>,
    #[serde(default)]
    pub driver_exit_code: Option<i64>,
    #[serde(default)]
    pub driver_node_id: Option<String>,
    /// When the job started and ended, in milliseconds since the epoch.
    #[serde(default)]
    pub start_time: Option<u64>,
    #[serde(default)]
    pub end_time: Option<u64>,
    #[serde(default)]
    pub metadata: Option<std::collections::BTreeMap<String, String>>,
}

/// A job to submit.
#[derive(Debug, Clone, Serialize)]
pub struct JobRequest {
    pub entrypoint: String,
    pub submission_id: String,
    pub runtime_env: serde_json::Value,
    pub metadata: std::collections::BTreeMap<String, String>,
    pub entrypoint_resources: std::collections::BTreeMap<String, f64>,
}

/// One node of the cluster.
#[derive(Debug, Clone, Serialize)]
pub struct NodeInfo {
    pub node_id: String,
    pub ip: String,
    pub is_head: bool,
    pub alive: bool,
    /// The node's `repairbench` slots (0 when it offers none).
    pub slots: f64,
}

/// The last line of an error body that says something (Ray ends a traceback with `.`).
fn last_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let line = text.lines().rev().map(str::trim).find(|l| l.len() > 1).unwrap_or("");
    line.chars().take(400).collect()
}

#[derive(Clone)]
pub struct RayClient {
    base: String,
    token: Option<Secret>,
    agent: ureq::Agent,
}

impl std::fmt::Debug for RayClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RayClient").field("base", &self.base).finish()
    }
}

impl RayClient {
    /// A client of the head at `url` (`http://HEAD:8265`).
    pub fn new(url: &str, token: Option<Secret>) -> Result<Self, RayError> {
        let base = url.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) || base.len() <= "https://".len() {
            return Err(RayError::Address(url.to_owned()));
        }
        let agent = ureq::Agent::config_builder()
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .http_status_as_error(false)
            .build()
            .new_agent();
        Ok(Self { base, token, agent })
    }

    pub fn url(&self) -> &str {
        &self.base
    }

    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<(u16, Vec<u8>), RayError> {
        let url = format!("{}{path}", self.base);
        let auth = self.token.as_ref().map(|t| format!("Bearer {}", t.expose()));
        let sent = match body {
            None => {
                let mut request = match method {
                    "GET" => self.agent.get(&url),
                    _ => self.agent.delete(&url),
                };
                if let Some(auth) = &auth {
                    request = request.header("Authorization", auth);
                }
                request.config().timeout_global(Some(timeout)).build().call()
            }
            Some(body) => {
                let mut request = match method {
                    "PUT" => self.agent.put(&url).header("Content-Type", "application/octet-stream"),
                    _ => self.agent.post(&url).header("Content-Type", "application/json"),
                };
                if let Some(auth) = &auth {
                    request = request.header("Authorization", auth);
                }
                request.config().timeout_global(Some(timeout)).build().send(body)
            }
        };
        let mut response =
            sent.map_err(|source| RayError::Unreachable { url: url.clone(), source: Box::new(source) })?;
        let status = response.status().as_u16();
        let bytes = response
            .body_mut()
            .with_config()
            .limit(1 << 30)
            .read_to_vec()
            .map_err(|source| RayError::Unreachable { url: url.clone(), source: Box::new(source) })?;
        if status == 401 || status == 403 {
            return Err(RayError::Unauthorized { url: self.base.clone() });
        }
        Ok((status, bytes))
    }

    fn json<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<T, RayError> {
        let (status, bytes) = self.call(method, path, body, REQUEST_TIMEOUT)?;
        let url = format!("{}{path}", self.base);
        if !(200..300).contains(&status) {
            let body = last_line(&bytes);
            return Err(RayError::Status { url, status, body });
        }
        serde_json::from_slice(&bytes).map_err(|e| RayError::Answer { url, source: Box::new(e) })
    }

    /// Ray's version (also a cheap check that the head answers).
    pub fn version(&self) -> Result<String, RayError> {
        #[derive(Deserialize)]
        struct Version {
            ray_version: String,
        }
        Ok(self.json::<Version>("GET", "/api/version", None)?.ray_version)
    }

    /// Whether the cluster holds package `name` (`_ray_pkg_….zip`). Asking also keeps it for a
    /// while, so it is not deleted before the job that uses it is submitted.
    pub fn has_package(&self, name: &str) -> Result<bool, RayError> {
        let (status, _) = self.call("GET", &format!("/api/packages/gcs/{name}"), None, REQUEST_TIMEOUT)?;
        Ok(status == 200)
    }

    pub fn upload_package(&self, name: &str, bytes: &[u8]) -> Result<(), RayError> {
        let path = format!("/api/packages/gcs/{name}");
        let (status, body) = self.call("PUT", &path, Some(bytes), UPLOAD_TIMEOUT)?;
        if status != 200 {
            let body = last_line(&body);
            return Err(RayError::Status { url: format!("{}{path}", self.base), status, body });
        }
        Ok(())
    }

    pub fn submit(&self, job: &JobRequest) -> Result<(), RayError> {
        let body = serde_json::to_vec(job).unwrap_or_default();
        self.json::<serde_json::Value>("POST", "/api/jobs/", Some(&body)).map(drop)
    }

    pub fn job(&self, id: &str) -> Result<JobInfo, RayError> {
        self.json("GET", &format!("/api/jobs/{}", crate::http::encode_segment(id)), None)
    }

    pub fn jobs(&self) -> Result<Vec<JobInfo>, RayError> {
        self.json("GET", "/api/jobs/", None)
    }

    /// The job's log so far (everything its entrypoint printed).
    pub fn logs(&self, id: &str) -> Result<String, RayError> {
        #[derive(Deserialize)]
        struct Logs {
            logs: String,
        }
        Ok(self
            .json::<Logs>("GET", &format!("/api/jobs/{}/logs", crate::http::encode_segment(id)), None)?
            .logs)
    }

    /// Asks Ray to stop the job (its entrypoint gets SIGTERM, then SIGKILL).
    pub fn stop(&self, id: &str) -> Result<(), RayError> {
        let path = format!("/api/jobs/{}/stop", crate::http::encode_segment(id));
        self.json::<serde_json::Value>("POST", &path, Some(b"{}")).map(drop)
    }

    /// The cluster's nodes (alive and dead) with their `repairbench` slots.
    pub fn nodes(&self) -> Result<Vec<NodeInfo>, RayError> {
        let answer: serde_json::Value = self.json("GET", "/nodes?view=summary", None)?;
        let summary =
            answer.pointer("/data/summary").and_then(|s| s.as_array()).ok_or_else(|| RayError::Answer {
                url: format!("{}/nodes?view=summary", self.base),
                source: "no data.summary list".into(),
            })?;
        Ok(summary
            .iter()
            .filter_map(|node| {
                let raylet = node.get("raylet")?;
                Some(NodeInfo {
                    node_id: raylet.get("nodeId")?.as_str()?.to_owned(),
                    ip: raylet.get("nodeManagerAddress").and_then(|v| v.as_str()).unwrap_or("").to_owned(),
                    is_head: raylet.get("isHeadNode").and_then(|v| v.as_bool()).unwrap_or(false),
                    alive: raylet.get("state").and_then(|v| v.as_str()) == Some("ALIVE"),
                    slots: raylet
                        .pointer("/resourcesTotal/repairbench")
                        .and_then(|v| v.as_f64())
                        .unwrap_or(0.0),
                })
            })
            .collect())
    }
}
