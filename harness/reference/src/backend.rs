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

use crate::pool::Pool;
use dfdx::prelude::{Cache, Cpu, Tensor, TensorFrom};
use std::fmt::Debug;

/// dtypes a leaf signature can carry (`int32` for counters, like optax's `count`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F16,
    F32,
    F64,
    I32,
}

impl DType {
    /// The numpy-style name (`float16`, `int32`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F16 => "float16",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::I32 => "int32",
        }
    }
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::F64 => 8,
        }
    }
    /// The largest finite value (65504 for f16; `i32::MAX` for int32).
    pub fn max_finite(self) -> f64 {
        match self {
            DType::F16 => 65504.0,
            DType::F32 => f32::MAX as f64,
            DType::F64 => f64::MAX,
            DType::I32 => i32::MAX as f64,
        }
    }
    /// Parse `float16`/`f16`, `float32`/`f32`, `float64`/`f64`.
    pub fn parse(s: &str) -> Option<DType> {
        match s {
            "float16" | "f16" => Some(DType::F16),
            "float32" | "f32" => Some(DType::F32),
            "float64" | "f64" => Some(DType::F64),
            "int32" | "i32" => Some(DType::I32),
            _ => None,
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A floating-point element type the reference implementation runs in: f16, f32 or f64.
pub trait Float:
    dfdx::dtypes::Dtype + Copy + Send + Sync + PartialEq + PartialOrd + Debug + Default + 'static
{
    /// Signature dtype.
    const DTYPE: DType;
    /// The arithmetic (and optimizer-moment) type: f32 for f16 and f32, f64 for f64.
    type Acc: Real;
    fn as_f64(self) -> f64;
    fn of_f64(x: f64) -> Self;
    fn to_acc(self) -> Self::Acc;
    fn from_acc(x: Self::Acc) -> Self;
    /// Round an f32 to this type (round to nearest even; exact for f32 and f64).
    fn of_f32(x: f32) -> Self {
        Self::of_f64(x as f64)
    }
    /// [`Float::of_f32`] over a slice (`dst.len() == src.len()`); f16 uses half's vectorised
    /// conversion (F16C where the CPU has it), which rounds identically.
    fn cast_f32_slice(src: &[f32], dst: &mut [Self]) {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = Self::of_f32(s);
        }
    }
    /// Raw bits, widened, for bitwise comparisons.
    fn bits(self) -> u64;
    fn is_nan(self) -> bool {
        self.as_f64().is_nan()
    }
    fn is_finite(self) -> bool {
        self.as_f64().is_finite()
    }
}

/// An arithmetic type (f32 or f64): a [`Float`] that is its own accumulator and that dfdx can
/// compute with (see [`Ten`]).
pub trait Real:
    Float<Acc = Self> + num_traits::Float + Send + Sync + std::iter::Sum + DfdxOps + DfdxMatOps
{
}
impl Real for f32 {}
impl Real for f64 {}

/// The dfdx operations the composed forms use, stamped for the concrete dtypes so that generic
/// code never has to spell `Cpu: Device<A>` bounds.
#[doc(hidden)]
pub trait DfdxOps: Sized + dfdx::dtypes::Dtype {
    fn t_add(a: Flat<Self>, b: Flat<Self>) -> Flat<Self>;
    fn t_sub(a: Flat<Self>, b: Flat<Self>) -> Flat<Self>;
    fn t_mul(a: Flat<Self>, b: Flat<Self>) -> Flat<Self>;
    fn t_div(a: Flat<Self>, b: Flat<Self>) -> Flat<Self>;
    fn t_add_s(a: Flat<Self>, s: Self) -> Flat<Self>;
    fn t_mul_s(a: Flat<Self>, s: Self) -> Flat<Self>;
    fn t_div_s(a: Flat<Self>, s: Self) -> Flat<Self>;
    fn t_sqrt(a: Flat<Self>) -> Flat<Self>;
    fn t_choose(mask: &[bool], on_true: Flat<Self>, on_false: Flat<Self>) -> Flat<Self>;
}

macro_rules! stamp_dfdx_ops {
    ($t:ty) => {
        impl DfdxOps for $t {
            fn t_add(a: Flat<$t>, b: Flat<$t>) -> Flat<$t> {
                a + b
            }
            fn t_sub(a: Flat<$t>, b: Flat<$t>) -> Flat<$t> {
                a - b
            }
            fn t_mul(a: Flat<$t>, b: Flat<$t>) -> Flat<$t> {
                a * b
            }
            fn t_div(a: Flat<$t>, b: Flat<$t>) -> Flat<$t> {
                a / b
            }
            fn t_add_s(a: Flat<$t>, s: $t) -> Flat<$t> {
                a + s
            }
            fn t_mul_s(a: Flat<$t>, s: $t) -> Flat<$t> {
                a * s
            }
            fn t_div_s(a: Flat<$t>, s: $t) -> Flat<$t> {
                a / s
            }
            fn t_sqrt(a: Flat<$t>) -> Flat<$t> {
                a.sqrt()
            }
            fn t_choose(mask: &[bool], on_true: Flat<$t>, on_false: Flat<$t>) -> Flat<$t> {
                use dfdx::prelude::ChooseFrom;
                if mask.is_empty() {
                    return on_false; // dfdx 0.13's choose kernel panics on empty tensors
                }
                let dev = device();
                let m: Tensor<(usize,), bool, Cpu> = dev.tensor((mask.to_vec(), (mask.len(),)));
                m.choose(on_true, on_false)
            }
        }
    };
}
stamp_dfdx_ops!(f32);
stamp_dfdx_ops!(f64);

/// A flat dfdx tensor in an arithmetic dtype, with the usual operators, so composed forms read
/// like the formulas (`m * b1 + g * (1 - b1)`). Scalars on the right are tensor-dtype values.
#[derive(Clone)]
pub struct Ten<A: Real>(pub Flat<A>);

impl<A: Real> Ten<A> {
    /// Copy an array in.
    pub fn from_array(dev: &Cpu, a: &Array<A>) -> Self {
        Ten(a.to_dfdx(dev))
    }
    /// Move a buffer in.
    pub fn from_vec(dev: &Cpu, v: Vec<A>) -> Self {
        let n = v.len();
        Ten(dev.tensor((v, (n,))))
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        use dfdx::prelude::HasShape;
        self.0.shape().0
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn sqrt(self) -> Self {
        Ten(A::t_sqrt(self.0))
    }
    /// `jnp.where(mask, on_true, on_false)`.
    pub fn select(mask: &[bool], on_true: Self, on_false: Self) -> Self {
        Ten(A::t_choose(mask, on_true.0, on_false.0))
    }
    /// Copy out under a logical shape.
    pub fn to_array(&self, shape: &[usize]) -> crate::Result<Array<A>> {
        Array::from_dfdx(shape.to_vec(), &self.0)
    }
}

macro_rules! ten_binop {
    ($tr:ident, $m:ident, $op:ident, $sop:ident) => {
        impl<A: Real> std::ops::$tr for Ten<A> {
            type Output = Ten<A>;
            fn $m(self, rhs: Ten<A>) -> Ten<A> {
                Ten(A::$op(self.0, rhs.0))
            }
        }
        impl<A: Real> std::ops::$tr<A> for Ten<A> {
            type Output = Ten<A>;
            fn $m(self, rhs: A) -> Ten<A> {
                Ten(A::$sop(self.0, rhs))
            }
        }
    };
}
ten_binop!(Add, add, t_add, t_add_s);
ten_binop!(Mul, mul, t_mul, t_mul_s);
ten_binop!(Div, div, t_div, t_div_s);
impl<A: Real> std::ops::Sub for Ten<A> {
    type Output = Ten<A>;
    fn sub(self, rhs: Ten<A>) -> Ten<A> {
        Ten(A::t_sub(self.0, rhs.0))
    }
}

impl Float for half::f16 {
    const DTYPE: DType = DType::F16;
    type Acc = f32;
    fn as_f64(self) -> f64 {
        half::f16::to_f64(self)
    }
    fn of_f64(x: f64) -> Self {
        half::f16::from_f64(x)
    }
    fn to_acc(self) -> f32 {
        self.to_f32()
    }
    fn from_acc(x: f32) -> Self {
        half::f16::from_f32(x)
    }
    fn of_f32(x: f32) -> Self {
        half::f16::from_f32(x)
    }
    fn cast_f32_slice(src: &[f32], dst: &mut [Self]) {
        use half::slice::HalfFloatSliceExt;
        dst.convert_from_f32_slice(src);
    }
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
}

impl Float for f32 {
    const DTYPE: DType = DType::F32;
    type Acc = f32;
    fn as_f64(self) -> f64 {
        self as f64
    }
    fn of_f64(x: f64) -> Self {
        x as f32
    }
    fn to_acc(self) -> f32 {
        self
    }
    fn from_acc(x: f32) -> Self {
        x
    }
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
}

impl Float for f64 {
    const DTYPE: DType = DType::F64;
    type Acc = f64;
    fn as_f64(self) -> f64 {
        self
    }
    fn of_f64(x: f64) -> Self {
        x
    }
    fn to_acc(self) -> f64 {
        self
    }
    fn from_acc(x: f64) -> Self {
        x
    }
    fn bits(self) -> u64 {
        self.to_bits()
    }
}

/// The CPU device every dfdx computation in the workspace runs on (allocation cache disabled).
pub fn device() -> Cpu {
    let dev = Cpu::default();
    dev.disable_cache();
    dev
}

/// A flat dfdx tensor: the logical shape lives in the [`Array`] it came from.
pub type Flat<E> = Tensor<(usize,), E, Cpu>;

/// A dense, row-major, runtime-shaped tensor owning its buffer.
#[derive(Clone, PartialEq)]
pub struct Array<E> {
    shape: Vec<usize>,
    data: Vec<E>,
}

impl<E: Debug> Debug for Array<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Array{:?}{:?}", self.shape, self.data)
    }
}

