//! Scheduling, resume and append-only results.

pub mod config;
pub mod fingerprint;
pub mod kernel;
pub mod store;
pub mod swe;
pub mod swe_infer;
