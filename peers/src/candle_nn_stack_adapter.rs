//! `candle-nn` 0.10.2 building a stack of layers through `VarMap`/`VarBuilder` (CPU), measured
//! against the analytic peaks of `harness::stack::bounds`.
//!
//! # What the adapter builds
//! The reference's model ([`StackConfig`]): `N` blocks, each an up projection `D -> H` and a down
//! projection `H -> D` with biases, `P = 2*D*H + H + D` parameters per block. Each projection is
//! `candle_nn::linear(in, out, vb.pp(..))`, which asks the `VarBuilder` for `weight` (Kaiming
//! normal) and `bias` (uniform); a `VarBuilder::from_varmap` creates each as a `Var` in the
//! builder's dtype. Two ways to a model of the config's dtype:
//!
//! - [`Path::F32ThenCast`]: the builder in f32, then every weight and bias cast with
//!   `Tensor::to_dtype`, the f32 model and its `VarMap` dropped. Its bound is the reference's
//!   `vmap-f32-then-cast` (`N*P*(4+s) + meta`: every f32 layer and its cast at once).
//! - [`Path::Direct`]: the builder in the config's dtype (`VarBuilder` with `DType::F16`). Its
//!   bound is `layerwise-list` (`N*P*s + P*4 + meta`): nothing but the model and at most one
//!   f32 layer of working memory.
//!
//! The adapter uses candle-nn's own initialisers (its RNG, not the reference's), so only memory
//! is compared: the bits of a candle model are not the reference's.
//!
//! # What is measured
//! [`measure`] runs one build under `harness::probe::measure_in(Scope::ThisThread, ..)` (the
//! binary must install the counting allocator) and keeps the model alive until the measurement
//! ends: the peak of live bytes above the baseline, and the bytes still live when the build
//! returns the model. CPU initialisers and casts of candle-core 0.10.2 run on the calling thread.
//!
//! # References
//! - `harness/reference/src/stack/bounds.rs` (the bounds and `meta`).
//! - candle-nn 0.10.2 `linear`, `VarBuilder::from_varmap`, `VarMap::get`; candle-core 0.10.2
//!   `Tensor::to_dtype`.
//!
//! ```no_run
//! use harness::backend::DType;
//! use harness::stack::StackConfig;
//! use peers::candle_nn_stack_adapter::{measure, Path};
//! let cfg = StackConfig::new(4, 64, 256, DType::F16).unwrap();
//! let m = measure(&cfg, Path::Direct, &peers::candle_nn_stack_adapter::build).unwrap();
//! println!("peak {} bytes, bound {}", m.peak_bytes, m.bound_bytes);
//! ```

use candle_core::{DType as CDType, Device, Tensor};
use candle_nn::{linear, Linear, Module, VarBuilder, VarMap};
use harness::backend::DType;
use harness::probe::{self, Scope};
use harness::stack::bounds::{meta_bytes, peak_bound};
use harness::stack::{StackConfig, Strategy};

/// The crate version the adapter was written against (pinned in `Cargo.toml`).
pub const VERSION: &str = "0.10.2";

/// How the model reaches the config's dtype (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// A `VarBuilder` in f32, then every tensor cast with `Tensor::to_dtype`.
    F32ThenCast,
    /// A `VarBuilder` in the config's dtype.
    Direct,
}

impl Path {
    /// Both paths.
    pub const ALL: [Path; 2] = [Path::F32ThenCast, Path::Direct];

    /// The subject's name in the conformance table.
    pub fn subject(self) -> &'static str {
        match self {
            Path::F32ThenCast => "candle-nn VarBuilder f32 then to_dtype",
            Path::Direct => "candle-nn VarBuilder in the model dtype",
        }
    }

    /// The reference strategy whose analytic peak bounds this path.
    pub fn strategy(self) -> Strategy {
        match self {
            Path::F32ThenCast => Strategy::VmapF32ThenCast,
            Path::Direct => Strategy::LayerwiseList,
        }
    }
}

/// One block: the up projection `D -> H` and the down projection `H -> D`.
#[derive(Debug, Clone)]
pub struct Block {
    /// `D -> H`, weight `[H, D]`, bias `[H]`.
    pub up: Linear,
    /// `H -> D`, weight `[D, H]`, bias `[D]`.
    pub down: Linear,
}

impl Block {
    /// Every tensor of the block: weights and biases.
    pub fn tensors(&self) -> Vec<&Tensor> {
        let mut v = vec![self.up.weight(), self.down.weight()];
        v.extend(self.up.bias());
        v.extend(self.down.bias());
        v
    }
}

