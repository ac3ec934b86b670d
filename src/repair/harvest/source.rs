//! Where candidates come from: a repository's first-parent history (or named commits), or a
//! GitLab project's merged merge requests with the issues they close.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use base64::Engine as _;

use crate::http::Secret;
use crate::tasks::gitlab::{self, GitLab, MergeRequest};

/// Where to harvest from.
#[derive(Debug, Clone)]
pub enum HarvestSource {
    /// A git repository (a path or a URL the git CLI can clone); only `commits` when given,
    /// otherwise first-parent history from HEAD.
    Git {
        repo: String,
        commits: Vec<String>,
    },
    GitLab(GitLabSource),
}

/// A GitLab project, walked through the REST API v4 and cloned over https.
#[derive(Debug, Clone)]
pub struct GitLabSource {
    /// The instance (`https://gitlab.example.com`).
    pub url: String,
    /// Numeric id or full path (`group/project`).
    pub project: String,
    pub token: Option<Secret>,
    /// Merge request state; only merged ones have a fix on the target branch.
    pub state: String,
    /// CA certificates (PEM) of a self-hosted instance.
    pub ca_cert: Option<PathBuf>,
}

/// The merge request a candidate comes from, and the issues it closes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MergeRequestOrigin {
    pub iid: u64,
    pub web_url: String,
    pub created_at: String,
    pub merged_at: Option<String>,
    /// When it was merged (seconds since the epoch): the day the fix became public.
    pub merged_unix: Option<i64>,
    pub issues: Vec<IssueRef>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IssueRef {
    pub iid: u64,
    pub web_url: String,
    pub created_at: String,
}

/// A commit that may become a task.
#[derive(Debug, Clone, Default)]
pub(super) struct Candidate {
    pub commit: String,
    pub parent: String,
    pub committed_unix: i64,
    pub message: String,
    pub code_files: Vec<String>,
    pub test_files: Vec<String>,
    pub merge_request: Option<MergeRequestOrigin>,
    /// The issue text when one is known (GitLab), else the commit message is used.
    pub problem_statement: Option<String>,
    pub hints_text: String,
}

impl Candidate {
    pub fn changes_code_and_tests(&self) -> bool {
        !self.code_files.is_empty() && !self.test_files.is_empty()
    }
}

