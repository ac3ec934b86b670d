//! Scheduling, resume and append-only results.

pub mod config;
pub mod fingerprint;
pub mod interrupt;
pub mod kernel;
pub mod pipeline;
pub mod regenerate;
pub mod scheduler;
pub mod store;
pub mod swe;
pub mod swe_infer;