/// A builder of the stack of `cfg` along a [`Path`] (the adapter's [`build`], or a stand-in).
pub type Builder = dyn Fn(&StackConfig, Path) -> Result<Vec<Block>, String>;

/// candle's dtype for `d` (f16, f32, f64).
pub fn candle_dtype(d: DType) -> Result<CDType, String> {
    match d {
        DType::F16 => Ok(CDType::F16),
        DType::F32 => Ok(CDType::F32),
        DType::F64 => Ok(CDType::F64),
        other => Err(format!("no candle float dtype for {other}")),
    }
}

fn peer_error(e: candle_core::Error) -> String {
    let text = e.to_string();
    format!(
        "candle-nn: {}",
        text.lines().next().unwrap_or_default().trim()
    )
}

/// `N` blocks from the `VarBuilder` `vb` (named `l{i}.up`, `l{i}.down`).
pub fn blocks_from(vb: &VarBuilder, cfg: &StackConfig) -> Result<Vec<Block>, String> {
    (0..cfg.layers())
        .map(|i| {
            let vb = vb.pp(format!("l{i}"));
            Ok(Block {
                up: linear(cfg.width(), cfg.hidden(), vb.pp("up")).map_err(peer_error)?,
                down: linear(cfg.hidden(), cfg.width(), vb.pp("down")).map_err(peer_error)?,
            })
        })
        .collect()
}

/// `l` with its weight and bias cast to `dtype` by `Tensor::to_dtype`.
pub fn cast_linear(l: &Linear, dtype: CDType) -> Result<Linear, String> {
    let w = l.weight().to_dtype(dtype).map_err(peer_error)?;
    let b = l
        .bias()
        .map(|b| b.to_dtype(dtype))
        .transpose()
        .map_err(peer_error)?;
    Ok(Linear::new(w, b))
}

/// The stack of `cfg` along `path`, as a user of candle-nn writes it (module docs).
pub fn build(cfg: &StackConfig, path: Path) -> Result<Vec<Block>, String> {
    let dev = Device::Cpu;
    let dtype = candle_dtype(cfg.dtype())?;
    match path {
        Path::Direct => {
            let varmap = VarMap::new();
            let vb = VarBuilder::from_varmap(&varmap, dtype, &dev);
            blocks_from(&vb, cfg)
        }
        Path::F32ThenCast => {
            let varmap = VarMap::new();
            let vb = VarBuilder::from_varmap(&varmap, CDType::F32, &dev);
            let f32_blocks = blocks_from(&vb, cfg)?;
            f32_blocks
                .iter()
                .map(|b| {
                    Ok(Block {
                        up: cast_linear(&b.up, dtype)?,
                        down: cast_linear(&b.down, dtype)?,
                    })
                })
                .collect()
        }
    }
}

/// One measured build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitPeak {
    /// Highest live bytes during the build, above the bytes live before it.
    pub peak_bytes: usize,
    /// Bytes still live when the build has returned the model (the model and whatever it keeps).
    pub held_bytes: usize,
    /// Bytes of the model's parameters (`N*P*s`), read from the tensors built.
    pub param_bytes: usize,
    /// The bound of the path's strategy (`harness::stack::bounds::peak_bound`).
    pub bound_bytes: usize,
    /// `N*P*s` of the config.
    pub final_bytes: usize,
    /// `meta = 1024 + 512*N` of the config.
    pub meta_bytes: usize,
}

/// Build the stack of `cfg` along `path` with `build` under the counting allocator (this
/// thread's counters), the model alive until the measurement ends. `Err` when the counting
/// allocator is not installed, the build fails, or the model is not of the config's dtype.
pub fn measure(cfg: &StackConfig, path: Path, build: &Builder) -> Result<InitPeak, String> {
    probe::require_installed().map_err(|e| e.to_string())?;
    let want = candle_dtype(cfg.dtype())?;
    // one small build first: candle's thread-local RNG and other first-use state are allocated
    // once per thread, and would otherwise count towards the first measurement only
    let warm = StackConfig::new(1, 1, 1, cfg.dtype()).map_err(|e| e.to_string())?;
    drop(build(&warm, path)?);
    // `measure_in` reads the counters while the returned model is still alive: the live bytes
    // at the end are what the model holds
    let (model, m) = probe::measure_in(Scope::ThisThread, || build(cfg, path));
    let model = model?;
    let mut param_bytes = 0;
    for t in model.iter().flat_map(Block::tensors) {
        if t.dtype() != want {
            return Err(format!("a tensor of {:?}, want {want:?}", t.dtype()));
        }
        param_bytes += t.elem_count() * t.dtype().size_in_bytes();
    }
    // the model works: one forward pass of a zero row through the first block
    if let Some(b) = model.first() {
        let x = Tensor::zeros((1, cfg.width()), want, &Device::Cpu).map_err(peer_error)?;
        let h = b.up.forward(&x).map_err(peer_error)?;
        b.down.forward(&h).map_err(peer_error)?;
    }
    drop(model);
    Ok(InitPeak {
        peak_bytes: m.peak_above_baseline,
        held_bytes: m.live_delta.max(0) as usize,
        param_bytes,
        bound_bytes: peak_bound(cfg, path.strategy()),
        final_bytes: cfg.final_bytes(),
        meta_bytes: meta_bytes(cfg),
    })
}

