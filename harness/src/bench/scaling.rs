//! `harness bench scaling`: how each kernel's time grows with its size.
//!
//! Each kernel is timed over a range of sizes (median seconds per call; a sample repeats short
//! calls back to back until it lasts long enough to time). Where the kernel has a physical
//! limit, it is the kind of limit `bench all` uses (for the optimizer kernels, the stream over
//! each kernel's own arrays; for the stacked init, the largest model's bytes), measured in the
//! same run just before and just after the largest size's timing, the faster counting, and read
//! again when the two readings moved apart, as `bench all`'s are ([`super::Bracket::settled`]);
//! it is converted into a predicted time for every size:
//!
//! | kernel | size | limit |
//! |---|---|---|
//! | `adam_fused`, `radam_fused` | f32 parameters | the 28 bytes per parameter at `stream_4r3w` bandwidth |
//! | `newton_schulz5` | side `n` of the square f32 matrix | [`super::ns5_flops`] at the f32 gemm rate |
//! | `cnf_loglik` | batch (2-D points) | the forward solve's product flops at the f64 chunk-gemm rate |
//! | `ode_lv_tsit5_constant` | accepted steps | none (a 2-D scalar solve) |
//! | `stacked_init_chunked` | layers of 1024-4096-1024, f16 | the model's bytes at `fresh_write` bandwidth |
//!
//! The exponent `b` of `time = a size^b` is fitted by least squares on `(ln size, ln time)`
//! ([`fit_power_law`]) over the whole range and over its upper half (the larger sizes, where a
//! kernel is in its asymptotic regime).

use super::{median_seconds, timed_fallibly, Figure};
use crate::backend::Array;
use crate::ode::Integration;
use crate::optim::{AdamHyper, FusedMoments, RadamHyper, Selection};
use crate::report::svg::{line_chart_with, panel_grid, Axis, LineOptions, Series, Style};
use crate::tree::Tree;
use crate::Result;
use std::time::Instant;

/// A least-squares fit of `time = prefactor * size^exponent` over the points whose sizes lie in
/// `[size_min, size_max]`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct PowerFit {
    /// `b` of `time = a size^b`.
    pub exponent: f64,
    /// `a` of `time = a size^b`, in seconds.
    pub prefactor: f64,
    /// Smallest size the fit used.
    pub size_min: f64,
    /// Largest size the fit used.
    pub size_max: f64,
    /// Points the fit used.
    pub points: usize,
}

/// Fit `y = a x^b` by ordinary least squares on `(ln x, ln y)`: `b` is the slope, `a` the
/// exponential of the intercept. Points with a non-positive or non-finite coordinate are left
/// out; `None` when fewer than two points remain or all of them share one `x`.
///
/// Exact power laws give their exponent to rounding; constant times give exactly 0.
///
/// ```
/// use harness::bench::scaling::fit_power_law;
/// let pts: Vec<(f64, f64)> = (1..=8).map(|i| {
///     let n = (1u64 << i) as f64;
///     (n, 3e-9 * n * n)
/// }).collect();
/// let fit = fit_power_law(&pts).unwrap();
/// assert!((fit.exponent - 2.0).abs() < 1e-12);
/// assert!((fit.prefactor / 3e-9 - 1.0).abs() < 1e-9);
/// assert_eq!((fit.size_min, fit.size_max, fit.points), (2.0, 256.0, 8));
/// assert!(fit_power_law(&[(4.0, 1.0)]).is_none());
/// ```
pub fn fit_power_law(points: &[(f64, f64)]) -> Option<PowerFit> {
    let usable = || {
        points
            .iter()
            .filter(|(x, y)| *x > 0.0 && *y > 0.0 && x.is_finite() && y.is_finite())
    };
    let logs: Vec<(f64, f64)> = usable().map(|(x, y)| (x.ln(), y.ln())).collect();
    if logs.len() < 2 {
        return None;
    }
    let k = logs.len() as f64;
    let mx = logs.iter().map(|p| p.0).sum::<f64>() / k;
    let my = logs.iter().map(|p| p.1).sum::<f64>() / k;
    let sxx: f64 = logs.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    let sxy: f64 = logs.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let b = sxy / sxx;
    let (lo, hi) = usable()
        .map(|p| p.0)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
            (lo.min(x), hi.max(x))
        });
    Some(PowerFit {
        exponent: b,
        prefactor: (my - b * mx).exp(),
        size_min: lo,
        size_max: hi,
        points: logs.len(),
    })
}

/// The upper half of `points` by size (the larger `ceil(k / 2)` of `k`, at least two when there
/// are two): the range of [`ScalingKernel::fit_top_half`].
pub fn top_half(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut p = points.to_vec();
    p.sort_by(|a, b| a.0.total_cmp(&b.0));
    let keep = p.len().div_ceil(2).max(p.len().min(2));
    p.split_off(p.len() - keep)
}

/// One measured size of a kernel.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ScalingPoint {
    /// In the kernel's `size_unit`.
    pub size: f64,
    /// Median seconds per call.
    pub seconds: f64,
    /// The time the kernel would take at its limit (absent when it has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_seconds: Option<f64>,
    /// `limit_seconds / seconds`: the fraction of the limit reached (above 1: faster than the
    /// limit measured at the largest size, e.g. while the data stay in cache).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
}

