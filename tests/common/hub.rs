//! A Hugging Face hub on a loopback port that speaks the file API the real one speaks, for
//! dataset repositories: `HEAD`/`GET /datasets/OWNER/NAME/resolve/REVISION/PATH` answers
//! `302 Found` to the storage path with `x-repo-commit`, `x-linked-etag` (the file's sha256, in
//! quotes) and `x-linked-size`, as for a file kept in large-file storage; a missing file is
//! `404` with `x-error-code: EntryNotFound`, an unknown revision `404 RevisionNotFound`, and a
//! gated repository asked without its token `401 GatedRepo`. `GET /cdn/SHA256` serves the bytes.
//! Every request is logged, with whether it carried a token.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

/// One request the hub saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub authorization: Option<String>,
}

/// A dataset repository: its commit, its files, and the token a gated one asks for.
pub struct Repo {
    pub id: String,
    pub commit: String,
    pub files: BTreeMap<String, Vec<u8>>,
    pub gated_token: Option<String>,
}

pub struct Hub {
    pub endpoint: String,
    pub log: Arc<Mutex<Vec<Request>>>,
}

impl Hub {
    /// Serves `repos` until the test process ends.
    pub fn start(repos: Vec<Repo>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let log = Arc::new(Mutex::new(Vec::new()));
        let seen = log.clone();
        let blobs: BTreeMap<String, Vec<u8>> = repos
            .iter()
            .flat_map(|r| r.files.values().map(|b| (repairbench::digest::sha256_hex(b), b.clone())))
            .collect();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let mut parts = line.split_whitespace();
                let (method, path) =
                    (parts.next().unwrap_or("").to_owned(), parts.next().unwrap_or("").to_owned());
                let mut authorization = None;
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
                        break;
                    }
                    if let Some((name, value)) = header.split_once(':') {
                        if name.eq_ignore_ascii_case("authorization") {
                            authorization = Some(value.trim().to_owned());
                        }
                    }
                }
                seen.lock().unwrap().push(Request {
                    method: method.clone(),
                    path: path.clone(),
                    authorization: authorization.clone(),
                });
                let (head, body) = answer(&repos, &blobs, &method, &path, authorization.as_deref());
                let body = if method == "HEAD" { Vec::new() } else { body };
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(&body);
            }
        });
        Self { endpoint, log }
    }

    pub fn requests(&self) -> Vec<Request> {
        self.log.lock().unwrap().clone()
    }
}

fn response(status: &str, headers: &[(&str, String)], body: Vec<u8>) -> (String, Vec<u8>) {
    let mut head = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n", body.len());
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    (head, body)
}

fn error(status: &str, code: &str) -> (String, Vec<u8>) {
    let message = format!("{code}: as the hub says it");
    response(
        status,
        &[("x-error-code", code.to_owned()), ("x-error-message", message.clone())],
        format!("{{\"error\":\"{message}\"}}").into_bytes(),
    )
}

fn answer(
    repos: &[Repo],
    blobs: &BTreeMap<String, Vec<u8>>,
    method: &str,
    path: &str,
    authorization: Option<&str>,
) -> (String, Vec<u8>) {
    if method != "GET" && method != "HEAD" {
        return error("405 Method Not Allowed", "MethodNotAllowed");
    }
    if let Some(sha) = path.strip_prefix("/cdn/") {
        return match blobs.get(sha) {
            Some(bytes) => response("200 OK", &[("ETag", format!("\"{sha}\""))], bytes.clone()),
            None => error("404 Not Found", "NotFound"),
        };
    }
    let Some(rest) = path.strip_prefix("/datasets/") else {
        return error("404 Not Found", "RepoNotFound");
    };
    let Some(repo) = repos.iter().find(|r| rest.starts_with(&format!("{}/resolve/", r.id))) else {
        return error("404 Not Found", "RepoNotFound");
    };
    if let Some(token) = &repo.gated_token {
        if authorization != Some(format!("Bearer {token}").as_str()) {
            return error("401 Unauthorized", "GatedRepo");
        }
    }
    let rest = &rest[repo.id.len() + "/resolve/".len()..];
    let (revision, file) = rest.split_once('/').unwrap_or((rest, ""));
    if revision != repo.commit && revision != "main" {
        return error("404 Not Found", "RevisionNotFound");
    }
    let Some(bytes) = repo.files.get(file) else {
        return error("404 Not Found", "EntryNotFound");
    };
    let sha = repairbench::digest::sha256_hex(bytes);
    response(
        "302 Found",
        &[
            ("Location", format!("/cdn/{sha}")),
            ("x-repo-commit", repo.commit.clone()),
            ("x-linked-etag", format!("\"{sha}\"")),
            ("x-linked-size", bytes.len().to_string()),
            ("ETag", "\"0123456789abcdef0123456789abcdef01234567\"".to_owned()),
        ],
        Vec::new(),
    )
}
