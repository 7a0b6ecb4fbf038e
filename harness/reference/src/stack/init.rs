//! The five initialisation strategies, and the hook through which a caller observes a build.
//!
//! Every strategy computes the same values — element `i` of tensor `t` of layer `l` is
//! `cast(rng::init_value(seed, l, t, i, fan_in(t)))` — and differs only in what it holds in
//! memory on the way (formulas in [`super::bounds`]):
//!
//! | strategy | what it does | peak |
//! |---|---|---|
//! | `vmap-f32-then-cast` | every layer in f32 at once, then cast (equinox's `filter_vmap`) | `N*P*(4+s)` |
//! | `layerwise-list` | each layer built in f32 and cast at once, kept in a list | `N*P*s + P*4` |
//! | `list-then-stack` | the cast list, stacked afterwards while the list is alive | `N*P*s + max(N*P*s, P*4)` |
//! | `preallocated` | the final stack allocated first, each f32 layer cast into its slot | `N*P*s + P*4` |
//! | `chunked-direct` | values generated in f32 chunks of at most 64 KiB straight into the final stack | `N*P*s + 4*min(16384, D*H)` |
//!
//! (each plus a few hundred bytes of headers, see [`super::bounds::meta_bytes`]).
//!
//! Guarantees: every strategy returns the bit-identical model for a given `(config, seed)`; the
//! builds are single-threaded and allocate only what the table says, so their peaks are
//! deterministic. The [`Observer`] is called at every allocation and release point and once per
//! layer or chunk; it is how `harness init-peaks` samples live bytes without this module
//! importing the probe.
//!
//! # References
//! equinox #673 (the vmap peak, and the advice to build, then cast).
//!
//! # Example
//! ```
//! use harness_reference::backend::DType;
//! use harness_reference::stack::{build, StackConfig, Strategy};
//! let cfg = StackConfig::new(2, 3, 5, DType::F16)?;
//! let a = build::<half::f16>(&cfg, 9, Strategy::VmapF32ThenCast, &mut ())?.into_stacked()?;
//! let b = build::<half::f16>(&cfg, 9, Strategy::ChunkedDirect, &mut ())?.into_stacked()?;
//! assert_eq!(a.checksum(), b.checksum());
//! # Ok::<(), harness_reference::Error>(())
//! ```

use super::config::{StackConfig, TensorId};
use super::model::{Layer, LayerList, Stacked};
use super::rng::{fill_canonical, fill_f32, limit, stream_key};
use crate::backend::{Array, DType, Float};
use crate::error::ensure;
use crate::Result;

/// Elements of one chunk of `chunked-direct`'s work (16,384: the unit of parallel work, and
/// the size of the working-memory term of its bound, 16,384 x 4 bytes = 64 KiB).
pub const CHUNK_ELEMS: usize = 16 * 1024;

/// Called by the strategies at their allocation/release points (`at` says which).
pub trait Observer {
    /// Record the live memory at the point named `at` (called at allocations, releases and once per
    /// layer or chunk).
    fn sample(&mut self, at: &'static str);
}

/// No observation.
impl Observer for () {
    fn sample(&mut self, _at: &'static str) {}
}

/// An initialisation strategy (names from `docs/CLI.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Strategy {
    /// `vmap-f32-then-cast`: every layer in f32 at once, then cast; peak `N*P*(4+s)`.
    VmapF32ThenCast,
    /// `layerwise-list`: each layer built in f32, cast, and kept in a list; peak `N*P*s + P*4`.
    LayerwiseList,
    /// `list-then-stack`: the cast list, stacked while it is alive; peak `N*P*s + max(N*P*s, P*4)`.
    ListThenStack,
    /// `preallocated`: the final stack first, each f32 layer cast into its slot; peak `N*P*s +
    /// P*4`.
    Preallocated,
    /// `chunked-direct`: f32 chunks of at most [`CHUNK_ELEMS`] straight into the stack; peak `N*P*s
    /// + 4*min(16384, D*H)`.
    ChunkedDirect,
}

impl Strategy {
    /// Every strategy, in the order of the module's table.
    pub const ALL: [Strategy; 5] = [
        Strategy::VmapF32ThenCast,
        Strategy::LayerwiseList,
        Strategy::ListThenStack,
        Strategy::Preallocated,
        Strategy::ChunkedDirect,
    ];
    /// The stable CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::VmapF32ThenCast => "vmap-f32-then-cast",
            Strategy::LayerwiseList => "layerwise-list",
            Strategy::ListThenStack => "list-then-stack",
            Strategy::Preallocated => "preallocated",
            Strategy::ChunkedDirect => "chunked-direct",
        }
    }
    /// The strategy with CLI name `s` (as [`Strategy::name`] spells it), or `None`.
    ///
    /// ```
    /// use harness_reference::stack::Strategy;
    /// assert_eq!(Strategy::parse("chunked-direct"), Some(Strategy::ChunkedDirect));
    /// assert_eq!(Strategy::parse("chunked"), None);
    /// ```
    pub fn parse(s: &str) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|x| x.name() == s)
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a strategy produced: the stacked model, or (for `layerwise-list`) the list.
#[derive(Debug, Clone, PartialEq)]
pub enum Built<E> {
    /// The stacked model (every strategy but `layerwise-list`).
    Stacked(Stacked<E>),
    /// The per-layer list (`layerwise-list`).
    List(LayerList<E>),
}

