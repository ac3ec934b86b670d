//! GitLab's REST API v4, as far as harvesting tasks needs it: a project, its merged merge
//! requests, the issues each one closes and those issues' notes. Lists are followed page by
//! page (the `Link: rel="next"` header, else `x-next-page`), never by `x-total`, which GitLab
//! leaves out for large lists. A 429 or a 5xx is retried ([`crate::http`]). The token travels only in request headers: it is never
//! written to disk, to logs or into a URL, and it is only sent to the instance named.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::http::Secret;

#[derive(Debug, thiserror::Error)]
pub enum GitLabError {
    #[error("GitLab {url}: HTTP {status}: {body}")]
    Status { url: String, status: u16, body: String },
    #[error("GitLab {url}")]
    Transport {
        url: String,
        #[source]
        source: Box<ureq::Error>,
    },
    #[error("GitLab {url}: the response is not the JSON expected")]
    Json {
        url: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("GitLab {url}: still rate-limited or unavailable after {attempts} attempts")]
    RateLimited { url: String, attempts: u32 },
    #[error("GitLab {url}: the next page `{next}` is not on the same instance; not followed")]
    ForeignLink { url: String, next: String },
    #[error("--ca-cert {}: {detail}", path.display())]
    CaCert { path: PathBuf, detail: String },
    #[error("`{0}` is not an http(s) URL of a GitLab instance")]
    BadUrl(String),
}

/// A project (`GET /projects/:id`), the fields harvesting uses.
#[derive(Debug, Clone, Deserialize)]
pub struct Project {
    pub id: u64,
    pub path: String,
    pub path_with_namespace: String,
    pub http_url_to_repo: String,
    pub web_url: String,
    pub default_branch: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct DiffRefs {
    pub base_sha: Option<String>,
    pub head_sha: Option<String>,
    pub start_sha: Option<String>,
}

/// A merge request as lists and `GET /merge_requests/:iid` return it.
#[derive(Debug, Clone, Deserialize)]
pub struct MergeRequest {
    pub iid: u64,
    pub title: String,
    pub description: Option<String>,
    pub state: String,
    pub created_at: String,
    pub merged_at: Option<String>,
    pub target_branch: String,
    /// The merge commit; null for fast-forward merges.
    pub merge_commit_sha: Option<String>,
    /// The squashed commit when the MR was squashed on merge.
    pub squash_commit_sha: Option<String>,
    /// The source branch's head.
    pub sha: Option<String>,
    pub web_url: String,
    /// Only in the single-MR response.
    #[serde(default)]
    pub diff_refs: Option<DiffRefs>,
}

/// An issue as `closes_issues` lists it.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Issue {
    pub iid: u64,
    pub project_id: u64,
    pub title: String,
    pub description: Option<String>,
    pub created_at: String,
    pub web_url: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Note {
    pub body: String,
    pub created_at: String,
    /// Notes GitLab writes itself ("mentioned in merge request !3").
    #[serde(default)]
    pub system: bool,
}

/// A client for one instance.
pub struct GitLab {
    /// `https://host[/prefix]/api/v4`
    api: String,
    token: Option<Secret>,
    agent: ureq::Agent,
    /// Attempts per request when rate-limited or the server is briefly unavailable.
    attempts: u32,
}

impl std::fmt::Debug for GitLab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitLab").field("api", &self.api).field("token", &self.token).finish()
    }
}

pub use crate::http::encode_segment;

/// The URL in a `Link` header whose `rel` is `next`.
fn next_link(header: &str) -> Option<String> {
    header.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        let is_next = params.split(';').any(|p| {
            let p = p.trim();
            p == "rel=\"next\"" || p == "rel=next"
        });
        is_next.then(|| url.trim().trim_start_matches('<').trim_end_matches('>').to_owned())
    })
}

