//! Live bytes over time: a sample buffer filled at explicit points during a measured scope.
//!
//! The buffer is allocated up front (before the measurement's baseline) and never grows, so
//! recording does not allocate: a full timeline drops further samples and counts them.
//! The reference code calls sample points through its own hook traits (e.g.
//! `stack::Observer`); the laws implement those hooks for [`Timeline`].

use super::{counters_in, Scope};

/// One sample: live bytes and the peak so far, both above the timeline's baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Sample {
    /// Live bytes above the baseline when the sample was taken.
    pub live_bytes: usize,
    /// Peak live bytes above the baseline up to the sample.
    pub peak_bytes: usize,
}

/// A fixed-capacity record of live bytes.
#[derive(Debug, Clone)]
pub struct Timeline {
    scope: Scope,
    baseline: usize,
    samples: Vec<Sample>,
    dropped: usize,
}

impl Timeline {
    /// Room for `capacity` samples (allocated now), reading the process-wide counters.
    pub fn with_capacity(capacity: usize) -> Self {
        Self::in_scope(Scope::Process, capacity)
    }
    /// Room for `capacity` samples (allocated now), reading the counters of `scope`.
    pub fn in_scope(scope: Scope, capacity: usize) -> Self {
        Self {
            scope,
            baseline: 0,
            samples: Vec::with_capacity(capacity.max(1)),
            dropped: 0,
        }
    }
    /// Start a new record: the baseline is the current live bytes; earlier samples are cleared.
    pub fn start(&mut self) {
        self.samples.clear();
        self.dropped = 0;
        self.baseline = counters_in(self.scope).live_bytes;
    }
    /// Record the current live bytes and peak (both above the baseline); never allocates.
    pub fn record(&mut self) {
        let c = counters_in(self.scope);
        if self.samples.len() < self.samples.capacity() {
            self.samples.push(Sample {
                live_bytes: c.live_bytes.saturating_sub(self.baseline),
                peak_bytes: c.peak_bytes.saturating_sub(self.baseline),
            });
        } else {
            self.dropped += 1;
        }
    }
    /// The samples taken, in order (at most the capacity; see [`Timeline::dropped`]).
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }
    /// Samples that did not fit.
    pub fn dropped(&self) -> usize {
        self.dropped
    }
}
