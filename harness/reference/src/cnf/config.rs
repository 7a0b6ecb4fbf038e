//! The CNF's static configuration (what `jax.jit` would close over) and its parameter layout.
//!
//! A block's vector field is `depth + 1` ConcatSquash layers `data -> width -> ... -> width ->
//! data` (`data -> data` when `depth = 0`). Each layer's parameters are stored flat, in this
//! order: `lin1.weight (out, in)`, `lin1.bias (out)`, `lin2.weight (out, 1)`, `lin2.bias (out)`,
//! `lin3.weight (out, 1)` — [`Layout`] holds the offsets.

use crate::error::ensure;
use crate::ode::Solver;
use crate::stage::KeyHasher;
use crate::Result;

/// How `tr(df/dy)` is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceEstimator {
    /// `sum_j e_j^T J e_j`: one tangent per data dimension.
    Exact,
    /// `eps^T J eps` with one probe per sample, shared over the solve (Hutchinson).
    Hutchinson(Probe),
}

/// The distribution of Hutchinson probes (both have `E[eps eps^T] = I`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Probe {
    /// Standard normal entries.
    Gaussian,
    /// `+-1` with probability 1/2 each.
    Rademacher,
}

/// Model and solver settings. Defaults are the training example of `docs/ALGORITHMS.md` §6.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CnfConfig {
    /// Dimension `d` of a data point (2 for the planar data sets); `1..=MAX_DIM`.
    pub data_size: usize,
    /// Hidden width of every ConcatSquash layer; `1..=MAX_DIM`.
    pub width: usize,
    /// Hidden layers per block: a block has `depth + 1` layers; `0..=MAX_LAYERS`.
    pub depth: usize,
    /// Number of flow blocks, each an ODE solve over `[t0, t1]`; `1..=MAX_LAYERS`.
    pub blocks: usize,
    /// Start of each block's time interval (finite).
    pub t0: f64,
    /// End of each block's time interval (finite, `> t0`).
    pub t1: f64,
    /// Constant step (positive); the log-likelihood solve runs from `t1` to `t0` with `-dt0`.
    pub dt0: f64,
    /// The explicit Runge–Kutta method of every block's solve.
    pub solver: Solver,
    /// How the divergence `tr(df/dy)` in the log-density equation is computed.
    pub trace: TraceEstimator,
}

impl Default for CnfConfig {
    fn default() -> Self {
        CnfConfig {
            data_size: 2,
            width: 64,
            depth: 3,
            blocks: 2,
            t0: 0.0,
            t1: 0.5,
            dt0: 0.05,
            solver: Solver::Tsit5,
            trace: TraceEstimator::Exact,
        }
    }
}

/// Largest width/data size accepted (keeps every buffer size far from overflow).
pub const MAX_DIM: usize = 1 << 14;
/// Largest depth and block count accepted.
pub const MAX_LAYERS: usize = 256;

impl CnfConfig {
    /// Check every setting; errors name the field.
    pub fn validate(&self) -> Result<()> {
        ensure(
            (1..=MAX_DIM).contains(&self.data_size),
            "data_size",
            self.data_size,
            "must be in 1..=16384",
        )?;
        ensure(
            (1..=MAX_DIM).contains(&self.width),
            "width",
            self.width,
            "must be in 1..=16384",
        )?;
        ensure(
            self.depth <= MAX_LAYERS,
            "depth",
            self.depth,
            "must be at most 256",
        )?;
        ensure(
            (1..=MAX_LAYERS).contains(&self.blocks),
            "blocks",
            self.blocks,
            "must be in 1..=256",
        )?;
        ensure(self.t0.is_finite(), "t0", self.t0, "must be finite")?;
        ensure(self.t1.is_finite(), "t1", self.t1, "must be finite")?;
        ensure(
            self.t1 > self.t0 && (self.t1 - self.t0).is_finite(),
            "t1",
            self.t1,
            "must be greater than t0, with t1 - t0 finite",
        )?;
        ensure(
            self.dt0.is_finite() && self.dt0 > 0.0,
            "dt0",
            self.dt0,
            "must be finite and > 0",
        )?;
        ensure(
            (self.t1 - self.t0) / self.dt0 <= MAX_STEPS_PER_BLOCK as f64,
            "dt0",
            self.dt0,
            "must give at most 4096 steps per block",
        )?;
        Ok(())
    }

    /// A validated copy.
    pub fn validated(self) -> Result<Self> {
        self.validate()?;
        Ok(self)
    }

