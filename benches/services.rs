//! What services cost per instance: each service sample graded (gold) with its services, and
//! again as a single-container task (its `services` and `service_checks` removed, so the
//! tests run alone with no network and fail fast). Prints, per sample, the time from the
//! group's start until every service was ready and the test stage's time both ways (the
//! difference is the services' overhead: network, containers, readiness, checks, teardown).
//! Images are built before measuring.
//!
//! `cargo bench --bench services --profile dev [-- ROUNDS]` (default 3).

#[path = "../tests/common/swe.rs"]
mod common_swe;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use repairbench::repair::{self, InstanceResult};
use repairbench::report::ConsoleProgress;
use repairbench::sandbox::{ensure_default_image, DockerSandbox};
use repairbench::tasks::PredictionSource;

const SAMPLES: [&str; 3] = ["shop-api-postgres", "jobs-redis-worker", "kvstore-client-server"];

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

/// A one-task dataset: the sample, or the sample without its services.
fn dataset(root: &Path, sample: &str, with_services: bool) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("issues").join(sample);
    let dir = root.join(format!("{sample}-{with_services}"));
    std::fs::create_dir_all(dir.join(sample)).unwrap();
    std::fs::copy(source.join("repo.bundle"), dir.join(sample).join("repo.bundle")).unwrap();
    let mut task: serde_json::Value =
        serde_json::from_slice(&std::fs::read(source.join("task.json")).unwrap()).unwrap();
    if !with_services {
        let task = task.as_object_mut().unwrap();
        task.remove("services");
        task.remove("service_checks");
    }
    std::fs::write(dir.join(sample).join("task.json"), serde_json::to_vec(&task).unwrap()).unwrap();
    dir
}

async fn grade_once(sandbox: &Arc<DockerSandbox>, image: &str, dataset: &Path, out: &Path) -> InstanceResult {
    let mut plan = common_swe::grade_plan(dataset, PredictionSource::Gold, out, &out.join("cache"), image);
    plan.settings.timeout = Duration::from_secs(120);
    plan.settings.workers = 1;
    plan.settings.flaky_reruns = 0;
    plan.force = true;
    let report = repair::grade(repair::Grader::Local(sandbox.clone()), &plan, &mut ConsoleProgress::hidden())
        .await
        .unwrap();
    report.instances.into_iter().next().expect("one instance")
}

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(3);
    let sandbox = Arc::new(DockerSandbox::connect().await.expect("a running Docker engine"));
    let image = ensure_default_image(sandbox.docker()).await.expect("the default image");
    let dir = tempfile::tempdir().unwrap();
    println!("{rounds} rounds per sample; medians in seconds");
    println!(
        "{:<24} {:>9} {:>14} {:>14} {:>9}",
        "sample", "all-ready", "tests+services", "tests alone", "overhead"
    );
    for sample in SAMPLES {
        let with = dataset(dir.path(), sample, true);
        let alone = dataset(dir.path(), sample, false);
        // Warm-up: builds the service images and the environment.
        let warm = grade_once(&sandbox, &image, &with, &dir.path().join("warm")).await;
        assert!(warm.resolved, "{sample} gold must resolve: {warm:#?}");
        let (mut ready, mut served, mut single) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let out = dir.path().join(format!("{sample}-{round}"));
            let result = grade_once(&sandbox, &image, &with, &out.join("with")).await;
            assert!(result.resolved, "{result:#?}");
            ready.push(result.services.iter().map(|s| s.ready_after_s).fold(0.0, f64::max));
            served.push(result.timings.tests_s);
            single.push(grade_once(&sandbox, &image, &alone, &out.join("alone")).await.timings.tests_s);
        }
        let (ready, served, single) = (median(&mut ready), median(&mut served), median(&mut single));
        println!("{sample:<24} {ready:>9.2} {served:>14.2} {single:>14.2} {:>9.2}", served - single);
    }
}