/// Number of elements of a shape, or an overflow error.
pub fn numel(shape: &[usize]) -> crate::Result<usize> {
    shape.iter().try_fold(1usize, |acc, &d| {
        acc.checked_mul(d)
            .ok_or_else(|| crate::Error::Overflow(format!("shape {shape:?} has too many elements")))
    })
}

impl<E: Copy + Default> Array<E> {
    /// A tensor from a shape and row-major data; the lengths must agree.
    pub fn new(shape: Vec<usize>, data: Vec<E>) -> crate::Result<Self> {
        let expected = numel(&shape)?;
        if expected != data.len() {
            return Err(crate::Error::DataLength {
                shape,
                expected,
                got: data.len(),
            });
        }
        Ok(Self { shape, data })
    }
    /// A tensor of zeros (`E::default()`).
    pub fn zeros(shape: &[usize]) -> crate::Result<Self> {
        Ok(Self {
            data: vec![E::default(); numel(shape)?],
            shape: shape.to_vec(),
        })
    }
    /// A 0-d tensor.
    pub fn scalar(x: E) -> Self {
        Self {
            shape: vec![],
            data: vec![x],
        }
    }
    /// A 1-d tensor.
    pub fn vector(data: Vec<E>) -> Self {
        Self {
            shape: vec![data.len()],
            data,
        }
    }
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn data(&self) -> &[E] {
        &self.data
    }
    pub fn data_mut(&mut self) -> &mut [E] {
        &mut self.data
    }
    pub fn into_data(self) -> Vec<E> {
        self.data
    }
    pub fn len(&self) -> usize {
        self.data.len()
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    /// Element-wise map into a new array (possibly of another type).
    pub fn map<F: Copy + Default>(&self, f: impl Fn(E) -> F) -> Array<F> {
        Array {
            shape: self.shape.clone(),
            data: self.data.iter().map(|&x| f(x)).collect(),
        }
    }
}

impl<E: Float> Array<E> {
    /// Move the buffer into a flat dfdx tensor (no copy).
    pub fn into_dfdx(self, dev: &Cpu) -> (Vec<usize>, Flat<E>) {
        let n = self.data.len();
        (self.shape, dev.tensor((self.data, (n,))))
    }
    /// Copy into a flat dfdx tensor.
    pub fn to_dfdx(&self, dev: &Cpu) -> Flat<E> {
        dev.tensor((self.data.clone(), (self.data.len(),)))
    }
    /// Read a flat dfdx tensor back (one copy) under the given logical shape.
    pub fn from_dfdx(shape: Vec<usize>, t: &Flat<E>) -> crate::Result<Self> {
        use dfdx::prelude::HasShape;
        if t.shape().0 == 0 {
            return Self::new(shape, Vec::new()); // dfdx's as_vec panics on empty tensors
        }
        Self::new(shape, t.as_vec())
    }
    /// Convert every element to another float type (round to nearest).
    pub fn cast<F: Float>(&self) -> Array<F> {
        self.map(|x| F::of_f64(x.as_f64()))
    }
}

// -------------------------------------------------------------------------------------------------
// Matrices: dfdx 2-D tensors for the composed Newton–Schulz form, and the same GEMM kernel called
// directly into planned buffers for the fused form.
//
// Quirks kept here: dfdx 0.13 lowers every CPU matmul to `gemm::gemm(m, n, k, dst, dst_cs,
// dst_rs, read_dst, lhs, lhs_cs, lhs_rs, rhs, rhs_cs, rhs_rs, alpha, beta, ..,
// Parallelism::Rayon(current_num_threads))`; [`gemm_into`] issues exactly that call, so a planned
// product over the same operands is the dfdx one. gemm-common 0.15.5 allocates, at every call, a
// `did_pack_lhs` flag vector (`mc/MR` bytes) and, when it packs the right operand, the packed
// panel; no release of gemm (0.15 to 0.19) takes a caller's workspace, so a planned product
// allocates those few bytes per call (freed by the call). Its rayon path allocates more
// (per-worker flags, rayon's job queue), which is why planned products run single-threaded gemm
// calls on [`crate::pool::Pool`] instead ([`gemm_into_pooled`]). A transposed operand is a
// stride swap (`permute`), never a copy.

/// A runtime-shaped 2-D dfdx tensor.
pub type Flat2<E> = Tensor<(usize, usize), E, Cpu>;

/// The 2-D dfdx operations the composed Newton–Schulz form uses.
#[doc(hidden)]
pub trait DfdxMatOps: Sized + dfdx::dtypes::Dtype {
    fn m_matmul(a: &Flat2<Self>, b: &Flat2<Self>) -> Flat2<Self>;
    fn m_matmul_t(a: &Flat2<Self>, b: &Flat2<Self>) -> Flat2<Self>;
    fn m_add(a: Flat2<Self>, b: Flat2<Self>) -> Flat2<Self>;
    fn m_mul_s(a: Flat2<Self>, s: Self) -> Flat2<Self>;
    fn m_div_s(a: Flat2<Self>, s: Self) -> Flat2<Self>;
    fn m_sum_sq(a: &Flat2<Self>) -> Self;
}

macro_rules! stamp_mat_ops {
    ($t:ty) => {
        impl DfdxMatOps for $t {
            fn m_matmul(a: &Flat2<$t>, b: &Flat2<$t>) -> Flat2<$t> {
                use dfdx::prelude::TryMatMul;
                a.clone().matmul(b.clone())
            }
            fn m_matmul_t(a: &Flat2<$t>, b: &Flat2<$t>) -> Flat2<$t> {
                use dfdx::prelude::{Axes2, PermuteTo, TryMatMul};
                a.clone().matmul(b.clone().permute::<_, Axes2<1, 0>>())
            }
            fn m_add(a: Flat2<$t>, b: Flat2<$t>) -> Flat2<$t> {
                a + b
            }
            fn m_mul_s(a: Flat2<$t>, s: $t) -> Flat2<$t> {
                a * s
            }
            fn m_div_s(a: Flat2<$t>, s: $t) -> Flat2<$t> {
                a / s
            }
            fn m_sum_sq(a: &Flat2<$t>) -> $t {
                use dfdx::prelude::{HasShape, Rank0, SumTo};
                let (r, c) = *a.shape();
                if r * c == 0 {
                    return 0.0; // dfdx's reductions index out of bounds on empty tensors
                }
                (a.clone() * a.clone()).sum::<Rank0, _>().as_vec()[0]
            }
        }
    };
}
stamp_mat_ops!(f32);
stamp_mat_ops!(f64);

/// A row-major matrix as a dfdx tensor, with the operators the composed Newton–Schulz form needs
/// (`x.matmul_t(&x)` is `X X^T`, the transpose being a stride swap).
#[derive(Clone)]
pub struct Mat<A: Real>(pub Flat2<A>);

impl<A: Real> Mat<A> {
    /// Move a row-major buffer in.
    pub fn from_vec(dev: &Cpu, rows: usize, cols: usize, data: Vec<A>) -> Self {
        Mat(dev.tensor((data, (rows, cols))))
    }
    pub fn shape(&self) -> (usize, usize) {
        use dfdx::prelude::HasShape;
        *self.0.shape()
    }
    /// `self @ rhs`
    pub fn matmul(&self, rhs: &Self) -> Self {
        Mat(A::m_matmul(&self.0, &rhs.0))
    }
    /// `self @ rhs^T`
    pub fn matmul_t(&self, rhs: &Self) -> Self {
        Mat(A::m_matmul_t(&self.0, &rhs.0))
    }
    /// `||self||_F^2`
    pub fn sum_sq(&self) -> A {
        A::m_sum_sq(&self.0)
    }
    /// Row-major copy out (empty matrices handled here: dfdx's `as_vec` panics on them).
    pub fn to_vec(&self) -> Vec<A> {
        let (r, c) = self.shape();
        if r * c == 0 {
            return Vec::new();
        }
        self.0.as_vec()
    }
}

impl<A: Real> std::ops::Add for Mat<A> {
    type Output = Mat<A>;
    fn add(self, rhs: Mat<A>) -> Mat<A> {
        Mat(A::m_add(self.0, rhs.0))
    }
}
impl<A: Real> std::ops::Mul<A> for Mat<A> {
    type Output = Mat<A>;
    fn mul(self, s: A) -> Mat<A> {
        Mat(A::m_mul_s(self.0, s))
    }
}
impl<A: Real> std::ops::Div<A> for Mat<A> {
    type Output = Mat<A>;
    fn div(self, s: A) -> Mat<A> {
        Mat(A::m_div_s(self.0, s))
    }
}

/// A strided read-only matrix operand of [`gemm_into`]: element `(i, j)` is
/// `data[offset + i*rs + j*cs]`.
#[derive(Clone, Copy)]
pub struct Operand<'a, A> {
    pub data: &'a [A],
    pub offset: usize,
    pub rs: usize,
    pub cs: usize,
}

