//! [`Array`]: an owned, runtime-shaped leaf that moves in and out of dfdx tensors without a copy.

use super::{Flat, Float};
use dfdx::prelude::{Cpu, TensorFrom};
use std::fmt::Debug;

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
