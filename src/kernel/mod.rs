//! The run kernel every kind of run goes through: items are matched against the result store
//! (reuse or recompute, with the reason), scheduled with a bound on concurrency
//! ([`scheduler`]), and every event goes first to the store (which appends finished
//! records, synced) and then to the run's other subscribers.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::time::Instant;

pub mod fingerprint;
pub mod interrupt;
pub mod scheduler;
pub mod store;

use self::fingerprint::Fingerprint;
use self::scheduler::{run_pool, PoolError};
use self::store::{ResultStore, Resume, ResumeSummary, StoredRecord};
use crate::report::{ReportError, Reporter, ResultEvent, RunRecords, Skipped, Tally};

/// One run: its store, its reporters, and the records finished so far (reused or new).
pub struct Kernel<'a, R: StoredRecord> {
    run: String,
    store: ResultStore<R>,
    reporter: &'a mut dyn Reporter<R>,
    started: Instant,
    finished: BTreeMap<String, R>,
    skipped: Vec<Skipped>,
}

impl<'a, R: StoredRecord + Clone + Send> Kernel<'a, R> {
    /// Opens the store at `path` (reading what an earlier run left; `force` reuses nothing).
    pub fn open(
        run: &str,
        path: &Path,
        force: bool,
        reporter: &'a mut dyn Reporter<R>,
    ) -> Result<Self, ReportError> {
        Ok(Self {
            run: run.to_owned(),
            store: ResultStore::open(path, force)?,
            reporter,
            started: Instant::now(),
            finished: BTreeMap::new(),
            skipped: Vec::new(),
        })
    }

    /// Splits `items` into reused records and work to do, and announces the run. `identify`
    /// gives an item's key and the fingerprint of its inputs now.
    pub fn plan<I>(
        &mut self,
        items: Vec<I>,
        identify: impl Fn(&I) -> (String, Fingerprint),
    ) -> Result<Vec<(I, Fingerprint)>, ReportError> {
        let mut todo = Vec::new();
        let mut reused = Vec::new();
        for item in items {
            let (key, fingerprint) = identify(&item);
            match self.store.resume(&key, &fingerprint) {
                Resume::Reuse(record) => reused.push((key, record)),
                Resume::Recompute(_) => todo.push((item, fingerprint)),
            }
        }
        let summary = self.store.summary();
        self.report(&ResultEvent::RunStarted {
            run: self.run.clone(),
            total: todo.len(),
            resumed: summary.reused,
            recomputed: summary.recomputed_again(),
        })?;
        for (key, record) in reused {
            self.report(&ResultEvent::ItemReused { id: key.clone(), record: record.clone() })?;
            self.finished.insert(key, record);
        }
        Ok(todo)
    }

    /// Sends `event` to the store first, so a record is on disk before anyone is told of it;
    /// the other subscribers see it only when the store took it.
    pub fn report(&mut self, event: &ResultEvent<R>) -> Result<(), ReportError> {
        self.store.report(event)?;
        if let ResultEvent::ItemSkipped(skipped) = event {
            self.skipped.push(skipped.clone());
        }
        self.reporter.report(event)
    }

    /// Stores a finished record (synced), then reports it.
    pub fn finish_item(&mut self, record: R, outcome: &str, success: bool) -> Result<(), ReportError> {
        let key = record.key();
        self.report(&ResultEvent::ItemFinished {
            id: key.clone(),
            outcome: outcome.to_owned(),
            success,
            record: record.clone(),
        })?;
        self.finished.insert(key, record);
        Ok(())
    }