    /// `(in, out)` of every layer of a block.
    pub fn layer_dims(&self) -> Vec<(usize, usize)> {
        (0..=self.depth)
            .map(|l| {
                let i = if l == 0 { self.data_size } else { self.width };
                let o = if l == self.depth {
                    self.data_size
                } else {
                    self.width
                };
                (i, o)
            })
            .collect()
    }

    /// Tangents propagated per sample: `data_size` (exact) or 1 (Hutchinson).
    pub fn tangents(&self) -> usize {
        match self.trace {
            TraceEstimator::Exact => self.data_size,
            TraceEstimator::Hutchinson(_) => 1,
        }
    }

    /// Hash of everything static.
    pub fn static_key(&self) -> u64 {
        KeyHasher::default()
            .val("cnf")
            .val(self.data_size)
            .val(self.width)
            .val(self.depth)
            .val(self.blocks)
            .f64(self.t0)
            .f64(self.t1)
            .f64(self.dt0)
            .val(self.solver as u8)
            .val(self.trace)
            .finish()
    }
}

/// The solver's step budget per block (diffrax's default `max_steps`).
pub const MAX_STEPS_PER_BLOCK: usize = 4096;

/// Offsets of one layer's tensors inside a block's flat parameter vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerLayout {
    /// Input width of the layer.
    pub inp: usize,
    /// Output width of the layer.
    pub out: usize,
    /// Offset of `lin1.weight`, `out x inp` row-major.
    pub w1: usize,
    /// Offset of `lin1.bias`, `out` values.
    pub b1: usize,
    /// Offset of `lin2.weight` (the time gate's weight), `out` values.
    pub w2: usize,
    /// Offset of `lin2.bias` (the time gate's bias), `out` values.
    pub b2: usize,
    /// Offset of `lin3.weight` (the time shift), `out` values.
    pub w3: usize,
}

/// Where every layer's parameters live in a block's flat vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The block's `depth + 1` layers, first (data input) to last (data output).
    pub layers: Vec<LayerLayout>,
    /// Parameters per block.
    pub len: usize,
    /// Data dimension `d` (the first layer's input and last layer's output).
    pub data_size: usize,
}

impl Layout {
    /// The offsets for `cfg`: layers packed back to back, each taking `out * inp + 4 * out` values.
    ///
    /// ```
    /// use harness_reference::cnf::{CnfConfig, Layout};
    /// let l = Layout::new(&CnfConfig::default()); // 2 -> 64 -> 64 -> 64 -> 2
    /// assert_eq!(l.layers.len(), 4);
    /// assert_eq!(l.len, (64 * 2 + 4 * 64) + 2 * (64 * 64 + 4 * 64) + (2 * 64 + 4 * 2));
    /// assert_eq!(l.layers[1].w1, 64 * 2 + 4 * 64);
    /// ```
    pub fn new(cfg: &CnfConfig) -> Self {
        let mut off = 0;
        let layers = cfg
            .layer_dims()
            .into_iter()
            .map(|(inp, out)| {
                let l = LayerLayout {
                    inp,
                    out,
                    w1: off,
                    b1: off + out * inp,
                    w2: off + out * inp + out,
                    b2: off + out * inp + 2 * out,
                    w3: off + out * inp + 3 * out,
                };
                off += out * inp + 4 * out;
                l
            })
            .collect();
        Layout {
            layers,
            len: off,
            data_size: cfg.data_size,
        }
    }
    /// Widest layer output (buffer sizing).
    pub fn max_width(&self) -> usize {
        self.layers
            .iter()
            .map(|l| l.out.max(l.inp))
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_counts_every_parameter_once() {
        // closed form: per layer out*in + 4*out; 2-64-64-64-2
        let cfg = CnfConfig::default();
        let l = Layout::new(&cfg);
        let want = (64 * 2 + 4 * 64) + 2 * (64 * 64 + 4 * 64) + (2 * 64 + 4 * 2);
        assert_eq!(l.len, want);
        assert_eq!(l.layers.last().unwrap().w3 + 2, want);
    }

    #[test]
    fn depth_zero_is_one_data_to_data_layer() {
        let cfg = CnfConfig {
            depth: 0,
            ..CnfConfig::default()
        };
        assert_eq!(cfg.layer_dims(), vec![(2, 2)]);
    }

    #[test]
    fn invalid_settings_name_the_field() {
        let bad = CnfConfig {
            dt0: 0.0,
            ..CnfConfig::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("`dt0`"));
        let bad = CnfConfig {
            t1: -1.0,
            ..CnfConfig::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("`t1`"));
        let bad = CnfConfig {
            blocks: 0,
            ..CnfConfig::default()
        };
        assert!(bad.validate().unwrap_err().to_string().contains("`blocks`"));
    }
}
