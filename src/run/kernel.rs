//! The run kernel every kind of run goes through: items are matched against the result store
//! (reuse or recompute, with the reason), scheduled with a bound on concurrency
//! ([`super::scheduler`]), and each finished record is appended to the store before any other
//! reporter sees its event.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::time::Instant;

use super::fingerprint::Fingerprint;
use super::scheduler::{run_pool, PoolError};
use super::store::{ResultStore, Resume, ResumeSummary, StoredRecord};
use crate::report::{ReportError, Reporter, ResultEvent};

/// One run: its store, its reporters, and the records finished so far (reused or new).
pub struct Kernel<'a, R: StoredRecord> {
    run: String,
    store: ResultStore<R>,
    reporter: &'a mut dyn Reporter<R>,
    started: Instant,
    finished: BTreeMap<String, R>,
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
        for item in items {
            let (key, fingerprint) = identify(&item);
            match self.store.resume(&key, &fingerprint) {
                Resume::Reuse(record) => {
                    self.finished.insert(key, record);
                }
                Resume::Recompute(_) => todo.push((item, fingerprint)),
            }
        }
        let summary = self.store.summary();
        self.reporter.report(&ResultEvent::RunStarted {
            run: self.run.clone(),
            total: todo.len(),
            resumed: summary.reused,
            recomputed: summary.recomputed_again(),
        })?;
        Ok(todo)
    }

    pub fn report(&mut self, event: &ResultEvent<R>) -> Result<(), ReportError> {
        self.reporter.report(event)
    }

    /// Stores a finished record (synced), then reports it.
    pub fn finish_item(&mut self, record: R, outcome: &str, success: bool) -> Result<(), ReportError> {
        self.store.append(&record)?;
        let key = record.key();
        self.reporter.report(&ResultEvent::ItemFinished {
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

    /// Announces the end with the counts `count` makes of all records, and returns every
    /// record, reused and new, by key.
    pub fn finish_with(
        self,
        count: impl Fn(&BTreeMap<String, R>) -> BTreeMap<String, usize>,
    ) -> Result<BTreeMap<String, R>, ReportError> {
        let counts = count(&self.finished);
        self.reporter
            .report(&ResultEvent::RunFinished { counts, elapsed_s: self.started.elapsed().as_secs_f64() })?;
        Ok(self.finished)
    }
}