    /// Runs `todo` through the scheduler, at most `workers` at once; each result is stored and
    /// reported as it comes. A panicking item becomes `on_panic(key, why)`. `outcome` labels a
    /// record for events.
    pub async fn run_concurrently<I, Fut>(
        &mut self,
        todo: Vec<(I, Fingerprint)>,
        workers: usize,
        key_of: impl Fn(&I) -> String,
        execute: impl Fn(I, Fingerprint) -> Fut,
        on_panic: impl Fn(&str, String) -> R,
        outcome: impl Fn(&R) -> (String, bool),
    ) -> Result<(), ReportError>
    where
        I: Send + 'static,
        Fut: Future<Output = R> + Send + 'static,
        R: 'static,
    {
        let keys: Vec<String> = todo.iter().map(|(item, _)| key_of(item)).collect();
        let mut first_error = None;
        run_pool(
            todo,
            workers,
            |_, (item, fingerprint)| {
                let work = execute(item, fingerprint);
                async move { Ok::<R, std::convert::Infallible>(work.await) }
            },
            |index, done| {
                let record = match done {
                    Ok(record) => record.clone(),
                    Err(PoolError::Panicked { message, .. }) => on_panic(
                        keys.get(index).map_or("", String::as_str),
                        format!("internal error: {message}"),
                    ),
                    Err(PoolError::Failed(never)) => match *never {},
                };
                let (label, success) = outcome(&record);
                if let Err(e) = self.finish_item(record, &label, success) {
                    first_error.get_or_insert(e);
                }
            },
        )
        .await;
        first_error.map_or(Ok(()), Err)
    }

    /// How resume went.
    pub fn resume_summary(&self) -> &ResumeSummary {
        self.store.summary()
    }

    /// Announces the end with the tally `count` makes of all records, and returns what the run
    /// ended with: the same records and skipped inputs the subscribers were shown.
    pub fn finish_with(
        mut self,
        count: impl Fn(&BTreeMap<String, R>) -> Tally,
    ) -> Result<RunRecords<R>, ReportError> {
        let Tally { counts, words } = count(&self.finished);
        let elapsed_s = self.started.elapsed().as_secs_f64();
        self.report(&ResultEvent::RunFinished { counts: counts.clone(), words, elapsed_s })?;
        Ok(RunRecords { records: self.finished, skipped: self.skipped, counts, elapsed_s })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::fingerprint::FingerprintBuilder;
    use crate::kernel::store::tests::Item;
    use crate::report::{Fanout, FinalWriter};

    /// One run over ids `a`, `b`, `c` where `b`'s input is `b_input`; returns what the final
    /// file subscriber saw and what the store holds.
    fn run_once(path: &Path, b_input: &str) -> (BTreeMap<String, u32>, Vec<String>) {
        let mut seen = BTreeMap::new();
        let mut skipped = Vec::new();
        let mut final_file = FinalWriter::new(|run: &RunRecords<Item>| {
            seen = run.records.iter().map(|(k, r)| (k.clone(), r.value)).collect();
            skipped = run.skipped.iter().map(|s| s.location.clone()).collect();
            Ok(())
        });
        let mut subscribers = Fanout::new(vec![&mut final_file]);
        let mut kernel = Kernel::open("test", path, false, &mut subscribers).unwrap();
        let fingerprint = |id: &str| {
            let input = if id == "b" { b_input } else { "same" };
            FingerprintBuilder::new().id("input", input).finish()
        };
        let todo = kernel.plan(vec!["a", "b", "c"], |id| (id.to_string(), fingerprint(id))).unwrap();
        kernel.report(&Skipped::invalid("in.jsonl:4".into(), None, "bad".into()).event()).unwrap();
        for (id, fingerprint) in todo {
            let value = if id == "b" { b_input.len() as u32 } else { 1 };
            kernel
                .finish_item(
                    Item { id: id.into(), value, failed_infra: false, fingerprint: Some(fingerprint) },
                    "done",
                    true,
                )
                .unwrap();
        }
        let returned = kernel
            .finish_with(|records| Tally {
                counts: BTreeMap::from([("n".into(), records.len())]),
                words: String::new(),
            })
            .unwrap();
        assert_eq!(returned.counts["n"], 3);
        drop(subscribers);
        drop(final_file);
        (seen, skipped)
    }

    #[test]
    fn the_final_file_subscriber_sees_reused_and_new_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.jsonl");
        let (first, skipped) = run_once(&path, "x");
        assert_eq!(first, BTreeMap::from([("a".into(), 1), ("b".into(), 1), ("c".into(), 1)]));
        assert_eq!(skipped, ["in.jsonl:4"]);
        // `b` changed: recomputed; `a` and `c` come to the subscriber as reused records.
        let (second, _) = run_once(&path, "xyz");
        assert_eq!(second, BTreeMap::from([("a".into(), 1), ("b".into(), 3), ("c".into(), 1)]));
        let stored = std::fs::read_to_string(&path).unwrap();
        assert_eq!(stored.lines().count(), 4, "only the recomputed record was appended: {stored}");
    }
}
