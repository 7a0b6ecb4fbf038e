//! Objectives for the line search, and the fixture problems, in one place.
//!
//! An [`Objective`] maps a parameter tree to a scalar; its gradient is given in closed form. The
//! fixtures see the tree's leaves concatenated in name order as one vector `x` (a single leaf is
//! the common case). Each term is written in the order the JAX reference writes it; long sums run
//! in the workspace's fixed order ([`crate::backend::lanes`]), where XLA chooses its own, so
//! golden cases replay to the last few bits.

use crate::backend::{blocked_sum, vectorised, Array, Kernel, Lanes, Real, SumSplit, LANES};
use crate::help::Slot;
use crate::stage::{HasSignature, LeafSig, Signature};
use crate::tree::Tree;
use crate::{Error, Result};

/// A differentiable scalar function of a parameter tree.
pub trait Objective<A: Real> {
    /// `f(x)`.
    fn value(&self, x: &Tree<A>) -> Result<A>;
    /// `(f(x), grad f(x))`, the gradient with `x`'s structure.
    fn value_and_grad(&self, x: &Tree<A>) -> Result<(A, Tree<A>)>;
    /// `f(w + eta u)`, the value at a line-search candidate, equal bit for bit to
    /// `value(&add_scale(w, eta, u))` (each coordinate `w_i + eta u_i`, rounded once per
    /// operation). The default builds the candidate; an objective may override it to evaluate
    /// without materialising the candidate (law `linesearch_value_along_matches_candidate`).
    /// A direction whose structure differs from `w`'s is a typed error.
    fn value_along(&self, w: &Tree<A>, eta: A, u: &Tree<A>) -> Result<A> {
        w.check_like(u, "direction")?;
        self.value(&super::backtracking::add_scale(w, eta, u))
    }
    /// Signature of the data the objective closes over (a quadratic's `A` and `b`): it enters
    /// the staging key beside the objective's type, like arrays a jitted closure captures.
    fn data_signature(&self) -> Signature {
        Signature::new()
    }
}

impl<A: Real, O: Objective<A> + ?Sized> Objective<A> for &O {
    fn value(&self, x: &Tree<A>) -> Result<A> {
        (**self).value(x)
    }
    fn value_and_grad(&self, x: &Tree<A>) -> Result<(A, Tree<A>)> {
        (**self).value_and_grad(x)
    }
    fn value_along(&self, w: &Tree<A>, eta: A, u: &Tree<A>) -> Result<A> {
        (**self).value_along(w, eta, u)
    }
    fn data_signature(&self) -> Signature {
        (**self).data_signature()
    }
}

/// The leaves of `x` concatenated in name order.
pub fn flatten<A: Real>(x: &Tree<A>) -> Vec<A> {
    x.iter()
        .flat_map(|(_, a)| a.data().iter().copied())
        .collect()
}

/// A flat vector split back into `like`'s leaves, moved (not copied) when there is one leaf.
pub fn unflatten_owned<A: Real>(like: &Tree<A>, flat: Vec<A>) -> Tree<A> {
    if like.len() == 1 {
        let (name, a) = like.iter().next().expect("one leaf");
        let leaf = Array::new(a.shape().to_vec(), flat).expect("same length");
        return Tree::from_leaves([(name.clone(), leaf)]).expect("one leaf");
    }
    unflatten(like, &flat)
}

/// A flat vector split back into `like`'s leaves.
pub fn unflatten<A: Real>(like: &Tree<A>, flat: &[A]) -> Tree<A> {
    let at = std::cell::Cell::new(0);
    like.map(|a| {
        let start = at.get();
        at.set(start + a.len());
        Array::new(a.shape().to_vec(), flat[start..start + a.len()].to_vec()).expect("same length")
    })
}

fn need_dim(what: &str, x: &[impl Copy], n: usize) -> Result<()> {
    if x.len() == n {
        Ok(())
    } else {
        Err(Error::ShapeMismatch {
            leaf: format!("{what} argument"),
            expected: vec![n],
            got: vec![x.len()],
        })
    }
}

fn c<A: Real>(x: f64) -> A {
    A::of_f64(x)
}

/// `f(x) = sum_i 100 (x[i+1] - x[i]^2)^2 + (1 - x[i])^2`, any dimension >= 1 (dimension 1: 0).
///
/// The sum runs in the workspace's lane order ([`crate::backend::lanes`]); the gradient is
/// `g_i = (200 d_{i-1} - 400 d_i x_i) - 2 (1 - x_i)` with `d_i = x_{i+1} - x_i^2` (the terms that
/// do not exist dropped). [`Objective::value_along`] evaluates a line-search candidate in one pass
/// over `w` and `u` without building it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rosenbrock;