impl GitLab {
    /// A client for the instance at `base` (`https://gitlab.example.com`), trusting the CA
    /// certificates in `ca_cert` (PEM) instead of the built-in roots when given.
    pub fn new(base: &str, token: Option<Secret>, ca_cert: Option<&Path>) -> Result<Self, GitLabError> {
        let base = base.trim_end_matches('/');
        if !(base.starts_with("https://") || base.starts_with("http://")) {
            return Err(GitLabError::BadUrl(base.to_owned()));
        }
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // Redirects could carry the token to another host.
            .max_redirects(0)
            .timeout_connect(Some(Duration::from_secs(30)))
            .timeout_global(Some(Duration::from_secs(120)));
        if let Some(path) = ca_cert {
            let ca_err = |detail: String| GitLabError::CaCert { path: path.to_owned(), detail };
            let pem = std::fs::read(path).map_err(|e| ca_err(e.to_string()))?;
            let mut certs = Vec::new();
            for item in ureq::tls::parse_pem(&pem) {
                if let ureq::tls::PemItem::Certificate(cert) = item.map_err(|e| ca_err(e.to_string()))? {
                    certs.push(cert);
                }
            }
            if certs.is_empty() {
                return Err(ca_err("no PEM certificate in it".into()));
            }
            config = config.tls_config(
                ureq::tls::TlsConfig::builder()
                    .root_certs(ureq::tls::RootCerts::new_with_certs(&certs))
                    .build(),
            );
        }
        Ok(Self { api: format!("{base}/api/v4"), token, agent: config.build().into(), attempts: 6 })
    }

    /// One GET (retried while rate-limited); the body and the next page's URL.
    fn get(&self, url: &str) -> Result<(Vec<u8>, Option<String>), GitLabError> {
        let transport = |source| GitLabError::Transport { url: url.to_owned(), source: Box::new(source) };
        let mut response = crate::http::with_retries(url, self.attempts, || {
            let mut request = self.agent.get(url).header("Accept", "application/json");
            if let Some(token) = &self.token {
                request = request.header("PRIVATE-TOKEN", token.expose());
            }
            request.call()
        })
        .map_err(transport)?;
        let status = response.status().as_u16();
        if crate::http::is_retryable(status) {
            return Err(GitLabError::RateLimited { url: url.to_owned(), attempts: self.attempts });
        }
        let header =
            |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let next = match header("link").as_deref().and_then(next_link) {
            Some(next) => Some(next),
            None => {
                header("x-next-page").filter(|p| !p.trim().is_empty()).map(|page| with_page(url, page.trim()))
            }
        };
        let mut body = Vec::new();
        response
            .body_mut()
            .as_reader()
            .take(64 << 20)
            .read_to_end(&mut body)
            .map_err(|e| transport(ureq::Error::Io(e)))?;
        if !(200..300).contains(&status) {
            let text = String::from_utf8_lossy(&body);
            let body = text.trim().chars().take(300).collect();
            return Err(GitLabError::Status { url: url.to_owned(), status, body });
        }
        if let Some(next) = &next {
            if !next.starts_with(&format!("{}/", self.api)) {
                return Err(GitLabError::ForeignLink { url: url.to_owned(), next: next.clone() });
            }
        }
        Ok((body, next))
    }

    fn get_one<T: DeserializeOwned>(&self, path: &str) -> Result<T, GitLabError> {
        let url = format!("{}{path}", self.api);
        let (body, _) = self.get(&url)?;
        serde_json::from_slice(&body).map_err(|source| GitLabError::Json { url, source })
    }

    /// Every page of a list.
    fn get_all<T: DeserializeOwned>(&self, path_and_query: &str) -> Result<Vec<T>, GitLabError> {
        let separator = if path_and_query.contains('?') { '&' } else { '?' };
        let mut url = Some(format!("{}{path_and_query}{separator}per_page=100", self.api));
        let mut all = Vec::new();
        while let Some(current) = url {
            let (body, next) = self.get(&current)?;
            let page: Vec<T> =
                serde_json::from_slice(&body).map_err(|source| GitLabError::Json { url: current, source })?;
            all.extend(page);
            url = next;
        }
        Ok(all)
    }

    /// A project by numeric id or full path (`group/project`).
    pub fn project(&self, id_or_path: &str) -> Result<Project, GitLabError> {
        self.get_one(&format!("/projects/{}", encode_segment(id_or_path)))
    }

    /// Merge requests in `state`, newest first, updated at or after `since` (seconds since
    /// the epoch) when given.
    pub fn merge_requests(
        &self,
        project: u64,
        state: &str,
        since: Option<i64>,
    ) -> Result<Vec<MergeRequest>, GitLabError> {
        let mut query = format!(
            "/projects/{project}/merge_requests?state={}&order_by=created_at&sort=desc",
            encode_segment(state)
        );
        if let Some(since) = since {
            query.push_str(&format!(
                "&updated_after={}",
                encode_segment(&crate::dates::format_timestamp(since))
            ));
        }
        self.get_all(&query)
    }

