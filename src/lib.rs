//! repairbench: measures how well a coding model really fixes bugs in your code.
//!
//! Data flows one way: task or suite item → prompt → model (generate or score) → patch or
//! answer → sandbox run → grade → result event → reporters. Each stage is its own module and
//! knows nothing of the stages after it: the model knows no containers, the sandbox knows no
//! models, grading never calls the model.

pub mod env;
pub mod grade;
pub mod model;
pub mod patch;
pub mod report;
pub mod run;
pub mod sandbox;
pub mod stats;
pub mod suites;
pub mod tasks;