impl Rosenbrock {
    /// The term of index `i`, from `x_i` and `x_{i+1}`.
    #[inline(always)]
    fn term<A: Real>(x0: A, x1: A) -> A {
        let d = x1 - x0 * x0;
        let e = c::<A>(1.0) - x0;
        c::<A>(100.0) * (d * d) + e * e
    }
}

/// Where [`rosenbrock_sum`] reads its point: `x` itself ([`At`]), or the candidate `w + eta u`
/// ([`Along`]). One implementation per case, so that the pass is compiled for each.
trait Point<A>: Copy {
    /// The dimension.
    fn len(&self) -> usize;
    /// `out[j] = term(x_{base+j}, x_{base+j+1})`: a plain element-wise loop over shifted slices,
    /// which the compiler vectorises.
    fn terms(&self, base: usize, out: &mut [A]);
}

#[derive(Clone, Copy)]
struct At<'a, A>(&'a [A]);

impl<A: Real> Point<A> for At<'_, A> {
    fn len(&self) -> usize {
        self.0.len()
    }
    #[inline(always)]
    fn terms(&self, base: usize, out: &mut [A]) {
        let m = out.len();
        let (x0, x1) = (&self.0[base..base + m], &self.0[base + 1..base + 1 + m]);
        for ((t, &a), &b) in out.iter_mut().zip(x0).zip(x1) {
            *t = Rosenbrock::term(a, b);
        }
    }
}

#[derive(Clone, Copy)]
struct Along<'a, A> {
    w: &'a [A],
    eta: A,
    u: &'a [A],
}

impl<A: Real> Point<A> for Along<'_, A> {
    fn len(&self) -> usize {
        self.w.len()
    }
    #[inline(always)]
    fn terms(&self, base: usize, out: &mut [A]) {
        let (m, eta) = (out.len(), self.eta);
        let (w0, u0) = (&self.w[base..base + m], &self.u[base..base + m]);
        let (w1, u1) = (
            &self.w[base + 1..base + 1 + m],
            &self.u[base + 1..base + 1 + m],
        );
        let pairs = w0.iter().zip(u0).zip(w1.iter().zip(u1));
        for (t, ((&a0, &b0), (&a1, &b1))) in out.iter_mut().zip(pairs) {
            // the candidate's coordinates, rounded as `add_scale` rounds them
            *t = Rosenbrock::term(a0 + eta * b0, a1 + eta * b1);
        }
    }
}

/// Terms computed per chunk into a stack buffer before they are summed (a multiple of
/// [`LANES`] dividing [`crate::backend::BLOCK`], so a term's lane is its index modulo 16 whatever
/// the chunk).
const CHUNK: usize = 16 * LANES;

/// The lane-order total of terms `start .. start + len` of [`Rosenbrock`]'s sum at a point (one
/// block of [`crate::backend::blocked_sum`]; a [`Kernel`]).
struct RosenbrockBlock<A, P> {
    point: P,
    start: usize,
    len: usize,
    dtype: std::marker::PhantomData<A>,
}

impl<A: Real, P: Point<A>> Kernel for RosenbrockBlock<A, P> {
    type Output = A;
    #[inline(always)]
    fn run(self) -> A {
        let end = self.start + self.len;
        let mut lanes = Lanes::default();
        let mut buf = [A::zero(); CHUNK];
        let mut base = self.start;
        while base < end {
            let m = CHUNK.min(end - base);
            self.point.terms(base, &mut buf[..m]);
            let mut blocks = buf[..m].chunks_exact(LANES);
            for b in &mut blocks {
                lanes.add_block(b.try_into().expect("a block of LANES"));
            }
            lanes.add_tail(blocks.remainder());
            base += m;
        }
        lanes.total()
    }
}

/// [`Rosenbrock`]'s sum at a point in the lane order, its blocks on every core.
fn rosenbrock_sum<A: Real, P: Point<A> + Sync>(point: P) -> A {
    let terms = point.len().saturating_sub(1);
    blocked_sum(terms, &|start, len| {
        vectorised(RosenbrockBlock {
            point,
            start,
            len,
            dtype: std::marker::PhantomData,
        })
    })
}

