//! Laws of Muon: fixed state shape and coefficients carried bit for bit, one trace per
//! parameter signature, iteration counts, transpose symmetry, singular-value bands, zero
//! gradients, and bitwise invariance under sharding and under the order in which parameters of
//! different dtypes and shapes are first updated.

use super::{check_property, unsupported_dtype, Family, Law};
use crate::backend::{Array, DType, Float, Real};
use crate::optim::muon::{
    coeffs, newton_schulz, orthogonalize_composed, CoeffPolicy, MuonStepper, NsPlan, PerUse,
    Sharding,
};
use crate::optim::{CoeffSpec, Jit, Muon, MuonHyper, MuonState, Transform};
use crate::stage::HasSignature;
use crate::tolerance;
use crate::tree::Tree;
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// inputs

/// Deterministic standard-normal data (splitmix64 + Box–Muller): cases carry a seed, not numbers,
/// so counterexamples stay short.
pub fn gaussian(seed: u64, n: usize) -> Vec<f64> {
    let mut s = seed ^ 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let (u1, u2) = (next().max(1e-300), next());
            (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
        })
        .collect()
}

/// Which coefficients a case uses.
#[derive(Clone, Debug, PartialEq)]
pub enum Coeffs {
    /// The `"standard"` preset (Keller Jordan's quintic), 5 steps.
    Standard,
    /// The `"dion"` preset (one row per iteration), 5 steps.
    Dion,
    /// `[3]` with this many steps.
    Single([f64; 3], usize),
    /// `[k, 3]`, one row per iteration, with `ns_steps >= k`.
    Rows(Vec<[f64; 3]>, usize),
}

impl Coeffs {
    /// The coefficient spec and `ns_steps` this case hands to [`MuonHyper`].
    ///
    /// ```
    /// use harness::laws::muon::Coeffs;
    /// use harness::optim::CoeffSpec;
    /// assert_eq!(Coeffs::Standard.spec(), (CoeffSpec::Preset("standard".into()), 5));
    /// let rows = Coeffs::Rows(vec![[3.0, -4.0, 1.5]; 2], 4);
    /// assert_eq!(rows.spec().1, 4);
    /// assert_eq!(rows.expected_iterations(), 2);
    /// ```
    pub fn spec(&self) -> (CoeffSpec, usize) {
        match self {
            Coeffs::Standard => (CoeffSpec::Preset("standard".into()), 5),
            Coeffs::Dion => (CoeffSpec::Preset("dion".into()), 5),
            Coeffs::Single(c, s) => (CoeffSpec::single(*c), *s),
            Coeffs::Rows(r, s) => (CoeffSpec::rows(r), *s),
        }
    }
    /// Iterations the coefficients must run.
    pub fn expected_iterations(&self) -> usize {
        match self {
            Coeffs::Standard => 5,
            Coeffs::Dion => 5,
            Coeffs::Single(_, s) => *s,
            Coeffs::Rows(r, _) => r.len(),
        }
    }
}

fn coeffs_strategy() -> impl Strategy<Value = Coeffs> {
    let row = || (2.0f64..4.5, -7.0f64..-2.0, 0.5f64..3.0).prop_map(|(a, b, c)| [a, b, c]);
    prop_oneof![
        2 => Just(Coeffs::Standard),
        2 => Just(Coeffs::Dion),
        1 => (row(), 0usize..7).prop_map(|(r, s)| Coeffs::Single(r, s)),
        1 => (prop::collection::vec(row(), 0..5), 0usize..3)
            .prop_map(|(rows, extra)| { let s = rows.len() + extra; Coeffs::Rows(rows, s) }),
    ]
}

/// A parameter tree (names `p0, p1, ...`), its dtype, and a run over it.
#[derive(Clone, Debug)]
pub struct MuonCase {
    /// Dtype of every parameter and gradient.
    pub dtype: DType,
    /// Shape of each parameter `p0, p1, ...` (2-D ones go through Muon, the rest through AdamW).
    pub shapes: Vec<Vec<usize>>,
    /// The Newton–Schulz coefficients.
    pub coeffs: Coeffs,
    /// Nesterov momentum.
    pub nesterov: bool,
    /// Muon weight decay (0 or 0.1 from [`muon_case`]).
    pub weight_decay: f64,
    /// Updates to run.
    pub steps: usize,
    /// Seed of the parameter and gradient draws.
    pub seed: u64,
}

impl MuonCase {
    /// `MuonHyper::new(0.02)` with this case's coefficients, Nesterov flag and weight decay.
    pub fn hyper(&self) -> MuonHyper {
        let (ns_coeffs, ns_steps) = self.coeffs.spec();
        MuonHyper {
            ns_coeffs,
            ns_steps,
            nesterov: self.nesterov,
            weight_decay: self.weight_decay,
            ..MuonHyper::new(0.02)
        }
    }
}

fn shape_strategy() -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![
        4 => (0usize..7, 0usize..7).prop_map(|(r, c)| vec![r, c]),
        1 => (1usize..20, 1usize..20).prop_map(|(r, c)| vec![r, c]),
        1 => (0usize..6).prop_map(|n| vec![n]),
        1 => Just(vec![]),
        1 => (1usize..3, 1usize..3, 1usize..3).prop_map(|(a, b, c)| vec![a, b, c]),
    ]
}

