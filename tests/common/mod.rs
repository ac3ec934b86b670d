//! Helpers shared by the integration tests (`mod common;`); each test binary uses some of them.
#![allow(dead_code)]

pub mod browser;
pub mod cli;
pub mod gguf;
pub mod hub;
pub mod llama;
pub mod ray;
pub mod sandbox;
pub mod scripted;
pub mod serve;
pub mod swe;
pub mod venv;
