//! Accumulates comparisons against expected values under golden-v1's tolerance rule.

use crate::backend::{Array, Float};
use crate::tolerance::Tol;
use crate::tree::Tree;

/// Records every comparison of a case: the largest errors and the first mismatch.
#[derive(Debug, Clone)]
pub struct Comparator {
    tol: Tol,
    compared: usize,
    max_abs: f64,
    max_rel: f64,
    first_failure: Option<String>,
    failures: usize,
}

impl Comparator {
    pub fn new(tol: Tol) -> Self {
        Self {
            tol,
            compared: 0,
            max_abs: 0.0,
            max_rel: 0.0,
            first_failure: None,
            failures: 0,
        }
    }
    /// One value; `what` names it in the detail of the first failure.
    pub fn value(&mut self, what: impl FnOnce() -> String, got: f64, want: f64) {
        self.compared += 1;
        if want.is_finite() && got.is_finite() {
            let abs = (got - want).abs();
            self.max_abs = self.max_abs.max(abs);
            if want != 0.0 {
                self.max_rel = self.max_rel.max(abs / want.abs());
            }
        }
        if !self.tol.close(got, want) {
            self.fail(format!("{}: got {got:e}, want {want:e}", what()));
        }
    }
    /// An integer field: must be equal.
    pub fn exact(&mut self, what: impl FnOnce() -> String, got: i64, want: i64) {
        self.compared += 1;
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
    /// A failure that is not a value comparison (an error of the reference, say).
    pub fn fail(&mut self, msg: String) {
        self.failures += 1;
        if self.first_failure.is_none() {
            self.first_failure = Some(msg);
        }
    }
    pub fn passed(&self) -> bool {
        self.failures == 0 && self.compared > 0
    }
    pub fn max_abs_err(&self) -> f64 {
        self.max_abs
    }
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