/// `dst[i*dst_rs + j] = sum_k lhs(i,k) rhs(k,j)` for an `m x n` block, overwriting `dst`, through
/// the very `gemm::gemm` call dfdx's CPU matmul makes (so results are bit-identical to dfdx's).
/// Products of fewer than [`GEMM_PARALLEL_MIN`] multiply-adds run on the calling thread; larger
/// ones use gemm's rayon parallelism (dfdx always does), which allocates per call (see the
/// module notes); single-threaded calls reuse their thread's scratch.
///
/// Panics if an operand's strided extent falls outside its slice (a bug in the caller's plan).
#[allow(clippy::too_many_arguments)]
pub fn gemm_into<A: Real>(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [A],
    dst_offset: usize,
    dst_rs: usize,
    lhs: Operand<'_, A>,
    rhs: Operand<'_, A>,
) {
    if !gemm_checked(m, n, k, dst, dst_offset, dst_rs, &lhs, &rhs) {
        return;
    }
    let parallelism = if m * n * k < GEMM_PARALLEL_MIN {
        gemm::Parallelism::None
    } else {
        gemm::Parallelism::Rayon(rayon::current_num_threads())
    };
    // SAFETY: `gemm_checked` asserted every touched index in bounds; `dst` is borrowed mutably,
    // the operands immutably, so they do not alias.
    unsafe {
        gemm_raw(
            m,
            n,
            k,
            dst.as_mut_ptr().add(dst_offset),
            dst_rs,
            lhs.data.as_ptr().add(lhs.offset),
            lhs.rs,
            lhs.cs,
            rhs.data.as_ptr().add(rhs.offset),
            rhs.rs,
            rhs.cs,
            parallelism,
        )
    }
}

