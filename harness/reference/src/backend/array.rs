//! [`Array`]: an owned, runtime-shaped leaf that moves in and out of dfdx tensors without a copy.

use super::{Flat, Float};
use dfdx::prelude::{Cpu, TensorFrom};
use std::fmt::Debug;
use std::mem::MaybeUninit;

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
    /// The dimensions, outermost first (empty for a 0-d tensor).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// The elements in row-major order; `len() == shape().iter().product()`.
    pub fn data(&self) -> &[E] {
        &self.data
    }
    /// Mutable access to the row-major elements (the shape cannot change through it).
    pub fn data_mut(&mut self) -> &mut [E] {
        &mut self.data
    }
    /// Consume the array, returning its row-major buffer without a copy.
    pub fn into_data(self) -> Vec<E> {
        self.data
    }
    /// Number of elements (the product of the shape; 1 for a 0-d tensor).
    pub fn len(&self) -> usize {
        self.data.len()
    }
    /// `true` when some dimension is 0 (a 0-d tensor holds one element and is not empty).
    ///
    /// ```
    /// use harness_reference::backend::Array;
    /// let empty = Array::<f32>::zeros(&[2, 0])?;
    /// assert_eq!((empty.len(), empty.is_empty()), (0, true));
    /// let s = Array::scalar(1.5f64);
    /// assert_eq!((s.shape(), s.len(), s.is_empty()), (&[][..], 1, false));
    /// # Ok::<(), harness_reference::Error>(())
    /// ```
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
    /// Element-wise map into a new array, like [`Array::map`], with the loop compiled for the
    /// CPU's widest vectors ([`super::vectorised`]) and, on a rayon worker, for arrays of at
    /// least [`super::PARALLEL_BLOCKS`] blocks, its ranges shared with the helper threads
    /// ([`crate::help`]). Each element is `f` of its own input, so the bits are [`Array::map`]'s.
    ///
    /// ```
    /// use harness_reference::backend::Array;
    /// let a = Array::vector(vec![1.0f32, 2.0, 3.0]);
    /// assert_eq!(a.map_vectorised(|x| 2.0 * x).data(), &[2.0, 4.0, 6.0]);
    /// ```
    pub fn map_vectorised<F: Float>(&self, f: impl Fn(E) -> F + Sync) -> Array<F> {
        let x = self.data.as_slice();
        Array {
            shape: self.shape.clone(),
            data: elementwise(x.len(), &|start, out: &mut [MaybeUninit<F>]| {
                for (o, &a) in out.iter_mut().zip(&x[start..]) {
                    o.write(f(a));
                }
            }),
        }
    }

    /// `f(self_i, other_i)` for every element into a new array, as [`Array::map_vectorised`]
    /// runs its loop.
    ///
    /// # Panics
    /// When `other`'s length differs from `self`'s.
    ///
    /// ```
    /// use harness_reference::backend::Array;
    /// let (a, b) = (Array::vector(vec![1.0f32, 2.0]), Array::vector(vec![0.5f32, 0.25]));
    /// assert_eq!(a.zip_map_vectorised(&b, |x, y| x + y).data(), &[1.5, 2.25]);
    /// ```
    pub fn zip_map_vectorised<F: Float>(
        &self,
        other: &Array<E>,
        f: impl Fn(E, E) -> F + Sync,
    ) -> Array<F> {
        assert_eq!(
            self.len(),
            other.len(),
            "zip_map_vectorised: lengths differ"
        );
        let (x, y) = (self.data.as_slice(), other.data.as_slice());
        Array {
            shape: self.shape.clone(),
            data: elementwise(x.len(), &|start, out: &mut [MaybeUninit<F>]| {
                let (x, y) = (&x[start..], &y[start..]);
                for ((o, &a), &b) in out.iter_mut().zip(x).zip(y) {
                    o.write(f(a, b));
                }
            }),
        }
    }

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

/// A vector of `n` elements, every one written by `write(start, out)`, which fills `out` with
/// elements `start .. start + out.len()`: one call compiled for the CPU's widest vectors, or, on a
/// rayon worker for at least [`super::PARALLEL_BLOCKS`] blocks, up to 8 calls over equal ranges
/// shared with the helper threads.
fn elementwise<F: Float>(
    n: usize,
    write: &(impl Fn(usize, &mut [MaybeUninit<F>]) + Sync),
) -> Vec<F> {
    /// One range of the output, as a [`super::Kernel`].
    struct Range<'a, W, F> {
        write: &'a W,
        start: usize,
        out: &'a mut [MaybeUninit<F>],
    }
    impl<W: Fn(usize, &mut [MaybeUninit<F>]), F> super::Kernel for Range<'_, W, F> {
        type Output = ();
        #[inline(always)]
        fn run(self) {
            (self.write)(self.start, self.out)
        }
    }
    let mut v: Vec<F> = Vec::with_capacity(n);
    let out = &mut v.spare_capacity_mut()[..n];
    let blocks = n.div_ceil(super::BLOCK);
    if blocks < super::PARALLEL_BLOCKS || rayon::current_thread_index().is_none() {
        super::vectorised(Range {
            write,
            start: 0,
            out,
        });
    } else {
        const PARTS: usize = 8;
        let width = n.div_ceil(PARTS);
        let mut ranges = out.chunks_mut(width);
        let ranges: [crate::help::Slot<Option<&mut [MaybeUninit<F>]>>; PARTS] =
            std::array::from_fn(|_| crate::help::Slot::new(ranges.next()));
        crate::help::run_parts(PARTS, &|k| {
            if let Some(out) = ranges[k].take() {
                super::vectorised(Range {
                    write,
                    start: k * width,
                    out,
                });
            }
        });
    }
    // SAFETY: every one of the first `n` slots was written above: the ranges cover `0..n`, and
    // `run_parts` returns only after every part has run (a panicking part panics here first)
    unsafe { v.set_len(n) };
    v
}
