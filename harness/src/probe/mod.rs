//! Measured memory: a counting global allocator and scoped measurements.
//!
//! Two sets of counters are kept, chosen by [`Scope`]. The process-wide ones are atomics that
//! see every thread, because dfdx's gemm allocates on rayon worker threads; code that measures
//! them must hold [`exclusive`] so that two measurements never overlap, and tests that measure
//! live in their own test binary. Even then another thread may free memory it allocated before
//! the measurement (a rayon worker finishing deferred clean-up, a thread exiting), which lowers
//! the process-wide peak by a few bytes from run to run. Single-threaded code is therefore
//! measured with [`Scope::ThisThread`]: counters kept per thread, which only the calling thread's
//! allocations and frees move, so its figures are exact and repeatable.
//!
//! The library installs no allocator: a binary that measures installs [`CountingAlloc`] with
//! [`install_counting_allocator!`](crate::install_counting_allocator) (the `harness` CLI, the
//! test binaries, the fuzz targets and the examples do). [`installed`] tells whether it is, and
//! the memory laws refuse to run without it rather than read counters that never move.
//!
//! ```
//! // A doctest is its own binary without the counting allocator: nothing is counted.
//! assert!(!harness::probe::installed());
//! ```

pub mod timeline;
pub use timeline::Timeline;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    // Const-initialised and without destructors: reading them never allocates, so the allocator
    // may use them, including while the thread is being torn down.
    // Net bytes this thread allocated minus freed (negative when it frees memory another thread
    // allocated), the highest value since the last reset, and its allocation calls.
    static HERE_LIVE: Cell<isize> = const { Cell::new(0) };
    static HERE_PEAK: Cell<isize> = const { Cell::new(0) };
    static HERE_ALLOCS: Cell<u64> = const { Cell::new(0) };
}

/// The system allocator, counting live bytes, the peak of live bytes and allocation calls.
pub struct CountingAlloc;

// SAFETY: every call forwards to `System` unchanged; the counters are side bookkeeping.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        LIVE.fetch_sub(layout.size(), Relaxed);
        shrank_here(layout.size());
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Relaxed);
            shrank_here(layout.size());
            grew(new_size);
        }
        p
    }
}

#[inline]
fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Relaxed) + bytes;
    PEAK.fetch_max(live, Relaxed);
    ALLOCS.fetch_add(1, Relaxed);
    let _ = HERE_LIVE.try_with(|l| {
        let live = l.get() + bytes as isize;
        l.set(live);
        let _ = HERE_PEAK.try_with(|p| p.set(p.get().max(live)));
        let _ = HERE_ALLOCS.try_with(|a| a.set(a.get() + 1));
    });
}

#[inline]
fn shrank_here(bytes: usize) {
    let _ = HERE_LIVE.try_with(|l| l.set(l.get() - bytes as isize));
}

/// Install [`CountingAlloc`] as the global allocator of the binary that invokes this macro (once,
/// at the root of a binary crate: the CLI, a test file, a fuzz target, an example).
///
/// ```ignore
/// harness::install_counting_allocator!();
/// fn main() {
///     assert!(harness::probe::installed());
/// }
/// ```
#[macro_export]
macro_rules! install_counting_allocator {
    () => {
        #[global_allocator]
        static HARNESS_COUNTING_ALLOCATOR: $crate::probe::CountingAlloc =
            $crate::probe::CountingAlloc;
    };
}

/// Whether [`CountingAlloc`] is this process's global allocator: an allocation made now must
/// move its counter (no other allocator touches it).
pub fn installed() -> bool {
    let before = ALLOCS.load(Relaxed);
    let probe = std::hint::black_box(Box::new(0u64));
    drop(probe);
    ALLOCS.load(Relaxed) > before
}

