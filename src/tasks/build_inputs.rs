//! Fields of a task that reach an image build or a shell (`environment.install`, `apt`, `pip`,
//! `env`; a service's `build` and `env`). Task definitions are only semi-trusted (a team's
//! GitLab, harvested history), so each value is checked to be one plain value: no control
//! character can end a Dockerfile instruction and start another (`ADD` from a URL would run in
//! the daemon, on the host's network), package names have their package system's syntax, and
//! variable names are names. The builds then pass commands as files, never as Dockerfile text.

use std::collections::BTreeMap;

/// A field of a task that is wrong, and how.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: {problem}")]
pub struct FieldError {
    pub field: String,
    pub problem: String,
}

fn problem(field: String, problem: String) -> FieldError {
    FieldError { field, problem }
}

/// A value with no control character (a newline would start a new Dockerfile instruction).
pub fn plain_text(field: &str, value: &str) -> Result<(), FieldError> {
    match value.chars().find(|c| c.is_control()) {
        Some(c) => Err(problem(
            field.to_owned(),
            format!("control character U+{:04X} is not allowed in {value:?}", c as u32),
        )),
        None => Ok(()),
    }
}

/// Each entry of a list is plain text (`field[i]` names the bad one).
pub fn plain_list(field: &str, values: &[String]) -> Result<(), FieldError> {
    values.iter().enumerate().try_for_each(|(i, v)| plain_text(&format!("{field}[{i}]"), v))
}

/// A Debian package: `name`, `name:arch` or `name=version` in Debian's syntax.
pub fn apt_packages(field: &str, packages: &[String]) -> Result<(), FieldError> {
    for (i, package) in packages.iter().enumerate() {
        let (name, version) = package.split_once('=').unwrap_or((package, ""));
        let (name, arch) = name.split_once(':').unwrap_or((name, ""));
        let name_ok = name.len() >= 2
            && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c));
        let arch_ok = arch.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        let version_ok = version.chars().all(|c| c.is_ascii_alphanumeric() || ".+~:-".contains(c));
        if !(name_ok && arch_ok && version_ok) {
            return Err(problem(
                format!("{field}[{i}]"),
                format!(
                    "expected a Debian package name (`name`, `name:arch`, `name=version`), found {package:?}"
                ),
            ));
        }
    }
    Ok(())
}

/// Variables: names of letters, digits and `_` (not starting with a digit), plain values.
pub fn variables(field: &str, env: &BTreeMap<String, String>) -> Result<(), FieldError> {
    for (name, value) in env {
        let name_ok = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !name_ok {
            return Err(problem(
                field.to_owned(),
                format!("expected variable names of letters, digits and `_`, found {name:?}"),
            ));
        }
        plain_text(&format!("{field}.{name}"), value)?;
    }
    Ok(())
}

/// The task's `environment`: every field that reaches the build or the tests' shell.
pub fn environment(env: &super::TaskEnvironment) -> Result<(), FieldError> {
    plain_list("environment.install", &env.install)?;
    plain_list("environment.pip", &env.pip)?;
    apt_packages("environment.apt", &env.apt)?;
    variables("environment.env", &env.env)?;
    plain_list("environment.junit", &env.junit)?;
    plain_list("environment.pre_install", &env.pre_install)?;
    let requirements = env.requirements.as_deref().unwrap_or_default();
    plain_list("environment.requirements", requirements)?;
    for (i, file) in requirements.iter().enumerate() {
        let inside =
            std::path::Path::new(file).components().all(|c| matches!(c, std::path::Component::Normal(_)));
        if !inside || file.is_empty() || file.starts_with('-') {
            return Err(problem(
                format!("environment.requirements[{i}]"),
                format!("expected a file path inside the repository, found {file:?}"),
            ));
        }
    }
    if let Some(when) = &env.packages_as_of {
        if when != "latest" && chrono::DateTime::parse_from_rfc3339(when).is_err() {
            return Err(problem(
                "environment.packages_as_of".into(),
                format!("expected an RFC 3339 time (`2020-06-01T00:00:00Z`) or `latest`, found {when:?}"),
            ));
        }
    }
    for (field, value) in [("environment.image", &env.image), ("environment.python", &env.python)] {
        if let Some(value) = value {
            plain_text(field, value)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newline_or_another_control_character_is_refused_naming_the_field() {
        let err =
            plain_list("services[0].build.run", &["true".into(), "true\nADD http://127.0.0.1/x /x".into()])
                .unwrap_err();
        assert_eq!(err.field, "services[0].build.run[1]");
        assert!(err.problem.contains("U+000A"), "{}", err.problem);
        assert!(plain_text("f", "tab\there").is_err());
        assert!(plain_text("f", "pip install 'x>=1' && echo ok").is_ok());
    }

    #[test]
    fn packages_and_variables_have_their_syntax() {
        let ok: Vec<String> = ["redis-server", "libpq-dev:amd64", "python3-psycopg2=2.9.5-1+b1", "g++"]
            .map(String::from)
            .to_vec();
        assert!(apt_packages("apt", &ok).is_ok());
        for bad in ["x", "-y", "Redis", "a b", "pkg;rm", "pkg\n"] {
            assert!(apt_packages("apt", &[bad.to_string()]).is_err(), "{bad:?}");
        }
        let env = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
        assert!(variables("env", &env("APP_MODE", "a b=c")).is_ok());
        assert_eq!(variables("env", &env("A=B", "x")).unwrap_err().field, "env");
        assert_eq!(variables("env", &env("1X", "x")).unwrap_err().field, "env");
        assert_eq!(variables("env", &env("X", "a\rb")).unwrap_err().field, "env.X");
    }

    #[test]
    fn requirement_files_stay_inside_and_the_cutoff_is_a_time() {
        let with = |requirements: &[&str], when: Option<&str>| super::super::TaskEnvironment {
            requirements: Some(requirements.iter().map(|r| r.to_string()).collect()),
            packages_as_of: when.map(str::to_owned),
            ..Default::default()
        };
        assert!(environment(&with(&["tests/requirements/py3.txt"], Some("2020-06-01T00:00:00Z"))).is_ok());
        assert!(environment(&with(&[], Some("latest"))).is_ok());
        for bad in ["../x.txt", "/etc/passwd", "a/../../b", "-e git+https://x", "./"] {
            let err = environment(&with(&[bad], None)).unwrap_err();
            assert_eq!(err.field, "environment.requirements[0]", "{bad:?}");
        }
        assert_eq!(
            environment(&with(&[], Some("June 2020"))).unwrap_err().field,
            "environment.packages_as_of"
        );
    }
}