/// Interior coordinates `lo .. lo + g.len()` (all within `1 .. dim - 1`) of [`Rosenbrock`]'s
/// gradient at `x` (a [`Kernel`]): `g_i = ((0 + 200 d_{i-1}) - 400 d_i x_i) - 2 (1 - x_i)` with
/// `d_i = x_{i+1} - x_i^2`, each coordinate on its own and rounded as accumulating both
/// contributions into zeros (so any split of the coordinates gives the same bits).
struct GradInterior<'a, A> {
    x: &'a [A],
    lo: usize,
    g: &'a mut [A],
}

impl<A: Real> Kernel for GradInterior<'_, A> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let (x, lo, m) = (self.x, self.lo, self.g.len());
        let (xl, xc, xr) = (
            &x[lo - 1..lo - 1 + m],
            &x[lo..lo + m],
            &x[lo + 1..lo + 1 + m],
        );
        let d = |x0: A, x1: A| x1 - x0 * x0;
        for (j, gi) in self.g.iter_mut().enumerate() {
            let (l, c0, r) = (xl[j], xc[j], xr[j]);
            *gi = (A::zero() + c::<A>(200.0) * d(l, c0))
                - c::<A>(400.0) * d(c0, r) * c0
                - c::<A>(2.0) * (c::<A>(1.0) - c0);
        }
    }
}

/// [`Rosenbrock`]'s gradient at `x` into `g`, on this thread: the first coordinate has no left
/// term, the last only its left term.
fn rosenbrock_grad<A: Real>(x: &[A], g: &mut [A]) {
    let dim = x.len();
    if dim >= 3 {
        vectorised(GradInterior {
            x,
            lo: 1,
            g: &mut g[1..dim - 1],
        });
    }
    rosenbrock_grad_ends(x, g);
}

/// The first and last coordinates of [`Rosenbrock`]'s gradient.
fn rosenbrock_grad_ends<A: Real>(x: &[A], g: &mut [A]) {
    let dim = x.len();
    let d = |x0: A, x1: A| x1 - x0 * x0;
    if dim >= 2 {
        g[0] =
            (A::zero() - c::<A>(400.0) * d(x[0], x[1]) * x[0]) - c::<A>(2.0) * (c::<A>(1.0) - x[0]);
        g[dim - 1] = A::zero() + c::<A>(200.0) * d(x[dim - 2], x[dim - 1]);
    } else if dim == 1 {
        g[0] = A::zero();
    }
}

/// [`Rosenbrock`]'s value and gradient at `x` (gradient into `g`). On a rayon worker, when the
/// sum is long enough to split ([`SumSplit`]), the value's parts and as many ranges of the
/// gradient's interior run as one job shared with the helper threads ([`crate::help`]); every
/// coordinate and the sum's tree are the same whoever runs them.
fn rosenbrock_value_and_grad<A: Real>(x: &[A], g: &mut [A]) -> A {
    let dim = x.len();
    let split = SumSplit::new(dim.saturating_sub(1));
    if split.parts() == 1 || dim < 3 || rayon::current_thread_index().is_none() {
        rosenbrock_grad(x, g);
        return rosenbrock_sum(At(x));
    }
    let p = split.parts();
    rosenbrock_grad_ends(x, g);
    let inner = &mut g[1..dim - 1];
    let width = inner.len().div_ceil(p);
    let mut ranges = inner.chunks_mut(width);
    let ranges: [Slot<Option<&mut [A]>>; SumSplit::MAX_PARTS] =
        std::array::from_fn(|_| Slot::new(ranges.next()));
    let totals: [Slot<A>; SumSplit::MAX_PARTS] = Default::default();
    let block_total = |start, len| {
        vectorised(RosenbrockBlock {
            point: At(x),
            start,
            len,
            dtype: std::marker::PhantomData,
        })
    };
    // the gradient's ranges (the heavier parts) first, then the value's subtrees
    crate::help::run_parts(2 * p, &|k| {
        if k < p {
            if let Some(g) = ranges[k].take() {
                vectorised(GradInterior {
                    x,
                    lo: 1 + k * width,
                    g,
                });
            }
        } else {
            totals[k - p].put(split.part(k - p, &block_total));
        }
    });
    let mut totals = totals.map(Slot::into_inner);
    split.combine(&mut totals[..p])
}

/// The tree's leaves as one slice: borrowed when there is a single leaf, concatenated otherwise.
fn contiguous<A: Real>(x: &Tree<A>) -> std::borrow::Cow<'_, [A]> {
    match x.len() {
        1 => std::borrow::Cow::Borrowed(x.iter().next().expect("one leaf").1.data()),
        _ => std::borrow::Cow::Owned(flatten(x)),
    }
}

