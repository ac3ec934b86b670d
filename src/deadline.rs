//! Deadlines: the one parser for timeouts given in seconds, and bounded waits for child
//! processes (clones, downloads) and Docker calls, so nothing repairbench starts can hang it.

use std::future::Future;
use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The longest timeout accepted anywhere (one week): longer is surely a typo.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// Deadline of a `git clone` of a task repository.
pub const CLONE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Deadline of the body of one HTTP download (a model file).
pub const DOWNLOAD_BODY_TIMEOUT: Duration = Duration::from_secs(6 * 3600);
/// Deadline of a `pip download` of one wheel.
pub const PIP_DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(30 * 60);

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("timeout {seconds} s must be a positive number of seconds up to {max} s", max = MAX_TIMEOUT.as_secs())]
pub struct BadTimeout {
    pub seconds: f64,
}

/// A timeout in seconds as a [`Duration`]: positive, finite and at most [`MAX_TIMEOUT`].
pub fn timeout_secs(seconds: f64) -> Result<Duration, BadTimeout> {
    match Duration::try_from_secs_f64(seconds) {
        Ok(d) if !d.is_zero() && d <= MAX_TIMEOUT => Ok(d),
        _ => Err(BadTimeout { seconds }),
    }
}

/// [`timeout_secs`] for command-line flags (clap's `value_parser`).
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text.trim().parse().map_err(|_| format!("`{text}` is not a number of seconds"))?;
    timeout_secs(seconds).map_err(|e| e.to_string())
}

/// Runs `command` to its end with its output collected, killing it when `limit` passes (the
/// error is then [`std::io::ErrorKind::TimedOut`]).
pub fn output_within(command: &mut Command, limit: Duration) -> std::io::Result<Output> {
    let mut child = command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    // Drained on threads so a chatty child never blocks on a full pipe while we wait.
    let pipe = |mut reader: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = reader.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = pipe(Box::new(child.stdout.take().expect("piped")));
    let stderr = pipe(Box::new(child.stderr.take().expect("piped")));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("did not finish within {} s and was killed", limit.as_secs_f64()),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Ok(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// Deadline of a short Docker call (inspect, list, create, remove, kill, ...).
pub const DOCKER_CALL: Duration = Duration::from_secs(120);

/// `fut`, or `None` when `limit` passes first.
pub async fn within<T>(limit: Duration, fut: impl Future<Output = T>) -> Option<T> {
    tokio::time::timeout(limit, fut).await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_positive_finite_and_bounded() {
        assert_eq!(timeout_secs(1.5), Ok(Duration::from_millis(1500)));
        for bad in [0.0, -1.0, 1e20, f64::NAN, f64::INFINITY, 8.0 * 24.0 * 3600.0] {
            assert!(timeout_secs(bad).is_err(), "{bad} accepted");
        }
        assert!(parse_timeout("1e20").unwrap_err().contains("positive number of seconds"));
        assert!(parse_timeout("soon").unwrap_err().contains("not a number"));
    }

    #[test]
    fn a_child_past_its_deadline_is_killed() {
        let started = Instant::now();
        let err = output_within(Command::new("sleep").arg("30"), Duration::from_millis(300)).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert!(started.elapsed() < Duration::from_secs(5));
        let out = output_within(Command::new("sh").args(["-c", "echo hi"]), Duration::from_secs(10)).unwrap();
        assert_eq!(out.stdout, b"hi\n");
    }
}