/// Output widths up to this may take gemm 0.15's small-size path (`m, n <= 64` after its
/// transpose to a column-oriented destination, `gemm-common` `gemm.rs`), whose depth chunk is
/// `kc = min(k, 512)` instead of `kernel_params`' `ceil(k / ceil(k / auto_kc))`: a block of at
/// most 64 rows of a narrow product could then sum over `k` in other chunks than the whole
/// product. [`gemm_into_pooled`] splits rows only of wider products.
pub const GEMM_SMALL_SIDE: usize = 64;

/// [`gemm_into`] with the `m` output rows split into [`Pool::threads`] contiguous blocks, each
/// one single-threaded `gemm::gemm` call (`Parallelism::None`) on its own pool thread. Each
/// element of the output is computed by the same kernel with the same depth chunks as in one
/// call over all rows (gemm's depth chunk depends on `k` only, for outputs wider than
/// [`GEMM_SMALL_SIDE`]; rows are independent), so the result is bit-identical to [`gemm_into`]'s
/// whatever the number of threads (tested below). Products smaller than [`GEMM_PARALLEL_MIN`],
/// narrower than [`GEMM_SMALL_SIDE`] or with fewer than two rows per thread run as one call on
/// the calling thread.
#[allow(clippy::too_many_arguments)]
pub fn gemm_into_pooled<A: Real>(
    pool: &mut Pool,
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [A],
    dst_offset: usize,
    dst_rs: usize,
    lhs: Operand<'_, A>,
    rhs: Operand<'_, A>,
) {
    if !gemm_checked(m, n, k, dst, dst_offset, dst_rs, &lhs, &rhs) {
        return;
    }
    let parts = pool.threads();
    let split =
        parts > 1 && m * n * k >= GEMM_PARALLEL_MIN && n > GEMM_SMALL_SIDE && m >= 2 * parts;
    let parts = if split { parts } else { 1 };
    let d = SendPtr(dst.as_mut_ptr().wrapping_add(dst_offset));
    let l = SendPtr(lhs.data.as_ptr().wrapping_add(lhs.offset) as *mut A);
    let r = SendPtr(rhs.data.as_ptr().wrapping_add(rhs.offset) as *mut A);
    let part = |i: usize| {
        // rows [m i / parts, m (i+1) / parts)
        let (r0, r1) = (m * i / parts, m * (i + 1) / parts);
        if r1 == r0 {
            return;
        }
        // SAFETY: `gemm_checked` asserted the whole product in bounds; part `i` writes only the
        // rows `r0..r1` of `dst` (disjoint from every other part's, as `dst_rs >= n`), and reads
        // the operands, which nothing writes during the call.
        unsafe {
            gemm_raw(
                r1 - r0,
                n,
                k,
                d.get().add(r0 * dst_rs),
                dst_rs,
                l.get().add(r0 * lhs.rs),
                lhs.rs,
                lhs.cs,
                r.get(),
                rhs.rs,
                rhs.cs,
                gemm::Parallelism::None,
            )
        }
    };
    if parts == 1 {
        part(0);
    } else {
        pool.run(&part);
    }
}

