//! Which Python a task's environment gets, and why: the task's `environment.python`, else the
//! nearest available interpreter inside the range the project declares (`requires-python`,
//! `python_requires`), nearest to the Python of the environment commit's day (the newest release
//! before it). A project whose declared range holds no available interpreter is refused with
//! the range named, instead of running under one it says it does not support.

use super::{TaskError, DEBIAN_PYTHON};

/// The interpreters the images offer, with their full versions.
const AVAILABLE: &[(u32, u32, u32)] = &[(3, 11, 2)];

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
];

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

/// The newest Python released on or before `date` (`YYYY-MM-DD`).
fn of_the_day(date: &str) -> Option<(u32, u32)> {
    RELEASED.iter().rev().find(|(_, released)| *released <= date).map(|(v, _)| *v)
}

/// The interpreter chosen, as `3.11`, with the reason in words.
pub fn choose(
    wanted: Option<&str>,
    declared: Option<&str>,
    commit_date: Option<&str>,
) -> Result<String, TaskError> {
    if let Some(wanted) = wanted {
        if !(DEBIAN_PYTHON.starts_with(wanted) || wanted == "3") {
            return Err(TaskError::PythonVersion { wanted: wanted.to_owned(), available: DEBIAN_PYTHON });
        }
        return Ok(format!("{DEBIAN_PYTHON} (the task's environment.python {wanted})"));
    }
    let mut reasons = Vec::new();
    let mut allowed: Vec<(u32, u32, u32)> = AVAILABLE.to_vec();
    if let Some(spec) = declared {
        match AVAILABLE.iter().map(|v| satisfies(spec, *v)).collect::<Option<Vec<_>>>() {
            Some(verdicts) => {
                allowed = AVAILABLE.iter().zip(verdicts).filter(|(_, ok)| *ok).map(|(v, _)| *v).collect();
                if allowed.is_empty() {
                    return Err(TaskError::PythonRange {
                        declared: spec.to_owned(),
                        available: DEBIAN_PYTHON,
                    });
                }
                reasons.push(format!("the project declares Python `{spec}`"));
            }
            None => reasons.push(format!("the project's Python range `{spec}` could not be read")),
        }
    }
    let era = commit_date.and_then(of_the_day);
    if let (Some((major, minor)), Some(date)) = (era, commit_date) {
        reasons.push(format!("{major}.{minor} was the newest on the environment commit's date {date}"));
    }
    let target = era.map_or((3, 11), |e| e);
    let distance = |v: &(u32, u32, u32)| {
        (i64::from(v.0) * 100 + i64::from(v.1) - (i64::from(target.0) * 100 + i64::from(target.1))).abs()
    };
    let chosen = allowed.iter().min_by_key(|v| distance(v)).expect("at least one allowed");
    if reasons.is_empty() {
        reasons.push("nothing declared".to_owned());
    }
    Ok(format!("{}.{} ({}; the nearest available)", chosen.0, chosen.1, reasons.join("; ")))
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
        let chosen = choose(None, Some(">=3.8"), Some("2020-05-01")).unwrap();
        assert!(
            chosen.starts_with("3.11 (") && chosen.contains(">=3.8") && chosen.contains("3.8 was the newest"),
            "{chosen}"
        );
        let err = choose(None, Some(">=3.6, <3.10"), Some("2020-05-01")).unwrap_err().to_string();
        assert!(err.contains(">=3.6, <3.10") && err.contains("3.11"), "{err}");
        assert!(choose(Some("3.8"), None, None).is_err());
        assert!(choose(Some("3.11"), Some("<3"), None).unwrap().contains("environment.python"));
        assert_eq!(choose(None, None, None).unwrap(), "3.11 (nothing declared; the nearest available)");
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
