//! Grading plans shared by the SWE grading tests and the services benchmark.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use repairbench::repair::{GradePlan, GradeSettings};
use repairbench::tasks::PredictionSource;

/// Grading of `dataset` into `out` in `image`: 60 s per test run, two workers, repositories
/// only from the task folders' bundles (the URL template points nowhere).
pub fn grade_plan(
    dataset: &Path,
    predictions: PredictionSource,
    out: &Path,
    cache: &Path,
    image: &str,
) -> GradePlan {
    let mut settings = GradeSettings::new(image);
    settings.timeout = Duration::from_secs(60);
    settings.workers = 2;
    GradePlan {
        dataset: dataset.to_owned(),
        predictions,
        repos: None,
        url_template: Some(format!("{}/no-remote/{{repo}}", cache.display())),
        cache_dir: cache.to_owned(),
        out: out.to_owned(),
        settings,
        extra_manifest: BTreeMap::new(),
        force: false,
        specs: None,
        perturb: None,
    }
}
