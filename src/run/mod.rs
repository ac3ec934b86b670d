//! Scheduling, resume and append-only results.

pub mod swe;