/// One kernel over its range of sizes, with its fitted exponents.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ScalingKernel {
    /// Stable name (`adam_fused`, `radam_fused`, `newton_schulz5`, `cnf_loglik`,
    /// `ode_lv_tsit5_constant`, `stacked_init_chunked`).
    pub name: String,
    /// The work of one call.
    pub work: String,
    /// What `size` counts.
    pub size_unit: String,
    /// The measured sizes, smallest first.
    pub points: Vec<ScalingPoint>,
    /// The power-law fit over every size.
    pub fit_full: Option<PowerFit>,
    /// The power-law fit over the larger half of the sizes ([`top_half`]).
    pub fit_top_half: Option<PowerFit>,
    /// Where the limit comes from, or why there is none.
    pub limit_source: String,
    /// The limit's readings on both sides of the largest size's timing; `None` for a kernel
    /// without a limit.
    pub limit_bracket: Option<LimitBracket>,
}

/// A scaling kernel's limit read on both sides of its largest size's timing: its name, unit and
/// [`super::Bracket`] (`{"name", "unit", "before", "after", "rounds"}` in the JSON).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LimitBracket {
    /// The limit's name: `bench all`'s where it is the same measurement at the same size
    /// (`gemm_1024_gflops`, `gemm_f64_384x64x64_all_cores_gflops`), else its own
    /// (`<kernel>_own_arrays_gbps`: `bench all`'s `adam_arrays_4r3w_gbps` is the same pass at
    /// 16M parameters read before each repetition, the fastest counting, not a bracket;
    /// `fresh_write_<MiB>mib_gbps`: the largest model's bytes, not `bench all`'s model's).
    pub name: String,
    /// The unit of its readings (`GB/s`, `GFLOP/s`).
    pub unit: String,
    /// Its readings.
    #[serde(flatten)]
    pub bracket: super::Bracket,
}

impl ScalingKernel {
    /// A kernel from its measured `(size, seconds, limit_seconds)` triples, fitted.
    pub fn new(
        name: &str,
        work: &str,
        size_unit: &str,
        measured: Vec<(f64, f64, Option<f64>)>,
        limit_source: &str,
    ) -> ScalingKernel {
        let points: Vec<ScalingPoint> = measured
            .into_iter()
            .map(|(size, seconds, limit)| ScalingPoint {
                size,
                seconds,
                limit_seconds: limit,
                ratio: limit.map(|l| l / seconds),
            })
            .collect();
        let xy: Vec<(f64, f64)> = points.iter().map(|p| (p.size, p.seconds)).collect();
        ScalingKernel {
            name: name.into(),
            work: work.into(),
            size_unit: size_unit.into(),
            fit_full: fit_power_law(&xy),
            fit_top_half: fit_power_law(&top_half(&xy)),
            points,
            limit_source: limit_source.into(),
            limit_bracket: None,
        }
    }

    /// The kernel with its limit, `name` in `unit`, read on both sides of its largest size's
    /// timing.
    ///
    /// ```
    /// use harness::bench::{scaling::ScalingKernel, Bracket};
    /// let k = ScalingKernel::new("k", "one call", "parameters", vec![(1024.0, 1e-6, None)], "-");
    /// assert_eq!(k.moved_limit(), None);
    /// let k = k.with_limit_bracket("k_gbps", "GB/s", Bracket::new(20.0, 30.0));
    /// assert_eq!(k.moved_limit().map(|m| m.drift), Some(1.5));
    /// ```
    pub fn with_limit_bracket(
        self,
        name: &str,
        unit: &str,
        bracket: super::Bracket,
    ) -> ScalingKernel {
        ScalingKernel {
            limit_bracket: Some(LimitBracket {
                name: name.into(),
                unit: unit.into(),
                bracket,
            }),
            ..self
        }
    }

    /// The limit's bracket as a [`super::MovedLimit`] when its readings moved apart.
    pub fn moved_limit(&self) -> Option<super::MovedLimit> {
        let l = self.limit_bracket.as_ref()?;
        super::MovedLimit::of(&l.name, &l.bracket)
    }
}

/// A CPU cache of this machine (from `/sys/devices/system/cpu/cpu0/cache`; empty elsewhere).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Cache {
    /// Cache level (1, 2, 3, ...).
    pub level: u32,
    /// `Data`, `Unified` (instruction caches are left out).
    pub kind: String,
    /// Capacity in bytes.
    pub bytes: u64,
}

/// The data and unified caches of CPU 0, smallest level first (empty when the system does not
/// describe them).
pub fn caches() -> Vec<Cache> {
    let mut out = Vec::new();
    let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    for i in 0..16 {
        let idx = dir.join(format!("index{i}"));
        let read = |f: &str| std::fs::read_to_string(idx.join(f)).map(|s| s.trim().to_string());
        let (Ok(level), Ok(kind), Ok(size)) = (read("level"), read("type"), read("size")) else {
            continue;
        };
        if kind == "Instruction" {
            continue;
        }
        let (digits, mult) = match size.chars().last() {
            Some('K') => (&size[..size.len() - 1], 1u64 << 10),
            Some('M') => (&size[..size.len() - 1], 1 << 20),
            Some('G') => (&size[..size.len() - 1], 1 << 30),
            _ => (size.as_str(), 1),
        };
        if let (Ok(level), Ok(n)) = (level.parse(), digits.parse::<u64>()) {
            out.push(Cache {
                level,
                kind,
                bytes: n * mult,
            });
        }
    }
    out.sort_by_key(|c| c.level);
    out
}