impl<A: Real> Objective<A> for Rosenbrock {
    fn value(&self, x: &Tree<A>) -> Result<A> {
        let x = contiguous(x);
        Ok(rosenbrock_sum(At(&x)))
    }
    fn value_and_grad(&self, x: &Tree<A>) -> Result<(A, Tree<A>)> {
        let f = contiguous(x);
        let mut g = vec![A::zero(); f.len()];
        let v = rosenbrock_value_and_grad(&f, &mut g);
        Ok((v, unflatten_owned(x, g)))
    }
    fn value_along(&self, w: &Tree<A>, eta: A, u: &Tree<A>) -> Result<A> {
        w.check_like(u, "direction")?;
        let (w, u) = (contiguous(w), contiguous(u));
        Ok(rosenbrock_sum(Along { w: &w, eta, u: &u }))
    }
}

/// `f(x) = 0.5 x^T A x - b^T x`, gradient `0.5 (A x + A^T x) - b` (exact for any `A`).
#[derive(Clone, Debug, PartialEq)]
pub struct Quadratic {
    /// Row-major `n x n`.
    pub a: Vec<f64>,
    /// The linear term `b`; its length `n` is the dimension.
    pub b: Vec<f64>,
}

impl Quadratic {
    /// `a` must hold `b.len()^2` entries.
    pub fn new(a: Vec<f64>, b: Vec<f64>) -> Result<Self> {
        let n = b.len();
        if a.len() != n * n {
            return Err(Error::DataLength {
                shape: vec![n, n],
                expected: n * n,
                got: a.len(),
            });
        }
        Ok(Self { a, b })
    }
    /// The dimension `n` (the length of `b`).
    ///
    /// ```
    /// use harness_reference::optim::linesearch::Quadratic;
    /// assert_eq!(Quadratic::new(vec![2.0, 0.0, 0.0, 1.0], vec![1.0, -1.0])?.dim(), 2);
    /// assert!(Quadratic::new(vec![1.0; 3], vec![1.0, -1.0]).is_err()); // needs 2 x 2
    /// # Ok::<(), harness_reference::Error>(())
    /// ```
    pub fn dim(&self) -> usize {
        self.b.len()
    }
    fn ax<A: Real>(&self, x: &[A], transpose: bool) -> Vec<A> {
        let n = self.dim();
        (0..n)
            .map(|i| {
                (0..n).fold(A::zero(), |s, j| {
                    let aij = if transpose {
                        self.a[j * n + i]
                    } else {
                        self.a[i * n + j]
                    };
                    s + c::<A>(aij) * x[j]
                })
            })
            .collect()
    }
    fn dot<A: Real>(x: &[A], y: &[A]) -> A {
        x.iter().zip(y).fold(A::zero(), |s, (&a, &b)| s + a * b)
    }
}

impl<A: Real> Objective<A> for Quadratic {
    fn value(&self, x: &Tree<A>) -> Result<A> {
        let x = flatten(x);
        need_dim("quadratic", &x, self.dim())?;
        let b: Vec<A> = self.b.iter().map(|&v| c(v)).collect();
        Ok(c::<A>(0.5) * Self::dot(&x, &self.ax(&x, false)) - Self::dot(&b, &x))
    }
    fn value_and_grad(&self, x: &Tree<A>) -> Result<(A, Tree<A>)> {
        let v = <Self as Objective<A>>::value(self, x)?;
        let f = flatten(x);
        let (ax, atx) = (self.ax(&f, false), self.ax(&f, true));
        let g: Vec<A> = (0..f.len())
            .map(|i| c::<A>(0.5) * (ax[i] + atx[i]) - c::<A>(self.b[i]))
            .collect();
        Ok((v, unflatten(x, &g)))
    }
    fn data_signature(&self) -> Signature {
        let mut s = Signature::new();
        s.push("A", LeafSig::strong(&[self.dim(), self.dim()], A::DTYPE));
        s.push("b", LeafSig::strong(&[self.dim()], A::DTYPE));
        s
    }
}

/// Himmelblau's function `(x^2 + y - 11)^2 + (x + y^2 - 7)^2` (dimension 2; four minima).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Himmelblau;

