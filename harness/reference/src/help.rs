//! # Parts of a job shared with spinning helper threads, claimed one at a time
//!
//! [`run_parts`]`(n, part)` calls `part(i)` once for every `i < n`. The calling thread and the
//! process's helper threads (one fewer than the CPU's cores, started on first use) take parts
//! from a shared counter: whoever is free claims the next index. The caller never waits for a
//! helper to *start*, only for parts a helper has already claimed to finish, so a helper that is
//! asleep, descheduled or busy with another caller's job costs nothing: the caller then runs
//! every part itself. Results cannot depend on which thread ran which part as long as each part
//! writes only its own output (the work split is the caller's, as with [`crate::pool::Pool`]).
//!
//! This is for jobs of a few microseconds, the passes of a line search over a vector that lives
//! in the caches, where a fork-join through a sleeping pool (a futex wake-up, tens of
//! microseconds) costs more than the half it saves. Helpers poll for about
//! [`crate::pool::SPIN`] after each job before they park (yielding their core between polls, in
//! case the scheduler put them beside the caller), so back-to-back jobs find them awake. Parked
//! helpers are woken at most once a millisecond; jobs published meanwhile run on their caller
//! alone, so a machine whose other cores keep the helpers asleep costs about what one thread
//! costs.
//!
//! How a job is handed over, with no allocation and no lock on the fast path:
//! - one job at a time: a caller that finds the slot taken (another thread's job, or a part
//!   calling [`run_parts`] again) runs its parts itself;
//! - the job lives on the caller's stack; its address is published, then a gate is opened and
//!   the generation counter bumped; a helper enters by incrementing the gate's count of helpers
//!   inside and leaves at once if the gate was closed;
//! - when the counter runs past the last part, the caller closes the gate and waits until no
//!   helper is inside; only then does it return (or re-raise a part's panic), so the job is never
//!   read after it is gone.
//!
//! # References
//! - R. D. Blumofe, C. E. Leiserson, "Scheduling multithreaded computations by work stealing",
//!   JACM 46(5), 1999 (idle workers taking work rather than being handed it).
//! - M. Herlihy, N. Shavit, *The Art of Multiprocessor Programming*, 2nd ed., 2020, ch. 7
//!   (spinning before blocking).
//!
//! # Example
//! ```
//! use harness_reference::help::run_parts;
//! use std::sync::Mutex;
//! let x: Vec<u64> = (0..1000).collect();
//! let sums: [Mutex<u64>; 4] = Default::default();
//! run_parts(4, &|i| *sums[i].lock().unwrap() = x[i * 250..(i + 1) * 250].iter().sum());
//! let total: u64 = sums.iter().map(|s| *s.lock().unwrap()).sum();
//! assert_eq!(total, 499_500);
//! ```

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Instant;

/// One job: the parts and the counter they are claimed from.
struct Job<'a> {
    part: &'a (dyn Fn(usize) + Sync),
    parts: usize,
    next: AtomicUsize,
    /// A part run by a helper panicked (the caller's own panics unwind through it directly).
    panicked: AtomicBool,
}

impl Job<'_> {
    /// Run parts until the counter passes the last one.
    fn claim_all(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.parts {
                return;
            }
            (self.part)(i);
        }
    }
}

/// The shortest time between two wake-ups of parked helpers.
const WAKE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(1);

/// Polls of the gate before a caller waiting for the helpers inside starts yielding its core.
const WAIT_POLLS: u32 = 1 << 12;

/// Set in [`Shared::gate`] while the current job may be entered; the other bits count the
/// helpers inside it.
const OPEN: usize = 1 << (usize::BITS - 1);

struct Shared {
    /// A caller owns the job slot.
    busy: AtomicBool,
    /// The current job (lifetime erased); read only by a helper inside the open gate.
    job: AtomicPtr<Job<'static>>,
    gate: AtomicUsize,
    /// Bumped for every job; helpers poll it.
    generation: AtomicU64,
    /// Helpers parked on `wake`.
    parked: AtomicUsize,
    /// When parked helpers were last woken: nanoseconds since `epoch`.
    last_wake: AtomicU64,
    epoch: Instant,
    lock: Mutex<()>,
    wake: Condvar,
}