/// One tile of a tiled product: output rows `r0..r1`, columns `c0..c1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tile {
    pub r0: usize,
    pub r1: usize,
    pub c0: usize,
    pub c1: usize,
}

/// `dst[r0..r1, c0..c1] = lhs[r0..r1, :] rhs[:, c0..c1]` for every tile of `tiles` (the
/// operands are an `m x k` and a `k x n` matrix; tiles lie inside `m x n`). Thread `t` of the
/// pool takes tiles `t, t + threads, ...`, each one single-threaded `gemm::gemm` call: a tile's
/// result does not depend on which thread computes it, so the output is bit-identical for
/// every thread count. Tiles must not overlap.
#[allow(clippy::too_many_arguments)]
pub fn gemm_tiles_pooled<A: Real>(
    pool: &mut Pool,
    tiles: &[Tile],
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [A],
    dst_rs: usize,
    lhs: Operand<'_, A>,
    rhs: Operand<'_, A>,
) {
    if !gemm_checked(m, n, k, dst, 0, dst_rs, &lhs, &rhs) {
        return;
    }
    for t in tiles {
        assert!(
            t.r0 <= t.r1 && t.r1 <= m && t.c0 <= t.c1 && t.c1 <= n,
            "gemm_tiles_pooled: tile {t:?} outside {m} x {n}"
        );
    }
    let threads = pool.threads();
    let d = SendPtr(dst.as_mut_ptr());
    let l = SendPtr(lhs.data.as_ptr().wrapping_add(lhs.offset) as *mut A);
    let r = SendPtr(rhs.data.as_ptr().wrapping_add(rhs.offset) as *mut A);
    let part = |p: usize| {
        for t in tiles.iter().skip(p).step_by(threads) {
            if t.r1 == t.r0 || t.c1 == t.c0 {
                continue;
            }
            // SAFETY: `gemm_checked` asserted the whole `m x n` product in bounds and every
            // tile lies inside it; tiles are disjoint, so parts write disjoint elements of
            // `dst`, and the operands are only read.
            unsafe {
                gemm_raw(
                    t.r1 - t.r0,
                    t.c1 - t.c0,
                    k,
                    d.get().add(t.r0 * dst_rs + t.c0),
                    dst_rs,
                    l.get().add(t.r0 * lhs.rs),
                    lhs.rs,
                    lhs.cs,
                    r.get().add(t.c0 * rhs.cs),
                    rhs.rs,
                    rhs.cs,
                    gemm::Parallelism::None,
                )
            }
        }
    };
    if threads == 1 || tiles.len() < 2 {
        for p in 0..threads {
            part(p);
        }
    } else {
        pool.run(&part);
    }
}

/// A raw pointer that may cross to pool threads (each part touches its own rows only).
#[derive(Clone, Copy)]
struct SendPtr<A>(*mut A);
// SAFETY: see `gemm_into_pooled`: parts write disjoint rows and only read shared operands.
unsafe impl<A> Send for SendPtr<A> {}
unsafe impl<A> Sync for SendPtr<A> {}
impl<A> SendPtr<A> {
    fn get(self) -> *mut A {
        self.0
    }
}

