//! The application layer: the main job, and the plans that the CLI hands to the suites and to
//! code repair (see `ARCHITECTURE.md`).

pub mod config;
pub mod folder;
pub mod images;
pub mod pipeline;
pub mod regenerate;