/// The process's helpers, started on first use; `None` on a single core.
fn shared() -> Option<&'static Shared> {
    static SHARED: OnceLock<Option<&'static Shared>> = OnceLock::new();
    *SHARED.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cores < 2 {
            return None;
        }
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            busy: AtomicBool::new(false),
            job: AtomicPtr::new(std::ptr::null_mut()),
            gate: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            parked: AtomicUsize::new(0),
            last_wake: AtomicU64::new(0),
            epoch: Instant::now(),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        }));
        let started = (1..cores)
            .filter(|k| {
                std::thread::Builder::new()
                    .name(format!("harness-help-{k}"))
                    .spawn(move || helper(shared))
                    .is_ok()
            })
            .count();
        (started > 0).then_some(shared)
    })
}

/// Call `part(i)` for every `i < parts`, on this thread and on whichever helpers are free;
/// return when every call has returned. A panic in a part is re-raised here after every part
/// that started has finished.
///
/// ```
/// use harness_reference::help::{run_parts, Slot};
/// let squares: [Slot<u64>; 5] = Default::default();
/// run_parts(5, &|i| squares[i].put((i * i) as u64));
/// assert_eq!(squares.map(Slot::into_inner), [0, 1, 4, 9, 16]);
/// ```
pub fn run_parts(parts: usize, part: &(dyn Fn(usize) + Sync)) {
    let shared = match shared() {
        Some(s) if parts > 1 && !s.busy.swap(true, Ordering::Acquire) => s,
        _ => {
            (0..parts).for_each(part);
            return;
        }
    };
    // Parked helpers are woken at most once per WAKE_INTERVAL: a wake-up is a system call (an
    // interrupt to another core in a virtual machine) and the helper takes tens of
    // microseconds to come back, longer than such a job. Until then, and when helpers keep
    // falling asleep between jobs (their core is slow to reach, or busy), this thread runs
    // the parts alone.
    let parked = shared.parked.load(Ordering::SeqCst) > 0;
    let wake = parked && {
        let now = shared.epoch.elapsed().as_nanos() as u64;
        let last = shared.last_wake.load(Ordering::Relaxed);
        now.saturating_sub(last) >= WAKE_INTERVAL.as_nanos() as u64
            && shared
                .last_wake
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    };
    if parked && !wake {
        shared.busy.store(false, Ordering::Release);
        (0..parts).for_each(part);
        return;
    }
    let job = Job {
        part,
        parts,
        next: AtomicUsize::new(0),
        panicked: AtomicBool::new(false),
    };
    // SAFETY (of the erasure): `Close` below keeps this frame alive, on return and on unwind,
    // until no helper is inside the gate, and helpers read the pointer only inside it.
    let ptr = (&job as *const Job<'_>).cast::<Job<'static>>().cast_mut();
    shared.job.store(ptr, Ordering::Release);
    shared.gate.fetch_or(OPEN, Ordering::AcqRel);
    shared.generation.fetch_add(1, Ordering::SeqCst);
    if wake {
        let _guard = shared.lock.lock().unwrap_or_else(|e| e.into_inner());
        shared.wake.notify_all();
    }

    /// Closes the gate and waits for the helpers inside, also when a part of the caller's
    /// panics.
    struct Close(&'static Shared);
    impl Drop for Close {
        fn drop(&mut self) {
            self.0.gate.fetch_and(!OPEN, Ordering::AcqRel);
            // a helper inside finishes its last part within microseconds, unless it shares this
            // core (or was preempted): then yielding lets it run
            let mut polls = 0u32;
            while self.0.gate.load(Ordering::Acquire) != 0 {
                polls += 1;
                if polls < WAIT_POLLS {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            self.0.job.store(std::ptr::null_mut(), Ordering::Relaxed);
            self.0.busy.store(false, Ordering::Release);
        }
    }
    let close = Close(shared);
    job.claim_all();
    drop(close);
    assert!(
        !job.panicked.load(Ordering::Relaxed),
        "a part run by a helper thread panicked"
    );
}

fn helper(shared: &'static Shared) {
    let mut seen = shared.generation.load(Ordering::Acquire);
    loop {
        if !poll_yielding(|| shared.generation.load(Ordering::Acquire) != seen) {
            let mut guard = shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            shared.parked.fetch_add(1, Ordering::SeqCst);
            while shared.generation.load(Ordering::SeqCst) == seen {
                guard = shared.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
            }
            shared.parked.fetch_sub(1, Ordering::SeqCst);
        }
        seen = shared.generation.load(Ordering::Acquire);
        if shared.gate.fetch_add(1, Ordering::Acquire) & OPEN == 0 {
            // the job finished (or was taken by the caller alone) before this helper came
            shared.gate.fetch_sub(1, Ordering::Release);
            continue;
        }
        // SAFETY: the gate was open when this helper entered, so the caller has published the
        // job and waits in `Close` for this helper to leave before the job goes away.
        let job = unsafe { &*shared.job.load(Ordering::Acquire) };
        if catch_unwind(AssertUnwindSafe(|| job.claim_all())).is_err() {
            job.panicked.store(true, Ordering::Relaxed);
        }
        shared.gate.fetch_sub(1, Ordering::Release);
    }
}

/// Poll `ready` until about [`crate::pool::SPIN`] of polling has gone by, yielding the core
/// between batches of polls: when the scheduler has put this helper on the caller's core, the
/// caller runs instead of waiting for the helper's time slice to end. Only time spent polling
/// counts: a batch that took longer than [`BATCH_CAP`] (this thread was descheduled, or a yield
/// let another thread run) counts as `BATCH_CAP`, so a helper that loses its core for a while
/// comes back polling rather than parked.
fn poll_yielding(ready: impl Fn() -> bool) -> bool {
    let mut polled = std::time::Duration::ZERO;
    let mut last = Instant::now();
    loop {
        for _ in 0..64 {
            if ready() {
                return true;
            }
            std::hint::spin_loop();
        }
        let now = Instant::now();
        polled += (now - last).min(BATCH_CAP);
        last = now;
        if polled >= crate::pool::SPIN {
            return false;
        }
        std::thread::yield_now();
    }
}

/// The most one batch of polls counts towards a helper's polling time.
const BATCH_CAP: std::time::Duration = std::time::Duration::from_micros(5);

/// A part's own output: a value behind a lock (uncontended: each part touches only its own
/// slot), alone on its cache lines, so that parts finishing on different cores do not pass one
/// line back and forth.
///
/// ```
/// use harness_reference::help::{run_parts, Slot};
/// let slots: [Slot<u32>; 3] = Default::default();
/// run_parts(3, &|i| slots[i].put(10 * i as u32));
/// assert_eq!(slots.map(Slot::into_inner), [0, 10, 20]);
/// ```
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Slot<T>(Mutex<T>);

impl<T> Slot<T> {
    /// A slot holding `x`.
    pub fn new(x: T) -> Self {
        Slot(Mutex::new(x))
    }
    /// Replace the value.
    pub fn put(&self, x: T) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = x;
    }
    /// Take the value out, leaving `T::default()`.
    pub fn take(&self) -> T
    where
        T: Default,
    {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
    /// The value.
    pub fn into_inner(self) -> T {
        self.0.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn every_part_runs_exactly_once_over_many_jobs() {
        for parts in [0, 1, 2, 3, 8, 33] {
            let hits: Vec<AtomicUsize> = (0..parts).map(|_| AtomicUsize::new(0)).collect();
            for _ in 0..500 {
                run_parts(parts, &|i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
            }
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 500));
        }
    }

    #[test]
    fn concurrent_and_nested_callers_each_get_all_their_parts() {
        let total = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..200 {
                        run_parts(4, &|_| {
                            run_parts(3, &|_| {
                                total.fetch_add(1, Ordering::Relaxed);
                            })
                        });
                    }
                });
            }
        });
        assert_eq!(total.load(Ordering::Relaxed), 4 * 200 * 4 * 3);
    }

    #[test]
    fn a_panicking_part_is_reraised_after_the_others_and_the_helpers_still_work() {
        let done = AtomicUsize::new(0);
        for bad in 0..8 {
            let r = catch_unwind(AssertUnwindSafe(|| {
                run_parts(8, &|i| {
                    if i == bad {
                        panic!("part {i}");
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                })
            }));
            assert!(r.is_err());
        }
        let after = AtomicUsize::new(0);
        run_parts(16, &|_| {
            after.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(after.load(Ordering::Relaxed), 16);
    }
}
