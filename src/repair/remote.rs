//! Grading on a Ray cluster. The coordinator (here) keeps the run: it loads the inputs,
//! matches them against the result store, and sends only the instances to grade, in units,
//! with one package holding its own executable, the dataset, the predictions and the
//! settings. A worker (`repairbench worker grade`, on a node with a Docker engine) grades its
//! unit with the ordinary code and prints one frame per finished instance: the record and
//! its logs. Each record is stored only if its fingerprint is the one the coordinator
//! computed for that instance, so a worker on other inputs or other code earns nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;

use super::{error_result, GradePlan, InstanceResult, RunError};
use crate::executor::frame::FrameWriter;
use crate::executor::package::{Package, PackageError, RAY_PACKAGE_LIMIT};
use crate::executor::{
    units, worker_entrypoint, Admission, DispatchReport, ExecutorError, RayRun, UnitWork, WORKER_EXE,
};
use crate::kernel::fingerprint::Fingerprint;
use crate::kernel::Kernel;
use crate::tasks::{safe_name, Prediction, SweTask, BUNDLE_FILE};

/// Where the package's parts are, inside it.
const PREDICTIONS: &str = "predictions.jsonl";
const SETTINGS: &str = "settings.json";
const SPECS: &str = "specs.json";

fn package_error(source: crate::executor::package::PackageError) -> RunError {
    RunError::Executor(ExecutorError::Package(source))
}

/// What a run sends: the package, the dataset's path in it, and whether the dataset's
/// repository bundles are in it.
pub(super) struct Shipment {
    package: Package,
    dataset: String,
    bundles_in_package: bool,
}

impl Shipment {
    /// The manifest's `repositories`: whether the bundles travelled, else where workers
    /// fetched the repositories.
    pub(super) fn manifest_entry(
        &self,
        repos: &Option<PathBuf>,
        url_template: &Option<String>,
    ) -> serde_json::Value {
        serde_json::json!({
            "in_package": self.bundles_in_package,
            "fetched_by_workers_from": (!self.bundles_in_package).then(|| repo_flags(repos, url_template)),
        })
    }
}

/// The executable, the dataset as given (a file or a folder) and the run's own `files`. A
/// folder's repository bundles travel with it unless they would take the package over Ray's
/// limit; then they stay here and workers fetch each repository where
/// `--repos`/`--url-template` say (the run is refused when neither is given).
fn dataset_package(
    exe: &Path,
    dataset: &Path,
    files: &[(&str, Vec<u8>)],
    repos: &Option<PathBuf>,
    url_template: &Option<String>,
) -> Result<Shipment, RunError> {
    let name = dataset.file_name().map_or_else(|| "dataset".into(), |n| n.to_string_lossy().into_owned());
    let inside = format!("dataset/{name}");
    let build = |bundles: bool| -> Result<Package, RunError> {
        let mut package = Package::new();
        package.add_file(WORKER_EXE, exe, true).map_err(package_error)?;
        if dataset.is_dir() {
            let is_bundle = |path: &Path| !bundles && path.file_name().is_some_and(|n| n == BUNDLE_FILE);
            package.add_dir_except(&inside, dataset, &is_bundle).map_err(package_error)?;
        } else {
            package.add_file(&inside, dataset, false).map_err(package_error)?;
        }
        for (name, bytes) in files {
            package.add_bytes(name, bytes.clone());
        }
        Ok(package)
    };
    let whole = build(true)?;
    if whole.fits().map_err(package_error)? {
        return Ok(Shipment { package: whole, dataset: inside, bundles_in_package: true });
    }
    let lean = build(false)?;
    if lean.size() == whole.size() {
        // No bundles to leave out: the executable and inputs alone are too large.
        return Ok(Shipment { package: whole, dataset: inside, bundles_in_package: true });
    }
    if repos.is_none() && url_template.is_none() {
        return Err(package_error(PackageError::TooLarge {
            size_mib: whole.size() >> 20,
            limit_mib: RAY_PACKAGE_LIMIT >> 20,
            why: format!(
                "the dataset's repository bundles take {} MiB; let workers fetch the repositories instead (--repos DIR on storage they share, or --url-template)",
                (whole.size() - lean.size()) >> 20
            ),
        }));
    }
    tracing::info!(
        "the repository bundles ({} MiB) stay here: workers fetch the repositories themselves",
        (whole.size() - lean.size()) >> 20
    );
    Ok(Shipment { package: lean, dataset: inside, bundles_in_package: false })
}