fn dtype_strategy() -> impl Strategy<Value = DType> {
    prop_oneof![Just(DType::F64), Just(DType::F32), Just(DType::F16)]
}

/// Random [`MuonCase`]s: f16/f32/f64, 1-3 leaves (zero-size, vectors, scalars and 3-D included),
/// any coefficients, 1-4 steps.
pub fn muon_case() -> impl Strategy<Value = MuonCase> {
    (
        dtype_strategy(),
        prop::collection::vec(shape_strategy(), 1..4),
        coeffs_strategy(),
        any::<bool>(),
        prop_oneof![3 => Just(0.0), 1 => Just(0.1)],
        1usize..5,
        any::<u64>(),
    )
        .prop_map(
            |(dtype, shapes, coeffs, nesterov, weight_decay, steps, seed)| MuonCase {
                dtype,
                shapes,
                coeffs,
                nesterov,
                weight_decay,
                steps,
                seed,
            },
        )
}

/// Leaves `p0, p1, ...` with Gaussian data (times `scale`) rounded to `E`.
pub fn tree<E: Float>(shapes: &[Vec<usize>], seed: u64, scale: f64) -> Tree<E> {
    Tree::from_leaves(shapes.iter().enumerate().map(|(i, s)| {
        let n: usize = s.iter().product();
        let data = gaussian(seed.wrapping_add(i as u64 * 7919), n)
            .into_iter()
            .map(|x| E::of_f64(x * scale))
            .collect();
        (format!("p{i}"), Array::new(s.clone(), data).expect("sized"))
    }))
    .expect("distinct names")
}

fn err(e: crate::reference::Error) -> String {
    e.to_string()
}

// ---------------------------------------------------------------------------------------------
// fixed state shape, traces, iterations

/// `init` and every `update` have one state signature; `ns_coeffs` is bit-identical after every
/// update; a jitted loop traces once; the planned stepper traces one workspace per distinct 2-D
/// leaf signature; every Muon leaf runs the iterations its coefficients prescribe.
pub fn state_fixed_traces_iterations(case: &MuonCase) -> Result<(), String> {
    state_fixed_traces_iterations_with(case, &Muon::new)
}

/// A Muon-shaped transform in every float dtype, its state a [`MuonState`] in the dtype's
/// accumulator (the reference's [`Muon`], or a planted one).
pub trait MuonTransform:
    Transform<half::f16, State = MuonState<f32>>
    + Transform<f32, State = MuonState<f32>>
    + Transform<f64, State = MuonState<f64>>
{
}
impl<T> MuonTransform for T where
    T: Transform<half::f16, State = MuonState<f32>>
        + Transform<f32, State = MuonState<f32>>
        + Transform<f64, State = MuonState<f64>>
{
}

/// [`state_fixed_traces_iterations`] with `init` and the jitted `update` of the Muon `make`
/// builds (state signature, coefficients, one trace); the planned stepper's traces and
/// iteration counts are the reference's.
pub fn state_fixed_traces_iterations_with<T: MuonTransform>(
    case: &MuonCase,
    make: &dyn Fn(MuonHyper) -> crate::reference::Result<T>,
) -> Result<(), String> {
    by_dtype!(float case.dtype, state_fixed_e[T](case, make), else unsupported_dtype(case.dtype))
}

