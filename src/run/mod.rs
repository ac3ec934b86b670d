//! Scheduling, resume and append-only results.

pub mod config;
pub mod swe;
pub mod swe_infer;
