//! Services a task's tests talk to (field `services`, ours): a database, a cache, a worker,
//! the project's own server. Each is an image built like every other layer (Debian packages,
//! pip packages, files of the repository, commands) or one the engine already has, started
//! on the attempt's private network where the tests reach it by its name. `service_checks`
//! are commands run inside services after the tests, each graded as `service:NAME::CHECK`.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

use super::build_inputs::{self, FieldError};

/// The name the test runner has on the services' network.
pub const RUNNER_NAME: &str = "tests";

/// Seconds a service may take to become ready unless its `ready.timeout_s` says otherwise.
pub const DEFAULT_READY_TIMEOUT_S: u64 = 60;

/// Services one task may start: each is a container with the run's memory limit.
pub const MAX_SERVICES: usize = 16;

/// One service of a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskService {
    /// The host name the tests and the other services reach it by.
    pub name: String,
    /// How its image is built (exclusive with `image`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<ServiceBuild>,
    /// An image the engine already has (exclusive with `build`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Its main process as argv; empty: the image's own entrypoint and command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Ports it listens on; the first is the one an `http` readiness check asks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<ReadyCheck>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// The tree under test (prediction and test_patch applied) is copied into its
    /// `/workspace` before it starts, so a fix to the service's code takes effect in it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub repo: bool,
    /// Writable directories for its data (fresh, memory-backed, per attempt).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data_dirs: Vec<String>,
}

/// What a service's image holds on top of the default image.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceBuild {
    /// Debian packages.
    #[serde(default)]
    pub apt: Vec<String>,
    /// Python packages, installed into a venv that also sees Debian's Python packages.
    #[serde(default)]
    pub pip: Vec<String>,
    /// Files or folders of the repository (at the environment commit) copied into
    /// `/workspace`, e.g. a schema or a requirements file.
    #[serde(default)]
    pub copy: Vec<String>,
    /// Shell commands run in `/workspace` while the image is built (network on).
    #[serde(default)]
    pub run: Vec<String>,
}

/// When a service counts as ready: exactly one of `tcp`, `http`, `cmd`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadyCheck {
    /// A port accepting connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<u16>,
    /// A path answering 2xx/3xx on the service's first port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
    /// A command run inside the service that exits 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<u64>,
}

/// A check run after the tests, graded as the test `service:SERVICE::NAME`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceCheck {
    pub service: String,
    pub name: String,
    /// A command run inside the service; passes when it exits 0 (exclusive with
    /// `log_excludes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<Vec<String>>,
    /// Passes when no line of the service's log contains this text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_excludes: Option<String>,
}

impl ServiceCheck {
    /// The test id the check is graded as.
    pub fn id(&self) -> String {
        format!("service:{}::{}", self.service, self.name)
    }
}

fn field_error(field: impl Into<String>, problem: impl Into<String>) -> FieldError {
    FieldError { field: field.into(), problem: problem.into() }
}

/// A service name that is also a host name: letters, digits and dashes, not at the ends.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// A path inside the repository: relative, no `..`.
fn valid_repo_path(path: &str) -> bool {
    !path.is_empty() && !path.starts_with('/') && path.split('/').all(|part| part != ".." && !part.is_empty())
}