impl<E: Float> Built<E> {
    /// The stacked form (a list is moved over layer by layer).
    pub fn into_stacked(self) -> Result<Stacked<E>> {
        match self {
            Built::Stacked(s) => Ok(s),
            Built::List(l) => l.into_stacked(),
        }
    }
    /// The list form (a stack is copied out).
    pub fn into_list(self) -> Result<LayerList<E>> {
        match self {
            Built::Stacked(s) => s.to_list(),
            Built::List(l) => Ok(l),
        }
    }
    /// FNV-1a of every element's bits; equal for the stacked and list forms of the same values.
    pub fn checksum(&self) -> u64 {
        match self {
            Built::Stacked(s) => s.checksum(),
            Built::List(l) => l.checksum(),
        }
    }
    /// Bytes of parameter data, `N*P*s` (headers excluded).
    pub fn data_bytes(&self) -> usize {
        match self {
            Built::Stacked(s) => s.data_bytes(),
            Built::List(l) => l.data_bytes(),
        }
    }
}

/// A build in the dtype chosen at run time.
#[derive(Debug, Clone, PartialEq)]
pub enum AnyBuilt {
    /// An f16 build.
    F16(Built<half::f16>),
    /// An f32 build.
    F32(Built<f32>),
    /// An f64 build.
    F64(Built<f64>),
}

impl AnyBuilt {
    /// [`Built::checksum`] of the build, whatever its dtype.
    pub fn checksum(&self) -> u64 {
        match self {
            AnyBuilt::F16(b) => b.checksum(),
            AnyBuilt::F32(b) => b.checksum(),
            AnyBuilt::F64(b) => b.checksum(),
        }
    }
    /// [`Built::data_bytes`] of the build, whatever its dtype.
    pub fn data_bytes(&self) -> usize {
        match self {
            AnyBuilt::F16(b) => b.data_bytes(),
            AnyBuilt::F32(b) => b.data_bytes(),
            AnyBuilt::F64(b) => b.data_bytes(),
        }
    }
}

/// [`build`] in `cfg.dtype()`.
pub fn build_any(
    cfg: &StackConfig,
    seed: u64,
    strategy: Strategy,
    obs: &mut dyn Observer,
) -> Result<AnyBuilt> {
    Ok(match cfg.dtype() {
        DType::F16 => AnyBuilt::F16(build(cfg, seed, strategy, obs)?),
        DType::F32 => AnyBuilt::F32(build(cfg, seed, strategy, obs)?),
        _ => AnyBuilt::F64(build(cfg, seed, strategy, obs)?),
    })
}

/// `cfg`'s dtype is `E`'s (a typed error otherwise).
pub(crate) fn ensure_element_type<E: Float>(cfg: &StackConfig) -> Result<()> {
    ensure(
        cfg.dtype() == E::DTYPE,
        "dtype",
        cfg.dtype(),
        &format!("must be the element type of the build, {}", E::DTYPE),
    )
}

