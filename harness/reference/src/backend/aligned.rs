//! # Buffers that start on a cache line
//!
//! A `Vec<f32>` or `Vec<f64>` starts where the allocator puts it: glibc's `malloc` promises 16
//! bytes, so a buffer's first element lands at offset 0, 16, 32 or 48 of its 64-byte cache line,
//! depending on what the process allocated before. With rows of 64 values, every row then starts
//! at that offset too, and every 64-byte vector load or store of the AVX-512 loops touches two
//! cache lines instead of one. On the benchmark machine that decided a CNF training step's
//! speed from one process to the next: the same binary took 38.9-39.0 or 37.9-38.0 ms in f32,
//! and 83-84 or 77-78 ms in f64, as its buffers happened to fall.
//!
//! [`AlignedVec`] is a growable buffer of `f32` or `f64` whose first element always starts a
//! 64-byte line, read and written as a slice. The values are those a `Vec` would hold: only the
//! address differs, so no result changes.
//!
//! # References
//! - AMD, *Software Optimization Guide for the AMD Zen4 Microarchitecture* (57647), 2023:
//!   loads and stores that cross a cache-line boundary.
//!
//! # Example
//! ```
//! use harness_reference::backend::AlignedVec;
//! let mut v = AlignedVec::<f32>::default();
//! v.resize(100, 1.5);
//! assert_eq!(v.as_ptr() as usize % 64, 0);
//! v[3] = 2.0;
//! assert_eq!((v.len(), v[3], v[99]), (100, 2.0, 1.5));
//! v.resize(2, 0.0);
//! assert_eq!(&v[..], &[1.5, 1.5]);
//! ```

use super::Real;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

/// One cache line of storage.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A growable buffer of `A` (`f32` or `f64`) whose first element starts a 64-byte cache line;
/// a slice through `Deref`. Growing may move it (to another line start), as a `Vec` moves.
pub struct AlignedVec<A> {
    lines: Vec<Line>,
    len: usize,
    dtype: PhantomData<A>,
}

impl<A> Default for AlignedVec<A> {
    fn default() -> Self {
        AlignedVec {
            lines: Vec::new(),
            len: 0,
            dtype: PhantomData,
        }
    }
}

impl<A: Real> AlignedVec<A> {
    /// Set the length to `len`, the new elements (if any) equal to `value`; the first
    /// `min(len, old length)` keep their values.
    pub fn resize(&mut self, len: usize, value: A) {
        let old = self.len;
        let bytes = len
            .checked_mul(std::mem::size_of::<A>())
            .expect("AlignedVec: length overflows the address space");
        self.lines.resize(bytes.div_ceil(64), Line([0; 64]));
        self.len = len;
        if len > old {
            self[old..].fill(value);
        }
    }

    /// A buffer holding a copy of `values`.
    pub fn from_slice(values: &[A]) -> Self {
        let mut v = Self::default();
        v.resize(values.len(), A::zero());
        v.copy_from_slice(values);
        v
    }
}

impl<A: Real> Deref for AlignedVec<A> {
    type Target = [A];
    fn deref(&self) -> &[A] {
        // SAFETY: `lines` holds at least `len * size_of::<A>()` initialised bytes, aligned to 64
        // (more than `A`'s alignment), and every bit pattern is a valid `f32` or `f64` (the only
        // `Real` types).
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<A>(), self.len) }
    }
}

impl<A: Real> DerefMut for AlignedVec<A> {
    fn deref_mut(&mut self) -> &mut [A] {
        // SAFETY: as in `deref`; the borrow of `self` is unique.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<A>(), self.len) }
    }
}

impl<A: Real> Clone for AlignedVec<A> {
    fn clone(&self) -> Self {
        Self::from_slice(self)
    }
}

impl<A: Real> std::fmt::Debug for AlignedVec<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_length_starts_a_line_and_keeps_its_values_across_resizes() {
        let mut v = AlignedVec::<f64>::default();
        assert!(v.is_empty());
        for len in [1, 7, 8, 9, 63, 64, 65, 1000, 3, 0, 17] {
            let old: Vec<f64> = v.to_vec();
            v.resize(len, -0.0);
            assert_eq!(v.len(), len);
            if len > 0 {
                assert_eq!(v.as_ptr() as usize % 64, 0, "length {len}");
            }
            let kept = old.len().min(len);
            assert_eq!(&v[..kept], &old[..kept], "length {len}");
            assert!(v[kept..].iter().all(|x| x.to_bits() == (-0.0f64).to_bits()));
            for (i, x) in v.iter_mut().enumerate() {
                *x = i as f64 + len as f64;
            }
        }
        let w = AlignedVec::<f32>::from_slice(&[1.0, f32::NAN, 3.0]);
        assert_eq!(w.as_ptr() as usize % 64, 0);
        assert!(w[1].is_nan() && w[2] == 3.0);
        assert_eq!(w.clone().len(), 3);
    }
}
