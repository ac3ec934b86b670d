//! A team of threads that spin between jobs, for the many small parallel regions of a forward
//! pass.
//!
//! Decoding one token runs about two hundred matmuls of a few dozen microseconds each. Handed
//! to rayon, each one wakes a sleeping worker and lets it sleep again: on our virtual machines
//! a sleeping vCPU halts, and waking it costs more than the matmul (a whole-system profile of
//! 2-thread decode showed 23% of CPU time in the hypervisor's halt). The team's workers spin
//! on one atomic word for a while after each job, so the next job starts at once, and only
//! then park; the caller takes a share of the tasks itself and spins until they all finish.
//!
//! One caller at a time drives the team; a second concurrent caller runs its job on rayon's
//! pool instead of waiting.

use std::cell::UnsafeCell;
use std::ops::Range;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, TryLockError};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long an idle worker spins before it parks: longer than the gaps between the matmuls of
/// a forward pass and between decode steps, short enough that an idle engine stops burning CPU
/// at once.
const SPIN: Duration = Duration::from_millis(2);

/// The job word: epoch (16 bits) | task count (24 bits) | next task (24 bits). A claim is one
/// compare-and-swap on it, so a worker can never claim a task of a job other than the one whose
/// epoch it saw.
const TASK_BITS: u32 = 24;
const TASK_MASK: u64 = (1 << TASK_BITS) - 1;

fn word(epoch: u64, tasks: usize, next: usize) -> u64 {
    (epoch << (2 * TASK_BITS)) | ((tasks as u64) << TASK_BITS) | next as u64
}

fn epoch_of(w: u64) -> u64 {
    w >> (2 * TASK_BITS)
}

/// The current job: a monomorphised trampoline and the closure it calls.
#[derive(Clone, Copy)]
struct Job {
    run: unsafe fn(*const (), usize),
    ctx: *const (),
}

struct Shared {
    word: AtomicU64,
    /// Written by the driving caller only while no task of the previous job can be claimed or
    /// is running; read by a worker only after it has claimed a task of this job.
    job: UnsafeCell<Job>,
    finished: AtomicUsize,
    panicked: AtomicBool,
    sleepers: AtomicUsize,
    workers: OnceLock<Vec<Thread>>,
}

// SAFETY: `job` is only accessed under the claim protocol described on the field.
unsafe impl Sync for Shared {}

pub struct Team {
    shared: &'static Shared,
    threads: usize,
    driving: Mutex<()>,
}

impl Team {
    /// The process's team, with as many threads (the caller included) as rayon's global pool.
    pub fn global() -> &'static Team {
        static TEAM: OnceLock<Team> = OnceLock::new();
        TEAM.get_or_init(|| Team::new(rayon::current_num_threads()))
    }

    fn new(threads: usize) -> Self {
        let threads = threads.max(1);
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            word: AtomicU64::new(word(0, 0, 0)),
            job: UnsafeCell::new(Job { run: noop, ctx: std::ptr::null() }),
            finished: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            workers: OnceLock::new(),
        }));
        let handles: Vec<Thread> = (1..threads)
            .map(|i| {
                std::thread::Builder::new()
                    .name(format!("repairbench-team-{i}"))
                    .spawn(move || worker(shared))
                    .expect("spawning a team thread")
                    .thread()
                    .clone()
            })
            .collect();
        let _ = shared.workers.set(handles);
        Self { shared, threads, driving: Mutex::new(()) }
    }

    /// Threads that run a job, the caller included.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Splits `0..n` into contiguous ranges, `per_thread` per team thread (fewer if `n` is
    /// small), and runs `f` on each range as one task of [`Team::for_each`].
    pub fn for_each_range<F: Fn(Range<usize>) + Sync>(&self, n: usize, per_thread: usize, f: F) {
        let tasks = (self.threads * per_thread).clamp(1, n.max(1));
        let per_task = n.div_ceil(tasks);
        self.for_each(n.div_ceil(per_task.max(1)), |t| f(t * per_task..((t + 1) * per_task).min(n)));
    }

    /// Runs `f(0..tasks)`, each index once, spread over the team; returns when all are done.
    /// A panic in a task is raised here after every task has finished.
    pub fn for_each<F: Fn(usize) + Sync>(&self, tasks: usize, f: F) {
        if tasks == 0 {
            return;
        }
        if self.threads == 1 || tasks == 1 {
            (0..tasks).for_each(f);
            return;
        }
        // A poisoned lock only means an earlier job's task panicked; that job had finished.
        let _driving = match self.driving.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => {
                use rayon::prelude::*;
                (0..tasks).into_par_iter().for_each(&f);
                return;
            }
        };
        assert!(tasks as u64 <= TASK_MASK, "too many tasks for one job");
        let s = self.shared;
        // SAFETY: every task of the previous job has finished (its caller waited for them) and
        // its word has no task left to claim, so no worker reads `job` now.
        unsafe { *s.job.get() = Job { run: trampoline::<F>, ctx: &f as *const F as *const () } };
        s.finished.store(0, Ordering::Relaxed);
        let epoch = (epoch_of(s.word.load(Ordering::Relaxed)) + 1) & 0xFFFF;
        s.word.store(word(epoch, tasks, 0), Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            s.workers.get().into_iter().flatten().for_each(Thread::unpark);
        }
        let mine = catch_unwind(AssertUnwindSafe(|| run_tasks(s, epoch)));
        // `f` lives on this stack: wait for every task before returning or unwinding.
        let mut spins = 0u32;
        while s.finished.load(Ordering::Acquire) < tasks {
            pause(&mut spins);
        }
        if let Err(panic) = mine {
            resume_unwind(panic);
        }
        if s.panicked.swap(false, Ordering::Relaxed) {
            panic!("a task of a team job panicked");
        }
    }
}

