//! Scheduling, resume and append-only results.