/// What `bench scaling` measured (the `--json` document).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Scaling {
    /// Always `scaling`.
    pub area: String,
    /// The machine measured ([`super::Host`]).
    pub host: super::Host,
    /// Whether the run was `--quick` (fewer sizes and repetitions).
    pub quick: bool,
    /// Rayon threads the kernels ran on.
    pub threads: usize,
    /// The data and unified caches of CPU 0 ([`caches`]).
    pub caches: Vec<Cache>,
    /// One entry per kernel measured.
    pub kernels: Vec<ScalingKernel>,
    /// The machine's other load over the run ([`super::HostLoad`]; `None` where it cannot be
    /// read).
    pub host_load: Option<super::HostLoad>,
    /// The bracketed limits whose readings moved apart ([`ScalingKernel::moved_limit`]).
    pub moved_limits: Vec<super::MovedLimit>,
}

/// Median seconds per call of `f` over `reps` samples, each sample timing enough back-to-back
/// calls to last at least `min_sample` seconds (one call when a call is longer); two calls
/// before the first sample warm it up and set the count.
pub fn median_per_call(reps: usize, min_sample: f64, mut f: impl FnMut()) -> f64 {
    f();
    let s = Instant::now();
    f();
    let one = s.elapsed().as_secs_f64().max(1e-9);
    let calls = ((min_sample / one).ceil() as usize).clamp(1, 1 << 20);
    median_seconds(reps, || {
        for _ in 0..calls {
            f();
        }
    }) / calls as f64
}

/// The sizes, repetitions and sample length of a run.
#[derive(Debug, Clone)]
struct Plan {
    /// A smoke run: one bracket per bracketed limit ([`super::settle_rounds`]).
    quick: bool,
    reps: usize,
    /// Products per thread of the CNF limit's gemm rate.
    cnf_gemm_reps: usize,
    min_sample: f64,
    params_log2: Vec<u32>,
    ns_sides: Vec<usize>,
    batches: Vec<usize>,
    ode_steps: Vec<usize>,
    layers: Vec<usize>,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                quick,
                reps: 3,
                cnf_gemm_reps: 50,
                min_sample: 2e-3,
                params_log2: vec![10, 12, 14, 16, 18],
                ns_sides: vec![64, 128, 256],
                batches: vec![64, 128, 256],
                ode_steps: vec![10, 100, 1000],
                layers: vec![1, 2, 4],
            }
        } else {
            Plan {
                quick,
                reps: 9,
                cnf_gemm_reps: 400,
                min_sample: 10e-3,
                params_log2: (10..=24).collect(),
                ns_sides: vec![64, 96, 128, 192, 256, 384, 512, 768, 1024],
                batches: vec![64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048],
                ode_steps: vec![10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000],
                layers: vec![1, 2, 4, 8, 16, 32],
            }
        }
    }
}

/// Bytes an Adam/RAdam step keeps live per parameter (`g, p, m, v` in f32): where its working
/// set crosses a cache.
pub const FUSED_RESIDENT_BYTES_PER_PARAM: usize = 16;

/// The stacked-init layer of the scaling run: 1024-4096-1024 in f16 (16 MiB a layer, 512 MiB at
/// 32 layers).
pub const STACK_LAYER: (usize, usize) = (1024, 4096);

/// Run every kernel over its sizes (`on_kernel(name)` before each) and fit the exponents.
/// `quick` keeps it to a few seconds: fewer and smaller sizes, three repetitions.
pub fn run(quick: bool, mut on_kernel: impl FnMut(&str)) -> Result<Scaling> {
    super::keep_freed_memory();
    let mark = super::LoadMark::now();
    let plan = Plan::new(quick);
    let mut kernels = Vec::new();
    let [adam, radam] = fused(&plan, &mut on_kernel)?;
    kernels.push(adam);
    kernels.push(radam);
    on_kernel("newton_schulz5");
    kernels.push(newton_schulz(&plan)?);
    on_kernel("cnf_loglik");
    kernels.push(cnf(&plan)?);
    on_kernel("ode_lv_tsit5_constant");
    kernels.push(ode(&plan)?);
    on_kernel("stacked_init_chunked");
    kernels.push(stack(&plan)?);
    let host_load = mark.and_then(|m| m.load());
    Ok(Scaling {
        host_load,
        moved_limits: kernels
            .iter()
            .filter_map(ScalingKernel::moved_limit)
            .collect(),
        area: "scaling".into(),
        host: super::Host::this(),
        quick,
        threads: rayon::current_num_threads(),
        caches: caches(),
        kernels,
    })
}

/// The fitted exponents as figures (`scaling_<kernel>_exponent` over every size,
/// `scaling_<kernel>_exponent_top_half` over the larger half) and each limit with its bracket
/// (`scaling_<limit name>`, so that [`super::moved_limits`] finds those that moved), what
/// `bench::run("scaling")` reports.
pub fn figures(s: &Scaling) -> Vec<Figure> {
    let mut out = Vec::new();
    for k in &s.kernels {
        if let Some(l) = &k.limit_bracket {
            out.push(Figure::bracketed(
                &format!("scaling_{}", l.name),
                l.bracket,
                &l.unit,
            ));
        }
        if let Some(f) = k.fit_full {
            out.push(Figure::new(
                &format!("scaling_{}_exponent", k.name),
                f.exponent,
                "exponent",
            ));
        }
        if let Some(f) = k.fit_top_half {
            out.push(Figure::new(
                &format!("scaling_{}_exponent_top_half", k.name),
                f.exponent,
                "exponent",
            ));
        }
    }
    out
}