unsafe fn noop(_: *const (), _: usize) {}

/// One round of a spin-wait. Every so often it yields instead: when more threads are busy than
/// there are cores (tests running side by side), the thread being waited for may be the one
/// that needs this core.
fn pause(spins: &mut u32) {
    *spins = spins.wrapping_add(1);
    if spins.is_multiple_of(128) {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// # Safety
/// `ctx` must point to a live `F`.
unsafe fn trampoline<F: Fn(usize)>(ctx: *const (), task: usize) {
    (*(ctx as *const F))(task)
}

/// Claims and runs tasks of job `epoch` until none is left.
fn run_tasks(s: &Shared, epoch: u64) {
    let mut w = s.word.load(Ordering::Acquire);
    loop {
        let (tasks, next) = (((w >> TASK_BITS) & TASK_MASK) as usize, (w & TASK_MASK) as usize);
        if epoch_of(w) != epoch || next >= tasks {
            return;
        }
        match s.word.compare_exchange_weak(w, w + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                // SAFETY: the claim succeeded, so `job` is this epoch's and its closure lives
                // until `finished` counts this task.
                let job = unsafe { *s.job.get() };
                if catch_unwind(AssertUnwindSafe(|| unsafe { (job.run)(job.ctx, next) })).is_err() {
                    s.panicked.store(true, Ordering::Relaxed);
                }
                s.finished.fetch_add(1, Ordering::Release);
                w = s.word.load(Ordering::Acquire);
            }
            Err(now) => w = now,
        }
    }
}

fn worker(s: &'static Shared) {
    let mut seen = epoch_of(s.word.load(Ordering::Acquire));
    loop {
        // Spin for a new epoch, then park until the caller unparks us.
        let started = Instant::now();
        let mut spins = 0u32;
        let epoch = loop {
            let e = epoch_of(s.word.load(Ordering::Acquire));
            if e != seen {
                break e;
            }
            if spins.is_multiple_of(1024) && started.elapsed() > SPIN {
                s.sleepers.fetch_add(1, Ordering::SeqCst);
                if epoch_of(s.word.load(Ordering::SeqCst)) == seen {
                    std::thread::park();
                }
                s.sleepers.fetch_sub(1, Ordering::SeqCst);
            } else {
                pause(&mut spins);
            }
        };
        seen = epoch;
        run_tasks(s, epoch);
    }
}

/// A buffer's pointer shared by the tasks of a job that each write their own disjoint elements.
pub(super) struct DisjointPtr<T>(pub(super) *mut T);

impl<T> Clone for DisjointPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for DisjointPtr<T> {}
// SAFETY: every task writes a disjoint set of elements (its own rows or output columns).
unsafe impl<T: Send> Send for DisjointPtr<T> {}
unsafe impl<T: Send> Sync for DisjointPtr<T> {}

impl<T> DisjointPtr<T> {
    /// Through a method so closures capture the whole (Send) wrapper, not its raw field.
    pub(super) fn get(self) -> *mut T {
        self.0
    }

    /// Elements `range` of the buffer.
    ///
    /// # Safety
    /// `range` must be inside the buffer and written by no other task.
    pub(super) unsafe fn slice<'a>(self, range: std::ops::Range<usize>) -> &'a mut [T] {
        std::slice::from_raw_parts_mut(self.0.add(range.start), range.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_once_across_many_jobs() {
        let team = Team::new(3);
        for tasks in [1usize, 2, 7, 64, 1000] {
            for _ in 0..50 {
                let counts: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
                team.for_each(tasks, |t| {
                    counts[t].fetch_add(1, Ordering::Relaxed);
                });
                assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 1), "{tasks} tasks");
            }
        }
        // After the workers have parked, a job still runs to completion.
        std::thread::sleep(SPIN * 3);
        let sum = AtomicUsize::new(0);
        team.for_each(100, |t| {
            sum.fetch_add(t, Ordering::Relaxed);
        });
        assert_eq!(sum.load(Ordering::Relaxed), 4950);
    }

    #[test]
    fn ranges_cover_every_index_once() {
        let team = Team::new(2);
        for n in [0usize, 1, 5, 8, 9, 100] {
            let counts: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            team.for_each_range(n, 4, |range| {
                range.for_each(|i| {
                    counts[i].fetch_add(1, Ordering::Relaxed);
                })
            });
            assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 1), "n = {n}");
        }
    }

    #[test]
    fn a_panicking_task_panics_the_caller_after_the_job() {
        let team = Team::new(2);
        let ran = AtomicUsize::new(0);
        let result = catch_unwind(AssertUnwindSafe(|| {
            team.for_each(16, |t| {
                ran.fetch_add(1, Ordering::Relaxed);
                assert!(t != 5, "task 5 fails");
            })
        }));
        assert!(result.is_err());
        assert_eq!(ran.load(Ordering::Relaxed), 16, "every task ran before the panic surfaced");
        // The team still works afterwards.
        let sum = AtomicUsize::new(0);
        team.for_each(10, |t| {
            sum.fetch_add(t, Ordering::Relaxed);
        });
        assert_eq!(sum.load(Ordering::Relaxed), 45);
    }

    #[test]
    fn concurrent_callers_both_finish() {
        let team = Team::new(2);
        std::thread::scope(|scope| {
            for _ in 0..3 {
                scope.spawn(|| {
                    for _ in 0..200 {
                        let sum = AtomicUsize::new(0);
                        team.for_each(33, |t| {
                            sum.fetch_add(t, Ordering::Relaxed);
                        });
                        assert_eq!(sum.load(Ordering::Relaxed), 528);
                    }
                });
            }
        });
    }
}