/// Where workers find repositories (`--repos`, `--url-template`), as the coordinator does.
fn repo_flags(repos: &Option<PathBuf>, url_template: &Option<String>) -> Vec<String> {
    let mut flags = Vec::new();
    if let Some(repos) = repos {
        flags.extend(["--repos".into(), repos.to_string_lossy().into_owned()]);
    }
    if let Some(template) = url_template {
        flags.extend(["--url-template".into(), template.clone()]);
    }
    flags
}

/// The package: the executable, the dataset, every prediction of the run's work (not only
/// what is left, so a rerun finds the same package) and the settings. When the repository
/// bundles stay here, `work`'s tasks lose theirs too, so the fingerprints computed here are
/// the ones workers compute.
pub(super) fn package(
    grading: &RayRun,
    plan: &GradePlan,
    work: &mut [(SweTask, Prediction)],
) -> Result<Shipment, RunError> {
    let mut predictions = String::new();
    for (_, prediction) in work.iter() {
        predictions.push_str(&serde_json::to_string(prediction).unwrap_or_default());
        predictions.push('\n');
    }
    let mut files = vec![
        (PREDICTIONS, predictions.into_bytes()),
        (SETTINGS, serde_json::to_vec_pretty(&plan.settings).unwrap_or_default()),
    ];
    if let Some(path) = &plan.specs {
        // Workers give the tasks the same environments, so their fingerprints match ours.
        let specs = std::fs::read(path).map_err(|source| {
            RunError::Specs(crate::tasks::specs::SpecsError::Read { path: path.clone(), source })
        })?;
        files.push((SPECS, specs));
    }
    let shipment = dataset_package(&grading.exe, &plan.dataset, &files, &plan.repos, &plan.url_template)?;
    if !shipment.bundles_in_package {
        for (task, _) in work.iter_mut() {
            task.bundle = None;
        }
    }
    Ok(shipment)
}

/// Stores what comes back: checked against the fingerprints computed here.
struct Collect<'k, 'r> {
    kernel: &'k mut Kernel<'r, InstanceResult>,
    admission: Admission,
    out: PathBuf,
    entrypoint: Vec<String>,
}

impl UnitWork for Collect<'_, '_> {
    fn entrypoint(&self, items: &[String]) -> String {
        worker_entrypoint(&self.entrypoint, items)
    }

    fn store(&mut self, frame: serde_json::Value) -> Result<Option<String>, ExecutorError> {
        let Some(record) = self.admission.admit_frame::<InstanceResult>(&frame) else { return Ok(None) };
        let id = record.instance_id.clone();
        let log_dir = self.out.join("logs").join(safe_name(&id));
        let _ = std::fs::create_dir_all(&log_dir);
        if let Some(logs) = frame.get("logs").and_then(|l| l.as_object()) {
            for (name, content) in logs {
                // A log's name is one plain file name, never a path.
                if name.is_empty() || name.contains(['/', '\\']) || name == "." || name == ".." {
                    continue;
                }
                let bytes = content
                    .as_str()
                    .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
                    .unwrap_or_default();
                let _ = std::fs::write(log_dir.join(name), bytes);
            }
        }
        let outcome = record.verdict.as_str().to_owned();
        let resolved = record.resolved;
        self.kernel.finish_item(record, &outcome, resolved).map_err(|e| ExecutorError::Store(Box::new(e)))?;
        Ok(Some(id))
    }
}

