//! repairbench: measures how well a coding model really fixes bugs in your code.
//!
//! Data flows one way: task or suite item → prompt → model (generate or score) → patch or
//! answer → sandbox run → grade → result event → reporters. Each stage is its own module and
//! knows nothing of the stages after it: the model knows no containers, the sandbox knows no
//! models, grading never calls the model.

pub mod compare;
pub mod dates;
pub mod deadline;
pub mod digest;
pub mod env;
pub mod executor;
pub mod grade;
pub mod http;
pub mod kernel;
pub mod model;
pub mod order;
pub mod patch;
pub mod perturb;
pub mod probe;
pub mod repair;
pub mod report;
pub mod rng;
pub mod run;
pub mod sandbox;
pub mod serve;
pub mod shell;
pub mod stats;
pub mod suites;
pub mod tasks;

/// The `tracing` target of the few notices a user should see while they wait (an image being
/// built or bootstrapped): the CLI shows them at its default verbosity, plainly.
pub const PROGRESS: &str = "repairbench::progress";

/// An error and its `#[source]` chain on one line (`outer: cause: root cause`), for reports
/// and logs that keep text only.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
