//! Stacked-layer init laws (equinox #673): measured peaks within their analytic bounds,
//! `chunked-direct` within 1% of the final bytes, every strategy bit-identical, f16 init equal to
//! the cast of f32 init, scan equal to the unrolled loop, scan memory flat in `N`.
//!
//! The peak laws measure with the counting allocator, above the live bytes before each build;
//! the builds are single-threaded, so the measured peaks are exact and deterministic. A
//! [`InitSubject`] stands for the implementation under test, so the `stack-vmap-fp32` mutant
//! can stand in for the reference.

use super::{check_property, unsupported_dtype, Family, Law};
use crate::backend::{Array, DType, DfdxFromF32, Float};
use crate::probe::{self, Measurement, Scope, Timeline};
use crate::stack::bounds::{self, peak_bound};
use crate::stack::forward::{forward_scan, forward_unrolled};
use crate::stack::rng::uniform;
use crate::stack::{build, build_any, dfdx_face, AnyBuilt, Built, Observer, StackConfig, Strategy};
use proptest::prelude::{any, prop_oneof, Just};
use proptest::strategy::Strategy as Gen;

/// Sizes, dtype and seed of one stack (unvalidated: the laws validate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackCase {
    /// Layer count `N`.
    pub layers: usize,
    /// Width `D` (input and output of each block).
    pub width: usize,
    /// Hidden size `H`.
    pub hidden: usize,
    /// Element dtype (must be a float for a valid case).
    pub dtype: DType,
    /// Initialisation seed.
    pub seed: u64,
}

impl StackCase {
    /// The validated configuration, or the error (naming the field) as a string.
    ///
    /// ```
    /// use harness::backend::DType;
    /// use harness::laws::stack::StackCase;
    /// let case = StackCase { layers: 2, width: 3, hidden: 4, dtype: DType::F16, seed: 1 };
    /// assert_eq!(case.config()?.params_per_layer(), 2 * 3 * 4 + 4 + 3);
    /// let zero = StackCase { layers: 0, ..case };
    /// assert!(zero.config().unwrap_err().contains("layers"));
    /// # Ok::<(), String>(())
    /// ```
    pub fn config(&self) -> Result<StackConfig, String> {
        StackConfig::new(self.layers, self.width, self.hidden, self.dtype).map_err(err)
    }
}

fn err(e: crate::reference::Error) -> String {
    e.to_string()
}

/// A float dtype.
pub fn float_dtype() -> impl Gen<Value = DType> {
    prop_oneof![Just(DType::F16), Just(DType::F32), Just(DType::F64)]
}

/// Cases with `1..=n` layers, `1..=d` width, `1..=h` hidden, any float dtype and seed.
pub fn stack_case(n: usize, d: usize, h: usize) -> impl Gen<Value = StackCase> {
    (1..=n, 1..=d, 1..=h, float_dtype(), any::<u64>()).prop_map(
        |(layers, width, hidden, dtype, seed)| StackCase {
            layers,
            width,
            hidden,
            dtype,
            seed,
        },
    )
}

/// Cases large enough for `chunked-direct`'s 1% bound (see
/// [`bounds::chunked_within_one_percent`]): 8-16 layers of 256..512 - 1024..2048.
pub fn large_stack_case() -> impl Gen<Value = StackCase> {
    (
        8..=16usize,
        256..=512usize,
        1024..=2048usize,
        float_dtype(),
        any::<u64>(),
    )
        .prop_map(|(layers, width, hidden, dtype, seed)| StackCase {
            layers,
            width,
            hidden,
            dtype,
            seed,
        })
}

/// The implementation under test: builds the model of `cfg` with `strategy`.
pub trait InitSubject {
    /// Build the model of `cfg` from `seed` with `strategy`, calling `obs` at its allocation and
    /// release points.
    fn build(
        &self,
        cfg: &StackConfig,
        seed: u64,
        strategy: Strategy,
        obs: &mut dyn Observer,
    ) -> crate::reference::Result<AnyBuilt>;
}

/// The reference strategies of [`crate::stack::init`].
pub struct Reference;

