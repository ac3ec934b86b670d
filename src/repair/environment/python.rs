//! Which Python a task's environment gets, and why. The images offer one Python per Debian
//! suite (bullseye 3.9, bookworm 3.11, trixie 3.13); the wanted version is the task's
//! `environment.python`, else the newest the project's classifiers name up to the commit's
//! era, else the Python of the environment commit's day (the newest release before it). The
//! available one nearest to it inside the range the project declares (`requires-python`,
//! `python_requires`) is chosen, the older on a tie. A project whose declared range holds no
//! available interpreter is refused with the range named, instead of running under one it
//! says it does not support.

use std::fmt;

use super::TaskError;
use crate::sandbox::images::DebianSuite;

/// The interpreters the images offer, in words, for messages.
pub const AVAILABLE: &str = "3.9 (bullseye), 3.11 (bookworm) and 3.13 (trixie)";

/// When each Python minor version was released (x.y.0), for the commit-date rule.
const RELEASED: &[((u32, u32), &str)] = &[
    ((2, 7), "2010-07-03"),
    ((3, 5), "2015-09-13"),
    ((3, 6), "2016-12-23"),
    ((3, 7), "2018-06-27"),
    ((3, 8), "2019-10-14"),
    ((3, 9), "2020-10-05"),
    ((3, 10), "2021-10-04"),
    ((3, 11), "2022-10-24"),
    ((3, 12), "2023-10-02"),
    ((3, 13), "2024-10-07"),
    ((3, 14), "2025-10-07"),
];

/// The Python an environment gets: the Debian suite whose `python3` it is, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonChoice {
    pub suite: DebianSuite,
    pub reason: String,
}

impl PythonChoice {
    /// `3.9`.
    pub fn version(&self) -> String {
        let (major, minor, _) = self.suite.python();
        format!("{major}.{minor}")
    }
}

impl fmt::Display for PythonChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.version(), self.reason)
    }
}

/// One clause of a version specifier (`>=3.8`, `!=3.9.*`, `~=3.7`).
fn allows(clause: &str, version: (u32, u32, u32)) -> Option<bool> {
    let clause = clause.trim();
    let op_len = clause.find(|c: char| c.is_ascii_digit())?;
    let (op, number) = (clause[..op_len].trim(), clause[op_len..].trim());
    let wildcard = number.ends_with(".*");
    let parts: Vec<u32> =
        number.trim_end_matches(".*").split('.').map(|p| p.parse().ok()).collect::<Option<_>>()?;
    let given =
        [parts.first().copied()?, parts.get(1).copied().unwrap_or(0), parts.get(2).copied().unwrap_or(0)];
    let have = [version.0, version.1, version.2];
    // Versions are compared padded with zeros (`3.11` is 3.11.0), a wildcard on its prefix.
    let named = parts.len().min(3);
    let equal = if wildcard { have[..named] == given[..named] } else { have == given };
    let compatible = named.saturating_sub(1).max(1);
    Some(match op {
        "==" | "===" => equal,
        "!=" => !equal,
        ">=" => have >= given,
        ">" => have > given,
        "<=" => have <= given,
        "<" => have < given,
        // `~=3.7` is >=3.7, ==3.*; `~=3.7.1` is >=3.7.1, ==3.7.*.
        "~=" => have >= given && have[..compatible] == given[..compatible],
        _ => return None,
    })
}

/// Whether `version` satisfies `specifier` (clauses joined by commas); `None` when it cannot be
/// read.
pub fn satisfies(specifier: &str, version: (u32, u32, u32)) -> Option<bool> {
    specifier
        .split(',')
        .filter(|c| !c.trim().is_empty())
        .try_fold(true, |all, clause| Some(all && allows(clause, version)?))
}

/// How long after a Python's release its packages are taken to have caught up with it (wheels
/// built for it, fixes for its changes): packages older than that mostly do not support it.
const CATCH_UP_DAYS: i64 = 180;