/// Bounds checks shared by the GEMM entry points; `false` when nothing is left to compute
/// (empty output; `k = 0` zero-fills it).
#[allow(clippy::too_many_arguments)]
fn gemm_checked<A: Real>(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [A],
    dst_offset: usize,
    dst_rs: usize,
    lhs: &Operand<'_, A>,
    rhs: &Operand<'_, A>,
) -> bool {
    if m == 0 || n == 0 {
        return false;
    }
    let last = |o: usize, rs: usize, cs: usize, r: usize, c: usize| o + (r - 1) * rs + (c - 1) * cs;
    assert!(
        last(dst_offset, dst_rs, 1, m, n) < dst.len() && (m == 1 || dst_rs >= n),
        "gemm_into: dst"
    );
    if k == 0 {
        for i in 0..m {
            dst[dst_offset + i * dst_rs..dst_offset + i * dst_rs + n].fill(A::default());
        }
        return false;
    }
    assert!(
        last(lhs.offset, lhs.rs, lhs.cs, m, k) < lhs.data.len(),
        "gemm_into: lhs"
    );
    assert!(
        last(rhs.offset, rhs.rs, rhs.cs, k, n) < rhs.data.len(),
        "gemm_into: rhs"
    );
    true
}

/// The `gemm::gemm` call dfdx makes, on raw pointers: `dst` row-major with row stride
/// `dst_rs`, `read_dst = false`, `alpha = 0`, `beta = 1`, no conjugation.
///
/// # Safety
/// Every element of the `m x n` output and of the `m x k`, `k x n` operands at the given
/// strides must be in bounds, and the output must not overlap the operands.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_raw<A: Real>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut A,
    dst_rs: usize,
    lhs: *const A,
    lhs_rs: usize,
    lhs_cs: usize,
    rhs: *const A,
    rhs_rs: usize,
    rhs_cs: usize,
    parallelism: gemm::Parallelism,
) {
    gemm::gemm(
        m,
        n,
        k,
        dst,
        1,
        dst_rs as isize,
        false,
        lhs,
        lhs_cs as isize,
        lhs_rs as isize,
        rhs,
        rhs_cs as isize,
        rhs_rs as isize,
        A::default(),
        A::of_f64(1.0),
        false,
        false,
        false,
        parallelism,
    )
}

/// Multiply-adds from which [`gemm_into`] runs multi-threaded (2^22: a 128x128x256 product).
pub const GEMM_PARALLEL_MIN: usize = 1 << 22;
/// A flat f64 dfdx tensor recording its operations on an owned tape: the unit of the one-step
/// graphs of [`crate::ode::grad`].
///
/// dfdx quirks handled by the helpers below:
/// * a tensor is reused in several places with `with_empty_tape()` ([`taped_reuse`]): the clone
///   keeps the tensor's id, so gradients of every use accumulate into one slot, and binary ops
///   merge the operands' tapes;
/// * a value's own tape (the operations that produced it) must enter the final graph exactly
///   once: [`taped_split`] takes it out so the value can be reused freely, and [`taped_vjp`]
///   merges the parked tapes back before `backward` (operations are re-sorted by creation id,
///   so merge order does not matter);
/// * `Gradients::get` panics for an id no operation touched: [`taped_vjp`] allocates (zeros)
///   first with `get_or_alloc_mut`;
/// * `reshape_like` on a contiguous tensor keeps its id (no backward op), so a flat parameter
///   reshaped into a matrix shares its gradient slot with the flat leaf.
pub type Taped = Tensor<(usize,), f64, Cpu, dfdx::prelude::OwnedTape<f64, Cpu>>;

/// The tape a [`Taped`] carries.
pub type Tape64 = dfdx::prelude::OwnedTape<f64, Cpu>;

/// A new leaf (a fresh id) holding `v`, recording on a new leaky tape.
pub fn taped_leaf(dev: &Cpu, v: &[f64]) -> Taped {
    use dfdx::prelude::Trace;
    let t: Flat<f64> = dev.tensor((v.to_vec(), (v.len(),)));
    t.leaky_traced()
}

/// The same tensor (same id, gradients flow to it) with an empty tape, for a second use.
pub fn taped_reuse(t: &Taped) -> Taped {
    use dfdx::prelude::WithEmptyTape;
    t.with_empty_tape()
}

/// Take the tape out of `t`: the value (same id, empty tape) and the operations that made it.
pub fn taped_split(t: Taped) -> (Taped, Tape64) {
    use dfdx::prelude::{PutTape, SplitTape};
    let (v, tape) = t.split_tape();
    (v.put_tape(Tape64::default()), tape)
}

/// The values of a taped tensor.
pub fn taped_values(t: &Taped) -> Vec<f64> {
    use dfdx::prelude::HasShape;
    if t.shape().0 == 0 {
        return Vec::new();
    }
    t.as_vec()
}

/// `t * c` element-wise with a constant (untraced) vector.
pub fn taped_mul_const(t: Taped, c: &[f64]) -> Taped {
    let k: Flat<f64> = t.device().tensor((c.to_vec(), (c.len(),)));
    t * k
}

