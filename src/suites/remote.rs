//! Evaluating on a Ray cluster. The coordinator (here) plans the run against `samples.jsonl`
//! and sends only the items left, in units, with one package holding its own executable, the
//! suite file, the data and the completions; the model is named by its source and hash. A worker (`repairbench worker
//! eval`) evaluates its unit with the ordinary engine and prints one frame per record; a
//! record is stored only with the fingerprint computed here, so a worker on other inputs,
//! another model or other code earns nothing.

use std::path::{Component, Path};

use crate::executor::package::Package;
use crate::executor::{
    units, worker_entrypoint, Admission, DispatchReport, ExecutorError, RayRun, UnitWork, WORKER_EXE,
};
use crate::kernel::store::StoredRecord;
use crate::kernel::Kernel;
use crate::model::ModelInfo;

use super::config::Suite;
use super::record::SampleRecord;
use super::reports::outcome_label;
use super::SuiteError;

/// A run's cluster side, from the caller that knows the model and the sandbox.
pub struct ClusterEval {
    pub ray: RayRun,
    /// The worker's flags besides the files the package carries: the run's options (`--seeds`,
    /// `--shots`, `--batch`...) and how to drive the model (`--decode-batch`...).
    pub args: Vec<String>,
}

/// The files a worker needs, as the coordinator resolved them.
pub(super) struct Inputs<'a> {
    pub suite: &'a Suite,
    pub test: &'a Path,
    pub fewshot: Option<&'a Path>,
    pub samples: Option<&'a Path>,
    pub model: Option<&'a ModelInfo>,
    /// Records of an earlier coordinator's jobs are not collected: everything is computed again.
    pub force: bool,
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned())
}

/// A path inside the package from a suite file's relative path: plain names only, so a suite
/// cannot place a file outside the folder it names.
fn relative_inside(field: &str, path: &str) -> Result<String, SuiteError> {
    let parts: Vec<&str> = Path::new(path)
        .components()
        .map(|c| match c {
            Component::Normal(part) => part.to_str().ok_or(()),
            _ => Err(()),
        })
        .collect::<Result<_, _>>()
        .map_err(|()| SuiteError::Remote {
            what: format!("{field} `{path}` must be a relative path of plain names to travel to a worker"),
        })?;
    Ok(parts.join("/"))
}

/// Where the few-shot file travels: its declared name with the ending of the file actually
/// read (`data/dev.parquet` for a declared `dev.jsonl` read from a hub dataset's Parquet).
fn fewshot_name(declared: &str, actual: &Path) -> Result<String, SuiteError> {
    let declared = relative_inside("data.fewshot", declared)?;
    let stem = declared.split('.').next().unwrap_or(&declared);
    Ok(match file_name(actual).split_once('.') {
        Some((_, ending)) => format!("data/{stem}.{ending}"),
        None => format!("data/{stem}"),
    })
}

/// The package and the worker's command (before `--only`).
fn package(cluster: &ClusterEval, inputs: &Inputs) -> Result<(Package, Vec<String>), SuiteError> {
    let packaging = |e| SuiteError::Executor(ExecutorError::Package(e));
    let mut package = Package::new();
    package.add_file(WORKER_EXE, &cluster.ray.exe, true).map_err(packaging)?;
    package.add_bytes("suite.toml", inputs.suite.text.clone().into_bytes());
    let test = format!("data/{}", file_name(inputs.test));
    package.add_file(&test, inputs.test, false).map_err(packaging)?;
    if let Some(fewshot) = inputs.fewshot {
        // The worker finds the few-shot file where the engine looks beside a test file.
        // It keeps the declared name with the ending of the file actually read (a hub
        // dataset's Parquet for a declared `dev.jsonl`), which that lookup also tries.
        let declared = inputs.suite.def.data.fewshot.as_deref().unwrap_or_default();
        let name = fewshot_name(declared, fewshot)?;
        if name == test {
            return Err(SuiteError::Remote {
                what: format!("data.fewshot `{declared}` has the test file's name"),
            });
        }
        package.add_file(&name, fewshot, false).map_err(packaging)?;
    }
    let mut args: Vec<String> = ["./repairbench", "worker", "eval", "--suite", "suite.toml", "--data", &test]
        .map(String::from)
        .into();
    if let Some(samples) = inputs.samples {
        let name = format!("samples/{}", file_name(samples));
        package.add_file(&name, samples, false).map_err(packaging)?;
        args.extend(["--samples".into(), name]);
    }
    if let Some(model) = inputs.model {
        args.extend(crate::executor::model_flags(model));
    }
    args.extend(cluster.args.iter().cloned());
    Ok((package, args))
}