/// Checks `services` and `service_checks`; the first problem names its field.
pub fn validate(services: &[TaskService], checks: &[ServiceCheck]) -> Result<(), FieldError> {
    if services.len() > MAX_SERVICES {
        return Err(field_error(
            "services",
            format!("{} services; a task may have at most {MAX_SERVICES}", services.len()),
        ));
    }
    let mut names = HashSet::new();
    for (i, service) in services.iter().enumerate() {
        let at = |field: &str| format!("services[{i}].{field}");
        if !valid_name(&service.name) {
            return Err(field_error(
                at("name"),
                format!(
                    "expected a host name (lower-case letters, digits, dashes), found {:?}",
                    service.name
                ),
            ));
        }
        if service.name == RUNNER_NAME {
            return Err(field_error(at("name"), "`tests` is the test runner's own name"));
        }
        if !names.insert(service.name.as_str()) {
            return Err(field_error(at("name"), format!("`{}` is declared twice", service.name)));
        }
        match (&service.build, &service.image) {
            (Some(_), Some(_)) => return Err(field_error(at("image"), "give `build` or `image`, not both")),
            (None, None) => return Err(field_error(at("build"), "give `build` or `image`")),
            (None, Some(image)) if image.trim().is_empty() => {
                return Err(field_error(at("image"), "expected an image reference"))
            }
            _ => {}
        }
        if service.command.is_empty() && service.build.is_some() {
            return Err(field_error(at("command"), "a built service needs its command (argv)"));
        }
        if let Some(build) = &service.build {
            build_inputs::plain_list(&at("build.copy"), &build.copy)?;
            if let Some(bad) = build.copy.iter().find(|p| !valid_repo_path(p)) {
                return Err(field_error(
                    at("build.copy"),
                    format!("expected paths inside the repository, found {bad:?}"),
                ));
            }
            build_inputs::plain_list(&at("build.run"), &build.run)?;
            build_inputs::plain_list(&at("build.pip"), &build.pip)?;
            build_inputs::apt_packages(&at("build.apt"), &build.apt)?;
        }
        build_inputs::variables(&at("env"), &service.env)?;
        if let Some(image) = &service.image {
            build_inputs::plain_text(&at("image"), image)?;
        }
        if service.ports.contains(&0) {
            return Err(field_error(at("ports"), "port 0 is not a port"));
        }
        build_inputs::plain_list(&at("data_dirs"), &service.data_dirs)?;
        if let Some(bad) =
            service.data_dirs.iter().find(|d| !d.starts_with('/') || d.contains("..") || d.contains(','))
        {
            return Err(field_error(at("data_dirs"), format!("expected absolute paths, found {bad:?}")));
        }
        if let Some(ready) = &service.ready {
            let given = [ready.tcp.is_some(), ready.http.is_some(), ready.cmd.is_some()];
            if given.iter().filter(|g| **g).count() != 1 {
                return Err(field_error(at("ready"), "give exactly one of `tcp`, `http`, `cmd`"));
            }
            if ready.tcp == Some(0) {
                return Err(field_error(at("ready.tcp"), "port 0 is not a port"));
            }
            if let Some(path) = &ready.http {
                build_inputs::plain_text(&at("ready.http"), path)?;
                if !path.starts_with('/') {
                    return Err(field_error(
                        at("ready.http"),
                        format!("expected a path (`/health`), found {path:?}"),
                    ));
                }
                if service.ports.is_empty() {
                    return Err(field_error(
                        at("ports"),
                        "an `http` readiness check needs the service's port",
                    ));
                }
            }
            if ready.cmd.as_ref().is_some_and(Vec::is_empty) {
                return Err(field_error(at("ready.cmd"), "expected a non-empty argv"));
            }
            if ready.timeout_s == Some(0) {
                return Err(field_error(at("ready.timeout_s"), "expected a positive number of seconds"));
            }
        }
    }
    for (i, service) in services.iter().enumerate() {
        if let Some(missing) = service.depends_on.iter().find(|d| !names.contains(d.as_str())) {
            return Err(field_error(
                format!("services[{i}].depends_on"),
                format!("`{missing}` is not a declared service"),
            ));
        }
    }
    let nodes: Vec<(&str, &[String])> =
        services.iter().map(|s| (s.name.as_str(), &s.depends_on[..])).collect();
    if let Err(e) = crate::order::dependency_order(&nodes) {
        return Err(field_error("services", e.to_string()));
    }
    let mut ids = HashSet::new();
    for (i, check) in checks.iter().enumerate() {
        let at = |field: &str| format!("service_checks[{i}].{field}");
        if !names.contains(check.service.as_str()) {
            return Err(field_error(at("service"), format!("`{}` is not a declared service", check.service)));
        }
        if check.name.trim().is_empty() || check.name.contains("::") {
            return Err(field_error(
                at("name"),
                format!("expected a name without `::`, found {:?}", check.name),
            ));
        }
        match (&check.cmd, &check.log_excludes) {
            (Some(cmd), None) if !cmd.is_empty() => {}
            (None, Some(text)) if !text.is_empty() => {}
            _ => {
                return Err(field_error(
                    at("cmd"),
                    "give exactly one of a non-empty `cmd` and `log_excludes`",
                ))
            }
        }
        if !ids.insert(check.id()) {
            return Err(field_error(at("name"), format!("`{}` is declared twice", check.id())));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn services(value: serde_json::Value) -> Vec<TaskService> {
        serde_json::from_value(value).unwrap()
    }

    fn db_and_api() -> serde_json::Value {
        serde_json::json!([
            {"name": "db", "build": {"apt": ["postgresql"]}, "command": ["postgres"], "ready": {"tcp": 5432}},
            {"name": "api", "image": "team/api:1", "ports": [8000], "ready": {"http": "/health", "timeout_s": 5},
             "depends_on": ["db"], "repo": true},
        ])
    }

    #[test]
    fn a_well_formed_group_and_its_checks_pass() {
        let checks = vec![ServiceCheck {
            service: "db".into(),
            name: "migrated".into(),
            cmd: Some(vec!["true".into()]),
            log_excludes: None,
        }];
        assert_eq!(validate(&services(db_and_api()), &checks), Ok(()));
        assert_eq!(checks[0].id(), "service:db::migrated");
    }

    #[test]
    fn each_mistake_names_its_field() {
        let case = |edit: &dyn Fn(&mut serde_json::Value)| {
            let mut value = db_and_api();
            edit(&mut value);
            validate(&services(value), &[]).unwrap_err().field
        };
        assert_eq!(case(&|v| v[1]["name"] = "API_1".into()), "services[1].name");
        assert_eq!(case(&|v| v[1]["name"] = "db".into()), "services[1].name");
        assert_eq!(case(&|v| v[1]["build"] = serde_json::json!({})), "services[1].image");
        assert_eq!(case(&|v| v[0]["command"] = serde_json::json!([])), "services[0].command");
        assert_eq!(case(&|v| v[1]["ports"] = serde_json::json!([])), "services[1].ports");
        assert_eq!(
            case(&|v| v[0]["ready"] = serde_json::json!({"tcp": 1, "cmd": ["x"]})),
            "services[0].ready"
        );
        assert_eq!(case(&|v| v[1]["depends_on"] = serde_json::json!(["cache"])), "services[1].depends_on");
        assert_eq!(case(&|v| v[0]["depends_on"] = serde_json::json!(["api"])), "services");
        assert_eq!(case(&|v| v[0]["build"]["copy"] = serde_json::json!(["../x"])), "services[0].build.copy");
        let check = ServiceCheck { service: "cache".into(), name: "x".into(), cmd: None, log_excludes: None };
        let err = validate(&services(db_and_api()), &[check]).unwrap_err();
        assert_eq!(err.field, "service_checks[0].service");
        assert!(err.to_string().starts_with("field `service_checks[0].service`: `cache`"), "{err}");
    }

    #[test]
    fn unknown_keys_are_refused() {
        let bad = serde_json::json!([{"name": "db", "image": "x", "healthcheck": {}}]);
        let err = serde_json::from_value::<Vec<TaskService>>(bad).unwrap_err().to_string();
        assert!(err.contains("healthcheck"), "{err}");
    }
}
