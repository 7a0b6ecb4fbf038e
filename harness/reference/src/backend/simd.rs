//! Running a loop compiled for the widest vector instructions the CPU has, chosen at run time.
//!
//! The workspace is built for the baseline of its target (on x86-64: SSE2), so that one binary
//! runs everywhere. A kernel whose loop vectorises is a [`Kernel`] value handed to [`vectorised`];
//! its `run` is compiled a second and third time inside functions that enable AVX2 or AVX-512
//! (each with FMA), and the widest form the CPU supports runs. The kernels given to it do
//! element-wise IEEE arithmetic and sums in a fixed order ([`crate::backend::lanes`]); Rust never
//! contracts `a * b + c` into a fused multiply-add, and a fused one asked for by name
//! (`mul_add`) is rounded once, correctly, in every form (an instruction in the wider ones, the
//! C library's `fma` in the portable one), so the bits do not depend on the form that ran: every
//! form is tested equal on the CPU at hand ([`Simd::available`] lists them).
//!
//! For the wider form to be generated, `run` must be inlined into those functions: implementations
//! mark it `#[inline(always)]` (a closure would not do: its body is a function of its own, compiled
//! once for the baseline).
//!
//! # References
//! - The Rust Reference, "The `target_feature` attribute"; `std::arch::is_x86_feature_detected`.
//!
//! # Example
//! ```
//! use harness_reference::backend::{vectorised, run_at, Kernel, Simd};
//! /// `sum_i x_i^2` with four partial sums.
//! struct SumSq<'a>(&'a [f32]);
//! impl Kernel for SumSq<'_> {
//!     type Output = f32;
//!     #[inline(always)]
//!     fn run(self) -> f32 {
//!         let mut acc = [0.0f32; 4];
//!         for (i, v) in self.0.iter().enumerate() {
//!             acc[i % 4] += v * v;
//!         }
//!         (acc[0] + acc[1]) + (acc[2] + acc[3])
//!     }
//! }
//! let x: Vec<f32> = (0..1000).map(|i| i as f32).collect();
//! let fast = vectorised(SumSq(&x));
//! for level in Simd::available() {
//!     assert_eq!(run_at(level, SumSq(&x)).to_bits(), fast.to_bits());
//! }
//! ```

/// A computation to compile for several instruction-set levels ([`vectorised`], [`run_at`]).
pub trait Kernel {
    /// What [`Kernel::run`] returns.
    type Output;
    /// The computation; implementations mark it `#[inline(always)]`.
    fn run(self) -> Self::Output;
}

/// An instruction-set level a [`Kernel`] can be compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Simd {
    /// The target's baseline (no run-time feature).
    Portable,
    /// x86-64 AVX2 and FMA.
    Avx2,
    /// x86-64 AVX-512 F, DQ and VL, and FMA.
    Avx512,
}

impl Simd {
    /// Whether this CPU can run code compiled for `self`.
    pub fn is_available(self) -> bool {
        match self {
            Simd::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512dq")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Every level this CPU runs, narrowest first.
    pub fn available() -> Vec<Simd> {
        [Simd::Portable, Simd::Avx2, Simd::Avx512]
            .into_iter()
            .filter(|l| l.is_available())
            .collect()
    }

    /// The widest level this CPU runs (no allocation: kernels ask at every call).
    pub fn best() -> Simd {
        [Simd::Avx512, Simd::Avx2]
            .into_iter()
            .find(|l| l.is_available())
            .unwrap_or(Simd::Portable)
    }
}

/// Run `k` compiled for the widest level this CPU supports.
#[inline]
pub fn vectorised<K: Kernel>(k: K) -> K::Output {
    run_at(Simd::best(), k)
}

/// Run `k` compiled for `level`, or for the portable level when this CPU lacks `level`.
#[inline]
pub fn run_at<K: Kernel>(level: Simd, k: K) -> K::Output {
    #[cfg(target_arch = "x86_64")]
    {
        if level.is_available() {
            match level {
                // SAFETY: the CPU supports the features the callee enables (checked just above).
                Simd::Avx512 => return unsafe { run_avx512(k) },
                // SAFETY: as above.
                Simd::Avx2 => return unsafe { run_avx2(k) },
                Simd::Portable => {}
            }
        }
    }
    k.run()
}

/// # Safety
/// The CPU must support AVX-512 F, DQ and VL, and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,fma")]
unsafe fn run_avx512<K: Kernel>(k: K) -> K::Output {
    k.run()
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn run_avx2<K: Kernel>(k: K) -> K::Output {
    k.run()
}