/// Stores what comes back through the kernel, checked against the fingerprints computed here.
struct Collect<'k, 'r> {
    kernel: &'k mut Kernel<'r, SampleRecord>,
    admission: Admission,
    args: Vec<String>,
    stored: usize,
}

impl UnitWork for Collect<'_, '_> {
    fn entrypoint(&self, items: &[String]) -> String {
        worker_entrypoint(&self.args, items)
    }

    fn store(&mut self, frame: serde_json::Value) -> Result<Option<String>, ExecutorError> {
        let Some(record) = self.admission.admit_frame::<SampleRecord>(&frame) else { return Ok(None) };
        let key = record.key();
        let (outcome, success) = outcome_label(&record);
        self.kernel.finish_item(record, &outcome, success).map_err(|e| ExecutorError::Store(Box::new(e)))?;
        self.stored += 1;
        Ok(Some(key))
    }
}

/// Evaluates `items` (each record's key and fingerprint) on the cluster, storing each record through `kernel` as it comes. Returns
/// the dispatch and the records stored; items left without a record are an error (what came
/// back stays stored, and a rerun sends only the rest).
pub(super) fn evaluate_on_ray(
    cluster: &ClusterEval,
    kernel: &mut Kernel<'_, SampleRecord>,
    items: Vec<(String, serde_json::Value)>,
    inputs: &Inputs,
) -> Result<(DispatchReport, usize), SuiteError> {
    let (package, args) = package(cluster, inputs)?;
    let admission = Admission::new(items.iter().cloned().collect());
    let mut collect = Collect { kernel, admission, args, stored: 0 };
    let report = cluster
        .ray
        .executor
        .dispatch(inputs.force, &package, units(items, cluster.ray.unit_size), &mut collect)
        .map_err(SuiteError::Executor)?;
    let missing: Vec<_> = report.unfinished.iter().filter(|u| !collect.admission.is_stored(&u.key)).collect();
    if let Some(first) = missing.first() {
        return Err(SuiteError::Unfinished {
            count: missing.len(),
            first: format!("{}: {} ({})", first.key, first.reason, first.detail),
        });
    }
    Ok((report, collect.stored))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_names_travel() {
        assert_eq!(relative_inside("f", "dev.jsonl").unwrap(), "dev.jsonl");
        assert_eq!(relative_inside("f", "mmlu/dev.jsonl").unwrap(), "mmlu/dev.jsonl");
        for bad in ["../dev.jsonl", "/etc/passwd", "a/../../b", "./x/../.."] {
            let err = relative_inside("data.fewshot", bad).unwrap_err().to_string();
            assert!(err.contains("data.fewshot") && err.contains(bad), "{bad}: {err}");
        }
    }

    #[test]
    fn a_few_shot_file_travels_where_the_worker_looks_for_it() {
        let hub = Path::new("/hub/snapshots/c0ffee/all/dev-00000-of-00001.parquet");
        assert_eq!(fewshot_name("dev.jsonl", hub).unwrap(), "data/dev.parquet");
        assert_eq!(fewshot_name("dev.jsonl", Path::new("/data/dev.jsonl")).unwrap(), "data/dev.jsonl");
        assert_eq!(
            fewshot_name("mmlu/dev.jsonl", Path::new("/d/x.jsonl.gz")).unwrap(),
            "data/mmlu/dev.jsonl.gz"
        );
        // The worker, given the test file, finds it beside it under the declared name.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("dev.parquet"), b"").unwrap();
        assert_eq!(super::super::source::local_file(dir.path(), "dev.jsonl"), dir.path().join("dev.parquet"));
    }
}
