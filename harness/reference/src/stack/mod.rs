//! Stacked layers in low precision: N identical MLP blocks, initialised five ways, run as a scan
//! or an unrolled loop.
//!
//! The failure this module is built to avoid is equinox #673: creating all `N` layers of a
//! Mistral-sized model at once (`filter_vmap` over layer keys) materialises every layer's f32
//! weights before the cast to f16, so the peak is about `N*P*(4+2)` bytes for a model whose final
//! size is `N*P*2`. Here every initial value is a pure function of `(seed, layer, tensor, index)`
//! ([`rng`]), so any order of generation — all at once, layer by layer, chunk by chunk — yields
//! the bit-identical model, and the strategies of [`init`] differ only in their peak memory, which
//! [`bounds`] states as formulas.
//!
//! * [`config`] — the validated [`StackConfig`] (zero sizes and overflowing byte counts are typed
//!   errors);
//! * [`rng`] — the counter-based generator;
//! * [`model`] — the stacked `[N, ...]` model, the per-layer list and the conversion between them;
//! * [`init`] — the five strategies (`vmap-f32-then-cast`, `layerwise-list`, `list-then-stack`,
//!   `preallocated`, `chunked-direct`) and the [`Observer`] hook through which a caller may sample
//!   memory during a build (this module never imports the probe);
//! * [`bounds`] — the analytic peak of each strategy;
//! * [`forward`] — the forward pass as a scan over the stack and as an unrolled loop over a list.
//!
//! # References
//! equinox #673 ("Initialising a Mistral-sized model in f16 runs out of memory"), and equinox's
//! advice there: build the layers, then cast; a scan over stacked layers compiles the block once.
//!
//! # Example
//! ```
//! use harness_reference::backend::DType;
//! use harness_reference::stack::{build, bounds, StackConfig, Strategy};
//! let cfg = StackConfig::new(4, 8, 16, DType::F16)?;
//! let m = build::<half::f16>(&cfg, 7, Strategy::ChunkedDirect, &mut ())?.into_stacked()?;
//! assert_eq!(m.data_bytes(), cfg.final_bytes());
//! assert!(bounds::peak_bound(&cfg, Strategy::ChunkedDirect) >= cfg.final_bytes());
//! # Ok::<(), harness_reference::Error>(())
//! ```

pub mod bounds;
pub mod config;
pub mod dfdx_face;
pub mod forward;
pub mod init;
pub mod model;
pub mod rng;

pub use config::{StackConfig, TensorId};
pub use init::{build, build_any, AnyBuilt, Built, Observer, Strategy};
pub use model::{Layer, LayerList, Stacked};
