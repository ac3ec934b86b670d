//! Scheduling, resume and append-only results.

pub mod swe;
pub mod swe_infer;