/// A kernel's median seconds per call at each of `sizes`: `time` on the state `setup` builds for
/// the size, the largest size's timing read inside its limit's bracket (`limit` on the same
/// state), settled like `bench all`'s ([`super::Bracket::settled`]). The times in the order of
/// `sizes`, and the bracket.
fn timed_with_limit<S: Copy + Ord, K>(
    plan: &Plan,
    sizes: &[S],
    mut setup: impl FnMut(S) -> Result<K>,
    mut time: impl FnMut(&mut K) -> Result<f64>,
    mut limit: impl FnMut(&mut K) -> f64,
) -> Result<(Vec<(S, f64)>, super::Bracket)> {
    let largest = sizes.iter().copied().max().expect("a plan has sizes");
    let mut times = Vec::with_capacity(sizes.len());
    let mut bracket = None;
    for &size in sizes {
        let state = std::cell::RefCell::new(setup(size)?);
        let secs = if size == largest && bracket.is_none() {
            let (b, secs) = super::Bracket::settled(
                super::settle_rounds(plan.quick),
                || limit(&mut state.borrow_mut()),
                || time(&mut state.borrow_mut()),
            )?;
            bracket = Some(b);
            secs
        } else {
            time(&mut state.borrow_mut())?
        };
        times.push((size, secs));
    }
    Ok((times, bracket.expect("the largest size is among the sizes")))
}

fn fused(plan: &Plan, on_kernel: &mut impl FnMut(&str)) -> Result<[ScalingKernel; 2]> {
    // the parameters, the gradient and the optimizer of one size
    type Fused = (Tree<f32>, Tree<f32>, FusedMoments<f32>);
    let sizes: Vec<usize> = plan.params_log2.iter().map(|&e| 1usize << e).collect();
    let largest = sizes.iter().copied().max().expect("a plan has sizes");
    let mut out = Vec::new();
    for (name, rectified) in [("adam_fused", false), ("radam_fused", true)] {
        on_kernel(name);
        // the step over one f32 leaf of `n` parameters, past RAdam's switch to the rectified
        // branch
        let setup = |n: usize| -> Result<Fused> {
            let leaf = |v: f32| -> Result<Tree<f32>> {
                Ok(Tree::from_leaves([(
                    "w".to_string(),
                    Array::new(vec![n], vec![v; n])?,
                )])?)
            };
            let (mut p, g) = (leaf(0.5)?, leaf(0.01)?);
            let mut opt = if rectified {
                FusedMoments::radam(1e-3, RadamHyper::default(), Selection::Where, &p)?
            } else {
                FusedMoments::adam(1e-3, AdamHyper::default(), &p)?
            };
            for _ in 0..8 {
                opt.step(&mut p, &g)?;
            }
            Ok((p, g, opt))
        };
        let time = |(p, g, opt): &mut Fused| {
            Ok(timed_fallibly(
                |f| median_per_call(plan.reps, plan.min_sample, f),
                || opt.step(p, g).map(drop),
            )?)
        };
        // the limit: the 4-read 3-write pass over the kernel's own arrays
        // ([`super::own_arrays_pass`]; where an array lands changes how fast it streams on the
        // shared host, and the host's memory moves between states within a run)
        let own_stream = |(p, g, opt): &mut Fused| {
            let n = p.numel();
            let secs = super::best_seconds(plan.reps.min(5), || {
                super::own_arrays_pass(p, g, opt.state_mut())
            });
            (super::FUSED_BYTES_PER_PARAM * n) as f64 / secs / 1e9
        };
        let (times, bracket) = timed_with_limit(plan, &sizes, setup, time, own_stream)?;
        let stream = bracket.limit();
        let limit = |n: usize| (super::FUSED_BYTES_PER_PARAM * n) as f64 / (stream * 1e9);
        let measured = times
            .into_iter()
            .map(|(n, secs)| (n as f64, secs, Some(limit(n))))
            .collect();
        let work = format!(
            "one fused {} step in place, one f32 leaf",
            if rectified { "RAdam" } else { "Adam" }
        );
        let source = format!(
            "stream_4r3w, own arrays, {} ({stream:.2} GB/s): 28 B per parameter (read g, p, m, v; \
             write p, m, v, over the step's own arrays at {0} parameters)",
            size_label(largest as f64)
        );
        out.push(
            ScalingKernel::new(name, &work, "parameters", measured, &source).with_limit_bracket(
                &format!("{name}_own_arrays_gbps"),
                "GB/s",
                bracket,
            ),
        );
    }
    let radam = out.pop().expect("two kernels");
    let adam = out.pop().expect("two kernels");
    Ok([adam, radam])
}

