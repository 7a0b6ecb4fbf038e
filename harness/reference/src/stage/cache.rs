//! The cache itself: key = (static configuration hash, dynamic signature).

use super::{HasSignature, Signature};
use crate::error::TraceReason;
use crate::{Error, Result};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// Environment variable: when set to anything but `0` or empty, every trace is printed to stderr
/// with its reason (the analogue of `jax_log_compiles` + `jax_explain_cache_misses`).
pub const TRACE_LOG_ENV: &str = "HARNESS_TRACE_LOG";

/// A deterministic hasher for static configuration (floats hash by their bits).
pub struct KeyHasher(std::collections::hash_map::DefaultHasher);

impl Default for KeyHasher {
    fn default() -> Self {
        Self(std::collections::hash_map::DefaultHasher::new())
    }
}

impl KeyHasher {
    /// Feed the bits of `x` (so `0.0` and `-0.0` differ, and every NaN payload is its own key).
    ///
    /// ```
    /// use harness_reference::stage::KeyHasher;
    /// let key = |x: f64| KeyHasher::default().val("lr").f64(x).finish();
    /// assert_eq!(key(1e-3), key(1e-3));
    /// assert_ne!(key(0.0), key(-0.0));
    /// ```
    pub fn f64(mut self, x: f64) -> Self {
        x.to_bits().hash(&mut self.0);
        self
    }
    /// Feed any hashable value.
    pub fn val(mut self, x: impl Hash) -> Self {
        x.hash(&mut self.0);
        self
    }
    /// The 64-bit key (deterministic within one build of the program).
    pub fn finish(self) -> u64 {
        self.0.finish()
    }
}

/// Hash of a static configuration value.
pub fn static_key(x: &impl Hash) -> u64 {
    KeyHasher::default().val(x).finish()
}

/// One entry of the trace log.
#[derive(Debug, Clone)]
pub struct TraceEvent {
    /// 1-based trace number.
    pub index: usize,
    /// Hash of the static configuration the trace was made for.
    pub static_key: u64,
    /// The dynamic signature the trace was made for.
    pub signature: Signature,
    /// Why this trace was needed (the cache-miss explanation).
    pub reason: TraceReason,
}

/// A specialisation cache holding one plan `P` per (static key, signature).
pub struct Stage<P> {
    name: String,
    index: HashMap<(u64, Signature), usize>,
    plans: Vec<P>,
    keys: Vec<(u64, Signature)>,
    /// The entry hit last, checked first without building a signature (no allocation on a hit).
    last: Option<usize>,
    max_traces: Option<usize>,
    log: Vec<TraceEvent>,
    print_log: bool,
}

impl<P> Stage<P> {
    /// A cache named `name` (the name appears in the log and in errors).
    pub fn new(name: impl Into<String>) -> Self {
        let print_log = std::env::var(TRACE_LOG_ENV)
            .map(|v| !v.is_empty() && v != "0")
            .unwrap_or(false);
        Self {
            name: name.into(),
            index: HashMap::new(),
            plans: Vec::new(),
            keys: Vec::new(),
            last: None,
            max_traces: None,
            log: Vec::new(),
            print_log,
        }
    }
    /// Refuse the `(n+1)`-th trace with [`Error::TooManyTraces`] naming the leaf that changed
    /// (`chex.assert_max_traces`, with the diagnosis chex #176 asks for).
    pub fn with_max_traces(mut self, n: usize) -> Self {
        self.max_traces = Some(n);
        self
    }
    /// How many times a plan was built.
    pub fn traces(&self) -> usize {
        self.log.len()
    }
    /// Every trace so far, in order, with the reason for each.
    pub fn log(&self) -> &[TraceEvent] {
        &self.log
    }
    /// The staged function's name, as error messages and logs show it.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Drop every plan (their buffers are freed); the trace count is kept.
    pub fn clear(&mut self) {
        self.plans.clear();
        self.keys.clear();
        self.index.clear();
        self.last = None;
    }
    /// Number of plans held (each holds its buffers).
    pub fn plans(&self) -> usize {
        self.plans.len()
    }

    /// Look up the plan for `(static_key, signature of dynamic)`, tracing it with `build` on a miss.
    pub fn call(
        &mut self,
        static_key: u64,
        dynamic: &impl HasSignature,
        build: impl FnOnce(&Signature) -> Result<P>,
    ) -> Result<&mut P> {
        if let Some(i) = self.last {
            let (k, s) = &self.keys[i];
            if *k == static_key && dynamic.matches(s) {
                return Ok(&mut self.plans[i]);
            }
        }
        self.call_sig(static_key, dynamic.signature(), build)
    }

    /// [`Stage::call`] with a precomputed signature.
    pub fn call_sig(
        &mut self,
        static_key: u64,
        sig: Signature,
        build: impl FnOnce(&Signature) -> Result<P>,
    ) -> Result<&mut P> {
        let key = (static_key, sig);
        if !self.index.contains_key(&key) {
            let reason = self.explain(static_key, &key.1);
            if let Some(max) = self.max_traces {
                if self.log.len() >= max {
                    return Err(Error::TooManyTraces {
                        name: self.name.clone(),
                        traces: self.log.len() + 1,
                        max,
                        reason,
                    });
                }
            }
            let plan = build(&key.1)?;
            let event = TraceEvent {
                index: self.log.len() + 1,
                static_key,
                signature: key.1.clone(),
                reason,
            };
            if self.print_log {
                eprintln!(
                    "[trace] {} #{}: {} with {}",
                    self.name, event.index, event.reason, event.signature
                );
            }
            self.log.push(event);
            self.plans.push(plan);
            self.keys.push(key.clone());
            self.index.insert(key.clone(), self.plans.len() - 1);
        }
        let i = self.index[&key];
        self.last = Some(i);
        Ok(&mut self.plans[i])
    }

    fn explain(&self, static_key: u64, sig: &Signature) -> TraceReason {
        match self.log.iter().rev().find(|e| e.static_key == static_key) {
            Some(prev) => TraceReason::NewSignature(prev.signature.diff(sig)),
            None if self.log.is_empty() => TraceReason::FirstTrace,
            None => TraceReason::NewStatic { key: static_key },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::DType;
    use crate::stage::LeafSig;

    fn sig(weak: bool) -> Signature {
        let mut s = Signature::new();
        s.push(
            "info.num_linesearch_steps",
            LeafSig {
                shape: vec![],
                dtype: DType::I32,
                weak,
            },
        );
        s
    }

    #[test]
    fn same_signature_traces_once() {
        let mut st: Stage<()> = Stage::new("f");
        for _ in 0..5 {
            st.call_sig(1, sig(false), |_| Ok(())).unwrap();
        }
        assert_eq!(st.traces(), 1);
    }

    #[test]
    fn max_traces_error_names_the_changed_leaf() {
        let mut st: Stage<()> = Stage::new("update").with_max_traces(1);
        st.call_sig(7, sig(true), |_| Ok(())).unwrap();
        let err = st
            .call_sig(7, sig(false), |_| Ok(()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("leaf `info.num_linesearch_steps`: weak int32[] -> int32[]"),
            "{err}"
        );
    }

    #[test]
    fn new_static_key_is_reported_as_such() {
        let mut st: Stage<()> = Stage::new("g");
        st.call_sig(1, sig(false), |_| Ok(())).unwrap();
        st.call_sig(2, sig(false), |_| Ok(())).unwrap();
        assert!(matches!(
            st.log()[1].reason,
            TraceReason::NewStatic { key: 2 }
        ));
    }
}
