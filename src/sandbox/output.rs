//! Output capture with a size cap that says when it cut.

/// Which stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    Stdout,
    Stderr,
}

/// A piece of output as it arrives (only the part within the cap).
#[derive(Debug, Clone)]
pub struct OutputChunk {
    pub stream: StreamKind,
    pub bytes: Vec<u8>,
}

/// Where streamed output goes (e.g. the CLI printing it live).
pub type OutputSink = tokio::sync::mpsc::UnboundedSender<OutputChunk>;

/// Keeps the first `cap` bytes of a stream and remembers whether more came.
#[derive(Debug)]
pub struct CappedOutput {
    kept: Vec<u8>,
    cap: usize,
    truncated: bool,
}

impl CappedOutput {
    pub fn new(cap: usize) -> Self {
        Self { kept: Vec::new(), cap, truncated: false }
    }

    /// Appends what fits and returns that part; the rest is dropped and flagged.
    pub fn push<'a>(&mut self, bytes: &'a [u8]) -> &'a [u8] {
        let room = self.cap.saturating_sub(self.kept.len());
        let kept = &bytes[..bytes.len().min(room)];
        if kept.len() < bytes.len() {
            self.truncated = true;
        }
        self.kept.extend_from_slice(kept);
        kept
    }

    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// The kept bytes so far as text (invalid UTF-8 replaced), keeping the buffer.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.kept).into_owned()
    }

    /// The kept bytes as text (invalid UTF-8, e.g. a character cut by the cap, is replaced).
    pub fn into_string(self) -> String {
        match String::from_utf8(self.kept) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_up_to_the_cap_and_flags_the_rest() {
        let mut out = CappedOutput::new(5);
        assert_eq!(out.push(b"abc"), b"abc");
        assert!(!out.truncated());
        assert_eq!(out.push(b"defg"), b"de");
        assert!(out.truncated());
        assert_eq!(out.push(b"h"), b"");
        assert_eq!(out.into_string(), "abcde");
    }

    #[test]
    fn exactly_the_cap_is_not_truncated() {
        let mut out = CappedOutput::new(3);
        out.push(b"abc");
        assert!(!out.truncated());
    }
}
