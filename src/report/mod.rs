//! Result events and the reporters that consume them (console progress, JSON/JSONL).