/// Build the model of `cfg` (whose dtype must be `E`'s) with `strategy`.
pub fn build<E: Float>(
    cfg: &StackConfig,
    seed: u64,
    strategy: Strategy,
    obs: &mut dyn Observer,
) -> Result<Built<E>> {
    ensure_element_type::<E>(cfg)?;
    obs.sample("start");
    let out = match strategy {
        Strategy::VmapF32ThenCast => Built::Stacked(vmap_f32_then_cast(cfg, seed, obs)?),
        Strategy::LayerwiseList => Built::List(layerwise_list(cfg, seed, obs)?),
        Strategy::ListThenStack => {
            let list = layerwise_list::<E>(cfg, seed, obs)?;
            let stacked = list.to_stacked()?;
            obs.sample("list-then-stack: stacked");
            drop(list);
            obs.sample("list-then-stack: list freed");
            Built::Stacked(stacked)
        }
        Strategy::Preallocated => Built::Stacked(preallocated(cfg, seed, obs)?),
        Strategy::ChunkedDirect => Built::Stacked(chunked_direct(cfg, seed, obs)?),
    };
    obs.sample("end");
    Ok(out)
}

/// Append the canonical values of layer `l`'s tensor `t` (all of them) to `v`, in f32.
fn push_f32(cfg: &StackConfig, seed: u64, l: usize, t: TensorId, v: &mut Vec<f32>) {
    let n = cfg.layer_len(t);
    let start = v.len();
    v.resize(start + n, 0.0);
    let key = stream_key(seed, l as u64, t as u64);
    fill_f32(key, limit(cfg.fan_in(t)), 0, &mut v[start..]);
}

/// One layer's four tensors in f32 (`P*4` bytes).
fn layer_f32(cfg: &StackConfig, seed: u64, l: usize) -> Result<[Array<f32>; 4]> {
    let [a, b, c, d] = TensorId::ALL.map(|t| {
        let mut v = Vec::with_capacity(cfg.layer_len(t));
        push_f32(cfg, seed, l, t, &mut v);
        Array::new(cfg.layer_shape(t), v)
    });
    Ok([a?, b?, c?, d?])
}

fn cast_all<E: Float>(a: &[Array<f32>; 4]) -> [Array<E>; 4] {
    [&a[0], &a[1], &a[2], &a[3]].map(|x| x.map(E::of_f32))
}

fn vmap_f32_then_cast<E: Float>(
    cfg: &StackConfig,
    seed: u64,
    obs: &mut dyn Observer,
) -> Result<Stacked<E>> {
    let n = cfg.layers();
    let mut f32s = Vec::with_capacity(4);
    for t in TensorId::ALL {
        let mut v = Vec::with_capacity(n * cfg.layer_len(t));
        obs.sample("vmap: f32 tensor allocated");
        for l in 0..n {
            push_f32(cfg, seed, l, t, &mut v);
        }
        f32s.push(Array::new(cfg.stacked_shape(t), v)?);
    }
    let f32s: [Array<f32>; 4] = f32s.try_into().expect("four tensors");
    obs.sample("vmap: all layers in f32");
    let cast = cast_all::<E>(&f32s);
    obs.sample("vmap: cast");
    drop(f32s);
    obs.sample("vmap: f32 freed");
    Stacked::new(*cfg, cast)
}

fn layerwise_list<E: Float>(
    cfg: &StackConfig,
    seed: u64,
    obs: &mut dyn Observer,
) -> Result<LayerList<E>> {
    let mut layers = Vec::with_capacity(cfg.layers());
    for l in 0..cfg.layers() {
        let f = layer_f32(cfg, seed, l)?;
        obs.sample("layer: f32");
        let tensors = cast_all::<E>(&f);
        obs.sample("layer: cast");
        drop(f);
        layers.push(Layer { tensors });
        obs.sample("layer: f32 freed");
    }
    LayerList::new(*cfg, layers)
}

fn preallocated<E: Float>(
    cfg: &StackConfig,
    seed: u64,
    obs: &mut dyn Observer,
) -> Result<Stacked<E>> {
    let mut out: [Vec<E>; 4] =
        TensorId::ALL.map(|t| vec![E::default(); cfg.layers() * cfg.layer_len(t)]);
    obs.sample("preallocated: stack allocated");
    for l in 0..cfg.layers() {
        let f = layer_f32(cfg, seed, l)?;
        obs.sample("layer: f32");
        for t in TensorId::ALL {
            let len = cfg.layer_len(t);
            let slot = &mut out[t as usize][l * len..(l + 1) * len];
            for (o, &x) in slot.iter_mut().zip(f[t as usize].data()) {
                *o = E::of_f32(x);
            }
        }
        obs.sample("layer: written");
        drop(f);
        obs.sample("layer: f32 freed");
    }
    let [a, b, c, d] = TensorId::ALL
        .map(|t| Array::new(cfg.stacked_shape(t), std::mem::take(&mut out[t as usize])));
    Stacked::new(*cfg, [a?, b?, c?, d?])
}