/// Grades `todo` on the cluster, storing each record through `kernel`; instances that got
/// no record are stored as `error` with the executor's reason.
pub(super) fn grade_on_ray(
    grading: &RayRun,
    kernel: &mut Kernel<'_, InstanceResult>,
    todo: Vec<((SweTask, Prediction), Fingerprint)>,
    shipment: &Shipment,
    plan: &GradePlan,
) -> Result<DispatchReport, RunError> {
    let mut entrypoint: Vec<String> = ["./repairbench", "worker", "grade", "--dataset", &shipment.dataset]
        .into_iter()
        .map(str::to_owned)
        .collect();
    entrypoint.extend(["--predictions".into(), PREDICTIONS.into(), "--settings".into(), SETTINGS.into()]);
    entrypoint.extend(repo_flags(&plan.repos, &plan.url_template));
    if plan.specs.is_some() {
        entrypoint.extend(["--specs".into(), SPECS.into()]);
    }
    entrypoint.extend(plan.perturb.iter().flat_map(|spec| spec.flags()));
    let units = units(
        todo.iter()
            .map(|((task, _), fingerprint)| (task.instance_id.clone(), fingerprint.to_json()))
            .collect(),
        grading.unit_size,
    );
    let expected: BTreeMap<String, Fingerprint> =
        todo.into_iter().map(|((task, _), fingerprint)| (task.instance_id, fingerprint)).collect();
    let admission = Admission::new(expected.iter().map(|(id, f)| (id.clone(), f.to_json())).collect());
    let mut collect = Collect { kernel, admission, out: plan.out.clone(), entrypoint };
    let report = grading
        .executor
        .dispatch(plan.force, &shipment.package, units, &mut collect)
        .map_err(RunError::Executor)?;
    for unfinished in &report.unfinished {
        if collect.admission.is_stored(&unfinished.key) {
            continue;
        }
        let mut result = error_result(&unfinished.key, unfinished.detail.clone());
        result.reason = Some(unfinished.reason.to_owned());
        result.fingerprint = expected.get(&unfinished.key).cloned();
        collect.kernel.finish_item(result, "error", false).map_err(RunError::Report)?;
    }
    Ok(report)
}

/// A worker's reporter: each finished instance as one frame, with the files of its log folder.
pub fn worker_frames(out: PathBuf) -> FrameWriter<InstanceResult> {
    FrameWriter::new(move |record: &InstanceResult| Some(out.join(&record.log_dir)))
}

/// What a worker needs to generate as the coordinator does (an inference unit's settings).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct InferSettings {
    pub prompt: crate::tasks::prompt::PromptSettings,
    pub max_tokens: usize,
    pub sampling: crate::model::Sampling,
}

/// An inference run's cluster side: the executor, and the worker's model flags besides the
/// model itself (`--decode-batch`, a server's `--concurrency`...).
pub struct InferCluster {
    pub ray: RayRun,
    pub args: Vec<String>,
}

/// Stores the predictions that come back, checked against the fingerprints computed here.
struct CollectPredictions<'k, 'r> {
    kernel: &'k mut Kernel<'r, Prediction>,
    admission: Admission,
    entrypoint: Vec<String>,
    stored: Vec<Prediction>,
}

impl UnitWork for CollectPredictions<'_, '_> {
    fn entrypoint(&self, items: &[String]) -> String {
        worker_entrypoint(&self.entrypoint, items)
    }

    fn store(&mut self, frame: serde_json::Value) -> Result<Option<String>, ExecutorError> {
        let Some(prediction) = self.admission.admit_frame::<Prediction>(&frame) else { return Ok(None) };
        let id = prediction.instance_id.clone();
        let (method, success) = super::infer::outcome_of(&prediction);
        self.kernel
            .finish_item(prediction.clone(), &method, success)
            .map_err(|e| ExecutorError::Store(Box::new(e)))?;
        self.stored.push(prediction);
        Ok(Some(id))
    }
}