fn state_fixed_e<E: Float, T: Transform<E, State = MuonState<E::Acc>>>(
    case: &MuonCase,
    make: &dyn Fn(MuonHyper) -> crate::reference::Result<T>,
) -> Result<(), String> {
    let muon = Muon::new(case.hyper()).map_err(err)?;
    let mut params = tree::<E>(&case.shapes, case.seed, 1.0);
    let state = make(case.hyper())
        .map_err(err)?
        .init(&params)
        .map_err(err)?;
    let (sig0, c0) = (state.signature(), state.ns_coeffs.clone());
    let bits = |a: &Array<f64>| a.data().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let mut jit = Jit::new(make(case.hyper()).map_err(err)?).with_max_traces(1);
    let mut stepper = MuonStepper::new(&muon, &params, Sharding::single()).map_err(err)?;
    let mut st = state;
    for t in 1..=case.steps {
        let g = tree::<E>(&case.shapes, case.seed ^ (t as u64 * 31), 1.0);
        let (_, next) = jit.update(&g, &st, &params).map_err(err)?;
        let d = sig0.diff(&next.signature());
        if !d.is_empty() {
            return Err(format!("step {t}: state signature changed: {d}"));
        }
        if bits(&next.ns_coeffs) != bits(&c0) {
            return Err(format!(
                "step {t}: ns_coeffs changed: {:?} -> {:?}",
                c0, next.ns_coeffs
            ));
        }
        st = next;
        stepper.step(&mut params, &g).map_err(err)?;
        let want = case.coeffs.expected_iterations();
        for (leaf, k) in &stepper.last_info().iterations {
            if *k != want {
                return Err(format!(
                    "step {t}: leaf {leaf} ran {k} iterations, want {want}"
                ));
            }
        }
    }
    let mut distinct: Vec<&Vec<usize>> = case.shapes.iter().filter(|s| s.len() == 2).collect();
    distinct.sort();
    distinct.dedup();
    if stepper.traces() != distinct.len() {
        return Err(format!(
            "{} steps traced {} Newton-Schulz plans, want {} (one per 2-D leaf signature)",
            case.steps,
            stepper.traces(),
            distinct.len()
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Newton–Schulz numerics

/// A matrix input of the numerics laws.
#[derive(Clone, Debug)]
pub struct MatCase {
    /// Rows (`>= 1`).
    pub rows: usize,
    /// Columns (`>= 1`).
    pub cols: usize,
    /// f32 or f64.
    pub dtype: DType,
    /// Coefficients whose iteration stays bounded ([`bounded_coeffs`]).
    pub coeffs: Coeffs,
    /// Seed of the Gaussian input.
    pub seed: u64,
}

/// Coefficients whose iteration stays bounded on `[0, 1]` (the presets, repeated standard rows and
/// prefixes of dion): what the numerics laws use. Arbitrary coefficients can blow the iterate up
/// to inf/NaN, where ULP bounds mean nothing; the shape, trace and iteration laws use those.
pub fn bounded_coeffs() -> impl Strategy<Value = Coeffs> {
    prop_oneof![
        Just(Coeffs::Standard),
        Just(Coeffs::Dion),
        (0usize..8).prop_map(|s| Coeffs::Single(coeffs::STANDARD, s)),
        (0usize..=5).prop_map(|k| Coeffs::Rows(coeffs::DION[..k].to_vec(), 5)),
    ]
}

/// Random [`MatCase`]s of up to `max x max`, f32 or f64, with bounded coefficients.
pub fn mat_case(max: usize) -> impl Strategy<Value = MatCase> {
    (
        1..=max,
        1..=max,
        prop_oneof![Just(DType::F64), Just(DType::F32)],
        bounded_coeffs(),
        any::<u64>(),
    )
        .prop_map(|(rows, cols, dtype, coeffs, seed)| MatCase {
            rows,
            cols,
            dtype,
            coeffs,
            seed,
        })
}

pub use crate::tolerance::SQUARE_TRANSPOSE_ULPS_PER_N;

/// `orth(X^T) == orth(X)^T` bit for bit for non-square `X` (the tall side is transposed onto the
/// wide one exactly); within [`SQUARE_TRANSPOSE_ULPS_PER_N`] for square `X`. Also: the planned
/// and composed forms run the same number of iterations, which is the coefficients' count.
pub fn transpose_symmetry(case: &MatCase) -> Result<(), String> {
    transpose_symmetry_with(case, &Planned)
}

/// [`transpose_symmetry`] on `subject` (run with the reference's diagonal block,
/// [`newton_schulz::SYM_BLOCK`]; the composed form it is counted against is the reference's).
pub fn transpose_symmetry_with<S: PlannedNs>(case: &MatCase, subject: &S) -> Result<(), String> {
    by_dtype!(real case.dtype, transpose_e[S](case, subject), else unsupported_dtype(case.dtype))
}

fn transpose_e<A: Real, S: PlannedNs>(case: &MatCase, subject: &S) -> Result<(), String> {
    let (spec, steps) = case.coeffs.spec();
    let c = PerUse.convert::<A>(&coeffs::build(&spec, steps).map_err(err)?);
    let (r, cl) = (case.rows, case.cols);
    let x: Vec<A> = gaussian(case.seed, r * cl)
        .into_iter()
        .map(A::of_f64)
        .collect();
    let xt = newton_schulz::transpose(&x, r, cl);
    let eps = A::of_f64(1e-8);
    let run = |data: &[A], rr: usize, cc: usize| {
        let mut out = vec![A::default(); data.len()];
        let problem = NsProblem {
            rows: rr,
            cols: cc,
            sym_block: newton_schulz::SYM_BLOCK,
            x: data,
            coeffs: &c,
            steps,
            eps,
        };
        let k = subject.run(&problem, &mut out);
        (out, k)
    };
    let (o, k1) = run(&x, r, cl);
    let (ot, k2) = run(&xt, cl, r);
    let (_, k3) = orthogonalize_composed(
        &Array::new(vec![r, cl], x.clone()).expect("sized"),
        &c,
        steps,
        eps,
    );
    let want = case.coeffs.expected_iterations();
    if [k1, k2, k3] != [want; 3] {
        return Err(format!(
            "iterations {k1}, {k2} (planned), {k3} (composed); want {want}"
        ));
    }
    let o_t = newton_schulz::transpose(&o, r, cl);
    let bound = if r == cl {
        SQUARE_TRANSPOSE_ULPS_PER_N * r as f64 * A::epsilon().as_f64()
    } else {
        0.0
    };
    for (i, (p, q)) in ot.iter().zip(&o_t).enumerate() {
        let d = (p.as_f64() - q.as_f64()).abs();
        if (bound == 0.0 && p.bits() != q.bits()) || d > bound || d.is_nan() {
            return Err(format!(
                "{r}x{cl}: orth(X^T)[{i}] = {p:?}, orth(X)^T[{i}] = {q:?} (bound {bound:e})"
            ));
        }
    }
    Ok(())
}

pub use crate::tolerance::PLANNED_ULPS_PER_M;

/// The planned form (symmetric products, workspace) agrees with the composed dfdx form within
/// `PLANNED_ULPS_PER_M * m * eps` per entry (they round `A` and `B` differently: upper triangle +
/// mirror vs full products, `(cA)A` with a mirrored `A`).
pub fn planned_matches_composed(case: &MatCase) -> Result<(), String> {
    planned_matches_composed_with(case, &Planned)
}

/// One orthogonalisation a [`PlannedNs`] subject is asked for: the row-major `rows x cols`
/// matrix `x`, `steps` iterations of `coeffs` (already rounded to `A`'s precision), the
/// normaliser `eps` (`X_0 = x / (||x||_F + eps)`), and diagonal blocks of `sym_block` for the
/// symmetric products (a subject without blocks ignores it).
#[derive(Debug, Clone, Copy)]
pub struct NsProblem<'a, A> {
    /// Rows of `x`.
    pub rows: usize,
    /// Columns of `x`.
    pub cols: usize,
    /// Diagonal block size of the symmetric products.
    pub sym_block: usize,
    /// The input, `rows * cols` values, row-major.
    pub x: &'a [A],
    /// `[a, b, c]` per iteration (a `3` or `steps x 3` array).
    pub coeffs: &'a Array<f64>,
    /// Iterations.
    pub steps: usize,
    /// The normaliser's guard.
    pub eps: A,
}

/// A planned Newton–Schulz under test: the laws `*_with(case, subject)` of this module build an
/// [`NsProblem`] per case and judge what the subject writes.
///
/// # Example
/// A subject that runs the reference's plan one iteration short (the laws catch it; see
/// `harness::mutants::muon_ns::OneIterationShort`):
/// ```
/// use harness::laws::muon::{NsProblem, Planned, PlannedNs};
/// use harness::reference::backend::Real;
/// struct Short;
/// impl PlannedNs for Short {
///     fn run<A: Real>(&self, p: &NsProblem<'_, A>, out: &mut [A]) -> usize {
///         Planned.run(&NsProblem { steps: p.steps.saturating_sub(1), ..*p }, out)
///     }
/// }
/// ```
pub trait PlannedNs {
    /// Orthogonalise `problem.x` into `out` (`rows * cols` values); returns the iterations run.
    fn run<A: Real>(&self, problem: &NsProblem<'_, A>, out: &mut [A]) -> usize;
}

/// The reference's planned form ([`NsPlan`]).
pub struct Planned;

impl PlannedNs for Planned {
    fn run<A: Real>(&self, p: &NsProblem<'_, A>, out: &mut [A]) -> usize {
        NsPlan::new(p.rows, p.cols)
            .with_sym_block(p.sym_block)
            .run(p.x, p.coeffs, p.steps, p.eps, out)
    }
}

/// [`planned_matches_composed`] on `subject`.
pub fn planned_matches_composed_with<S: PlannedNs>(
    case: &MatCase,
    subject: &S,
) -> Result<(), String> {
    by_dtype!(real case.dtype, planned_e[S](case, subject), else unsupported_dtype(case.dtype))
}

fn planned_e<A: Real, S: PlannedNs>(case: &MatCase, subject: &S) -> Result<(), String> {
    let (spec, steps) = case.coeffs.spec();
    let c = PerUse.convert::<A>(&coeffs::build(&spec, steps).map_err(err)?);
    let (r, cl) = (case.rows, case.cols);
    let x: Vec<A> = gaussian(case.seed, r * cl)
        .into_iter()
        .map(A::of_f64)
        .collect();
    let eps = A::of_f64(1e-8);
    let mut out = vec![A::default(); x.len()];
    // small diagonal blocks, so that the recursive symmetric product is exercised at these sizes
    let problem = NsProblem {
        rows: r,
        cols: cl,
        sym_block: 1 + case.seed as usize % 8,
        x: &x,
        coeffs: &c,
        steps,
        eps,
    };
    subject.run(&problem, &mut out);
    let (want, _) =
        orthogonalize_composed(&Array::new(vec![r, cl], x).expect("sized"), &c, steps, eps);
    let bound = PLANNED_ULPS_PER_M * r.min(cl) as f64 * A::epsilon().as_f64();
    for (i, (p, q)) in out.iter().zip(want.data()).enumerate() {
        if (p.as_f64() - q.as_f64()).abs() > bound {
            return Err(format!(
                "{r}x{cl}: planned[{i}] = {p:?}, composed = {q:?} (bound {bound:e})"
            ));
        }
    }
    Ok(())
}

/// Eigenvalues of a symmetric `n x n` matrix (row-major) by cyclic Jacobi rotations, ascending.
pub fn jacobi_eigenvalues(a: &[f64], n: usize) -> Vec<f64> {
    let mut a = a.to_vec();
    for _sweep in 0..100 {
        let off: f64 = (0..n)
            .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| a[i * n + j] * a[i * n + j])
            .sum();
        let diag: f64 = (0..n).map(|i| a[i * n + i] * a[i * n + i]).sum();
        if off <= 1e-30 * diag.max(1e-300) {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                let apq = a[p * n + q];
                if apq == 0.0 {
                    continue;
                }
                let theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..n {
                    let (akp, akq) = (a[k * n + p], a[k * n + q]);
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for k in 0..n {
                    let (apk, aqk) = (a[p * n + k], a[q * n + k]);
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
            }
        }
    }
    let mut ev: Vec<f64> = (0..n).map(|i| a[i * n + i]).collect();
    ev.sort_by(|x, y| x.total_cmp(y));
    ev
}

/// Singular values of a row-major `r x c` matrix: square roots of the eigenvalues of `X X^T`
/// (on the smaller side), ascending.
pub fn singular_values(x: &[f64], r: usize, c: usize) -> Vec<f64> {
    let (m, n, t) = newton_schulz::sides(r, c);
    let x = if t {
        newton_schulz::transpose(x, r, c)
    } else {
        x.to_vec()
    };
    let mut g = vec![0.0; m * m];
    for i in 0..m {
        for j in 0..m {
            g[i * m + j] = (0..n).map(|k| x[i * n + k] * x[j * n + k]).sum();
        }
    }
    jacobi_eigenvalues(&g, m)
        .into_iter()
        .map(|l| l.max(0.0).sqrt())
        .collect()
}

/// The composed iteration polynomial `P = p_k o ... o p_1`, `p(s) = a s + b s^3 + c s^5`: in
/// exact arithmetic Newton–Schulz maps every normalised singular value `s` to `P(s)`.
pub fn ns_polynomial(coeffs: &Array<f64>, ns_steps: usize, mut s: f64) -> f64 {
    for i in 0..coeffs::iterations(coeffs, ns_steps) {
        let [a, b, c] = coeffs::row(coeffs, i);
        s = a * s + b * s.powi(3) + c * s.powi(5);
    }
    s
}

/// Lower end of the normalised input singular values the bands assume: `sigma_min / ||X||_F >=
/// 0.01`. Gaussian `m x n` inputs with `n >= 2m` satisfy it (observed minimum over 300 draws per
/// shape: 0.04 at 24x48, 0.05 at 4x8 and 16x32; numpy SVD); square Gaussians do not (`sigma_min`
/// is of order `1/n` of the others, 1e-5 at 48x48), which is why the band law draws `n >= 2m`.
pub const BAND_INPUT_FLOOR: f64 = 0.01;

/// Output singular-value bands: the range of `P` over `[BAND_INPUT_FLOOR, 1]` (dense grid of
/// 2e5 points, numpy), rounded outwards at the third decimal. "standard": P ranges over
/// [0.68183, 1.13436] -> [0.681, 1.135]; "dion": [0.97775, 1.03178] -> [0.977, 1.032].
pub const STANDARD_BAND: (f64, f64) = (0.681, 1.135);
/// The "dion" preset's band (see [`STANDARD_BAND`]).
pub const DION_BAND: (f64, f64) = (0.977, 1.032);

/// A Gaussian band input: the preset, the small and large side, orientation, seed.
#[derive(Clone, Debug)]
pub struct BandCase {
    /// Use the "dion" preset (else "standard").
    pub dion: bool,
    /// The small side, `1..=16`.
    pub m: usize,
    /// The large side, `max(2m, 2)..=48`.
    pub n: usize,
    /// `n x m` (tall) rather than `m x n`.
    pub tall: bool,
    /// Seed of the Gaussian input.
    pub seed: u64,
}

/// Random [`BandCase`]s with `n >= 2m`.
pub fn band_case() -> impl Strategy<Value = BandCase> {
    (any::<bool>(), 1usize..=16, any::<bool>(), any::<u64>())
        .prop_flat_map(|(dion, m, tall, seed)| {
            (
                Just(dion),
                Just(m),
                (2 * m).max(2)..=48,
                Just(tall),
                Just(seed),
            )
        })
        .prop_map(|(dion, m, n, tall, seed)| BandCase {
            dion,
            m,
            n,
            tall,
            seed,
        })
}

/// For Gaussian inputs with `n >= 2m` (f64): every singular value of the orthogonalised output
/// lies in the preset's band, and the sorted output singular values equal the sorted `P(s_i)` of
/// the normalised input singular values within [`tolerance::NS_SINGULAR_VALUES`] (the iteration
/// acts on each singular value independently).
pub fn singular_value_band(case: &BandCase) -> Result<(), String> {
    singular_value_band_with(case, &Planned)
}

/// [`singular_value_band`] on `subject` (f64, the reference's diagonal block).
pub fn singular_value_band_with<S: PlannedNs>(case: &BandCase, subject: &S) -> Result<(), String> {
    let (r, c) = if case.tall {
        (case.n, case.m)
    } else {
        (case.m, case.n)
    };
    let (spec, steps, band) = if case.dion {
        (CoeffSpec::Preset("dion".into()), 5, DION_BAND)
    } else {
        (CoeffSpec::Preset("standard".into()), 5, STANDARD_BAND)
    };
    let coeffs = coeffs::build(&spec, steps).map_err(err)?;
    let x = gaussian(case.seed, r * c);
    let mut out = vec![0.0; x.len()];
    let problem = NsProblem {
        rows: r,
        cols: c,
        sym_block: newton_schulz::SYM_BLOCK,
        x: &x,
        coeffs: &coeffs,
        steps,
        eps: 1e-8,
    };
    subject.run(&problem, &mut out);
    let norm = x.iter().map(|v| v * v).sum::<f64>().sqrt() + 1e-8;
    let s_in = singular_values(&x, r, c);
    if s_in[0] / norm < BAND_INPUT_FLOOR {
        return Ok(()); // outside the band's input domain (does not happen for n >= 2m in practice)
    }
    let s_out = singular_values(&out, r, c);
    let mut want: Vec<f64> = s_in
        .iter()
        .map(|s| ns_polynomial(&coeffs, steps, s / norm))
        .collect();
    want.sort_by(|a, b| a.total_cmp(b));
    for (i, (&got, &w)) in s_out.iter().zip(&want).enumerate() {
        if !(band.0..=band.1).contains(&got) {
            return Err(format!(
                "{r}x{c}: singular value {i} = {got} outside {band:?}"
            ));
        }
        if (got - w).abs() > tolerance::NS_SINGULAR_VALUES {
            return Err(format!("{r}x{c}: singular value {i} = {got}, P(s) = {w}"));
        }
    }
    Ok(())
}

/// A zero gradient gives a zero update (every leaf, every dtype, zero-size included) and no NaN,
/// at every step, when `weight_decay = adam_weight_decay = 0`.
pub fn zero_gradient_zero_update(case: &MuonCase) -> Result<(), String> {
    zero_gradient_zero_update_with(case, &Muon::new)
}

/// A Muon built from its hyperparameters, as every float dtype's [`Transform`] (the reference,
/// or a planted one).
pub trait AnyFloatTransform: Transform<half::f16> + Transform<f32> + Transform<f64> {}
impl<T: Transform<half::f16> + Transform<f32> + Transform<f64>> AnyFloatTransform for T {}

/// [`zero_gradient_zero_update`] on the Muon `make` builds.
pub fn zero_gradient_zero_update_with<T: AnyFloatTransform>(
    case: &MuonCase,
    make: &dyn Fn(MuonHyper) -> crate::reference::Result<T>,
) -> Result<(), String> {
    by_dtype!(float case.dtype, zero_e[T](case, make), else unsupported_dtype(case.dtype))
}

fn zero_e<E: Float, T: Transform<E>>(
    case: &MuonCase,
    make: &dyn Fn(MuonHyper) -> crate::reference::Result<T>,
) -> Result<(), String> {
    let hyper = MuonHyper {
        weight_decay: 0.0,
        ..case.hyper()
    };
    let muon = make(hyper).map_err(err)?;
    let params = tree::<E>(&case.shapes, case.seed, 1.0);
    let zeros = tree::<E>(&case.shapes, case.seed, 0.0);
    let mut state = muon.init(&params).map_err(err)?;
    for t in 1..=case.steps {
        let (u, next) = muon.update(&zeros, &state, &params).map_err(err)?;
        for (k, a) in u.iter() {
            if let Some(x) = a.data().iter().find(|x| x.as_f64() != 0.0 || x.is_nan()) {
                return Err(format!("step {t}: leaf {k} {:?}: update {x:?}", a.shape()));
            }
        }
        state = next;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// sharding and order

/// One group of parameters of a single dtype.
#[derive(Clone, Debug)]
pub struct Group {
    /// Dtype of every leaf of the group.
    pub dtype: DType,
    /// Shapes of the group's leaves.
    pub shapes: Vec<Vec<usize>>,
}

/// Groups updated by one shared optimizer, in `order`, each sharded over `shards` threads with
/// `assign`.
#[derive(Clone, Debug)]
pub struct ShardCase {
    /// The groups, 1-3 of them.
    pub groups: Vec<Group>,
    /// The order in which the groups are updated (a permutation of their indices).
    pub order: Vec<usize>,
    /// Shards, `1..=4`.
    pub shards: usize,
    /// Shard of each leaf (see [`Sharding`]).
    pub assign: Vec<usize>,
    /// The Newton–Schulz coefficients.
    pub coeffs: Coeffs,
    /// Updates per group (1 or 2).
    pub steps: usize,
    /// Seed of the parameter and gradient draws.
    pub seed: u64,
}

/// Random [`ShardCase`]s: 1-3 groups of mixed dtypes, a shuffled order, 1-4 shards.
pub fn shard_case() -> impl Strategy<Value = ShardCase> {
    let group = (
        dtype_strategy(),
        prop::collection::vec(shape_strategy(), 1..4),
    )
        .prop_map(|(dtype, shapes)| Group { dtype, shapes });
    (
        prop::collection::vec(group, 1..4),
        1usize..5,
        prop::collection::vec(0usize..4, 0..4),
        coeffs_strategy(),
        1usize..3,
        any::<u64>(),
    )
        .prop_flat_map(|(groups, shards, assign, coeffs, steps, seed)| {
            let order: Vec<usize> = (0..groups.len()).collect();
            (
                Just(groups),
                Just(order).prop_shuffle(),
                Just(shards),
                Just(assign),
                Just(coeffs),
                Just(steps),
                Just(seed),
            )
        })
        .prop_map(
            |(groups, order, shards, assign, coeffs, steps, seed)| ShardCase {
                groups,
                order,
                shards,
                assign,
                coeffs,
                steps,
                seed,
            },
        )
}

/// The bits of every update and of the final parameters of a group run.
fn run_group<E: Float, P: CoeffPolicy>(
    muon: &Muon<P>,
    shapes: &[Vec<usize>],
    seed: u64,
    steps: usize,
    sharding: Sharding,
) -> Result<Vec<u64>, String> {
    let mut params = tree::<E>(shapes, seed, 1.0);
    let mut stepper = MuonStepper::new(muon, &params, sharding).map_err(err)?;
    let mut bits = Vec::new();
    for t in 1..=steps {
        let g = tree::<E>(shapes, seed ^ (t as u64 * 131), 1.0);
        let u = stepper.step(&mut params, &g).map_err(err)?;
        bits.extend(
            u.iter()
                .flat_map(|(_, a)| a.data().iter().map(|x| x.bits())),
        );
    }
    bits.extend(
        params
            .iter()
            .flat_map(|(_, a)| a.data().iter().map(|x| x.bits())),
    );
    Ok(bits)
}

fn run_group_dyn<P: CoeffPolicy>(
    muon: &Muon<P>,
    g: &Group,
    seed: u64,
    steps: usize,
    sharding: Sharding,
) -> Result<Vec<u64>, String> {
    by_dtype!(
        float g.dtype,
        run_group[P](muon, &g.shapes, seed, steps, sharding),
        else unsupported_dtype(g.dtype).map(|()| Vec::new())
    )
}

/// Every group, updated by one shared `subject` in `order` and sharded as the case says, gives
/// bit-identical updates and parameters to a fresh reference optimizer per group, unsharded.
pub fn sharding_and_order_invariant<P: CoeffPolicy>(
    case: &ShardCase,
    subject: &Muon<P>,
) -> Result<(), String> {
    let hyper = subject.hyper().clone();
    for &gi in &case.order {
        let g = &case.groups[gi];
        let seed = case.seed.wrapping_add(gi as u64 * 1_000_003);
        let reference = Muon::new(hyper.clone()).map_err(err)?;
        let want = run_group_dyn(&reference, g, seed, case.steps, Sharding::single())?;
        let sharding = Sharding {
            shards: case.shards,
            assign: case.assign.clone(),
        };
        let got = run_group_dyn(subject, g, seed, case.steps, sharding)?;
        if let Some(i) = (0..want.len()).find(|&i| want[i] != got[i]) {
            return Err(format!(
                "group {gi} ({} {:?}), updated in order {:?} on {} shards: value {i} has bits {:#x}, the fresh unsharded reference {:#x}",
                g.dtype, g.shapes, case.order, case.shards, got[i], want[i]
            ));
        }
    }
    Ok(())
}

fn shard_hyper(case: &ShardCase) -> MuonHyper {
    let (ns_coeffs, ns_steps) = case.coeffs.spec();
    MuonHyper {
        ns_coeffs,
        ns_steps,
        ..MuonHyper::new(0.02)
    }
}

/// The reference subject for [`sharding_and_order_invariant`].
pub fn reference_subject(case: &ShardCase) -> Result<Muon<PerUse>, String> {
    Muon::new(shard_hyper(case)).map_err(err)
}

/// Build any subject with the case's hyperparameters.
pub fn subject_with<P: CoeffPolicy>(case: &ShardCase, policy: P) -> Result<Muon<P>, String> {
    Muon::with_policy(shard_hyper(case), policy).map_err(err)
}

/// Warm-up calls before [`planned_ns_allocates_only_gemm_scratch`] measures (the first call of a plan
/// starts its pool's threads' lazily allocated gemm scratch; the second proves it is reused).
pub const NS_WARMUP_CALLS: usize = 2;

/// A planned Newton–Schulz iteration under test: the reference [`NsPlan`], or another way of
/// running the same iteration for `rows x cols` matrices.
pub trait NsRunner {
    /// `(rows, cols)`.
    fn shape(&self) -> (usize, usize);
    /// Threads the products are split across.
    fn threads(&self) -> usize;
    /// Orthogonalise `input` into `out`; returns the iterations run.
    fn run(
        &mut self,
        input: &[f32],
        coeffs: &Array<f64>,
        ns_steps: usize,
        eps: f32,
        out: &mut [f32],
    ) -> usize;
}

impl NsRunner for NsPlan<f32> {
    fn shape(&self) -> (usize, usize) {
        NsPlan::shape(self)
    }
    fn threads(&self) -> usize {
        NsPlan::threads(self)
    }
    fn run(
        &mut self,
        input: &[f32],
        coeffs: &Array<f64>,
        ns_steps: usize,
        eps: f32,
        out: &mut [f32],
    ) -> usize {
        NsPlan::run(self, input, coeffs, ns_steps, eps, out)
    }
}

/// What one gemm call of the registry `gemm` 0.15 crate may allocate for its own per-call
/// scratch: its `did_pack_lhs` flags (one byte per `MR`-row block of an `MC`-row panel) and, for
/// operands it packs, a packed panel; the planned products pass contiguous row-major operands,
/// which it does not pack. Measured on this crate's shapes: 6 to 188 bytes a call (8 bytes for
/// 1024 x 1024). 1 KiB a concurrent call bounds it with room; a workspace of the iteration's own
/// (six `m x n` or `m x m` f32 matrices) is thousands of times larger. `gemm` 0.19 allocates its
/// packed operand panels at every call (tens to hundreds of KiB), so a plan issuing its products
/// there ([`crate::backend::GemmKernel::Widest`]) is judged on the same buffers through
/// `NsPlan::with_kernel(GemmKernel::Dfdx)`.
pub const GEMM_CALL_SCRATCH_BYTES: usize = 1024;

/// After [`NS_WARMUP_CALLS`] runs, each of `calls` further runs of `plan` on `x` allocates only
/// gemm's per-call scratch: live bytes return to where they were, every run makes the same
/// number of allocations (nothing grows with the number of runs), and the peak above the live
/// bytes before the run is at most [`GEMM_CALL_SCRATCH_BYTES`] per thread (no buffer that scales
/// with the matrix). Counts every thread (the counting allocator is process-wide). Returns the
/// measurement of the last run. Hold [`crate::probe::exclusive`].
pub fn planned_ns_allocates_only_gemm_scratch(
    plan: &mut dyn NsRunner,
    x: &[f32],
    calls: usize,
) -> Result<crate::probe::Measurement, String> {
    planned_ns_allocations(plan, x, calls, Some(GEMM_CALL_SCRATCH_BYTES))
}

/// The first two checks of [`planned_ns_allocates_only_gemm_scratch`] without its peak bound,
/// for a plan whose gemm allocates buffers that scale with the matrix at every call (`gemm`
/// 0.19's packed panels): live bytes return to where they were after each run and every run
/// makes the same number of allocations. Weaker: a plan that allocated and freed its whole
/// workspace at every call would pass. Hold [`crate::probe::exclusive`].
pub fn planned_ns_allocations_are_steady(
    plan: &mut dyn NsRunner,
    x: &[f32],
    calls: usize,
) -> Result<crate::probe::Measurement, String> {
    planned_ns_allocations(plan, x, calls, None)
}

/// Both laws above: `scratch`, when given, bounds the peak per thread.
fn planned_ns_allocations(
    plan: &mut dyn NsRunner,
    x: &[f32],
    calls: usize,
    scratch: Option<usize>,
) -> Result<crate::probe::Measurement, String> {
    let c = coeffs::build(&CoeffSpec::default(), 5).map_err(err)?;
    let (rows, cols) = plan.shape();
    let threads = plan.threads();
    let mut out = vec![0.0f32; x.len()];
    for _ in 0..NS_WARMUP_CALLS {
        plan.run(x, &c, 5, 1e-8, &mut out);
    }
    let bound = scratch.map(|b| b * threads);
    let mut first: Option<crate::probe::Measurement> = None;
    let mut last = None;
    for call in 0..calls.max(1) {
        let (_, m) = crate::probe::measure(|| plan.run(x, &c, 5, 1e-8, &mut out));
        let at = format!(
            "{rows}x{cols} on {threads} threads, planned run {} after warm-up",
            call + 1
        );
        if m.live_delta != 0 {
            return Err(format!("{at}: live bytes {:+}", m.live_delta));
        }
        if let Some(bound) = bound.filter(|&b| m.peak_above_baseline > b) {
            return Err(format!(
                "{at}: peak {} B above the live bytes before it, more than gemm's scratch bound {bound} B \
                 ({} allocations)",
                m.peak_above_baseline, m.allocations
            ));
        }
        let f = *first.get_or_insert(m);
        if m.allocations != f.allocations {
            return Err(format!(
                "{at}: {} allocations, the first run after warm-up made {}",
                m.allocations, f.allocations
            ));
        }
        last = Some(m);
    }
    Ok(last.expect("at least one run"))
}

/// The law on the reference.
pub fn sharding_and_order_reference(case: &ShardCase) -> Result<(), String> {
    sharding_and_order_invariant(case, &reference_subject(case)?)
}

// ---------------------------------------------------------------------------------------------
// registry

pub(crate) fn laws() -> Vec<Law> {
    vec![
        Law {
            name: "muon_state_fixed_traces_iterations",
            family: Family::FixedStateShape,
            summary: "one state signature, ns_coeffs bit-identical after every update, one trace per leaf signature, (k,3) runs k iterations and (3,) ns_steps",
            default_cases: 96,
            measures_memory: false,
            run: |c, s| {
                check_property("muon_state_fixed_traces_iterations", c, s, muon_case(), state_fixed_traces_iterations)
            },
        },
        Law {
            name: "muon_transpose_symmetry",
            family: Family::Numerics,
            summary: "orth(X^T) == orth(X)^T bitwise for non-square X, within 64 n eps for square",
            default_cases: 128,
            measures_memory: false,
            run: |c, s| check_property("muon_transpose_symmetry", c, s, mat_case(24), transpose_symmetry),
        },
        Law {
            name: "muon_planned_matches_composed",
            family: Family::Numerics,
            summary: "the planned symmetric Newton-Schulz agrees with the composed dfdx form within 64 m eps",
            default_cases: 128,
            measures_memory: false,
            run: |c, s| check_property("muon_planned_matches_composed", c, s, mat_case(40), planned_matches_composed),
        },
        Law {
            name: "muon_singular_value_band",
            family: Family::Numerics,
            summary: "Gaussian inputs (n >= 2m): output singular values = P(normalised input ones), in [0.681,1.135] (standard) / [0.977,1.032] (dion)",
            default_cases: 128,
            measures_memory: false,
            run: |c, s| check_property("muon_singular_value_band", c, s, band_case(), singular_value_band),
        },
        Law {
            name: "muon_zero_gradient_zero_update",
            family: Family::Numerics,
            summary: "a zero gradient gives a zero update with no NaN, every dtype and shape",
            default_cases: 96,
            measures_memory: false,
            run: |c, s| check_property("muon_zero_gradient_zero_update", c, s, muon_case(), zero_gradient_zero_update),
        },
        Law {
            name: "muon_sharding_and_order_invariant",
            family: Family::FixedStateShape,
            summary: "sharded == unsharded bitwise for every K and assignment; results independent of the order dtypes/shapes are first updated",
            default_cases: 64,
            measures_memory: false,
            run: |c, s| check_property("muon_sharding_and_order_invariant", c, s, shard_case(), sharding_and_order_reference),
        },
    ]
}