impl InitSubject for Reference {
    fn build(
        &self,
        cfg: &StackConfig,
        seed: u64,
        strategy: Strategy,
        obs: &mut dyn Observer,
    ) -> crate::reference::Result<AnyBuilt> {
        build_any(cfg, seed, strategy, obs)
    }
}

impl Observer for Timeline {
    fn sample(&mut self, _at: &'static str) {
        self.record();
    }
}

/// One strategy's measured peak against its bound.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PeakRow {
    /// The strategy's CLI name.
    pub name: String,
    /// Measured peak of live bytes above the baseline, on the building thread.
    pub peak_bytes: usize,
    /// `peak_bytes / final_bytes`.
    pub ratio: f64,
    /// The strategy's analytic bound, in bytes.
    pub bound_bytes: usize,
    /// `bound_bytes / final_bytes`.
    pub bound_ratio: f64,
    /// The bound's formula, e.g. `N*P*(4+s)`.
    pub formula: String,
    /// `peak_bytes <= bound_bytes`.
    pub within_bound: bool,
    /// The build's checksum, 16 hex digits (equal across strategies).
    pub checksum: String,
}

/// Build once under [`probe::measure`] (the caller holds [`probe::exclusive`]).
pub fn measure_build(
    subject: &dyn InitSubject,
    cfg: &StackConfig,
    seed: u64,
    strategy: Strategy,
    obs: &mut dyn Observer,
) -> Result<(AnyBuilt, Measurement), String> {
    // Builds run on the calling thread: its own counters give the same figure on every run.
    let (r, m) = probe::measure_in(Scope::ThisThread, || {
        subject.build(cfg, seed, strategy, obs)
    });
    Ok((r.map_err(err)?, m))
}

/// Measure every strategy in turn (each model dropped before the next build), optionally
/// recording a timeline per strategy. The caller holds [`probe::exclusive`].
pub fn measure_peaks(
    subject: &dyn InitSubject,
    cfg: &StackConfig,
    seed: u64,
    mut timelines: Option<&mut Vec<(Strategy, Timeline)>>,
) -> Result<Vec<PeakRow>, String> {
    let fin = cfg.final_bytes();
    let mut rows = Vec::new();
    for s in Strategy::ALL {
        let mut tl = Timeline::in_scope(
            Scope::ThisThread,
            if timelines.is_some() { 1 << 16 } else { 1 },
        );
        tl.start();
        let (built, m) = if timelines.is_some() {
            measure_build(subject, cfg, seed, s, &mut tl)?
        } else {
            measure_build(subject, cfg, seed, s, &mut ())?
        };
        if built.data_bytes() != fin {
            return Err(format!(
                "{s}: built {} bytes of parameters, want N*P*s = {fin}",
                built.data_bytes()
            ));
        }
        let checksum = format!("{:016x}", built.checksum());
        drop(built);
        let bound = peak_bound(cfg, s);
        rows.push(PeakRow {
            name: s.name().into(),
            peak_bytes: m.peak_above_baseline,
            ratio: m.peak_above_baseline as f64 / fin as f64,
            bound_bytes: bound,
            bound_ratio: bound as f64 / fin as f64,
            formula: bounds::formula(s).into(),
            within_bound: m.peak_above_baseline <= bound,
            checksum,
        });
        if let Some(t) = timelines.as_deref_mut() {
            t.push((s, tl));
        }
    }
    Ok(rows)
}

fn describe(cfg: &StackConfig, r: &PeakRow) -> String {
    format!(
        "{}: measured peak {} bytes = {:.4}x final ({} bytes), bound {} = {} bytes = {:.4}x \
         ({} layers of {}-{}-{} {})",
        r.name,
        r.peak_bytes,
        r.ratio,
        cfg.final_bytes(),
        r.formula,
        r.bound_bytes,
        r.bound_ratio,
        cfg.layers(),
        cfg.width(),
        cfg.hidden(),
        cfg.width(),
        cfg.dtype()
    )
}

/// Law: every strategy's measured peak is within its bound, and all builds agree bit for bit.
pub fn peaks_within_bounds(case: &StackCase, subject: &dyn InitSubject) -> Result<(), String> {
    let cfg = case.config()?;
    let rows = measure_peaks(subject, &cfg, case.seed, None)?;
    if let Some(r) = rows.iter().find(|r| !r.within_bound) {
        return Err(format!("peak above bound: {}", describe(&cfg, r)));
    }
    if let Some(r) = rows.iter().find(|r| r.checksum != rows[0].checksum) {
        return Err(format!(
            "{}: checksum {} != {}",
            r.name, r.checksum, rows[0].checksum
        ));
    }
    Ok(())
}

