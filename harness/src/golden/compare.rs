//! Accumulates comparisons against expected values under golden-v1's tolerance rule.

use crate::backend::{Array, Float};
use crate::tolerance::Tol;
use crate::tree::Tree;

/// `|got - want| / (atol + rtol*|want|)`: the error as a multiple of its tolerance (0 for an exact
/// match; infinite for a miss under a zero tolerance or a non-finite `got`).
pub fn error_over_tolerance(got: f64, want: f64, atol: f64, rtol: f64) -> f64 {
    let d = (got - want).abs();
    let tol = atol + rtol * want.abs();
    if d == 0.0 {
        0.0
    } else if d.is_nan() || tol == 0.0 {
        f64::INFINITY
    } else {
        d / tol
    }
}

/// Records every comparison of a case: the largest errors and the first mismatch.
#[derive(Debug, Clone)]
pub struct Comparator {
    tol: Tol,
    compared: usize,
    max_abs: f64,
    max_rel: f64,
    first_failure: Option<String>,
    failures: usize,
    ratios: Vec<f64>,
    bits: u64,
}

/// FNV-1a offset basis and prime (64-bit): [`Comparator::output_bits`] folds each computed
/// value's bits into the hash, so two builds that compute the same numbers give the same digest.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

impl Comparator {
    /// An empty comparison against `tol`.
    ///
    /// ```
    /// use harness::golden::Comparator;
    /// use harness::tolerance::Tol;
    /// let mut c = Comparator::new(Tol { rtol: 1e-6, atol: 0.0 });
    /// assert!(!c.passed()); // nothing compared yet
    /// c.value(|| "y[0]".into(), 2.0 + 1e-7, 2.0);
    /// assert!(c.passed());
    /// assert!((c.max_rel_err() - 5e-8).abs() < 1e-12);
    /// c.value(|| "y[1]".into(), 1.0, 2.0);
    /// assert!(!c.passed() && c.detail().contains("y[1]"));
    /// ```
    pub fn new(tol: Tol) -> Self {
        Self {
            tol,
            compared: 0,
            max_abs: 0.0,
            max_rel: 0.0,
            first_failure: None,
            failures: 0,
            ratios: Vec::new(),
            bits: FNV_OFFSET,
        }
    }
    fn fold(&mut self, bits: u64) {
        for byte in bits.to_le_bytes() {
            self.bits = (self.bits ^ byte as u64).wrapping_mul(FNV_PRIME);
        }
    }
    /// A digest of every value computed by the reference in this case, in comparison order
    /// (FNV-1a over the `f64` bits of each `got` and each integer): equal digests mean the
    /// same numbers bit for bit, e.g. across CPU levels or thread counts.
    pub fn output_bits(&self) -> u64 {
        self.bits
    }
    /// One value; `what` names it in the detail of the first failure.
    pub fn value(&mut self, what: impl FnOnce() -> String, got: f64, want: f64) {
        self.compared += 1;
        self.fold(got.to_bits());
        if want.is_finite() && got.is_finite() {
            let abs = (got - want).abs();
            self.max_abs = self.max_abs.max(abs);
            if want != 0.0 {
                self.max_rel = self.max_rel.max(abs / want.abs());
            }
            self.ratios.push(error_over_tolerance(
                got,
                want,
                self.tol.atol,
                self.tol.rtol,
            ));
        }
        if !self.tol.close(got, want) {
            self.fail(format!("{}: got {got:e}, want {want:e}", what()));
        }
    }
    /// An integer field: must be equal.
    pub fn exact(&mut self, what: impl FnOnce() -> String, got: i64, want: i64) {
        self.compared += 1;
        self.fold(got as u64);
        if got != want {
            self.fail(format!("{}: got {got}, want {want}", what()));
        }
    }
    /// Element-wise, shapes first.
    pub fn array<E: Float, F: Float>(&mut self, what: &str, got: &Array<E>, want: &Array<F>) {
        if got.shape() != want.shape() {
            self.fail(format!(
                "{what}: shape {:?}, want {:?}",
                got.shape(),
                want.shape()
            ));
            return;
        }
        for (i, (g, w)) in got.data().iter().zip(want.data()).enumerate() {
            self.value(|| format!("{what}[{i}]"), g.as_f64(), w.as_f64());
        }
    }
    /// Leaf-wise, structure first.
    pub fn tree<E: Float, F: Float>(&mut self, what: &str, got: &Tree<E>, want: &Tree<F>) {
        if let Err(e) = want.check_like(got, what) {
            self.fail(e.to_string());
            return;
        }
        for ((k, g), w) in got.iter().zip(want.0.values()) {
            self.array(&format!("{what}.{k}"), g, w);
        }
    }
    /// A whole field checked elsewhere (e.g. by the ODE replay), folded into this case's result.
    pub fn field(&mut self, passed: bool, max_abs: f64, max_rel: f64, failure: Option<String>) {
        self.compared += 1;
        self.max_abs = self.max_abs.max(max_abs);
        self.max_rel = self.max_rel.max(max_rel);
        if !passed {
            self.fail(failure.unwrap_or_else(|| "mismatch".into()));
        }
    }
    /// Error-over-tolerance ratios of values compared elsewhere (see [`Self::error_ratios`]).
    pub fn extend_ratios(&mut self, ratios: &[f64]) {
        self.ratios.extend_from_slice(ratios);
    }
    /// `|got - want| / (atol + rtol*|want|)` of every finite pair compared so far: below 1 is
    /// within tolerance (the report's histogram of golden errors).
    pub fn error_ratios(&self) -> &[f64] {
        &self.ratios
    }
    /// A failure that is not a value comparison (an error of the reference, say).
    pub fn fail(&mut self, msg: String) {
        self.failures += 1;
        if self.first_failure.is_none() {
            self.first_failure = Some(msg);
        }
    }
    /// No failure, and at least one value compared.
    pub fn passed(&self) -> bool {
        self.failures == 0 && self.compared > 0
    }
    /// Largest `|got - want|` over finite pairs (0 before any).
    pub fn max_abs_err(&self) -> f64 {
        self.max_abs
    }
    /// Largest `|got - want| / |want|` over finite pairs with `want != 0` (0 before any).
    pub fn max_rel_err(&self) -> f64 {
        self.max_rel
    }
    /// One line: the first failure and the failure count, or what was compared.
    pub fn detail(&self) -> String {
        match &self.first_failure {
            Some(f) => format!("{} mismatch(es); first: {f}", self.failures),
            None if self.compared == 0 => "nothing compared".into(),
            None => format!("{} values within tolerance", self.compared),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(values: &[f64]) -> u64 {
        let mut c = Comparator::new(Tol {
            rtol: 1e-6,
            atol: 1e-6,
        });
        for &v in values {
            c.value(String::new, v, 1.0);
        }
        c.output_bits()
    }

    #[test]
    fn output_bits_are_equal_for_equal_values_and_differ_by_one_ulp() {
        let a = [1.0, 0.5, -0.0];
        assert_eq!(digest(&a), digest(&a));
        let one_ulp = [f64::from_bits(1.0f64.to_bits() + 1), 0.5, -0.0];
        assert_ne!(digest(&a), digest(&one_ulp));
        // -0.0 and 0.0 compare equal but are different bits
        assert_ne!(digest(&a), digest(&[1.0, 0.5, 0.0]));
        // order matters: the digest follows the comparison order
        assert_ne!(digest(&[0.5, 1.0]), digest(&[1.0, 0.5]));
    }
}