fn newton_schulz(plan: &Plan) -> Result<ScalingKernel> {
    use crate::optim::muon::{coeffs::STANDARD, NsPlan};
    let largest = plan
        .ns_sides
        .iter()
        .copied()
        .max()
        .expect("a plan has sizes");
    let coeffs = Array::new(vec![3], STANDARD.to_vec())?;
    let setup = |n: usize| -> Result<(Vec<f32>, NsPlan<f32>, Vec<f32>)> {
        let x: Vec<f32> = (0..n * n).map(|i| ((i as f32) * 0.618).sin()).collect();
        Ok((x, NsPlan::<f32>::new(n, n), vec![0.0f32; n * n]))
    };
    let time = |(x, ns, out): &mut (Vec<f32>, NsPlan<f32>, Vec<f32>)| {
        let secs = median_per_call(plan.reps, plan.min_sample, || {
            ns.run(x, &coeffs, 5, 1e-8, out);
        });
        std::hint::black_box(&out);
        Ok(secs)
    };
    let gemm = |_: &mut _| super::gemm_f32_gflops(largest, plan.reps.min(7));
    let (times, bracket) = timed_with_limit(plan, &plan.ns_sides, setup, time, gemm)?;
    let gflops = bracket.limit();
    let measured = times
        .into_iter()
        .map(|(n, secs)| (n as f64, secs, Some(super::ns5_flops(n) / (gflops * 1e9))))
        .collect();
    Ok(ScalingKernel::new(
        "newton_schulz5",
        "5 standard Newton-Schulz iterations, planned form (NsPlan), n x n f32",
        "n (matrix side)",
        measured,
        &format!(
            "gemm rate of one {largest}^3 f32 product ({gflops:.1} GFLOP/s): the flops computed \
             (symmetric products over their upper tiles)"
        ),
    )
    .with_limit_bracket(&format!("gemm_{largest}_gflops"), "GFLOP/s", bracket))
}

fn cnf(plan: &Plan) -> Result<ScalingKernel> {
    use crate::cnf::flow::log_likelihood;
    use crate::cnf::{CnfConfig, CnfParams};
    let cfg = CnfConfig {
        width: 64,
        depth: 3,
        blocks: 1,
        ..CnfConfig::default()
    };
    let params = CnfParams::<f64>::init(cfg, 3)?;
    let setup =
        |b: usize| -> Result<Vec<f64>> { Ok((0..2 * b).map(|i| (i as f64 * 0.3).sin()).collect()) };
    let time = |x: &mut Vec<f64>| {
        Ok(timed_fallibly(
            |f| median_per_call(plan.reps, plan.min_sample, f),
            || log_likelihood(&params, x, None).map(drop),
        )?)
    };
    let gemm = |_: &mut _| super::cnf_chunk_gemm_gflops::<f64>(&cfg, plan.cnf_gemm_reps);
    let (times, bracket) = timed_with_limit(plan, &plan.batches, setup, time, gemm)?;
    let gflops = bracket.limit();
    let measured = times
        .into_iter()
        .map(|(b, secs)| {
            let flops = 2.0 * super::cnf_product_macs(&cfg, b).0;
            (b as f64, secs, Some(flops / (gflops * 1e9)))
        })
        .collect();
    let rows = (1 + cfg.tangents()) * super::CNF_LIMIT_SAMPLES;
    Ok(ScalingKernel::new(
        "cnf_loglik",
        "log-likelihood of a batch of 2-D points: width 64, depth 3, one block, 10 constant \
         Tsit5 steps, exact trace, f64",
        "batch (points)",
        measured,
        &format!(
            "f64 layer gemm, {rows}x64x64 on every thread ({gflops:.1} GFLOP/s): the forward \
             solve's product flops"
        ),
    )
    .with_limit_bracket(
        &format!("gemm_f64_{rows}x64x64_all_cores_gflops"),
        "GFLOP/s",
        bracket,
    ))
}

fn ode(plan: &Plan) -> Result<ScalingKernel> {
    use crate::ode::{fixtures::LotkaVolterra, solve, Controller, Solver};
    let lv = LotkaVolterra::new(1.1, 0.4, 0.4, 0.1)?;
    let tab = Solver::Tsit5.tableau();
    let mut measured = Vec::new();
    for &steps in &plan.ode_steps {
        let ctl = Controller::constant(15.0 / steps as f64)?;
        let i = Integration::new(&tab, &ctl, 0.0, 15.0)
            .max_steps(steps + 16)
            .save_steps(false);
        let sol = solve(&lv, &i, &[10.0f64, 10.0])?;
        let secs = timed_fallibly(
            |f| median_per_call(plan.reps, plan.min_sample, f),
            || solve(&lv, &i, &[10.0f64, 10.0]).map(|s| drop(std::hint::black_box(s))),
        )?;
        measured.push((sol.stats.num_accepted_steps as f64, secs, None));
    }
    Ok(ScalingKernel::new(
        "ode_lv_tsit5_constant",
        "Lotka-Volterra (1.1, 0.4, 0.4, 0.1) from (10, 10) over [0, 15], Tsit5, constant step \
         15 / steps, f64, final state only",
        "steps (accepted)",
        measured,
        "n/a: no measured machine limit fits a 2-D scalar solve",
    ))
}

fn stack(plan: &Plan) -> Result<ScalingKernel> {
    use crate::backend::DType;
    use crate::stack::{build, StackConfig, Strategy};
    let (d, h) = STACK_LAYER;
    let layers = |n: usize| StackConfig::new(n, d, h, DType::F16);
    let largest = layers(plan.layers.iter().copied().max().expect("a plan has sizes"))?;
    let time = |cfg: &mut StackConfig| {
        // one build is long enough to time; the median of the repetitions
        Ok(timed_fallibly(
            |f| median_seconds(plan.reps.min(5), f),
            || {
                build::<half::f16>(cfg, 0, Strategy::ChunkedDirect, &mut ())
                    .map(|m| drop(std::hint::black_box(m)))
            },
        )?)
    };
    // a new buffer of the largest model's size written once (the model of the timing dropped)
    let fresh = |_: &mut _| super::fresh_write_gbps(largest.params(), plan.reps.clamp(3, 5));
    let (times, bracket) = timed_with_limit(plan, &plan.layers, |n| Ok(layers(n)?), time, fresh)?;
    let gbps = bracket.limit();
    let measured = times
        .into_iter()
        .map(|(n, secs)| {
            let bytes = layers(n)?.final_bytes();
            Ok((n as f64, secs, Some(bytes as f64 / (gbps * 1e9))))
        })
        .collect::<Result<_>>()?;
    let mib = largest.final_bytes() >> 20;
    Ok(ScalingKernel::new(
        "stacked_init_chunked",
        &format!("chunked-direct stacked init, layers of {d}-{h}-{d}, f16"),
        "layers",
        measured,
        &format!(
            "fresh_write of the largest model's {mib} MiB ({gbps:.2} GB/s): the f16 model's \
             bytes written once to new memory"
        ),
    )
    .with_limit_bracket(&format!("fresh_write_{mib}mib_gbps"), "GB/s", bracket))
}