/// Law: `chunked-direct`'s measured peak is at most 1.01x the final bytes, for every size where
/// its bound says so ([`bounds::chunked_within_one_percent`]: `N*P*s >= 100 * (4*min(16384,
/// D*H) + 1024 + 512*N)`); other sizes are outside the law's domain.
pub fn chunked_within_one_percent(
    case: &StackCase,
    subject: &dyn InitSubject,
) -> Result<(), String> {
    let cfg = case.config()?;
    if !bounds::chunked_within_one_percent(&cfg) {
        return Ok(());
    }
    let (built, m) = measure_build(subject, &cfg, case.seed, Strategy::ChunkedDirect, &mut ())?;
    drop(built);
    let ratio = m.peak_above_baseline as f64 / cfg.final_bytes() as f64;
    if ratio > 1.01 {
        return Err(format!(
            "chunked-direct: measured peak {} bytes = {ratio:.4}x final ({} bytes), want <= 1.01x \
             ({} layers of {}-{}-{} {})",
            m.peak_above_baseline,
            cfg.final_bytes(),
            cfg.layers(),
            cfg.width(),
            cfg.hidden(),
            cfg.width(),
            cfg.dtype()
        ));
    }
    Ok(())
}

fn stacked<E: Float>(b: Built<E>) -> Result<crate::stack::Stacked<E>, String> {
    b.into_stacked().map_err(err)
}

/// `subject`'s build of `cfg` with `strategy`, as the dtype `E` it must have.
fn built_as<E: Float, S: InitSubject>(
    subject: &S,
    cfg: &StackConfig,
    seed: u64,
    strategy: Strategy,
) -> Result<Built<E>, String> {
    let any: Box<dyn std::any::Any> =
        match subject.build(cfg, seed, strategy, &mut ()).map_err(err)? {
            AnyBuilt::F16(b) => Box::new(b),
            AnyBuilt::F32(b) => Box::new(b),
            AnyBuilt::F64(b) => Box::new(b),
        };
    any.downcast::<Built<E>>()
        .map(|b| *b)
        .map_err(|_| format!("{strategy}: built in another dtype than {:?}", E::DTYPE))
}

fn identical_e<E: Float, S: InitSubject>(
    cfg: &StackConfig,
    seed: u64,
    subject: &S,
) -> Result<(), String> {
    let reference = stacked(built_as::<E, S>(
        subject,
        cfg,
        seed,
        Strategy::ChunkedDirect,
    )?)?;
    for s in Strategy::ALL {
        let b = built_as::<E, S>(subject, cfg, seed, s)?;
        if s == Strategy::LayerwiseList {
            // the list must equal the reference's list form too (conversion both ways)
            let l = b.clone().into_list().map_err(err)?;
            if l != reference.to_list().map_err(err)? {
                return Err(format!(
                    "{s}: list differs from the stacked model's list form"
                ));
            }
        }
        let m = stacked(b)?;
        if let Some(d) = m.first_difference(&reference) {
            return Err(format!("{s} differs from chunked-direct: {d}"));
        }
    }
    Ok(())
}

/// Law: all five strategies produce the bit-identical stack (the list via either conversion).
pub fn strategies_bitwise_identical(case: &StackCase) -> Result<(), String> {
    strategies_bitwise_identical_with(case, &Reference)
}

/// [`strategies_bitwise_identical`] on `subject`: its five strategies against its own
/// `chunked-direct`.
pub fn strategies_bitwise_identical_with<S: InitSubject>(
    case: &StackCase,
    subject: &S,
) -> Result<(), String> {
    let cfg = case.config()?;
    by_dtype!(float cfg.dtype(), identical_e[S](&cfg, case.seed, subject), else unsupported_dtype(cfg.dtype()))
}