/// Why harvesting stopped: git, GitLab, or a file of ours.
#[derive(Debug, thiserror::Error)]
pub enum HarvestError {
    #[error("git {args} could not run")]
    GitSpawn {
        args: String,
        #[source]
        source: std::io::Error,
    },
    #[error("git {args}: {stderr}")]
    Git { args: String, stderr: String },
    #[error(transparent)]
    GitLab(#[from] gitlab::GitLabError),
    #[error("merge request !{iid} has no merge, squash or head commit")]
    NoCommit { iid: u64 },
    #[error(transparent)]
    Repository(#[from] crate::tasks::RepoError),
    #[error("{path}")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: expected {{\"services\": [...], \"service_checks\": [...]}}")]
    NotServices {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}")]
    Services {
        path: PathBuf,
        #[source]
        source: crate::tasks::build_inputs::FieldError,
    },
    #[error("the harvest worker stopped")]
    Worker(#[from] tokio::task::JoinError),
}

/// Runs git (with a deadline) and returns its output; a failure carries git's own message.
fn run_git(command: &mut Command, args: String) -> Result<String, HarvestError> {
    let out = crate::deadline::output_within(command, crate::deadline::CLONE_TIMEOUT)
        .map_err(|source| HarvestError::GitSpawn { args: args.clone(), source })?;
    if !out.status.success() {
        return Err(HarvestError::Git {
            args,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(super) fn git(repo: &Path, args: &[&str]) -> Result<String, HarvestError> {
    run_git(
        Command::new("git").arg("-C").arg(repo).args(args).env("GIT_TERMINAL_PROMPT", "0"),
        args.join(" "),
    )
}

/// A candidate for `commit`, whose base is `parent` (default: its first parent); `None` for a
/// root commit or one older than `since`.
pub(super) fn candidate(
    mirror: &Path,
    commit: &str,
    parent: Option<&str>,
    since: Option<i64>,
) -> Result<Option<Candidate>, HarvestError> {
    let meta = git(mirror, &["show", "-s", "--format=%P%n%ct%n%B", commit])?;
    let mut lines = meta.lines();
    let first_parent = lines.next().and_then(|p| p.split_whitespace().next()).map(str::to_owned);
    let Some(parent) = parent.map(str::to_owned).or(first_parent) else {
        return Ok(None); // the root commit has no base
    };
    let committed_unix: i64 = lines.next().and_then(|t| t.trim().parse().ok()).unwrap_or(0);
    if since.is_some_and(|since| committed_unix < since) {
        return Ok(None);
    }
    let message: String = lines.collect::<Vec<_>>().join("\n").trim().to_owned();
    let files = git(mirror, &["diff", "--name-only", "--no-renames", &parent, commit])?;
    let (test_files, code_files): (Vec<String>, Vec<String>) = files
        .lines()
        .filter(|f| !f.is_empty())
        .map(str::to_owned)
        .partition(|f| crate::patch::protect::is_test_path(f));
    Ok(Some(Candidate {
        commit: commit.to_owned(),
        parent,
        committed_unix,
        message,
        code_files,
        test_files,
        merge_request: None,
        problem_statement: None,
        hints_text: String::new(),
    }))
}

/// Commits from first-parent history (newest first) or the named ones.
fn git_candidates(
    mirror: &Path,
    commits: &[String],
    since: Option<i64>,
) -> Result<Vec<Candidate>, HarvestError> {
    let listed = if commits.is_empty() {
        git(mirror, &["rev-list", "--first-parent", "HEAD"])?
    } else {
        let mut out = String::new();
        for commit in commits {
            out.push_str(&git(mirror, &["rev-parse", "--verify", &format!("{commit}^{{commit}}")])?);
        }
        out
    };
    let mut found = Vec::new();
    for commit in listed.lines().map(str::trim).filter(|l| !l.is_empty()) {
        found.extend(candidate(mirror, commit, None, since)?);
    }
    Ok(found)
}

/// The project, cloned into `dest` (a fresh mirror): the token goes to git as an HTTP header
/// through the environment (`GIT_CONFIG_*`), so it is in no URL, no file and no argument.
fn clone_gitlab(source: &GitLabSource, project: &gitlab::Project, dest: &Path) -> Result<(), HarvestError> {
    let _ = std::fs::remove_dir_all(dest);
    let mut command = Command::new("git");
    command
        .args(["clone", "--mirror", "--quiet", &project.http_url_to_repo])
        .arg(dest)
        .env("GIT_TERMINAL_PROMPT", "0");
    let mut config = Vec::new();
    if let Some(token) = &source.token {
        // GitLab takes a personal, project or group token as the password of any user.
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("oauth2:{}", token.expose()));
        config.push(("http.extraHeader".to_owned(), format!("Authorization: Basic {basic}")));
    }
    if let Some(ca) = &source.ca_cert {
        // The variable, not `http.sslCAInfo`: a GIT_SSL_CAINFO already set would win over it.
        command.env("GIT_SSL_CAINFO", ca);
    }
    command.env("GIT_CONFIG_COUNT", config.len().to_string());
    for (i, (key, value)) in config.iter().enumerate() {
        command.env(format!("GIT_CONFIG_KEY_{i}"), key).env(format!("GIT_CONFIG_VALUE_{i}"), value);
    }
    let cloned = run_git(&mut command, format!("clone {}", project.http_url_to_repo));
    if cloned.is_err() {
        let _ = std::fs::remove_dir_all(dest);
    }
    cloned.map(drop)
}

/// A source made ready: a repository the git CLI can clone, the name tasks are called by,
/// and how candidates are listed.
pub(super) struct Opened {
    pub repo: String,
    pub name: String,
    listing: Listing,
}

enum Listing {
    Commits(Vec<String>),
    MergeRequests { client: Box<GitLab>, project: u64, source: GitLabSource },
}

/// Opens `source`; a GitLab project is looked up and cloned into `work/source.git`.
pub(super) fn open(source: &HarvestSource, work: &Path) -> Result<Opened, HarvestError> {
    match source {
        HarvestSource::Git { repo, commits } => {
            let name =
                repo.trim_end_matches('/').trim_end_matches(".git").rsplit('/').next().unwrap_or("repo");
            Ok(Opened {
                repo: repo.clone(),
                name: name.to_owned(),
                listing: Listing::Commits(commits.clone()),
            })
        }
        HarvestSource::GitLab(gl) => {
            let client = GitLab::new(&gl.url, gl.token.clone(), gl.ca_cert.as_deref())?;
            let project = client.project(&gl.project)?;
            let dest = work.join("source.git");
            clone_gitlab(gl, &project, &dest)?;
            Ok(Opened {
                repo: dest.display().to_string(),
                name: project.path.clone(),
                listing: Listing::MergeRequests {
                    client: Box::new(client),
                    project: project.id,
                    source: gl.clone(),
                },
            })
        }
    }
}

impl Opened {
    /// The candidates, newest first; at most `limit` of them change code and tests.
    pub fn candidates(
        &self,
        mirror: &Path,
        since: Option<i64>,
        limit: Option<usize>,
    ) -> Result<Vec<Candidate>, HarvestError> {
        match &self.listing {
            Listing::MergeRequests { client, project, source } => {
                gitlab_candidates(client, *project, source, mirror, since, limit)
            }
            Listing::Commits(commits) => {
                let mut found = git_candidates(mirror, commits, since)?;
                if let Some(limit) = limit {
                    let mut examined = 0;
                    found.retain(|c| {
                        examined += usize::from(c.changes_code_and_tests());
                        !c.changes_code_and_tests() || examined <= limit
                    });
                }
                Ok(found)
            }
        }
    }
}

/// The commit a merged merge request put on its target branch, and that commit's base.
fn merged_commit(
    client: &GitLab,
    project: u64,
    mr: &MergeRequest,
) -> Result<(String, Option<String>), HarvestError> {
    if let Some(merge) = mr.merge_commit_sha.as_deref().or(mr.squash_commit_sha.as_deref()) {
        return Ok((merge.to_owned(), None));
    }
    // A fast-forward merge: the source branch's head, based where the MR's diff starts.
    let full = client.merge_request(project, mr.iid)?;
    let head = full.sha.or(mr.sha.clone()).ok_or(HarvestError::NoCommit { iid: mr.iid })?;
    let base = full.diff_refs.and_then(|d| d.base_sha.or(d.start_sha));
    Ok((head, base))
}

/// Candidates from a GitLab project's merge requests, newest first, each with its problem
/// statement (the closed issues' text, else the MR's) and hints (the issues' notes written
/// before the MR). `limit` caps the candidates that change code and tests; issue texts are
/// fetched only for those.
fn gitlab_candidates(
    client: &GitLab,
    project: u64,
    source: &GitLabSource,
    mirror: &Path,
    since: Option<i64>,
    limit: Option<usize>,
) -> Result<Vec<Candidate>, HarvestError> {
    let requests = client.merge_requests(project, &source.state, since)?;
    tracing::info!(count = requests.len(), state = %source.state, "merge requests listed");
    let mut found = Vec::new();
    let mut seen = HashMap::new();
    for mr in requests {
        let merged_unix = mr.merged_at.as_deref().and_then(crate::dates::parse_timestamp);
        if since.is_some_and(|since| merged_unix.is_some_and(|m| m < since)) {
            continue;
        }
        let (commit, base) = match merged_commit(client, project, &mr) {
            Ok(found) => found,
            Err(why) => {
                let why = crate::error_chain(&why);
                tracing::warn!(mr = mr.iid, %why, "merge request skipped: no commit to harvest");
                continue;
            }
        };
        if git(mirror, &["cat-file", "-e", &format!("{commit}^{{commit}}")]).is_err() {
            tracing::warn!(mr = mr.iid, %commit, "merge request skipped: its commit is not in the repository");
            continue;
        }
        if seen.insert(commit.clone(), mr.iid).is_some() {
            continue;
        }
        let Some(mut c) = candidate(mirror, &commit, base.as_deref(), None)? else { continue };
        let examined = found.iter().filter(|c: &&Candidate| c.changes_code_and_tests()).count();
        if c.changes_code_and_tests() && limit.is_some_and(|limit| examined >= limit) {
            continue;
        }
        let mut issues = Vec::new();
        if c.changes_code_and_tests() {
            issues = client.closes_issues(project, mr.iid)?;
            let created = crate::dates::parse_timestamp(&mr.created_at).unwrap_or(i64::MAX);
            let mut hints = Vec::new();
            for issue in &issues {
                let notes = client.issue_notes(issue.project_id, issue.iid)?;
                hints.push(gitlab::hints_text(&notes, created));
            }
            c.hints_text = hints.into_iter().filter(|h| !h.is_empty()).collect::<Vec<_>>().join("\n\n");
            c.problem_statement = Some(gitlab::problem_statement(&mr, &issues));
        }
        c.merge_request = Some(MergeRequestOrigin {
            iid: mr.iid,
            web_url: mr.web_url.clone(),
            created_at: mr.created_at.clone(),
            merged_at: mr.merged_at.clone(),
            merged_unix,
            issues: issues
                .iter()
                .map(|i| IssueRef {
                    iid: i.iid,
                    web_url: i.web_url.clone(),
                    created_at: i.created_at.clone(),
                })
                .collect(),
        });
        found.push(c);
    }
    Ok(found)
}