/// Generates `todo` (instance ids and fingerprints) on the cluster, storing each prediction
/// through `kernel`; instances that got none are stored with a `generation_error` (what a
/// rerun generates again). Returns the predictions that came back.
pub(super) fn infer_on_ray(
    cluster: &InferCluster,
    kernel: &mut Kernel<'_, Prediction>,
    todo: &[(String, Fingerprint)],
    plan: &super::infer::InferPlan,
    model: &crate::model::ModelInfo,
) -> Result<Vec<Prediction>, RunError> {
    let settings =
        InferSettings { prompt: plan.prompt.clone(), max_tokens: plan.max_tokens, sampling: plan.sampling };
    let files = [(SETTINGS, serde_json::to_vec_pretty(&settings).unwrap_or_default())];
    let Shipment { package, dataset, .. } =
        dataset_package(&cluster.ray.exe, &plan.dataset, &files, &plan.repos, &plan.url_template)?;
    let mut entrypoint: Vec<String> =
        ["./repairbench", "worker", "infer", "--dataset", &dataset, "--settings", SETTINGS]
            .map(String::from)
            .into();
    entrypoint.extend(repo_flags(&plan.repos, &plan.url_template));
    entrypoint.extend(plan.perturb.iter().flat_map(|spec| spec.flags()));
    entrypoint.extend(crate::executor::model_flags(model));
    entrypoint.extend(cluster.args.iter().cloned());
    let items: Vec<(String, serde_json::Value)> =
        todo.iter().map(|(id, fingerprint)| (id.clone(), fingerprint.to_json())).collect();
    let admission = Admission::new(items.iter().cloned().collect());
    let mut collect = CollectPredictions { kernel, admission, entrypoint, stored: Vec::new() };
    let report = cluster
        .ray
        .executor
        .dispatch(plan.force, &package, units(items, cluster.ray.unit_size), &mut collect)
        .map_err(RunError::Executor)?;
    tracing::info!("inference on the cluster: {}", cluster.ray.manifest_entry(&report));
    let model_name = model.name.clone().unwrap_or_else(|| model.source.clone());
    let fingerprints: BTreeMap<&str, &Fingerprint> = todo.iter().map(|(id, f)| (id.as_str(), f)).collect();
    for unfinished in &report.unfinished {
        if collect.admission.is_stored(&unfinished.key) {
            continue;
        }
        let mut extra = BTreeMap::new();
        let why = format!("{}: {}", unfinished.reason, unfinished.detail);
        extra.insert("generation_error".into(), serde_json::json!(why));
        let fingerprint = fingerprints.get(unfinished.key.as_str());
        extra.insert(super::infer::FINGERPRINT_FIELD.into(), serde_json::json!(fingerprint));
        let prediction = Prediction {
            instance_id: unfinished.key.clone(),
            model_name_or_path: Some(model_name.clone()),
            model_patch: Some(String::new()),
            extra,
        };
        collect.kernel.finish_item(prediction, unfinished.reason, false).map_err(RunError::Report)?;
    }
    Ok(collect.stored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::fingerprint::FingerprintBuilder;
    use crate::report::Fanout;

    /// A worker's frame for instance `id` with `fingerprint` and the log files `logs`.
    fn frame_of(id: &str, fingerprint: &Fingerprint, logs: &[(&str, &str)]) -> serde_json::Value {
        let mut record = super::error_result(id, "graded elsewhere".into());
        record.fingerprint = Some(fingerprint.clone());
        let logs: serde_json::Map<String, serde_json::Value> = logs
            .iter()
            .map(|(name, text)| {
                (name.to_string(), base64::engine::general_purpose::STANDARD.encode(text).into())
            })
            .collect();
        serde_json::json!({ "record": record, "logs": logs })
    }

    #[test]
    fn only_records_with_the_fingerprint_computed_here_are_stored_and_logs_stay_in_their_folder() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let mut fanout = Fanout::new(Vec::new());
        let mut kernel = Kernel::open("test", &out.join("results.jsonl"), false, &mut fanout).unwrap();
        let expected = FingerprintBuilder::new().id("input", "a").finish();
        let other = FingerprintBuilder::new().id("input", "b").finish();
        let mut collect = Collect {
            kernel: &mut kernel,
            admission: Admission::new(BTreeMap::from([("a".to_owned(), expected.to_json())])),
            out: out.clone(),
            entrypoint: vec!["./repairbench".into(), "worker".into()],
        };
        assert_eq!(collect.store(frame_of("a", &other, &[])).unwrap(), None, "another fingerprint");
        assert_eq!(collect.store(frame_of("z", &expected, &[])).unwrap(), None, "an instance not asked for");
        assert_eq!(collect.store(serde_json::json!({"record": {"instance_id": 3}})).unwrap(), None);
        let logs = [("test_output.txt", "ok"), ("../escape.txt", "x"), ("..", "x"), ("sub/x", "x")];
        assert_eq!(collect.store(frame_of("a", &expected, &logs)).unwrap(), Some("a".into()));
        assert_eq!(collect.store(frame_of("a", &expected, &logs)).unwrap(), None, "stored once");
        assert_eq!(std::fs::read_to_string(out.join("logs/a/test_output.txt")).unwrap(), "ok");
        let written: Vec<_> =
            std::fs::read_dir(out.join("logs/a")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(written, ["test_output.txt"]);
        assert!(!out.join("logs/escape.txt").exists() && !out.join("escape.txt").exists());
        let stored = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
        assert_eq!(stored.lines().count(), 1);
        let entry = collect.entrypoint(&["a".into(), "b c".into()]);
        assert_eq!(entry, "chmod +x repairbench && exec ./repairbench worker --only a --only 'b c'");
    }
}