impl PythonChoice {
    /// The earliest time packages are resolved as of for this Python: [`CATCH_UP_DAYS`] after
    /// its release. A commit older than that gets the packages of this day instead of its own,
    /// since pytest 2.8 of 2015 cannot run on Python 3.9.
    pub fn packages_floor(&self) -> chrono::DateTime<chrono::Utc> {
        let (major, minor, _) = self.suite.python();
        let released =
            RELEASED.iter().find(|(v, _)| *v == (major, minor)).map(|(_, d)| *d).unwrap_or("2000-01-01");
        let day = chrono::NaiveDate::parse_from_str(released, "%Y-%m-%d").unwrap_or_default()
            + chrono::Duration::days(CATCH_UP_DAYS);
        day.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc()
    }
}

/// The newest Python released on or before `date` (`YYYY-MM-DD`).
fn of_the_day(date: &str) -> Option<(u32, u32)> {
    RELEASED.iter().rev().find(|(_, released)| *released <= date).map(|(v, _)| *v)
}

/// `3.8` as (3, 8); `3` alone names no minor version.
fn parse_minor(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.trim().split_once('.')?;
    Some((major.parse().ok()?, minor.split('.').next()?.parse().ok()?))
}

/// What the project says of its Python: a declared range, and the minor versions its
/// `Programming Language :: Python :: 3.x` classifiers name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Declared {
    pub range: Option<String>,
    pub classifiers: Vec<(u32, u32)>,
}

/// The Python of a task's environment, with the reason in words.
pub fn choose(
    wanted: Option<&str>,
    declared: &Declared,
    commit_date: Option<&str>,
) -> Result<PythonChoice, TaskError> {
    let mut reasons = Vec::new();
    let mut allowed: Vec<DebianSuite> = DebianSuite::ALL.to_vec();
    if let Some(spec) = &declared.range {
        match allowed.iter().map(|s| satisfies(spec, s.python())).collect::<Option<Vec<_>>>() {
            Some(verdicts) => {
                allowed = allowed.into_iter().zip(verdicts).filter(|(_, ok)| *ok).map(|(s, _)| s).collect();
                if allowed.is_empty() {
                    return Err(TaskError::PythonRange { declared: spec.clone(), available: AVAILABLE });
                }
                reasons.push(format!("the project declares Python `{spec}`"));
            }
            None => reasons.push(format!("the project's Python range `{spec}` could not be read")),
        }
    }
    let era = commit_date.and_then(of_the_day);
    let wanted = match wanted.map(str::trim) {
        Some("3") | None => None,
        Some(text) => Some(
            parse_minor(text)
                .filter(|v| v.0 == 3)
                .ok_or_else(|| TaskError::PythonVersion { wanted: text.to_owned(), available: AVAILABLE })?,
        ),
    };
    let classified = declared.classifiers.iter().copied().filter(|v| era.is_none_or(|e| *v <= e)).max();
    let target = if let Some(version) = wanted {
        reasons.insert(0, format!("the task's environment.python is {}.{}", version.0, version.1));
        version
    } else if let Some(version) = classified.or_else(|| declared.classifiers.iter().copied().max()) {
        let named: Vec<String> = declared.classifiers.iter().map(|(a, b)| format!("{a}.{b}")).collect();
        reasons.push(format!("its classifiers name Python {}", named.join(", ")));
        version
    } else if let (Some(version), Some(date)) = (era, commit_date) {
        reasons.push(format!(
            "{}.{} was the newest on the environment commit's date {date}",
            version.0, version.1
        ));
        version
    } else {
        reasons.push("nothing declared".to_owned());
        let (major, minor, _) = DebianSuite::DEFAULT.python();
        (major, minor)
    };
    let distance = |suite: &DebianSuite| {
        let (major, minor, _) = suite.python();
        (i64::from(major) * 100 + i64::from(minor) - (i64::from(target.0) * 100 + i64::from(target.1))).abs()
    };
    // `allowed` is oldest first, and `min_by_key` keeps the first of equals: the older on a tie.
    let suite = *allowed.iter().min_by_key(|s| distance(s)).expect("at least one allowed");
    let exact = suite.python().0 == target.0 && suite.python().1 == target.1;
    reasons.push(if exact { "available".to_owned() } else { "the nearest available".to_owned() });
    Ok(PythonChoice { suite, reason: reasons.join("; ") })
}