/// The config of the conformance rows: 8 blocks of 256-1024-256 in f16 (final 8,409,088 bytes).
pub fn table_config() -> StackConfig {
    StackConfig::new(8, 256, 1024, DType::F16).expect("a valid config")
}

/// The bound of the law `stack_model_holds_final_bytes`: what `layerwise-list` may hold at its
/// worst, `N*P*s + P*4 + meta` (the model, and at most one f32 layer besides).
pub fn held_bound(cfg: &StackConfig) -> usize {
    peak_bound(cfg, Strategy::LayerwiseList)
}

fn sizes(cfg: &StackConfig) -> String {
    format!(
        "{} layers of {}-{}-{} {}",
        cfg.layers(),
        cfg.width(),
        cfg.hidden(),
        cfg.width(),
        cfg.dtype()
    )
}

/// The law `stack_peak_within_bound` on one path: the measured peak at most the analytic bound
/// of the path's strategy ([`Path::strategy`], `harness::stack::bounds::peak_bound`). `Ok` and
/// `Err` carry the evidence (measured and bound bytes, both as multiples of the final bytes).
pub fn peak_within_bound(m: &InitPeak, cfg: &StackConfig, path: Path) -> Result<String, String> {
    let s = path.strategy();
    let text = format!(
        "measured peak {} bytes = {:.4}x final ({} bytes), bound of {} {} = {} bytes = {:.4}x ({})",
        m.peak_bytes,
        m.peak_bytes as f64 / m.final_bytes as f64,
        m.final_bytes,
        s.name(),
        harness::stack::bounds::formula(s),
        m.bound_bytes,
        m.bound_bytes as f64 / m.final_bytes as f64,
        sizes(cfg)
    );
    if m.peak_bytes <= m.bound_bytes {
        Ok(text)
    } else {
        Err(format!(
            "{text}: {} bytes over",
            m.peak_bytes - m.bound_bytes
        ))
    }
}

/// The law `stack_model_holds_final_bytes` on one path: once built, the model keeps at most
/// [`held_bound`] bytes live (its parameters, and no more than one f32 layer besides). `Ok` and
/// `Err` carry the evidence.
pub fn model_holds_final_bytes(m: &InitPeak, cfg: &StackConfig) -> Result<String, String> {
    let bound = held_bound(cfg);
    let text = format!(
        "the built model holds {} bytes = {:.4}x final ({} bytes of parameters), bound \
         N*P*s + P*4 + meta = {} bytes ({})",
        m.held_bytes,
        m.held_bytes as f64 / m.final_bytes as f64,
        m.param_bytes,
        bound,
        sizes(cfg)
    );
    if m.held_bytes <= bound {
        Ok(text)
    } else {
        Err(format!("{text}: {} bytes over", m.held_bytes - bound))
    }
}

/// Both laws on both paths for `cfg` with `build`: `(path, law, verdict)` in table order; a
/// failed measurement fails both laws of its path with the error.
pub fn check(
    cfg: &StackConfig,
    build: &Builder,
) -> Vec<(Path, &'static str, Result<String, String>)> {
    let mut out = Vec::new();
    for path in Path::ALL {
        match measure(cfg, path, build) {
            Ok(m) => {
                out.push((
                    path,
                    "stack_peak_within_bound",
                    peak_within_bound(&m, cfg, path),
                ));
                out.push((
                    path,
                    "stack_model_holds_final_bytes",
                    model_holds_final_bytes(&m, cfg),
                ));
            }
            Err(e) => {
                for law in ["stack_peak_within_bound", "stack_model_holds_final_bytes"] {
                    out.push((path, law, Err(e.clone())));
                }
            }
        }
    }
    out
}
