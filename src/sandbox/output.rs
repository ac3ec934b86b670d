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

/// Keeps the first half of `cap` bytes of a stream and its last half, and counts what was cut
/// between them: a runner's closing summary (pytest's `-rA` section, `Ran N tests`) comes last,
/// so a long log must not push it out.
#[derive(Debug)]
pub struct CappedOutput {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    cap: usize,
    cut: u64,
}

impl CappedOutput {
    pub fn new(cap: usize) -> Self {
        Self { head: Vec::new(), tail: std::collections::VecDeque::new(), cap, cut: 0 }
    }

    fn head_cap(&self) -> usize {
        self.cap - self.cap / 2
    }

    /// Appends `bytes` and returns the part that went to the head (what is shown live); the
    /// rest goes to the tail, whose oldest bytes are cut once it is full.
    pub fn push<'a>(&mut self, bytes: &'a [u8]) -> &'a [u8] {
        let room = self.head_cap().saturating_sub(self.head.len());
        let (head, rest) = bytes.split_at(bytes.len().min(room));
        self.head.extend_from_slice(head);
        self.tail.extend(rest);
        let tail_cap = self.cap / 2;
        if self.tail.len() > tail_cap {
            let excess = self.tail.len() - tail_cap;
            self.tail.drain(..excess);
            self.cut += excess as u64;
        }
        head
    }

    /// Whether bytes were cut.
    pub fn truncated(&self) -> bool {
        self.cut > 0
    }

    /// Head, a line saying how much was cut (when something was), and tail, as text (invalid
    /// UTF-8, e.g. a character cut in two, is replaced).
    pub fn text(&self) -> String {
        let mut bytes = self.head.clone();
        if self.cut > 0 {
            bytes.extend_from_slice(
                format!("\n[... {} bytes cut here by the output cap ...]\n", self.cut).as_bytes(),
            );
        }
        bytes.extend(self.tail.iter());
        match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }

    pub fn into_string(self) -> String {
        self.text()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_head_and_the_tail_and_says_what_was_cut() {
        let mut out = CappedOutput::new(6);
        assert_eq!(out.push(b"ab"), b"ab");
        assert_eq!(out.push(b"cdef"), b"c");
        assert!(!out.truncated());
        assert_eq!(out.text(), "abcdef");
        assert_eq!(out.push(b"ghij"), b"");
        assert!(out.truncated());
        assert_eq!(out.into_string(), "abc\n[... 4 bytes cut here by the output cap ...]\nhij");
    }

    #[test]
    fn exactly_the_cap_is_not_truncated() {
        let mut out = CappedOutput::new(3);
        out.push(b"abc");
        assert!(!out.truncated());
        assert_eq!(out.into_string(), "abc");
    }
}