/// The minor versions named by `Programming Language :: Python :: 3.x` classifiers in `text`.
pub fn classifier_versions(text: &str) -> Vec<(u32, u32)> {
    const PREFIX: &str = "Programming Language :: Python :: ";
    let mut versions: Vec<(u32, u32)> = text
        .match_indices(PREFIX)
        .filter_map(|(at, _)| {
            let rest = &text[at + PREFIX.len()..];
            let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
            parse_minor(&rest[..end])
        })
        .filter(|v| v.0 == 3)
        .collect();
    versions.sort_unstable();
    versions.dedup();
    versions
}

/// The project's declared Python range: `[project] requires-python`, or `python_requires` in
/// setup.cfg or setup.py.
pub fn declared_range(
    pyproject: Option<&str>,
    setup_cfg: Option<&str>,
    setup_py: Option<&str>,
) -> Option<String> {
    if let Some(doc) = pyproject.and_then(|t| t.parse::<toml::Table>().ok()) {
        if let Some(spec) = doc.get("project").and_then(|p| p.get("requires-python")).and_then(|r| r.as_str())
        {
            return Some(spec.to_owned());
        }
    }
    let assigned = |text: &str| {
        let rest = &text[text.find("python_requires")? + "python_requires".len()..];
        let rest = rest.trim_start().strip_prefix('=')?.trim_start();
        let quoted = rest.strip_prefix(['"', '\'']);
        let value = match quoted {
            Some(q) => q.split(['"', '\'']).next()?,
            None => rest.lines().next()?,
        };
        Some(value.trim().to_owned()).filter(|v| !v.is_empty())
    };
    setup_cfg.and_then(assigned).or_else(|| setup_py.and_then(assigned))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specifiers_read_as_pep_440_reads_them() {
        let py311 = (3, 11, 2);
        for (spec, ok) in [
            (">=3.8", true),
            (">=3.8, <3.10", false),
            ("<3.11", false),
            // Padded with zeros, as PEP 440 compares: 3.11.2 is above 3.11 (3.11.0).
            ("<=3.11", false),
            ("<=3.11.2", true),
            ("==3.11.*", true),
            ("==3.11", false),
            ("!=3.11.*", false),
            ("!=3.11.1", true),
            ("~=3.7", true),
            ("~=3.9.1", false),
            (">3.11", true),
            (">3.11.2", false),
            (">=2.7, !=3.0.*, !=3.1.*", true),
        ] {
            assert_eq!(satisfies(spec, py311), Some(ok), "{spec}");
        }
        assert_eq!(satisfies(">=three", py311), None);
    }

    #[test]
    fn the_choice_and_its_reason() {
        let range = |r: &str| Declared { range: Some(r.to_owned()), classifiers: Vec::new() };
        let chosen = choose(None, &range(">=3.8"), Some("2020-05-01")).unwrap();
        assert_eq!(chosen.suite, DebianSuite::Bullseye, "{chosen}");
        assert!(chosen.to_string().starts_with("3.9 (") && chosen.reason.contains(">=3.8"), "{chosen}");
        assert!(
            chosen.reason.contains("3.8 was the newest") && chosen.reason.contains("nearest"),
            "{chosen}"
        );
        // The era's Python outside the range: the nearest inside it.
        let chosen = choose(None, &range(">=3.10"), Some("2020-05-01")).unwrap();
        assert_eq!(chosen.suite, DebianSuite::Bookworm, "{chosen}");
        let err = choose(None, &range(">=3.6, <3.9"), Some("2020-05-01")).unwrap_err().to_string();
        assert!(err.contains(">=3.6, <3.9") && err.contains("3.13"), "{err}");
        // A commit of 2023-11 (3.12's era) sits between 3.11 and 3.13: the older is taken.
        assert_eq!(
            choose(None, &Declared::default(), Some("2023-11-14")).unwrap().suite,
            DebianSuite::Bookworm
        );
        assert_eq!(
            choose(None, &Declared::default(), Some("2025-01-10")).unwrap().suite,
            DebianSuite::Trixie
        );
        assert_eq!(
            choose(None, &Declared::default(), Some("2016-03-01")).unwrap().suite,
            DebianSuite::Bullseye
        );
        // The task's own version, exact or the nearest; one that is not a Python 3 version is refused.
        let chosen = choose(Some("3.8"), &Declared::default(), Some("2024-01-01")).unwrap();
        assert_eq!(chosen.suite, DebianSuite::Bullseye);
        assert!(chosen.reason.starts_with("the task's environment.python is 3.8"), "{chosen}");
        assert_eq!(choose(Some("3.13"), &range(">=3.8"), None).unwrap().suite, DebianSuite::Trixie);
        assert!(choose(Some("2.7"), &Declared::default(), None).is_err());
        assert!(choose(Some("latest"), &Declared::default(), None).is_err());
        // Classifiers, up to the commit's era.
        let classified = Declared { range: None, classifiers: vec![(3, 6), (3, 7), (3, 12)] };
        let chosen = choose(None, &classified, Some("2019-01-01")).unwrap();
        assert_eq!(chosen.suite, DebianSuite::Bullseye, "{chosen}");
        assert!(chosen.reason.contains("classifiers name Python 3.6, 3.7, 3.12"), "{chosen}");
        assert_eq!(choose(None, &classified, Some("2025-01-01")).unwrap().suite, DebianSuite::Bookworm);
        assert_eq!(
            choose(None, &Declared::default(), None).unwrap().to_string(),
            "3.11 (nothing declared; available)"
        );
    }

    #[test]
    fn packages_are_never_older_than_the_python_they_serve() {
        let choice = |suite| PythonChoice { suite, reason: String::new() };
        assert_eq!(choice(DebianSuite::Bullseye).packages_floor().to_rfc3339(), "2021-04-03T00:00:00+00:00");
        assert_eq!(choice(DebianSuite::Trixie).packages_floor().to_rfc3339(), "2025-04-05T00:00:00+00:00");
    }

    #[test]
    fn classifiers_name_minor_versions() {
        let setup = "classifiers=[\n 'Programming Language :: Python :: 2.7',\n \
                     'Programming Language :: Python :: 3',\n 'Programming Language :: Python :: 3.5',\n \
                     \"Programming Language :: Python :: 3.10\",\n 'Programming Language :: Python :: 3.5']";
        assert_eq!(classifier_versions(setup), [(3, 5), (3, 10)]);
    }

    #[test]
    fn ranges_come_from_pyproject_setup_cfg_or_setup_py() {
        let pyproject = "[project]\nname = \"x\"\nrequires-python = \">=3.9\"\n";
        assert_eq!(declared_range(Some(pyproject), None, None).as_deref(), Some(">=3.9"));
        assert_eq!(
            declared_range(None, Some("[options]\npython_requires = >=3.7\n"), None).as_deref(),
            Some(">=3.7")
        );
        let setup = "setup(name='x', python_requires='>=3.6, <4', install_requires=[])";
        assert_eq!(declared_range(None, None, Some(setup)).as_deref(), Some(">=3.6, <4"));
        assert_eq!(declared_range(Some("[project]\nname = \"x\"\n"), None, Some("setup()")), None);
    }
}