/// Elements of `chunked-direct`'s working-memory term for `cfg`: `min(CHUNK_ELEMS, D*H)` (the
/// largest tensor of a layer has `D*H` elements).
pub fn chunk_elems(cfg: &StackConfig) -> usize {
    CHUNK_ELEMS.min(cfg.width() * cfg.hidden())
}

/// Fill `part`, the elements `first ..` of the stacked tensor `t` (layer `g / len`, index
/// `g % len` for element `g`), with their canonical values cast to `E`, one run of a layer's
/// stream at a time ([`fill_canonical`]).
fn fill_stacked<E: Float>(cfg: &StackConfig, seed: u64, t: TensorId, first: usize, part: &mut [E]) {
    let (len, lim) = (cfg.layer_len(t), limit(cfg.fan_in(t)));
    let mut g = first;
    let mut rest = part;
    while !rest.is_empty() {
        let (l, i) = (g / len, g % len);
        let (run, after) = rest.split_at_mut(rest.len().min(len - i));
        fill_canonical(stream_key(seed, l as u64, t as u64), lim, i as u64, run);
        g += run.len();
        rest = after;
    }
}

fn chunked_direct<E: Float>(
    cfg: &StackConfig,
    seed: u64,
    obs: &mut dyn Observer,
) -> Result<Stacked<E>> {
    use rayon::prelude::*;
    // zeroed allocations: the pages are first touched by the fill below, written once
    let mut out: [Vec<E>; 4] =
        TensorId::ALL.map(|t| E::zeroed_vec(cfg.layers() * cfg.layer_len(t)));
    obs.sample("chunked: stack allocated");
    // Every element is a pure function of its position, so the chunks can be filled in any
    // order on any number of threads with the same bits. Threads only for layers of at least
    // CHUNK_ELEMS elements, where the bound's working-memory term (64 KiB) covers the thread
    // pool's own bookkeeping.
    let parallel = chunk_elems(cfg) == CHUNK_ELEMS;
    for t in TensorId::ALL {
        let v = &mut out[t as usize];
        let fill = |(c, part): (usize, &mut [E])| fill_stacked(cfg, seed, t, c * CHUNK_ELEMS, part);
        if parallel && v.len() > CHUNK_ELEMS {
            v.par_chunks_mut(CHUNK_ELEMS).enumerate().for_each(fill);
        } else {
            v.chunks_mut(CHUNK_ELEMS).enumerate().for_each(fill);
        }
        obs.sample("chunked: tensor filled");
    }
    let [a, b, c, d] = TensorId::ALL
        .map(|t| Array::new(cfg.stacked_shape(t), std::mem::take(&mut out[t as usize])));
    Stacked::new(*cfg, [a?, b?, c?, d?])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in Strategy::ALL {
            assert_eq!(Strategy::parse(s.name()), Some(s));
        }
        assert_eq!(Strategy::parse("vmap"), None);
    }

    #[test]
    fn wrong_element_type_is_a_typed_error() {
        let cfg = StackConfig::new(1, 2, 3, DType::F16).unwrap();
        assert!(build::<f32>(&cfg, 0, Strategy::ChunkedDirect, &mut ()).is_err());
    }

    #[test]
    fn chunked_direct_gives_the_same_bits_on_one_thread_and_on_several() {
        // D*H = 20,000 >= CHUNK_ELEMS: the parallel path, chunks crossing layer boundaries
        let cfg = StackConfig::new(3, 100, 200, DType::F16).unwrap();
        let on = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| build::<half::f16>(&cfg, 5, Strategy::ChunkedDirect, &mut ()).unwrap())
        };
        let one = on(1);
        assert_eq!(one, on(2));
        assert_eq!(one, on(3));
        let reference = build::<half::f16>(&cfg, 5, Strategy::VmapF32ThenCast, &mut ()).unwrap();
        assert_eq!(one, reference);
    }

    #[test]
    fn chunking_crosses_tensor_boundaries_identically() {
        // D*H = 20,000 > CHUNK_ELEMS: w1 and w2 are generated in two chunks per layer
        let cfg = StackConfig::new(2, 100, 200, DType::F32).unwrap();
        let a = build::<f32>(&cfg, 3, Strategy::ChunkedDirect, &mut ()).unwrap();
        let b = build::<f32>(&cfg, 3, Strategy::VmapF32ThenCast, &mut ()).unwrap();
        assert_eq!(a, b);
    }
}
