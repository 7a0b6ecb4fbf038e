//! # A persistent fork-join worker pool that allocates nothing per job
//!
//! [`Pool::new`]`(t)` starts `t - 1` parked worker threads once; [`Pool::run`]`(job)` calls
//! `job(i)` for every `i` in `0..t` — `i = 0` on the calling thread, the others on the workers —
//! and returns when all have returned. A job is a borrowed closure: its address is published
//! under a mutex with a generation number, the workers are woken through a condition variable,
//! and the caller waits on a second one until the pending count reaches zero; both sides first
//! poll for [`SPIN`] (back-to-back jobs then skip the futex round trip). No step of that
//! allocates (std's `Mutex` and `Condvar` are futex words on Linux), unlike rayon's job
//! injection, whose queue allocates a block now and then.
//!
//! The work split is the caller's: `job(i)` decides what part `i` does, so results cannot
//! depend on which thread ran which part. A panic in any part is re-raised by `run` after every
//! part has finished.
//!
//! # References
//! - The Rust standard library, `std::sync::{Mutex, Condvar}` (the generation-counter pattern
//!   for condition variables, as in `std::sync::Barrier`).

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a worker that finished its part, or a caller waiting for the workers, polls before
/// parking on its condition variable. Products of a Newton–Schulz iteration follow one another
/// within microseconds, while a futex wake-up costs tens of microseconds (and, on a loaded
/// machine, a wait for a time slice); 50 us of polling covers the back-to-back products and
/// bounds the CPU burnt when no job follows.
pub const SPIN: Duration = Duration::from_micros(50);

/// Poll `ready` for at most [`SPIN`]; `true` when it became true.
fn spin_until(ready: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if ready() {
            return true;
        }
        if start.elapsed() >= SPIN {
            return false;
        }
        for _ in 0..SPIN_BATCH {
            std::hint::spin_loop();
        }
    }
}

/// `spin_loop` hints between two polls (and clock reads).
const SPIN_BATCH: usize = 32;

