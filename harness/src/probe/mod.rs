//! Measured memory: a counting global allocator and scoped measurements.
//!
//! The counters are process-wide atomics because dfdx's gemm allocates on rayon worker threads;
//! a measurement therefore sees every thread. Code that measures must hold [`exclusive`] so that
//! two measurements never overlap, and tests that measure live in their own test binary.
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
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

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
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Relaxed);
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
    pub live_bytes: usize,
    pub peak_bytes: usize,
    pub allocations: u64,
}

/// Read the counters.
pub fn counters() -> Counters {
    Counters {
        live_bytes: LIVE.load(Relaxed),
        peak_bytes: PEAK.load(Relaxed),
        allocations: ALLOCS.load(Relaxed),
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

/// Run `f` and report its memory use. Hold [`exclusive`] around it when other threads of this
/// process may allocate concurrently.
pub fn measure<R>(f: impl FnOnce() -> R) -> (R, Measurement) {
    let before = LIVE.load(Relaxed);
    PEAK.store(before, Relaxed);
    let allocs = ALLOCS.load(Relaxed);
    let r = f();
    let after = LIVE.load(Relaxed);
    let m = Measurement {
        baseline_bytes: before,
        peak_above_baseline: PEAK.load(Relaxed).saturating_sub(before),
        live_delta: after as i64 - before as i64,
        allocations: ALLOCS.load(Relaxed) - allocs,
    };
    (r, m)
}

static EXCLUSIVE: Mutex<()> = Mutex::new(());

/// Serialises measurements within the process (poisoning is ignored: a failed measurement does
/// not invalidate the next one).
pub fn exclusive() -> MutexGuard<'static, ()> {
    EXCLUSIVE.lock().unwrap_or_else(|e| e.into_inner())
}
