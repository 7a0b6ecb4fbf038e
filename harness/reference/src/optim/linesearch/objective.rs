//! Objectives for the line search, and the fixture problems, in one place.
//!
//! An [`Objective`] maps a parameter tree to a scalar; its gradient is given in closed form. The
//! fixtures see the tree's leaves concatenated in name order as one vector `x` (a single leaf is
//! the common case). The formulas are written in the order the JAX reference writes them, so that
//! golden cases replay to the last few bits.

use crate::backend::{Array, Real};
use crate::stage::{HasSignature, LeafSig, Signature};
use crate::tree::Tree;
use crate::{Error, Result};

/// A differentiable scalar function of a parameter tree.
pub trait Objective<A: Real> {
    /// `f(x)`.
    fn value(&self, x: &Tree<A>) -> Result<A>;
    /// `(f(x), grad f(x))`, the gradient with `x`'s structure.
    fn value_and_grad(&self, x: &Tree<A>) -> Result<(A, Tree<A>)>;
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
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rosenbrock;

impl<A: Real> Objective<A> for Rosenbrock {
    fn value(&self, x: &Tree<A>) -> Result<A> {
        let x = flatten(x);
        Ok(x.windows(2)
            .map(|w| {
                let d = w[1] - w[0] * w[0];
                let e = c::<A>(1.0) - w[0];
                c::<A>(100.0) * (d * d) + e * e
            })
            .fold(A::zero(), |s, t| s + t))
    }
    // `Real` has no `AddAssign`: the accumulations are spelled out
    #[allow(clippy::assign_op_pattern)]
    fn value_and_grad(&self, x: &Tree<A>) -> Result<(A, Tree<A>)> {
        let v = <Self as Objective<A>>::value(self, x)?;
        let f = flatten(x);
        let mut g = vec![A::zero(); f.len()];
        for i in 0..f.len().saturating_sub(1) {
            let d = f[i + 1] - f[i] * f[i];
            g[i] = g[i] - c::<A>(400.0) * d * f[i] - c::<A>(2.0) * (c::<A>(1.0) - f[i]);
            g[i + 1] = g[i + 1] + c::<A>(200.0) * d;
        }
        Ok((v, unflatten(x, &g)))
    }
}

/// `f(x) = 0.5 x^T A x - b^T x`, gradient `0.5 (A x + A^T x) - b` (exact for any `A`).
#[derive(Clone, Debug, PartialEq)]
pub struct Quadratic {
    /// Row-major `n x n`.
    pub a: Vec<f64>,
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