    /// One merge request, with its `diff_refs`.
    pub fn merge_request(&self, project: u64, iid: u64) -> Result<MergeRequest, GitLabError> {
        self.get_one(&format!("/projects/{project}/merge_requests/{iid}"))
    }

    /// The issues a merge request closes (`Closes #12` in its description or commits).
    pub fn closes_issues(&self, project: u64, iid: u64) -> Result<Vec<Issue>, GitLabError> {
        self.get_all(&format!("/projects/{project}/merge_requests/{iid}/closes_issues"))
    }

    /// An issue's notes, oldest first.
    pub fn issue_notes(&self, project: u64, issue: u64) -> Result<Vec<Note>, GitLabError> {
        self.get_all(&format!("/projects/{project}/issues/{issue}/notes?sort=asc&order_by=created_at"))
    }
}

/// `url` with its `page` query parameter set to `page`.
fn with_page(url: &str, page: &str) -> String {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let mut params: Vec<&str> =
        query.split('&').filter(|p| !p.is_empty() && !p.starts_with("page=")).collect();
    let page = format!("page={page}");
    params.push(&page);
    format!("{path}?{}", params.join("&"))
}

/// The text a task states its problem with: the closed issues' titles and descriptions, or
/// the merge request's own when it closes none (SWE-bench takes the issue text).
pub fn problem_statement(mr: &MergeRequest, issues: &[Issue]) -> String {
    let texts: Vec<String> = if issues.is_empty() {
        vec![join_title(&mr.title, mr.description.as_deref())]
    } else {
        issues.iter().map(|i| join_title(&i.title, i.description.as_deref())).collect()
    };
    texts.join("\n\n")
}

fn join_title(title: &str, body: Option<&str>) -> String {
    match body.map(str::trim).filter(|b| !b.is_empty()) {
        Some(body) => format!("{}\n\n{body}", title.trim()),
        None => title.trim().to_owned(),
    }
}

/// Hints as SWE-bench takes them: the issue's human notes written before the fix was
/// proposed (the merge request's creation), oldest first.
pub fn hints_text(notes: &[Note], mr_created_unix: i64) -> String {
    notes
        .iter()
        .filter(|n| !n.system)
        .filter(|n| crate::dates::parse_timestamp(&n.created_at).is_some_and(|t| t < mr_created_unix))
        .map(|n| n.body.trim())
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_paths_are_one_segment() {
        assert_eq!(encode_segment("group/sub project"), "group%2Fsub%20project");
        assert_eq!(encode_segment("42"), "42");
    }

    #[test]
    fn the_next_page_comes_from_link_or_page_headers() {
        let link = "<https://gl.example/api/v4/projects/1/merge_requests?page=1&per_page=2>; rel=\"prev\", \
                    <https://gl.example/api/v4/projects/1/merge_requests?page=3&per_page=2>; rel=\"next\", \
                    <https://gl.example/api/v4/projects/1/merge_requests?page=1&per_page=2>; rel=\"first\"";
        assert_eq!(
            next_link(link).as_deref(),
            Some("https://gl.example/api/v4/projects/1/merge_requests?page=3&per_page=2")
        );
        assert_eq!(next_link("<https://gl.example/a>; rel=\"last\""), None);
        assert_eq!(
            with_page("https://h/api/v4/x?state=merged&page=1&per_page=100", "2"),
            "https://h/api/v4/x?state=merged&per_page=100&page=2"
        );
    }

    #[test]
    fn hints_are_human_notes_before_the_merge_request() {
        let note =
            |body: &str, at: &str, system: bool| Note { body: body.into(), created_at: at.into(), system };
        let notes = [
            note("Seen on 2.1 too.", "2024-03-01T10:00:00.000Z", false),
            note("mentioned in merge request !4", "2024-03-01T10:30:00.000Z", true),
            note("Thanks, fixed.", "2024-03-02T09:00:00.000Z", false),
        ];
        let created = crate::dates::parse_timestamp("2024-03-01T11:00:00Z").unwrap();
        assert_eq!(hints_text(&notes, created), "Seen on 2.1 too.");
    }
}