/// Law: f16 init equals `half::f16::from_f32` of f32 init element for element (and f64 init
/// equals the f32 init widened, exactly), whichever strategy builds each.
pub fn low_precision_is_cast_of_f32(case: &StackCase) -> Result<(), String> {
    low_precision_is_cast_of_f32_with(case, &Reference)
}

/// [`low_precision_is_cast_of_f32`] on `subject` (f32 by `layerwise-list`, f16 by
/// `chunked-direct`, f64 by `vmap-f32-then-cast`).
pub fn low_precision_is_cast_of_f32_with<S: InitSubject>(
    case: &StackCase,
    subject: &S,
) -> Result<(), String> {
    let c32 = case.config()?.with_dtype(DType::F32).map_err(err)?;
    let s32 = stacked(built_as::<f32, S>(
        subject,
        &c32,
        case.seed,
        Strategy::LayerwiseList,
    )?)?;
    let s16 = stacked(built_as::<half::f16, S>(
        subject,
        &c32.with_dtype(DType::F16).map_err(err)?,
        case.seed,
        Strategy::ChunkedDirect,
    )?)?;
    let s64 = stacked(built_as::<f64, S>(
        subject,
        &c32.with_dtype(DType::F64).map_err(err)?,
        case.seed,
        Strategy::VmapF32ThenCast,
    )?)?;
    for t in 0..4 {
        let (a, h, w) = (
            s32.tensors[t].data(),
            s16.tensors[t].data(),
            s64.tensors[t].data(),
        );
        for i in 0..a.len() {
            if h[i].to_bits() != half::f16::from_f32(a[i]).to_bits() {
                return Err(format!(
                    "tensor {t}[{i}]: f16 init {:?} != cast(f32 init {:?})",
                    h[i], a[i]
                ));
            }
            if w[i] != a[i] as f64 {
                return Err(format!(
                    "tensor {t}[{i}]: f64 init {:?} != f32 init {:?}",
                    w[i], a[i]
                ));
            }
        }
    }
    Ok(())
}

/// A `[batch, D]` input drawn from the counter-based generator (layer `u64::MAX` as stream).
pub fn input<E: Float>(cfg: &StackConfig, batch: usize, seed: u64) -> Array<E> {
    let v = (0..batch * cfg.width())
        .map(|i| E::of_f32(uniform(seed, u64::MAX, 0, i as u64)))
        .collect();
    Array::new(vec![batch, cfg.width()], v).expect("shape and data agree")
}

/// The forward pass under test: the scan over a stacked model (`[B, D]` in, `[B, D]` out).
pub trait ScanSubject {
    /// Run the stacked blocks over the batch `x` (`[B, D]`), returning `[B, D]`.
    fn scan<E: Float>(
        &self,
        stack: &crate::stack::Stacked<E>,
        x: &Array<E>,
    ) -> crate::reference::Result<Array<E>>;
}

/// The reference scan ([`forward_scan`]).
impl ScanSubject for Reference {
    fn scan<E: Float>(
        &self,
        stack: &crate::stack::Stacked<E>,
        x: &Array<E>,
    ) -> crate::reference::Result<Array<E>> {
        forward_scan(stack, x)
    }
}

fn scan_equals_e<E: Float, S: ScanSubject>(
    cfg: &StackConfig,
    seed: u64,
    batch: usize,
    subject: &S,
) -> Result<(), String> {
    let stack = stacked(build::<E>(cfg, seed, Strategy::ChunkedDirect, &mut ()).map_err(err)?)?;
    let list = build::<E>(cfg, seed, Strategy::LayerwiseList, &mut ())
        .and_then(|b| b.into_list())
        .map_err(err)?;
    let x = input::<E>(cfg, batch, seed);
    let a = subject.scan(&stack, &x).map_err(err)?;
    let b = forward_unrolled(&list, &x).map_err(err)?;
    if a.shape() != b.shape() {
        return Err(format!(
            "scan shape {:?}, unrolled {:?}",
            a.shape(),
            b.shape()
        ));
    }
    for (i, (p, q)) in super::paired("y", a.data(), b.data())?.enumerate() {
        if p.bits() != q.bits() {
            return Err(format!("y[{i}]: scan {p:?} != unrolled {q:?}"));
        }
    }
    Ok(())
}

