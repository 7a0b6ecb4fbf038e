//! The only module that knows dfdx's quirks.
//!
//! * dfdx 0.13 has no public mutable view of a CPU tensor's buffer (`data` is crate-private), so
//!   the workspace keeps leaves as owned, runtime-shaped [`Array`]s. They *move* into a dfdx tensor
//!   without a copy ([`Array::into_dfdx`]) for composed tensor maths and autodiff, and the fused
//!   kernels work on their slices in place. Leaving dfdx costs one copy (`as_vec`).
//! * dfdx's static-rank shapes are replaced by a flat `(usize,)` tensor plus the logical shape
//!   kept beside it; element-wise maths does not care about rank, and matmuls reshape explicitly.
//! * dfdx's `Cpu` device has an allocation cache; it is disabled by default and must stay so, or
//!   the counting allocator would see buffers parked in the cache as live.
//! * dfdx 0.13's `choose` kernel and `as_vec` index out of bounds on empty tensors; [`Ten::select`]
//!   and [`Array::from_dfdx`] handle the empty case themselves.
//! * f16 comes from the `half` crate; arithmetic on f16 is done in the [`Float::Acc`] type (f32).

//!
//! One concern a file: [`dtype`] (element types), [`array`](mod@array) (owned leaves), [`dfdx_ops`] (dfdx
//! tensor maths and the tape), [`gemm`] (the GEMM kernel and its tiles), [`lanes`] (the order of
//! summation of long reductions), [`simd`] (loops compiled for the CPU's widest vectors),
//! [`aligned`] (buffers that start on a cache line).

pub mod aligned;
pub mod array;
pub mod dfdx_ops;
pub mod dtype;
pub mod gemm;
pub mod lanes;
pub mod simd;

pub use aligned::*;
pub use array::*;
pub use dfdx_ops::*;
pub use dtype::*;
pub use gemm::*;
pub use lanes::*;
pub use simd::*;
