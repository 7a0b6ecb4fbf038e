//! dfdx tensor maths behind one small interface: flat 1-D tensors ([`Ten`]) for element-wise
//! composed forms, 2-D tensors ([`Mat`]) for the composed Newton–Schulz form, and taped tensors
//! ([`Taped`], [`Taped2`], [`Graph`]) for reverse mode.

use super::{Array, Real};
use dfdx::prelude::{Cache, Cpu, Tensor, TensorFrom};

/// The CPU device every dfdx computation in the workspace runs on (allocation cache disabled).
pub fn device() -> Cpu {
    let dev = Cpu::default();
    dev.disable_cache();
    dev
}

/// A flat dfdx tensor: the logical shape lives in the [`Array`] it came from.
pub type Flat<E> = Tensor<(usize,), E, Cpu>;

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
    fn t_abs(a: Flat<Self>) -> Flat<Self>;
    fn t_maximum(a: Flat<Self>, b: Flat<Self>) -> Flat<Self>;
    fn t_sum(a: &Flat<Self>) -> Self;
    fn t_sum_middle(a: Flat<Self>, outer: usize, inner: usize) -> Flat<Self>;
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
            fn t_abs(a: Flat<$t>) -> Flat<$t> {
                a.abs()
            }
            fn t_maximum(a: Flat<$t>, b: Flat<$t>) -> Flat<$t> {
                a.maximum(b)
            }
            fn t_sum(a: &Flat<$t>) -> $t {
                use dfdx::prelude::{HasShape, Rank0, SumTo};
                if a.shape().0 == 0 {
                    return 0.0; // dfdx's reductions index out of bounds on empty tensors
                }
                // dfdx's CPU sum accumulates from zero in index order (then scales by 1)
                a.clone().sum::<Rank0, _>().as_vec()[0]
            }
            fn t_sum_middle(a: Flat<$t>, outer: usize, inner: usize) -> Flat<$t> {
                use dfdx::prelude::{Axis, HasShape, ReshapeTo, SumTo};
                let middle = a.shape().0 / (outer * inner);
                if middle == 0 {
                    return device().tensor((vec![0.0; outer * inner], (outer * inner,)));
                }
                // [outer, middle, inner] row-major: output (o, k) accumulates a[o, 0, k],
                // a[o, 1, k], ... from zero
                let r = a
                    .reshape_like(&(outer, middle, inner))
                    .sum::<(usize, usize), Axis<1>>();
                r.reshape_like(&(outer * inner,))
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

/// Casting f32 tensors to an element type with dfdx's `to_dtype` (round to nearest even, as
/// `half`'s conversions) and stacking them along a new leading axis with dfdx's `stack`.
#[doc(hidden)]
pub trait DfdxFromF32: Sized + dfdx::dtypes::Unit {
    /// `stack([to_dtype(t) for t in ts])`, flattened row-major (the first axis slowest).
    fn stack_cast(ts: Vec<Flat<f32>>) -> Vec<Self>;
}

macro_rules! stamp_from_f32 {
    ($t:ty) => {
        impl DfdxFromF32 for $t {
            fn stack_cast(ts: Vec<Flat<f32>>) -> Vec<$t> {
                use dfdx::prelude::{HasShape, TryStack};
                if ts.is_empty() || ts[0].shape().0 == 0 {
                    return Vec::new(); // dfdx's `as_vec` indexes out of bounds on empty tensors
                }
                let cast: Vec<Flat<$t>> = ts.into_iter().map(|t| t.to_dtype::<$t>()).collect();
                cast.stack().as_vec()
            }
        }
    };
}
stamp_from_f32!(half::f16);
stamp_from_f32!(f32);
stamp_from_f32!(f64);

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
    /// `true` for a vector of length 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Element-wise IEEE square root (correctly rounded; NaN for negative input).
    pub fn sqrt(self) -> Self {
        Ten(A::t_sqrt(self.0))
    }
    /// `|x|` element-wise.
    pub fn abs(self) -> Self {
        Ten(A::t_abs(self.0))
    }
    /// Element-wise maximum (dfdx's `maximum`; on NaN it follows the platform's `max`, which
    /// returns the other operand).
    pub fn maximum(self, rhs: Self) -> Self {
        Ten(A::t_maximum(self.0, rhs.0))
    }
    /// `sum_i x_i`, accumulated from zero in index order (`0` for an empty tensor).
    pub fn sum(&self) -> A {
        A::t_sum(&self.0)
    }
    /// `sum_i x_i` in the workspace's lane order ([`crate::backend::lanes`]), as tensor
    /// operations: zeros pad the tensor (to whole rows of 16 within one block, or to a power of
    /// two of whole blocks), a `[blocks, rows, 16]` view is reduced along its middle axis (each
    /// lane accumulates from zero in index order), `[blocks, 2, w]` views halve every block's
    /// lanes (`w = 8, 4, 2, 1`), and `[pairs, 2, 1]` views add adjacent block totals. Bit for bit
    /// [`crate::backend::lane_sum`].
    ///
    /// ```
    /// use harness_reference::backend::{device, lane_sum, Ten};
    /// for n in [37, 3 * 8192 + 5] {
    ///     let x: Vec<f32> = (0..n).map(|i| (i as f32).sin()).collect();
    ///     let t = Ten::from_vec(&device(), x.clone());
    ///     assert_eq!(t.lane_sum().to_bits(), lane_sum(&x).to_bits());
    /// }
    /// ```
    pub fn lane_sum(&self) -> A {
        use super::{BLOCK, LANES};
        let dev = device();
        let n = self.len();
        let blocks = n.div_ceil(BLOCK).max(1).next_power_of_two();
        // one block: padded to whole rows of lanes; more: every block padded to BLOCK terms
        let padded_len = match blocks {
            1 => n.div_ceil(LANES) * LANES,
            _ => blocks * BLOCK,
        };
        let padded = if padded_len == n {
            self.clone()
        } else {
            // concatenation by copy: dfdx 0.13's `concat` needs static shapes on one axis
            let mut v = self.to_vec();
            v.resize(padded_len, A::zero());
            Ten::from_vec(&dev, v)
        };
        // every block's sixteen lanes, then the halving tree inside each block
        let mut lanes = A::t_sum_middle(padded.0, blocks, LANES);
        let mut w = LANES / 2;
        while w > 0 {
            lanes = A::t_sum_middle(lanes, blocks, w);
            w /= 2;
        }
        // the blocks' totals, adjacent pairs added until one is left
        let mut totals = lanes;
        let mut count = blocks;
        while count > 1 {
            count /= 2;
            totals = A::t_sum_middle(totals, count, 1);
        }
        Ten(totals).to_vec()[0]
    }
    /// `n` zeros.
    pub fn zeros(dev: &Cpu, n: usize) -> Self {
        Self::from_vec(dev, vec![A::zero(); n])
    }
    /// Copy out (an empty tensor gives an empty vector: dfdx's `as_vec` panics on it).
    pub fn to_vec(&self) -> Vec<A> {
        if self.is_empty() {
            return Vec::new();
        }
        self.0.as_vec()
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

// -------------------------------------------------------------------------------------------------
// Matrices: dfdx 2-D tensors for the composed Newton–Schulz form, and the same GEMM kernel called
// directly into planned buffers for the fused form.
//
// Quirks kept here: dfdx 0.13 lowers every CPU matmul to `gemm::gemm(m, n, k, dst, dst_cs,
// dst_rs, read_dst, lhs, lhs_cs, lhs_rs, rhs, rhs_cs, rhs_rs, alpha, beta, ..,
// Parallelism::Rayon(current_num_threads))`; [`gemm_into`] issues that call (with
// `Parallelism::None` below `GEMM_PARALLEL_MIN`, the same bits as `Rayon(1)` in 0.15), so a planned
// product over the same operands is the dfdx one. gemm-common 0.15.5 allocates, at every call, a
// `did_pack_lhs` flag vector (`mc/MR` bytes) and, when it packs the right operand, the packed
// panel; no release of gemm (0.15 to 0.19) takes a caller's workspace, so a planned product on
// 0.15 allocates those few bytes per call (freed by the call), and on 0.19 (`GemmKernel::Widest`)
// its packed operand panels. Its rayon path allocates more
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
    /// `(rows, cols)`.
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
    /// An empty graph with nothing parked.
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