/// `x` seconds in the unit that keeps it between 1 and 1000 (`12.3 ms`).
pub fn seconds_label(x: f64) -> String {
    let (v, u) = if x >= 1.0 {
        (x, "s")
    } else if x >= 1e-3 {
        (x * 1e3, "ms")
    } else if x >= 1e-6 {
        (x * 1e6, "us")
    } else {
        (x * 1e9, "ns")
    };
    format!("{v:.3} {u}")
}

/// A cache's size as `32 KiB` / `2 MiB`.
fn bytes_label(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else {
        format!("{} KiB", b >> 10)
    }
}

/// The reference marks of a kernel's panel: caches its working set crosses, and where its
/// threads start.
fn marks(s: &Scaling, k: &ScalingKernel) -> Vec<(f64, String)> {
    let cache_marks = |per_size: &dyn Fn(f64) -> f64| -> Vec<(f64, String)> {
        s.caches
            .iter()
            .map(|c| {
                (
                    per_size(c.bytes as f64),
                    format!("L{} {}", c.level, bytes_label(c.bytes)),
                )
            })
            .collect()
    };
    match k.name.as_str() {
        "adam_fused" | "radam_fused" => {
            let mut m = cache_marks(&|b| b / FUSED_RESIDENT_BYTES_PER_PARAM as f64);
            m.push((
                crate::optim::fused::CHUNK as f64,
                "1 thread at and below".into(),
            ));
            m
        }
        "newton_schulz5" => {
            // the plan's buffers: X, X^T, Y (n^2 each) and A, cA, B (n^2 each), f32
            let mut m = cache_marks(&|b| (b / 24.0).sqrt());
            let threads_from = (crate::backend::GEMM_PARALLEL_MIN as f64).cbrt();
            m.push((threads_from, "threads from here".into()));
            m
        }
        "cnf_loglik" => {
            let chunk = crate::cnf::flow::GRAD_CHUNK as f64;
            vec![
                (chunk, "1 chunk, 1 thread at and below".into()),
                (
                    chunk * s.threads as f64,
                    format!("{} chunks: every thread busy", s.threads),
                ),
            ]
        }
        _ => Vec::new(),
    }
}

/// The `--svg` figure: one log-log panel per kernel (three per row), median time against
/// size with a dot per size, the limit dashed, the fitted exponents in the legend, and dotted
/// marks where the working set crosses a cache or the threads start.
///
/// ```
/// use harness::bench::scaling::{svg, Scaling, ScalingKernel};
/// let k = ScalingKernel::new(
///     "a<b", "work", "n",
///     (4..=10).map(|e| { let n = (1 << e) as f64; (n, 1e-9 * n, Some(5e-10 * n)) }).collect(),
///     "a limit",
/// );
/// let s = Scaling {
///     area: "scaling".into(),
///     host: harness::bench::Host::this(),
///     quick: true,
///     threads: 2,
///     caches: vec![],
///     kernels: vec![k],
///     host_load: None,
///     moved_limits: vec![],
/// };
/// let doc = svg(&s);
/// assert!(doc.contains("a&lt;b") && doc.contains("b = 1.00"));
/// ```
pub fn svg(s: &Scaling) -> String {
    let panels: Vec<String> = s
        .kernels
        .iter()
        .map(|k| {
            let exps = match (k.fit_full, k.fit_top_half) {
                (Some(f), Some(t)) => format!(
                    "b = {:.2} (all sizes), {:.2} (top half, from {})",
                    f.exponent,
                    t.exponent,
                    size_label(t.size_min)
                ),
                (Some(f), None) => format!("b = {:.2}", f.exponent),
                _ => "no fit".into(),
            };
            let mut series = vec![Series {
                name: format!("median time, {exps}"),
                points: k.points.iter().map(|p| (p.size, p.seconds)).collect(),
            }];
            let mut styles = vec![Style {
                markers: true,
                ..Style::default()
            }];
            let limit: Vec<(f64, f64)> = k
                .points
                .iter()
                .filter_map(|p| p.limit_seconds.map(|l| (p.size, l)))
                .collect();
            if !limit.is_empty() {
                let src = k.limit_source.split(':').next().unwrap_or("limit");
                series.push(Series {
                    name: format!("limit: {src}"),
                    points: limit,
                });
                styles.push(Style {
                    dashed: true,
                    color: Some(7),
                    ..Style::default()
                });
            }
            // powers of two when the range starts and ends on one (sizes between are drawn at
            // their place), decades otherwise
            let (lo, hi) = k.points.iter().fold((f64::INFINITY, 0f64), |(lo, hi), p| {
                (lo.min(p.size), hi.max(p.size))
            });
            let x = if is_power_of_two(lo) && is_power_of_two(hi) {
                Axis::Log2
            } else {
                Axis::Log10
            };
            let title = if k.points.iter().any(|p| p.limit_seconds.is_some()) {
                k.name.clone()
            } else {
                format!("{}: no limit (see limit_source)", k.name)
            };
            let x_label = match k.name.as_str() {
                "adam_fused" | "radam_fused" => {
                    format!("{} (cache marks at 16 B each: g, p, m, v)", k.size_unit)
                }
                "newton_schulz5" => format!("{} (cache marks at 24 n^2 B)", k.size_unit),
                _ => k.size_unit.clone(),
            };
            line_chart_with(
                &title,
                &x_label,
                "seconds per call",
                &series,
                &LineOptions {
                    x,
                    y: Axis::Log10,
                    styles,
                    legend_below: true,
                    plot_size: Some((430.0, 300.0)),
                    marks: marks(s, k),
                },
            )
        })
        .collect();
    panel_grid(&panels, 3)
}