/// `Ok` when memory is measured ([`installed`]), else [`crate::Error::ProbeNotInstalled`].
pub fn require_installed() -> crate::Result<()> {
    if installed() {
        Ok(())
    } else {
        Err(crate::Error::ProbeNotInstalled)
    }
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    /// Bytes allocated and not yet freed.
    pub live_bytes: usize,
    /// Largest `live_bytes` since the peak was last reset.
    pub peak_bytes: usize,
    /// Allocations made so far (frees not subtracted).
    pub allocations: u64,
}

/// Which allocations a measurement counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    /// Every thread's (hold [`exclusive`]): for code that allocates on worker threads.
    #[default]
    Process,
    /// Only the calling thread's: exact and repeatable for single-threaded code, whatever other
    /// threads do meanwhile. Memory the thread frees but did not allocate counts as negative.
    ThisThread,
}

/// Read the process-wide counters.
pub fn counters() -> Counters {
    counters_in(Scope::Process)
}

/// Read the counters of `scope`. For [`Scope::ThisThread`] the live bytes are the thread's net
/// allocation since it started, offset so that they never read below zero (only differences
/// between two readings on the same thread mean anything).
pub fn counters_in(scope: Scope) -> Counters {
    match scope {
        Scope::Process => Counters {
            live_bytes: LIVE.load(Relaxed),
            peak_bytes: PEAK.load(Relaxed),
            allocations: ALLOCS.load(Relaxed),
        },
        Scope::ThisThread => {
            let here = |c: &'static std::thread::LocalKey<Cell<isize>>| {
                (c.with(Cell::get) as i128 + isize::MAX as i128 / 2) as usize
            };
            Counters {
                live_bytes: here(&HERE_LIVE),
                peak_bytes: here(&HERE_PEAK),
                allocations: HERE_ALLOCS.with(Cell::get),
            }
        }
    }
}

/// Start a new peak for `scope` at the current live bytes.
fn reset_peak(scope: Scope) {
    match scope {
        Scope::Process => PEAK.store(LIVE.load(Relaxed), Relaxed),
        Scope::ThisThread => HERE_PEAK.with(|p| p.set(HERE_LIVE.with(Cell::get))),
    }
}

/// What a scope did to memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Measurement {
    /// Live bytes when the scope started.
    pub baseline_bytes: usize,
    /// Highest live bytes during the scope, above the baseline.
    pub peak_above_baseline: usize,
    /// Live bytes at the end minus at the start (negative when the scope freed memory).
    pub live_delta: i64,
    /// Allocation calls made during the scope.
    pub allocations: u64,
}

/// Run `f` and report its memory use over every thread ([`Scope::Process`]). Hold
/// [`exclusive`] around it when other threads of this process may allocate concurrently.
pub fn measure<R>(f: impl FnOnce() -> R) -> (R, Measurement) {
    measure_in(Scope::Process, f)
}

/// Run `f` and report the memory use that `scope` counts.
///
/// ```
/// use harness::probe::{measure_in, Scope};
/// // Without the counting allocator installed (as in this doctest) nothing moves.
/// let (_, m) = measure_in(Scope::ThisThread, || vec![0u8; 1024]);
/// assert_eq!(m.peak_above_baseline, if harness::probe::installed() { 1024 } else { 0 });
/// ```
pub fn measure_in<R>(scope: Scope, f: impl FnOnce() -> R) -> (R, Measurement) {
    reset_peak(scope);
    let before = counters_in(scope);
    let r = f();
    let after = counters_in(scope);
    let m = Measurement {
        baseline_bytes: before.live_bytes,
        peak_above_baseline: after.peak_bytes.saturating_sub(before.live_bytes),
        live_delta: after.live_bytes as i64 - before.live_bytes as i64,
        allocations: after.allocations - before.allocations,
    };
    (r, m)
}

static EXCLUSIVE: Mutex<()> = Mutex::new(());

/// Serialises measurements within the process (poisoning is ignored: a failed measurement does
/// not invalidate the next one).
pub fn exclusive() -> MutexGuard<'static, ()> {
    EXCLUSIVE.lock().unwrap_or_else(|e| e.into_inner())
}
