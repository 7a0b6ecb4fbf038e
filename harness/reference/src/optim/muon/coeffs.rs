//! Newton–Schulz coefficients: presets, validation, and the per-dtype conversion policy.
//!
//! The coefficient *tensor* is built in exactly one place, `build`, called by `Muon::init`; it
//! lives in the state (`ns_coeffs`, float64 — the run's default float dtype under jax x64) and is
//! carried unchanged by every update. Each use converts it to the matrix's arithmetic dtype
//! through a [`CoeffPolicy`]; the reference ([`PerUse`]) converts afresh at every use.
//!
//! # References
//! - optax 0.2.8 `optax.contrib.muon` (`_DEFAULT_NS_COEFFS`, `_DION_NS_COEFFS`); optax #1186 /
//!   PR #1193 (coefficients moved into the state); `docs/ALGORITHMS.md` §3.

use crate::backend::{Array, Float};
use crate::{Error, Result};

/// "standard": Keller Jordan's quintic, `(a, b, c)`, run `ns_steps` times.
pub const STANDARD: [f64; 3] = [3.4445, -4.7750, 2.0315];

/// "dion": one row per iteration (Ahn et al., *Dion*, arXiv:2504.05295).
pub const DION: [[f64; 3]; 5] = [
    [4.0848, -6.8946, 2.9270],
    [3.9505, -6.3029, 2.6377],
    [3.7418, -5.5913, 2.3037],
    [2.8769, -3.1427, 1.2046],
    [2.8366, -3.0525, 1.2012],
];

/// What the user asked for: a preset name or raw numbers with a shape (unvalidated until `init`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub enum CoeffSpec {
    /// `"standard"` or `"dion"` (optax's preset strings).
    Preset(String),
    /// Raw coefficients: shape `[3]` or `[k, 3]`, row-major data.
    Raw {
        /// `[3]` (one `(a, b, c)` for every iteration) or `[k, 3]` (one row per iteration).
        shape: Vec<usize>,
        /// The coefficients, row-major.
        data: Vec<f64>,
    },
}

impl Default for CoeffSpec {
    fn default() -> Self {
        CoeffSpec::Preset("standard".into())
    }
}

impl CoeffSpec {
    /// `[3]` coefficients.
    pub fn single(c: [f64; 3]) -> Self {
        CoeffSpec::Raw {
            shape: vec![3],
            data: c.to_vec(),
        }
    }
    /// `[k, 3]` coefficients, one row per iteration.
    pub fn rows(rows: &[[f64; 3]]) -> Self {
        CoeffSpec::Raw {
            shape: vec![rows.len(), 3],
            data: rows.iter().flatten().copied().collect(),
        }
    }
}

fn bad(value: String, expected: &str) -> Error {
    Error::InvalidHyper {
        name: "ns_coeffs",
        value,
        expected: expected.into(),
    }
}

/// Build and validate the coefficient tensor (shape `[3]` or `[k, 3]` with `k <= ns_steps`,
/// every value finite). The only constructor of a coefficient tensor in the workspace.
pub fn build(spec: &CoeffSpec, ns_steps: usize) -> Result<Array<f64>> {
    let (shape, data) = match spec {
        CoeffSpec::Preset(name) => match name.as_str() {
            "standard" => (vec![3], STANDARD.to_vec()),
            "dion" => (
                vec![DION.len(), 3],
                DION.iter().flatten().copied().collect(),
            ),
            other => {
                return Err(bad(
                    format!("{other:?}"),
                    "preset must be \"standard\" or \"dion\"",
                ))
            }
        },
        CoeffSpec::Raw { shape, data } => (shape.clone(), data.clone()),
    };
    let ok_shape = matches!(shape.as_slice(), [3] | [_, 3]);
    if !ok_shape {
        return Err(bad(
            format!("shape {shape:?}"),
            "shape must be (3,) or (k, 3)",
        ));
    }
    if shape.len() == 2 && shape[0] > ns_steps {
        return Err(bad(
            format!("shape {shape:?}"),
            &format!("k = {} rows need k <= ns_steps = {ns_steps}", shape[0]),
        ));
    }
    let arr =
        Array::new(shape, data).map_err(|e| bad(e.to_string(), "data must fill the shape"))?;
    if let Some(x) = arr.data().iter().find(|x| !x.is_finite()) {
        return Err(bad(format!("{x}"), "every coefficient must be finite"));
    }
    Ok(arr)
}

/// Number of Newton–Schulz iterations the tensor runs: `k` rows for `[k, 3]`, `ns_steps` for `[3]`.
pub fn iterations(coeffs: &Array<f64>, ns_steps: usize) -> usize {
    match coeffs.shape() {
        [k, 3] => *k,
        _ => ns_steps,
    }
}

/// Row `(a, b, c)` of iteration `i`.
pub fn row(coeffs: &Array<f64>, i: usize) -> [f64; 3] {
    let d = coeffs.data();
    let at = if coeffs.shape().len() == 2 { 3 * i } else { 0 };
    [d[at], d[at + 1], d[at + 2]]
}

/// How the state's coefficients reach a matrix of arithmetic dtype `A`: the returned tensor's
/// values are exactly representable in `A` (they are what the iteration multiplies by).
pub trait CoeffPolicy: Send + Sync {
    /// The state's coefficients as the iteration on an `A` matrix uses them (every value exactly
    /// representable in `A`, carried as f64).
    fn convert<A: Float>(&self, state_coeffs: &Array<f64>) -> Array<f64>;
}

/// The reference: cast the state's coefficients to `A` at every use (optax `astype(x.dtype)`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PerUse;

impl CoeffPolicy for PerUse {
    fn convert<A: Float>(&self, c: &Array<f64>) -> Array<f64> {
        c.map(|x| A::of_f64(x).as_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dion_has_five_rows_and_needs_five_steps() {
        let spec = CoeffSpec::Preset("dion".into());
        assert_eq!(build(&spec, 5).unwrap().shape(), &[5, 3]);
        assert!(build(&spec, 4).is_err());
    }

    #[test]
    fn non_finite_and_bad_shapes_are_typed_errors() {
        for spec in [
            CoeffSpec::single([1.0, f64::NAN, 0.0]),
            CoeffSpec::Raw {
                shape: vec![4],
                data: vec![0.0; 4],
            },
            CoeffSpec::Raw {
                shape: vec![1, 3, 1],
                data: vec![0.0; 3],
            },
            CoeffSpec::Raw {
                shape: vec![3],
                data: vec![0.0; 2],
            },
            CoeffSpec::Preset("muon".into()),
        ] {
            assert!(matches!(
                build(&spec, 5),
                Err(Error::InvalidHyper {
                    name: "ns_coeffs",
                    ..
                })
            ));
        }
    }

    #[test]
    fn per_use_rounds_to_the_dtype() {
        let c = build(&CoeffSpec::default(), 5).unwrap();
        assert_eq!(PerUse.convert::<f64>(&c).data()[0], 3.4445);
        assert_eq!(PerUse.convert::<f32>(&c).data()[0], 3.4445f32 as f64);
    }
}