fn is_power_of_two(x: f64) -> bool {
    x >= 1.0 && x == x.round() && (x as u64).is_power_of_two()
}

/// A size as `2^20` (a power of two above 4096) or the plain number (`1536`, `0.5`).
///
/// ```
/// use harness::bench::scaling::size_label;
/// assert_eq!((size_label(1048576.0), size_label(1024.0), size_label(1536.0)), ("2^20".into(), "1024".into(), "1536".into()));
/// ```
pub fn size_label(x: f64) -> String {
    if is_power_of_two(x) && x > 4096.0 {
        format!("2^{}", x.log2().round())
    } else {
        format!("{x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pts(f: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
        (0..12)
            .map(|i| 2f64.powi(i) * 3.0)
            .map(|n| (n, f(n)))
            .collect()
    }

    #[test]
    fn exact_power_laws_give_their_exponent() {
        for (b, a) in [
            (2.0, 1e-9),
            (1.0, 3.5),
            (3.0, 2e-12),
            (0.5, 7.0),
            (-1.0, 1e3),
        ] {
            let fit = fit_power_law(&pts(|n| a * n.powf(b))).unwrap();
            assert!((fit.exponent - b).abs() < 1e-12, "{b}: {}", fit.exponent);
            assert!(
                (fit.prefactor / a - 1.0).abs() < 1e-9,
                "{a}: {}",
                fit.prefactor
            );
            assert_eq!(fit.points, 12);
        }
    }

    #[test]
    fn constant_times_give_exponent_zero_and_degenerate_input_no_fit() {
        let fit = fit_power_law(&pts(|_| 0.25)).unwrap();
        assert_eq!(fit.exponent, 0.0);
        assert!((fit.prefactor - 0.25).abs() < 1e-15);
        // one size, or one usable point: nothing to fit
        assert!(fit_power_law(&[(8.0, 1.0), (8.0, 2.0)]).is_none());
        assert!(fit_power_law(&[(8.0, 1.0), (16.0, 0.0), (-2.0, 1.0)]).is_none());
        assert!(fit_power_law(&[]).is_none());
        // unusable points are left out, the rest fitted
        let mut p = pts(|n| n * n);
        p.push((f64::NAN, 1.0));
        p.push((5.0, f64::INFINITY));
        p.push((5.0, -1.0));
        let fit = fit_power_law(&p).unwrap();
        assert_eq!(fit.points, 12);
        assert!((fit.exponent - 2.0).abs() < 1e-12);
    }

    #[test]
    fn noise_that_averages_out_leaves_the_exponent() {
        // a multiplicative factor alternating 1.1 and 1/1.1 around n^1.5: the log residuals
        // are +-ln 1.1, and their correlation with ln n is small, not zero
        let noisy: Vec<(f64, f64)> = pts(|n| n.powf(1.5))
            .into_iter()
            .enumerate()
            .map(|(i, (n, t))| (n, t * if i % 2 == 0 { 1.1 } else { 1.0 / 1.1 }))
            .collect();
        let fit = fit_power_law(&noisy).unwrap();
        assert!((fit.exponent - 1.5).abs() < 0.02, "{}", fit.exponent);
        // a flat start then a linear regime: the top half sees the linear part only
        let knee: Vec<(f64, f64)> = pts(|n| (n / 40.0).max(1.0));
        let full = fit_power_law(&knee).unwrap().exponent;
        let top = fit_power_law(&top_half(&knee)).unwrap().exponent;
        assert!(full < 0.95 && (top - 1.0).abs() < 1e-12, "{full} {top}");
    }

    #[test]
    fn the_top_half_is_the_larger_sizes() {
        let p = vec![(4.0, 1.0), (1.0, 1.0), (3.0, 1.0), (2.0, 1.0), (5.0, 1.0)];
        let sizes: Vec<f64> = top_half(&p).iter().map(|p| p.0).collect();
        assert_eq!(sizes, [3.0, 4.0, 5.0]);
        assert_eq!(top_half(&p[..2]).len(), 2);
        assert_eq!(top_half(&p[..1]).len(), 1);
    }

    #[test]
    fn only_the_largest_size_is_timed_inside_its_limits_bracket_and_errors_stop_the_sizes() {
        use std::cell::RefCell;
        let plan = Plan::new(true); // one bracket
        let calls = RefCell::new(Vec::new());
        let log = |c: String| calls.borrow_mut().push(c);
        let (times, bracket) = timed_with_limit(
            &plan,
            &[4usize, 16, 8],
            |n| {
                log(format!("setup {n}"));
                Ok(n)
            },
            |n: &mut usize| {
                log(format!("time {n}"));
                Ok(*n as f64 / 1e3)
            },
            |n: &mut usize| {
                log(format!("limit {n}"));
                10.0 + calls.borrow().len() as f64
            },
        )
        .unwrap();
        assert_eq!(
            *calls.borrow(),
            [
                "setup 4", "time 4", "setup 16", "limit 16", "time 16", "limit 16", "setup 8",
                "time 8"
            ]
        );
        assert_eq!(times, [(4, 0.004), (16, 0.016), (8, 0.008)]);
        // the limit read 10 + the calls logged so far: its 4th and 6th
        assert_eq!(
            (bracket.before, bracket.after, bracket.rounds),
            (14.0, 16.0, 1)
        );
        // a failing timing ends the run with its error, before the next size is set up
        calls.borrow_mut().clear();
        let failed = timed_with_limit(
            &plan,
            &[4usize, 16],
            |n| {
                log(format!("setup {n}"));
                Ok(n)
            },
            |_: &mut usize| -> Result<f64> {
                Err(crate::reference::Error::InvalidHyper {
                    name: "n",
                    value: "4".into(),
                    expected: "a size that runs".into(),
                }
                .into())
            },
            |_: &mut usize| 1.0,
        );
        assert!(failed.unwrap_err().to_string().contains("a size that runs"));
        assert_eq!(*calls.borrow(), ["setup 4"]);
    }

    #[test]
    fn kernels_carry_ratios_and_the_figure_shows_every_panel() {
        let k = ScalingKernel::new(
            "k",
            "w",
            "parameters",
            (10..=20)
                .map(|e| {
                    let n = 2f64.powi(e);
                    (n, 1e-9 * n, Some(0.5e-9 * n))
                })
                .collect(),
            "stream_4r3w: 28 B",
        )
        .with_limit_bracket(
            "k_own_arrays_gbps",
            "GB/s",
            crate::bench::Bracket::new(20.0, 25.0),
        );
        assert!(k.points.iter().all(|p| p.ratio == Some(0.5)));
        assert!((k.fit_full.unwrap().exponent - 1.0).abs() < 1e-12);
        assert_eq!(k.fit_top_half.unwrap().size_min, 2f64.powi(15));
        let ode = ScalingKernel::new(
            "ode",
            "w",
            "steps",
            vec![(10.0, 1e-6, None), (100.0, 1e-5, None)],
            "n/a",
        );
        let s = Scaling {
            area: "scaling".into(),
            host: crate::bench::Host::this(),
            quick: true,
            threads: 2,
            caches: vec![Cache {
                level: 2,
                kind: "Unified".into(),
                bytes: 1 << 20,
            }],
            host_load: None,
            moved_limits: [&k, &ode]
                .into_iter()
                .filter_map(ScalingKernel::moved_limit)
                .collect(),
            kernels: vec![k, ode],
        };
        // the bracketed limit read 20 then 25 GB/s (1.25x): listed as moved; the other has none
        assert_eq!(s.moved_limits.len(), 1);
        assert_eq!(
            (s.moved_limits[0].name.as_str(), s.moved_limits[0].drift),
            ("k_own_arrays_gbps", 1.25)
        );
        // as figures: the exponents, and the limit with its bracket, found moved there too
        let figs = figures(&s);
        let names: Vec<&str> = figs.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "scaling_k_own_arrays_gbps",
                "scaling_k_exponent",
                "scaling_k_exponent_top_half",
                "scaling_ode_exponent",
                "scaling_ode_exponent_top_half",
            ]
        );
        assert_eq!((figs[0].value, figs[0].unit.as_str()), (25.0, "GB/s"));
        let moved = crate::bench::moved_limits(&figs);
        assert_eq!(
            (moved.len(), moved[0].name.as_str(), moved[0].drift),
            (1, "scaling_k_own_arrays_gbps", 1.25)
        );
        let doc = svg(&s);
        assert_eq!(
            doc.matches("<svg").count(),
            3,
            "the document and two panels"
        );
        assert!(doc.contains("b = 1.00 (all sizes), 1.00 (top half, from 2^15)"));
        assert!(doc.contains("limit: stream_4r3w"));
        assert!(doc.contains("stroke-dasharray=\"7,5\""));
        assert!(
            !doc.contains("L2 1 MiB"),
            "cache marks on the optimizer panels only"
        );
        // powers of two on the parameter axis, decades on the time axis
        assert!(doc.contains(r#">2</text>"#) && doc.contains(r#"font-size="10">20</text>"#));
        assert!(doc.contains(r#">10</text>"#));
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            v["kernels"][0]["points"][0]["limit_seconds"],
            0.5e-9 * 1024.0
        );
        assert!(v["kernels"][1]["points"][0].get("limit_seconds").is_none());
        assert_eq!(
            v["kernels"][0]["limit_bracket"],
            serde_json::json!({"name": "k_own_arrays_gbps", "unit": "GB/s", "before": 20.0,
                "after": 25.0, "rounds": 1})
        );
        assert!(v["kernels"][1]["limit_bracket"].is_null());
        assert_eq!(v["moved_limits"][0]["name"], "k_own_arrays_gbps");
    }

    #[test]
    fn seconds_read_in_their_unit() {
        assert_eq!(seconds_label(0.0123), "12.300 ms");
        assert_eq!(seconds_label(2.5e-7), "250.000 ns");
        assert_eq!(seconds_label(3.0), "3.000 s");
    }
}