impl<A: Real> Objective<A> for Himmelblau {
    fn value(&self, x: &Tree<A>) -> Result<A> {
        let f = flatten(x);
        need_dim("himmelblau", &f, 2)?;
        let (p, q) = (f[0] * f[0] + f[1] - c(11.0), f[0] + f[1] * f[1] - c(7.0));
        Ok(p * p + q * q)
    }
    fn value_and_grad(&self, x: &Tree<A>) -> Result<(A, Tree<A>)> {
        let v = <Self as Objective<A>>::value(self, x)?;
        let f = flatten(x);
        let (p, q) = (f[0] * f[0] + f[1] - c(11.0), f[0] + f[1] * f[1] - c(7.0));
        let two: A = c(2.0);
        let g = [
            two * p * two * f[0] + two * q,
            two * p + two * q * two * f[1],
        ];
        Ok((v, unflatten(x, &g)))
    }
}

/// Matyas' function `0.26 (x^2 + y^2) - 0.48 x y` (dimension 2; minimum 0 at the origin).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Matyas;

impl<A: Real> Objective<A> for Matyas {
    fn value(&self, x: &Tree<A>) -> Result<A> {
        let f = flatten(x);
        need_dim("matyas", &f, 2)?;
        Ok(c::<A>(0.26) * (f[0] * f[0] + f[1] * f[1]) - c::<A>(0.48) * f[0] * f[1])
    }
    fn value_and_grad(&self, x: &Tree<A>) -> Result<(A, Tree<A>)> {
        let v = <Self as Objective<A>>::value(self, x)?;
        let f = flatten(x);
        let g = [
            c::<A>(0.52) * f[0] - c::<A>(0.48) * f[1],
            c::<A>(0.52) * f[1] - c::<A>(0.48) * f[0],
        ];
        Ok((v, unflatten(x, &g)))
    }
}

/// One leaf `x` holding `data` rounded to `A`: how fixture problems take their argument.
pub fn point<A: Real>(data: &[f64]) -> Tree<A> {
    Tree::from_leaves([(
        "x".to_string(),
        Array::vector(data.iter().map(|&v| A::of_f64(v)).collect()),
    )])
    .expect("one leaf")
}

impl HasSignature for Quadratic {
    fn signature(&self) -> Signature {
        <Self as Objective<f64>>::data_signature(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_direction_of_another_shape_is_a_typed_error_not_a_panic() {
        let (w, u) = (point::<f64>(&[1.0, 2.0]), point::<f64>(&[1.0, 2.0, 3.0]));
        // the default evaluation (building the candidate) and Rosenbrock's own
        assert!(Himmelblau.value_along(&w, 0.5, &u).is_err());
        assert!(Rosenbrock.value_along(&w, 0.5, &u).is_err());
    }

    fn fd_check<O: Objective<f64>>(o: &O, x: &[f64]) {
        let p = point::<f64>(x);
        let (_, g) = o.value_and_grad(&p).unwrap();
        let g = flatten(&g);
        for i in 0..x.len() {
            let h = 1e-6;
            let (mut a, mut b) = (x.to_vec(), x.to_vec());
            a[i] += h;
            b[i] -= h;
            let fd = (o.value(&point(&a)).unwrap() - o.value(&point(&b)).unwrap()) / (2.0 * h);
            assert!(
                (fd - g[i]).abs() <= 1e-5 * (1.0 + fd.abs()),
                "{} [{i}]: {fd} vs {}",
                std::any::type_name::<O>(),
                g[i]
            );
        }
    }

    #[test]
    fn closed_form_gradients_match_finite_differences() {
        fd_check(&Rosenbrock, &[-0.3, 0.7, 1.2, 0.1]);
        fd_check(&Himmelblau, &[0.5, -1.5]);
        fd_check(&Matyas, &[0.5, -1.5]);
        fd_check(
            &Quadratic::new(vec![2.0, 0.5, -0.3, 1.0], vec![1.0, -2.0]).unwrap(),
            &[0.3, 0.4],
        );
    }

    #[test]
    fn minima_are_where_the_books_put_them() {
        assert_eq!(
            Objective::<f64>::value(&Rosenbrock, &point(&[1.0; 5])).unwrap(),
            0.0
        );
        assert_eq!(
            Objective::<f64>::value(&Himmelblau, &point(&[3.0, 2.0])).unwrap(),
            0.0
        );
        assert_eq!(
            Objective::<f64>::value(&Matyas, &point(&[0.0, 0.0])).unwrap(),
            0.0
        );
    }

    #[test]
    fn wrong_dimension_is_a_typed_error() {
        assert!(Objective::<f64>::value(&Matyas, &point(&[1.0])).is_err());
        assert!(Quadratic::new(vec![1.0; 3], vec![1.0; 2]).is_err());
    }
}
