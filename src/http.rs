//! HTTP calls that wait out rate limits and brief outages, shared by the clients of remote
//! services (GitLab's API, OpenAI-compatible model servers): a 429 or a 5xx is retried after
//! the server's `Retry-After` (seconds), else after 1, 2, 4 … seconds, never more than a minute
//! at a time.

use std::time::Duration;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// What a path segment keeps as is: RFC 3986's unreserved characters.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// `text` as one URL path segment: everything but unreserved characters percent-encoded
/// (`group/sub project` → `group%2Fsub%20project`, as GitLab wants a project path).
pub fn encode_segment(text: &str) -> String {
    utf8_percent_encode(text, UNRESERVED).to_string()
}

/// A token or key that never shows in `Debug` output or logs.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Self {
        Self(value)
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// A response worth asking again for.
pub fn is_retryable(status: u16) -> bool {
    status == 429 || (500..600).contains(&status)
}

/// How long to wait before attempt `attempt + 1`.
pub fn retry_pause(retry_after: Option<&str>, attempt: u32) -> Duration {
    let seconds =
        retry_after.and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or_else(|| 1u64 << attempt.min(5));
    Duration::from_secs(seconds.min(60))
}

/// Sends with `send` until the response is not retryable, at most `attempts` times; the last
/// response is returned as it is, so the caller reports the status the server gave.
pub fn with_retries(
    url: &str,
    attempts: u32,
    mut send: impl FnMut() -> Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<ureq::http::Response<ureq::Body>, ureq::Error> {
    let mut attempt = 0;
    loop {
        let response = send()?;
        let status = response.status().as_u16();
        attempt += 1;
        if !is_retryable(status) || attempt >= attempts {
            return Ok(response);
        }
        let retry_after = response.headers().get("retry-after").and_then(|v| v.to_str().ok());
        let pause = retry_pause(retry_after, attempt - 1);
        tracing::warn!(%url, status, seconds = pause.as_secs(), attempt, "the server asks to retry later");
        std::thread::sleep(pause);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_honoured_and_bounded() {
        assert_eq!(retry_pause(Some("3"), 0), Duration::from_secs(3));
        assert_eq!(retry_pause(Some("3600"), 0), Duration::from_secs(60));
        assert_eq!(retry_pause(None, 2), Duration::from_secs(4));
        assert!(is_retryable(429) && is_retryable(503) && !is_retryable(404));
    }
}
