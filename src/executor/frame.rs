//! How a worker hands finished records back through its job's log: one line per record,
//! `repairbench-frame:1:` then the record (with its logs) as gzip-compressed JSON in base64.
//! The log is the only channel a Ray job has that outlives the worker's process without
//! shared storage, and a line is atomic enough: a frame cut short by a dying node does not
//! decode and is ignored, so its item counts as unfinished.

use std::io::{Read, Write};
use std::path::PathBuf;

use base64::Engine as _;
use flate2::{read::GzDecoder, write::GzEncoder, Compression};

const PREFIX: &str = "repairbench-frame:1:";
/// A frame holds at most this much JSON once decompressed (a worker's logs are capped far
/// below; this keeps a hostile frame from filling memory).
const MAX_FRAME: u64 = 256 << 20;

/// One frame's line (without its newline).
pub fn encode(value: &serde_json::Value) -> String {
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    // Writing into a Vec cannot fail.
    let _ = gz.write_all(value.to_string().as_bytes());
    let bytes = gz.finish().unwrap_or_default();
    format!("{PREFIX}{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// The frame a line holds: `None` for every other line and for a frame that does not decode.
pub fn decode(line: &str) -> Option<serde_json::Value> {
    let body = line.trim_end().strip_prefix(PREFIX)?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(body).ok()?;
    let mut text = String::new();
    GzDecoder::new(bytes.as_slice()).take(MAX_FRAME).read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

/// Reads frames out of a log that grows: each call gets the whole log so far (as Ray's jobs
/// API serves it) and returns the frames of the lines completed since the last call.
#[derive(Debug, Default)]
pub struct FrameReader {
    consumed: usize,
}

impl FrameReader {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn read(&mut self, log: &str) -> Vec<serde_json::Value> {
        let Some(new) = log.get(self.consumed..) else {
            // The log is shorter than before (a new attempt's log): start over.
            self.consumed = 0;
            return self.read(log);
        };
        let complete = new.rfind('\n').map_or(0, |end| end + 1);
        self.consumed += complete;
        new[..complete].lines().filter_map(decode).collect()
    }
}

/// A worker's reporter: each finished record as one frame on standard output, with the files
/// of the folder `logs` names for it (if any), each as base64.
pub struct FrameWriter<R> {
    logs: LogsDir<R>,
}

/// Where a record's log files lie, if it has any.
type LogsDir<R> = Box<dyn Fn(&R) -> Option<PathBuf> + Send>;

impl<R> FrameWriter<R> {
    pub fn new(logs: impl Fn(&R) -> Option<PathBuf> + Send + 'static) -> Self {
        Self { logs: Box::new(logs) }
    }
}

impl<R: serde::Serialize> crate::report::Reporter<R> for FrameWriter<R> {
    fn report(&mut self, event: &crate::report::ResultEvent<R>) -> Result<(), crate::report::ReportError> {
        let crate::report::ResultEvent::ItemFinished { record, .. } = event else { return Ok(()) };
        let mut logs = serde_json::Map::new();
        if let Some(Ok(entries)) = (self.logs)(record).map(std::fs::read_dir) {
            for entry in entries.filter_map(Result::ok).filter(|e| e.path().is_file()) {
                let bytes = std::fs::read(entry.path()).unwrap_or_default();
                logs.insert(
                    entry.file_name().to_string_lossy().into_owned(),
                    base64::engine::general_purpose::STANDARD.encode(bytes).into(),
                );
            }
        }
        let frame = encode(&serde_json::json!({ "record": record, "logs": logs }));
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{frame}")
            .and_then(|()| stdout.flush())
            .map_err(|source| crate::report::ReportError::Write { path: PathBuf::from("<stdout>"), source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_survive_the_log_and_partial_or_foreign_lines_do_not_count() {
        let record = serde_json::json!({"record": {"instance_id": "a"}, "logs": {"x.log": "é\n"}});
        let line = encode(&record);
        assert_eq!(decode(&line), Some(record.clone()));
        assert_eq!(decode("hello"), None);
        assert_eq!(decode(&line[..line.len() - 4]), None, "a frame cut short is no frame");

        let mut reader = FrameReader::new();
        let half = format!("INFO starting\n{}", &line[..10]);
        assert!(reader.read(&half).is_empty());
        let whole = format!("INFO starting\n{line}\nmore text\n");
        assert_eq!(reader.read(&whole), vec![record.clone()]);
        assert!(reader.read(&whole).is_empty(), "a frame is read once");
    }
}