/// Law: the scan over the stack equals the unrolled loop over the list, bit for bit.
pub fn scan_equals_unrolled(case: &StackCase, batch: usize) -> Result<(), String> {
    scan_equals_unrolled_with(case, batch, &Reference)
}

/// [`scan_equals_unrolled`] on `subject`'s scan (against the reference's unrolled loop).
pub fn scan_equals_unrolled_with<S: ScanSubject>(
    case: &StackCase,
    batch: usize,
    subject: &S,
) -> Result<(), String> {
    let cfg = case.config()?;
    by_dtype!(
        float cfg.dtype(),
        scan_equals_e[S](&cfg, case.seed, batch, subject),
        else unsupported_dtype(cfg.dtype())
    )
}

fn scan_peak_e<E: Float, S: ScanSubject>(
    cfg: &StackConfig,
    seed: u64,
    batch: usize,
    subject: &S,
) -> Result<usize, String> {
    let stack = stacked(build::<E>(cfg, seed, Strategy::ChunkedDirect, &mut ()).map_err(err)?)?;
    let x = input::<E>(cfg, batch, seed);
    let (y, m) = probe::measure(|| subject.scan(&stack, &x));
    drop(y.map_err(err)?);
    Ok(m.peak_above_baseline)
}

/// The scan's measured peak (working buffers and output) for `cfg`, above the live model and
/// input. The caller holds [`probe::exclusive`].
pub fn scan_peak(cfg: &StackConfig, seed: u64, batch: usize) -> Result<usize, String> {
    scan_peak_with(cfg, seed, batch, &Reference)
}

/// [`scan_peak`] of `subject`'s scan.
pub fn scan_peak_with<S: ScanSubject>(
    cfg: &StackConfig,
    seed: u64,
    batch: usize,
    subject: &S,
) -> Result<usize, String> {
    by_dtype!(
        float cfg.dtype(),
        scan_peak_e[S](cfg, seed, batch, subject),
        else unsupported_dtype(cfg.dtype()).map(|()| 0)
    )
}

/// Law: the scan's activation memory is the same for `N` and `2N + 1` layers, and within
/// [`bounds::scan_activation_bytes`].
pub fn scan_memory_flat(case: &StackCase, batch: usize) -> Result<(), String> {
    scan_memory_flat_with(case, batch, &Reference)
}

/// [`scan_memory_flat`] on `subject`'s scan. The caller holds [`probe::exclusive`].
pub fn scan_memory_flat_with<S: ScanSubject>(
    case: &StackCase,
    batch: usize,
    subject: &S,
) -> Result<(), String> {
    let cfg = case.config()?;
    let deep =
        StackConfig::new(2 * case.layers + 1, case.width, case.hidden, case.dtype).map_err(err)?;
    let (a, b) = (
        scan_peak_with(&cfg, case.seed, batch, subject)?,
        scan_peak_with(&deep, case.seed, batch, subject)?,
    );
    let bound = bounds::scan_activation_bytes(&cfg, batch);
    if a != b || b > bound {
        return Err(format!(
            "scan peak {a} bytes at N = {}, {b} bytes at N = {} (want equal, <= {bound})",
            cfg.layers(),
            deep.layers()
        ));
    }
    Ok(())
}

/// Every stack law on one case (what the `stack` fuzz target calls): the pure laws, and the
/// measured peaks within their bounds.
pub fn check_case(case: &StackCase) -> Result<(), String> {
    strategies_bitwise_identical(case)?;
    low_precision_is_cast_of_f32(case)?;
    scan_equals_unrolled(case, 2)?;
    let _g = probe::exclusive();
    peaks_within_bounds(case, &Reference)
}

/// Law: every strategy of `subject` builds, bit for bit, the stack of the dfdx face
/// ([`crate::stack::dfdx_face::build`]: each layer sampled, scaled, `to_dtype`'d and `stack`ed).
pub fn faces_agree_with(case: &StackCase, subject: &dyn InitSubject) -> Result<(), String> {
    let cfg = case.config()?;
    for strategy in Strategy::ALL {
        let built = subject
            .build(&cfg, case.seed, strategy, &mut ())
            .map_err(err)?;
        let diff = match built {
            AnyBuilt::F16(b) => face_difference(&cfg, case.seed, b),
            AnyBuilt::F32(b) => face_difference(&cfg, case.seed, b),
            AnyBuilt::F64(b) => face_difference(&cfg, case.seed, b),
        }?;
        if let Some(d) = diff {
            return Err(format!("{strategy} vs the dfdx face: {d}"));
        }
    }
    Ok(())
}

