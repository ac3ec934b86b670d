//! The one scheduler: many jobs at once behind a queue, at most `workers` in flight, each
//! outcome handed over as it finishes and all of them returned in input order; one job
//! failing (or panicking) never stops the others. The run kernel schedules every concurrent
//! run through it.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::Semaphore;

/// Why one job of a pool produced no value.
#[derive(Debug, thiserror::Error)]
pub enum PoolError<E> {
    #[error(transparent)]
    Failed(E),
    #[error("job {index} panicked: {message}")]
    Panicked { index: usize, message: String },
}

/// Runs `job(index, item)` for every item, `workers` at a time (at least one), and returns
/// each job's outcome in the items' order. `on_done` is called as each job finishes (to store
/// and report it).
pub async fn run_pool<I, T, E, F, Fut>(
    items: Vec<I>,
    workers: usize,
    job: F,
    mut on_done: impl FnMut(usize, &Result<T, PoolError<E>>),
) -> Vec<Result<T, PoolError<E>>>
where
    I: Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
    F: Fn(usize, I) -> Fut,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(workers.max(1)));
    let mut running = tokio::task::JoinSet::new();
    let count = items.len();
    let mut task_index = std::collections::HashMap::new();
    for (index, item) in items.into_iter().enumerate() {
        let slots = Arc::clone(&slots);
        let future = job(index, item);
        let handle = running.spawn(async move {
            // The semaphore is never closed, so acquiring only waits for a free slot.
            let _slot = slots.acquire_owned().await.expect("pool semaphore closed");
            (index, future.await)
        });
        task_index.insert(handle.id(), index);
    }
    let mut results: Vec<Option<Result<T, PoolError<E>>>> = (0..count).map(|_| None).collect();
    loop {
        let joined = running.join_next_with_id().await;
        let Some(joined) = joined else { break };
        let (index, outcome) = match joined {
            Ok((_, (index, outcome))) => (index, outcome.map_err(PoolError::Failed)),
            Err(e) => {
                let index = task_index.remove(&e.id()).unwrap_or(usize::MAX);
                let message = if e.is_panic() {
                    let payload = e.into_panic();
                    payload
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| payload.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".into())
                } else {
                    "cancelled".into()
                };
                (index, Err(PoolError::Panicked { index, message }))
            }
        };
        on_done(index, &outcome);
        if let Some(slot) = results.get_mut(index) {
            *slot = Some(outcome);
        }
    }
    results
        .into_iter()
        .enumerate()
        .map(|(index, r)| r.unwrap_or_else(|| Err(PoolError::Panicked { index, message: "lost".into() })))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn failures_and_panics_do_not_stop_the_others_and_workers_bound_concurrency() {
        let in_flight = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let items: Vec<usize> = (0..12).collect();
        let results = run_pool(
            items,
            3,
            |_, n| {
                let in_flight = Arc::clone(&in_flight);
                let peak = Arc::clone(&peak);
                async move {
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    if n == 4 {
                        panic!("job four blew up");
                    }
                    if n % 5 == 0 {
                        Err(format!("job {n} failed"))
                    } else {
                        Ok(n * 10)
                    }
                }
            },
            |_, _| {},
        )
        .await;
        assert_eq!(results.len(), 12);
        assert!(peak.load(Ordering::SeqCst) <= 3, "more than 3 jobs ran at once");
        assert!(peak.load(Ordering::SeqCst) >= 2, "the pool never ran jobs concurrently");
        for (n, r) in results.iter().enumerate() {
            match (n, r) {
                (4, Err(PoolError::Panicked { index, message })) => {
                    assert_eq!(*index, 4);
                    assert!(message.contains("blew up"));
                }
                (n, Err(PoolError::Failed(m))) if n % 5 == 0 => assert_eq!(m, &format!("job {n} failed")),
                (n, Ok(v)) => assert_eq!(*v, n * 10),
                (n, other) => panic!("job {n}: unexpected {other:?}"),
            }
        }
    }
}
