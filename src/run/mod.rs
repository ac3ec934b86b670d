//! The application layer: the plan behind each command ([`pipeline`]: the main job, grading,
//! inference, suites), the commands that work the Docker engine directly ([`images`]), run
//! configuration ([`config`]), the one reader of finished run folders ([`folder`]) and report
//! regeneration ([`regenerate`]). See `ARCHITECTURE.md`.

mod cluster;
pub mod config;
pub mod folder;
pub mod images;
pub mod index;
pub mod main_job;
pub mod pipeline;
pub mod regenerate;