/// Law `stack_faces_agree` on the reference strategies.
pub fn faces_agree(case: &StackCase) -> Result<(), String> {
    faces_agree_with(case, &Reference)
}

fn face_difference<E: Float + DfdxFromF32>(
    cfg: &StackConfig,
    seed: u64,
    built: Built<E>,
) -> Result<Option<String>, String> {
    let face = dfdx_face::build::<E>(cfg, seed).map_err(err)?;
    Ok(built.into_stacked().map_err(err)?.first_difference(&face))
}

pub(crate) fn laws() -> Vec<Law> {
    vec![
        Law {
            name: "stack_peak_within_bound",
            family: Family::Fp16InitPeaks,
            summary: "each strategy's measured init peak is within its analytic bound (N, D, H, s)",
            default_cases: 32,
            measures_memory: true,
            run: |c, s| {
                check_property(
                    "stack_peak_within_bound",
                    c,
                    s,
                    stack_case(8, 48, 96),
                    |x| peaks_within_bounds(x, &Reference),
                )
            },
        },
        Law {
            name: "stack_chunked_within_one_percent",
            family: Family::Fp16InitPeaks,
            summary: "chunked-direct peaks at <= 1.01x the final bytes where its bound says so",
            default_cases: 6,
            measures_memory: true,
            run: |c, s| {
                check_property(
                    "stack_chunked_within_one_percent",
                    c,
                    s,
                    large_stack_case(),
                    |x| chunked_within_one_percent(x, &Reference),
                )
            },
        },
        Law {
            name: "stack_faces_agree",
            family: Family::Fp16InitPeaks,
            summary: "every init strategy builds the dfdx face's stack (sample, scale, to_dtype, stack) bit for bit, f16/f32/f64",
            default_cases: 64,
            measures_memory: false,
            run: |c, s| check_property("stack_faces_agree", c, s, stack_case(6, 24, 48), faces_agree),
        },
        Law {
            name: "stack_strategies_bitwise_identical",
            family: Family::Fp16InitPeaks,
            summary: "all five init strategies give the bit-identical stack, f16/f32/f64",
            default_cases: 64,
            measures_memory: false,
            run: |c, s| {
                check_property(
                    "stack_strategies_bitwise_identical",
                    c,
                    s,
                    stack_case(6, 24, 48),
                    strategies_bitwise_identical,
                )
            },
        },
        Law {
            name: "stack_f16_init_is_cast_of_f32",
            family: Family::Fp16InitPeaks,
            summary: "f16 init == f16::from_f32(f32 init) and f64 init == f32 init, elementwise",
            default_cases: 64,
            measures_memory: false,
            run: |c, s| {
                check_property(
                    "stack_f16_init_is_cast_of_f32",
                    c,
                    s,
                    stack_case(6, 24, 48),
                    low_precision_is_cast_of_f32,
                )
            },
        },
        Law {
            name: "stack_scan_equals_unrolled",
            family: Family::Fp16InitPeaks,
            summary: "the scan over the stack equals the unrolled loop over the list, bit for bit",
            default_cases: 64,
            measures_memory: false,
            run: |c, s| {
                check_property(
                    "stack_scan_equals_unrolled",
                    c,
                    s,
                    (stack_case(6, 24, 48), 1..=3usize),
                    |(x, b)| scan_equals_unrolled(x, *b),
                )
            },
        },
        Law {
            name: "stack_scan_memory_flat",
            family: Family::Fp16InitPeaks,
            summary: "the scan's activation memory is the same for N and 2N+1 layers",
            default_cases: 16,
            measures_memory: true,
            run: |c, s| {
                check_property(
                    "stack_scan_memory_flat",
                    c,
                    s,
                    (stack_case(6, 32, 64), 1..=4usize),
                    |(x, b)| scan_memory_flat(x, *b),
                )
            },
        },
    ]
}
