//! From per-item scores to reported metrics: mean with its standard error per seed, then the
//! spread across seeds (mean ± std, 95% interval), and per-group results with their plain
//! average and standard deviation (MMLU subjects).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::stats::{mean, sample_std, stderr_of_mean, SeedSummary};

use super::record::SampleRecord;

/// One metric of one suite.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricResult {
    /// Mean over seeds of the per-seed value.
    pub value: f64,
    /// Standard error of the per-seed value over items (averaged over seeds).
    pub stderr: f64,
    /// Items (or groups) per seed.
    pub n: usize,
    /// Sum of the per-item values (e.g. the count of invalid answers), averaged over seeds.
    pub sum: f64,
    pub per_seed: Vec<f64>,
    /// Mean ± std and 95% interval across seeds; present with two or more seeds.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub across_seeds: Option<SeedSummary>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Aggregate {
    pub metrics: BTreeMap<String, MetricResult>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub groups: BTreeMap<String, BTreeMap<String, MetricResult>>,
}

#[derive(Clone, Copy)]
struct Single {
    value: f64,
    stderr: f64,
    n: usize,
    sum: f64,
}

fn single(values: &[f64]) -> Single {
    Single { value: mean(values), stderr: stderr_of_mean(values), n: values.len(), sum: values.iter().sum() }
}

fn by_metric<'a>(records: impl Iterator<Item = &'a SampleRecord>) -> BTreeMap<String, Vec<f64>> {
    let mut out: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in records {
        for (name, v) in &r.scores {
            out.entry(name.clone()).or_default().push(*v);
        }
    }
    out
}

/// Metrics of one seed's records: overall, per group, and the group average and spread.
fn one_seed(
    records: &[&SampleRecord],
) -> (BTreeMap<String, Single>, BTreeMap<String, BTreeMap<String, Single>>) {
    let mut overall: BTreeMap<String, Single> =
        by_metric(records.iter().copied()).into_iter().map(|(k, v)| (k, single(&v))).collect();
    let mut groups: BTreeMap<String, BTreeMap<String, Single>> = BTreeMap::new();
    let mut group_names: Vec<&str> = records.iter().filter_map(|r| r.group.as_deref()).collect();
    group_names.sort();
    group_names.dedup();
    for g in &group_names {
        let in_group = records.iter().copied().filter(|r| r.group.as_deref() == Some(*g));
        groups.insert(g.to_string(), by_metric(in_group).into_iter().map(|(k, v)| (k, single(&v))).collect());
    }
    if !groups.is_empty() {
        let names: Vec<String> = overall.keys().cloned().collect();
        for name in names {
            let per_group: Vec<Single> = groups.values().filter_map(|m| m.get(&name).copied()).collect();
            let values: Vec<f64> = per_group.iter().map(|s| s.value).collect();
            let g = per_group.len() as f64;
            let pooled = per_group.iter().map(|s| s.stderr * s.stderr).sum::<f64>().sqrt() / g;
            overall.insert(
                format!("{name}_group_mean"),
                Single { value: mean(&values), stderr: pooled, n: per_group.len(), sum: values.iter().sum() },
            );
            overall.insert(
                format!("{name}_group_std"),
                Single { value: sample_std(&values), stderr: 0.0, n: per_group.len(), sum: 0.0 },
            );
        }
    }
    (overall, groups)
}

fn combine(per_seed: &[Single]) -> MetricResult {
    let values: Vec<f64> = per_seed.iter().map(|s| s.value).collect();
    MetricResult {
        value: mean(&values),
        stderr: mean(&per_seed.iter().map(|s| s.stderr).collect::<Vec<_>>()),
        n: per_seed.first().map_or(0, |s| s.n),
        sum: mean(&per_seed.iter().map(|s| s.sum).collect::<Vec<_>>()),
        across_seeds: (values.len() >= 2).then(|| SeedSummary::of(&values)),
        per_seed: values,
    }
}

/// What a metric measures, in a few words, for the console's first mention of it.
pub fn gloss(metric: &str) -> &'static str {
    match metric {
        "acc" => "share of items whose highest-likelihood option is the gold one",
        "acc_norm" => "the same, with each option's log-likelihood divided by its length",
        "harness_errors" => "programs the sandbox could not judge (infrastructure); must be 0",
        "timeout_rate" => "share of samples that ran past their time limit",
        "wrong_rate" => "share of samples that ran and failed their tests",
        m if m.starts_with("pass@") => "chance that at least one of k samples passes (unbiased estimate)",
        m if m.starts_with("exact_match") => "share of answers equal to the reference after extraction",
        _ => "",
    }
}

/// Aggregates records grouped by seed (seeds in the order given).
pub fn aggregate(per_seed: &[(u64, Vec<&SampleRecord>)]) -> Aggregate {
    let seeds: Vec<_> = per_seed.iter().map(|(_, recs)| one_seed(recs)).collect();
    let mut agg = Aggregate::default();
    let names: std::collections::BTreeSet<String> =
        seeds.iter().flat_map(|(o, _)| o.keys().cloned()).collect();
    for name in names {
        let singles: Vec<Single> = seeds.iter().filter_map(|(o, _)| o.get(&name).copied()).collect();
        agg.metrics.insert(name, combine(&singles));
    }
    let group_names: std::collections::BTreeSet<String> =
        seeds.iter().flat_map(|(_, g)| g.keys().cloned()).collect();
    for g in group_names {
        let metric_names: std::collections::BTreeSet<String> =
            seeds.iter().filter_map(|(_, gs)| gs.get(&g)).flat_map(|m| m.keys().cloned()).collect();
        let mut out = BTreeMap::new();
        for name in metric_names {
            let singles: Vec<Single> =
                seeds.iter().filter_map(|(_, gs)| gs.get(&g).and_then(|m| m.get(&name)).copied()).collect();
            out.insert(name, combine(&singles));
        }
        agg.groups.insert(g, out);
    }
    agg
}

/// The metrics of a finished run: per seed, the records of `doc_ids` in order.
pub fn aggregate_run(
    records: &BTreeMap<String, SampleRecord>,
    seeds: &[u64],
    doc_ids: &[String],
) -> Aggregate {
    let per_seed: Vec<(u64, Vec<&SampleRecord>)> = seeds
        .iter()
        .map(|&s| (s, doc_ids.iter().filter_map(|id| records.get(&SampleRecord::key_of(s, id))).collect()))
        .collect();
    aggregate(&per_seed)
}