/// `t[idx]` (gather; gradients scatter back).
pub fn taped_gather(t: Taped, idx: &[usize]) -> Taped {
    use dfdx::prelude::GatherTo;
    let i: Tensor<(usize,), usize, Cpu> = t.device().tensor((idx.to_vec(), (idx.len(),)));
    t.gather(i)
}

/// `M v` for a row-major `rows x cols` matrix `m` stored flat, as `sum_j M[i, j] * v[j]`
/// (broadcast, multiply, sum over columns). dfdx's `matmul` would call `gemm`, which may hand
/// work to rayon threads whose allocations make memory measurements jitter by a few KB.
pub fn taped_matvec(m: Taped, rows: usize, cols: usize, v: Taped) -> Taped {
    use dfdx::prelude::{Axis, BroadcastTo, ReshapeTo, SumTo};
    let m2 = m.reshape_like(&(rows, cols));
    let v2 = v.broadcast_like::<(usize, usize), Axis<0>>(&(rows, cols));
    (m2 * v2).sum::<(usize,), Axis<1>>()
}

/// Vector-Jacobian product: merge `parked` tapes into `out`'s, back-propagate
/// `sum(weights * out)`, and return the gradient of every leaf in `leaves` (zeros for a leaf the
/// graph does not reach).
pub fn taped_vjp(
    out: Taped,
    weights: &[f64],
    parked: Vec<Tape64>,
    leaves: &[&Taped],
) -> Vec<Vec<f64>> {
    use dfdx::prelude::{Backward, Merge, PutTape, SplitTape, SumTo};
    let (v, mut tape) = out.split_tape();
    for p in parked {
        tape = tape.merge(p);
    }
    let out = v.put_tape(tape);
    let loss = taped_mul_const(out, weights).sum::<(), _>();
    let mut grads = loss.backward();
    leaves
        .iter()
        .map(|l| {
            let g = grads.get_or_alloc_mut(*l).expect("cpu allocation");
            g.iter().copied().collect()
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Taped matrices for the CNF field (see `crate::cnf::taped`): the same quirks as [`Taped`],
// plus a [`Graph`] that parks the tapes of shared intermediate values so that each operation
// enters the final graph exactly once.

/// A 2-D f64 dfdx tensor `(rows, cols)` recording on an owned tape.
pub type Taped2 = Tensor<(usize, usize), f64, Cpu, Tape64>;

/// Collects the tapes of values used more than once (see [`Graph::share`]).
#[derive(Default)]
pub struct Graph {
    parked: Vec<Tape64>,
}

impl Graph {
    pub fn new() -> Self {
        Self::default()
    }
    /// Make `t` shareable: its producing operations are parked here and the returned value (same
    /// id, empty tape) can be used any number of times through [`reuse2`] (or dfdx's `with_empty_tape`).
    pub fn share<S: dfdx::shapes::Shape>(
        &mut self,
        t: Tensor<S, f64, Cpu, Tape64>,
    ) -> Tensor<S, f64, Cpu, Tape64> {
        use dfdx::prelude::{PutTape, SplitTape};
        let (v, tape) = t.split_tape();
        self.parked.push(tape);
        v.put_tape(Tape64::default())
    }
    /// Merge every parked tape into `out`'s (call once, on the value the caller returns).
    pub fn finish<S: dfdx::shapes::Shape>(
        self,
        out: Tensor<S, f64, Cpu, Tape64>,
    ) -> Tensor<S, f64, Cpu, Tape64> {
        use dfdx::prelude::{Merge, PutTape, SplitTape};
        let (v, mut tape) = out.split_tape();
        for p in self.parked {
            tape = tape.merge(p);
        }
        v.put_tape(tape)
    }
}

/// A second use of a shared matrix (same id, empty tape).
pub fn reuse2(t: &Taped2) -> Taped2 {
    use dfdx::prelude::WithEmptyTape;
    t.with_empty_tape()
}

/// `t[start .. start + len]` (gradients flow back into the slice).
///
/// dfdx 0.13 quirk: `slice`'s backward *assigns* its gradient into the input's slot instead of
/// adding to it, so a tensor sliced and also used elsewhere (the state `y` of a step, a
/// parameter vector read by every stage) silently loses every other contribution. A gather
/// accumulates, so ranges are gathers.
pub fn taped_range(t: Taped, start: usize, len: usize) -> Taped {
    let idx: Vec<usize> = (start..start + len).collect();
    taped_gather(t, &idx)
}

/// A flat taped vector viewed as a row-major `rows x cols` matrix (no copy, same gradient slot).
pub fn taped_as_matrix(t: Taped, rows: usize, cols: usize) -> Taped2 {
    use dfdx::prelude::ReshapeTo;
    t.reshape_like(&(rows, cols))
}

/// A matrix flattened row-major.
pub fn taped_flatten(m: Taped2) -> Taped {
    use dfdx::prelude::{HasShape, ReshapeTo};
    let (r, c) = *m.shape();
    m.reshape_like(&(r * c,))
}

/// A constant matrix (a fresh leaf whose gradient nobody reads) on an empty tape.
pub fn taped_const2(dev: &Cpu, rows: usize, cols: usize, data: Vec<f64>) -> Taped2 {
    use dfdx::prelude::PutTape;
    let t: Flat2<f64> = dev.tensor((data, (rows, cols)));
    t.put_tape(Tape64::default())
}

/// A constant vector (a fresh leaf whose gradient nobody reads) on an empty tape.
pub fn taped_const(dev: &Cpu, data: Vec<f64>) -> Taped {
    use dfdx::prelude::PutTape;
    let n = data.len();
    let t: Flat<f64> = dev.tensor((data, (n,)));
    t.put_tape(Tape64::default())
}

/// `h w^T` for `h: (n, in)` and `w: (out, in)` (a Linear layer's weight as stored).
pub fn taped_matmul_t(h: Taped2, w: Taped2) -> Taped2 {
    use dfdx::prelude::{PermuteTo, TryMatMul};
    h.matmul(w.permute::<(usize, usize), dfdx::shapes::Axes2<1, 0>>())
}

/// `m + v` with `v: (cols,)` added to every row.
pub fn taped_add_row(m: Taped2, v: Taped) -> Taped2 {
    use dfdx::prelude::{Axis, BroadcastTo, HasShape};
    let s = *m.shape();
    m + v.broadcast_like::<(usize, usize), Axis<0>>(&s)
}

/// `m * v` with `v: (cols,)` multiplying every row.
pub fn taped_mul_row(m: Taped2, v: Taped) -> Taped2 {
    use dfdx::prelude::{Axis, BroadcastTo, HasShape};
    let s = *m.shape();
    m * v.broadcast_like::<(usize, usize), Axis<0>>(&s)
}

/// Row sums of `m * c` for a constant matrix `c` of the same shape: `out_i = sum_j m_ij c_ij`.
pub fn taped_row_dot_const(m: Taped2, c: Vec<f64>) -> Taped {
    use dfdx::prelude::{Axis, HasShape, SumTo};
    let (r, cols) = *m.shape();
    let k: Flat2<f64> = m.device().tensor((c, (r, cols)));
    (m * k).sum::<(usize,), Axis<1>>()
}

/// `tanh` element-wise.
pub fn taped_tanh(m: Taped2) -> Taped2 {
    m.tanh()
}

/// `1 - m^2` element-wise (the derivative of `tanh` written in terms of its output).
pub fn taped_one_minus_sq(m: Taped2) -> Taped2 {
    -(m.square()) + 1.0
}

/// `sigmoid` element-wise.
pub fn taped_sigmoid(v: Taped) -> Taped {
    v.sigmoid()
}

/// `v * s` for a constant scalar `s`.
pub fn taped_scale(v: Taped, s: f64) -> Taped {
    v * s
}

/// `[a, b]` (concatenation of flat vectors).
pub fn taped_concat(a: Taped, b: Taped) -> Taped {
    use dfdx::prelude::{Axis, TryConcatAlong};
    (a, b).concat_along(Axis::<0>)
}
#[cfg(test)]
mod gemm_tests {
    use super::*;

    fn data<A: Real>(len: usize, seed: f64) -> Vec<A> {
        (0..len)
            .map(|i| A::of_f64((i as f64 * seed).sin()))
            .collect()
    }

    fn bits<A: Real>(v: &[A]) -> Vec<u64> {
        v.iter().map(|x| x.as_f64().to_bits()).collect()
    }

    /// `m x n` from `m x k` and either a `k x n` operand or (transposed) an `n x k` one.
    fn check_splits<A: Real>(m: usize, n: usize, k: usize, transposed_rhs: bool) {
        let l = data::<A>(m * k, 0.37);
        let r = data::<A>(k * n, 0.71);
        let lhs = |off: usize| Operand {
            data: &l,
            offset: off,
            rs: k,
            cs: 1,
        };
        let rhs = if transposed_rhs {
            Operand {
                data: &r,
                offset: 0,
                rs: 1,
                cs: k,
            }
        } else {
            Operand {
                data: &r,
                offset: 0,
                rs: n,
                cs: 1,
            }
        };
        let mut whole = vec![A::default(); m * n];
        gemm_into(m, n, k, &mut whole, 0, n, lhs(0), rhs);
        // any row block is reduced exactly as in the whole product
        for r0 in [2, 17, m / 3, m / 2, m - 2] {
            let mut split = vec![A::default(); m * n];
            gemm_into(r0, n, k, &mut split, 0, n, lhs(0), rhs);
            gemm_into(m - r0, n, k, &mut split, r0 * n, n, lhs(r0 * k), rhs);
            assert_eq!(bits(&split), bits(&whole), "{m}x{n}x{k} split at {r0}");
        }
        for threads in 1..=4 {
            let mut pool = Pool::new(threads);
            let mut pooled = vec![A::default(); m * n];
            gemm_into_pooled(&mut pool, m, n, k, &mut pooled, 0, n, lhs(0), rhs);
            assert_eq!(
                bits(&pooled),
                bits(&whole),
                "{m}x{n}x{k} on {threads} threads"
            );
        }
    }

    #[test]
    fn row_blocks_of_a_product_are_bit_identical_to_the_whole_whatever_the_thread_count() {
        // wide enough for gemm's general path (n > GEMM_SMALL_SIDE); the larger shapes reach
        // GEMM_PARALLEL_MIN, so the pooled form really splits; k > 512 crosses a depth chunk
        for (m, n, k) in [
            (130, 90, 70),
            (256, 256, 256),
            (300, 200, 1100),
            (512, 512, 512),
        ] {
            check_splits::<f32>(m, n, k, false);
            check_splits::<f32>(m, n, k, true);
            check_splits::<f64>(m, n, k, false);
            check_splits::<f64>(m, n, k, true);
        }
    }
}