/// The job's address with its lifetime erased; only dereferenced while [`Pool::run`], which
/// borrows the job, is waiting for the parts to finish.
#[derive(Clone, Copy)]
struct JobPtr(*const (dyn Fn(usize) + Sync + 'static));

// SAFETY: the pointee is `Sync` and outlives every use (see `JobPtr`).
unsafe impl Send for JobPtr {}

/// A buffer's address shared by the parts of a [`Pool::run`] job (or any fork-join split),
/// each of which touches only elements no other part touches: the split that guarantees it is
/// the caller's, and every dereference is `unsafe` with that as its condition.
#[derive(Clone, Copy)]
pub(crate) struct PartsPtr<A>(*mut A);
// SAFETY: sharing the address is harmless; each dereference states why its elements are the
// part's own (see the users).
unsafe impl<A> Send for PartsPtr<A> {}
unsafe impl<A> Sync for PartsPtr<A> {}
impl<A> PartsPtr<A> {
    pub(crate) fn new(p: *mut A) -> Self {
        PartsPtr(p)
    }

    /// A read-only buffer's address (never written through).
    pub(crate) fn of_read_only(p: *const A) -> Self {
        PartsPtr(p as *mut A)
    }

    pub(crate) fn get(self) -> *mut A {
        self.0
    }

    /// The `len` elements from `start`.
    ///
    /// # Safety
    /// They lie in the buffer, and no other part touches them while the slice lives.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice<'a>(self, start: usize, len: usize) -> &'a mut [A] {
        std::slice::from_raw_parts_mut(self.0.add(start), len)
    }
}

struct State {
    /// Incremented by every `run`; a worker runs each generation once.
    generation: u64,
    job: Option<JobPtr>,
    /// Worker parts of the current generation not yet finished.
    pending: usize,
    panicked: bool,
    shutdown: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Mirrors of `State::generation` and `State::pending`, written under the lock, read
    /// without it while polling (a hint only: decisions are re-checked under the lock).
    generation: AtomicU64,
    pending: AtomicUsize,
    /// Signalled when a job is published (or on shutdown).
    work: Condvar,
    /// Signalled when the last worker part finishes.
    done: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // parts run outside the lock, so poisoning cannot leave the state half-updated
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A fixed set of parked threads running the parts of one job at a time.
pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl Pool {
    /// A pool running `threads` parts per job (at least 1): the caller and `threads - 1`
    /// workers, started here.
    pub fn new(threads: usize) -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                generation: 0,
                job: None,
                pending: 0,
                panicked: false,
                shutdown: false,
            }),
            generation: AtomicU64::new(0),
            pending: AtomicUsize::new(0),
            work: Condvar::new(),
            done: Condvar::new(),
        });
        let workers = (1..threads.max(1))
            .map(|part| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("harness-pool-{part}"))
                    .spawn(move || worker(&shared, part))
                    .expect("spawning a pool worker")
            })
            .collect();
        Pool { shared, workers }
    }

    /// Parts per job.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Call `job(i)` for `i in 0..threads()` concurrently; return when every call has.
    pub fn run(&mut self, job: &(dyn Fn(usize) + Sync)) {
        if self.workers.is_empty() {
            job(0);
            return;
        }
        // SAFETY: only the lifetime is erased; this function does not return (nor unwind)
        // before `pending` is back to 0, i.e. before every worker is done with the pointer.
        let ptr = JobPtr(unsafe {
            std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static (dyn Fn(usize) + Sync)>(job)
        });
        {
            let mut st = self.shared.lock();
            st.generation += 1;
            st.job = Some(ptr);
            st.pending = self.workers.len();
            st.panicked = false;
            self.shared.pending.store(st.pending, Ordering::Release);
            self.shared
                .generation
                .store(st.generation, Ordering::Release);
        }
        self.shared.work.notify_all();
        let mine = catch_unwind(AssertUnwindSafe(|| job(0)));
        spin_until(|| self.shared.pending.load(Ordering::Acquire) == 0);
        let mut st = self.shared.lock();
        while st.pending > 0 {
            st = self.shared.done.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st.job = None;
        let theirs = st.panicked;
        drop(st);
        if let Err(p) = mine {
            resume_unwind(p);
        }
        assert!(!theirs, "a pool worker panicked");
    }
}

fn worker(shared: &Shared, part: usize) {
    let mut seen = 0u64;
    loop {
        spin_until(|| shared.generation.load(Ordering::Acquire) != seen);
        let job = {
            let mut st = shared.lock();
            while st.generation == seen && !st.shutdown {
                st = shared.work.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            if st.shutdown {
                return;
            }
            seen = st.generation;
            st.job.expect("a published job")
        };
        // SAFETY: `run` keeps the job alive until this part reports below.
        let ok = catch_unwind(AssertUnwindSafe(|| unsafe { (*job.0)(part) })).is_ok();
        let mut st = shared.lock();
        st.panicked |= !ok;
        st.pending -= 1;
        shared.pending.store(st.pending, Ordering::Release);
        if st.pending == 0 {
            shared.done.notify_one();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.work.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn every_part_runs_once_per_job_for_many_jobs() {
        for threads in 1..=4 {
            let mut pool = Pool::new(threads);
            assert_eq!(pool.threads(), threads);
            let hits: Vec<AtomicUsize> = (0..threads).map(|_| AtomicUsize::new(0)).collect();
            for _ in 0..200 {
                pool.run(&|i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
            }
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 200));
        }
    }

    #[test]
    fn a_panicking_part_is_reraised_after_the_others_finish_and_the_pool_still_works() {
        let mut pool = Pool::new(3);
        let done = AtomicUsize::new(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run(&|i| {
                if i == 2 {
                    panic!("part 2");
                }
                done.fetch_add(1, Ordering::Relaxed);
            })
        }));
        assert!(r.is_err());
        assert_eq!(done.load(Ordering::Relaxed), 2);
        pool.run(&|_| {
            done.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(done.load(Ordering::Relaxed), 5);
    }
}
