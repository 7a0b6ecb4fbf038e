//! `harness bench AREA`: the reference timed against the physical limit measured in the same run.
//!
//! A limit is read beside the figure it bounds: the fused steps' before each repetition, the
//! others just before and just after their figures ([`Bracket`]), the faster reading counting;
//! a bracket whose two readings moved apart is read again, in up to [`SETTLE_ROUNDS`] brackets in
//! all, and the steadiest kept ([`Bracket::settled`]).
//!
//! Figures (names from `docs/CLI.md`, stable; times are medians over repetitions):
//! - area `optim`: `copy_bandwidth_gbps`, `adam_fused_16m_gbps`, `radam_fused_16m_gbps`,
//!   `radam_allocs_per_step`, the ratios of the fused rates to the copy bandwidth, and
//!   `linesearch_rosenbrock_65536_ms` (one chained `sgd(1) + backtracking` step on a
//!   65,536-dimensional Rosenbrock in f32: value and gradient, the staged line-search update and
//!   `apply_updates`, from the same start point each time) with its evaluation count;
//! - area `muon`: `ns5_1024_ms` (5 standard Newton–Schulz iterations on a 1024x1024 f32 matrix,
//!   planned form) and `gemm_1024_gflops` (one 1024^3 f32 product, `2 n^3` flops, the faster of
//!   dfdx's gemm call and the later `gemm` release with AVX-512 kernels the iteration uses);
//! - area `ode`: `ode_lv_tsit5_1e-8_us` and its step count;
//! - area `cnf`: `train_step_w64_d3_b500_ms` and its gemm bound, the same step in f32
//!   (`train_step_w64_d3_b500_f32_ms`) and its f32 gemm bound;
//! - area `stack`: `init_chunked_gbps` (f16 output bytes per second of `chunked-direct` for 16
//!   layers of 1024-4096-1024) against `fresh_write_gbps` (filling a freshly allocated buffer of
//!   the same size, the limit of producing that many bytes of new memory).
//!
//! - area `scaling` ([`scaling`]): each kernel timed over a range of sizes against its limit,
//!   with the exponent of a power-law fit.
//!
//! `--against PROFILE` adds the real library's figure on the same work
//! ([`crate::upstream::against`]).

pub mod scaling;

use crate::backend::{Array, GemmKernel};
use crate::ode::Integration;
use crate::optim::{AdamHyper, FusedMoments, RadamHyper, Selection};
use crate::tree::Tree;
use crate::{Error, Result};
use rayon::prelude::*;
use std::time::Instant;

/// One reported figure (`name`, `value`, `unit` as in `docs/CLI.md`; `bench all` adds the rest).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Figure {
    /// Stable name of the figure.
    pub name: String,
    /// The measurement, in `unit`.
    pub value: f64,
    /// Unit of `value` (e.g. `us`, `ms`, `GB/s`, `GFLOP/s`, `ratio`).
    pub unit: String,
    /// The area that produced it (`bench all` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub area: Option<String>,
    /// The physical limit this figure is compared with, in `unit` (`bench all` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<f64>,
    /// Fraction of the limit reached: `value / limit` for rates, `limit / value` for times
    /// (1 = at the limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// Where the limit comes from, or why there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_source: Option<String>,
    /// The real library on the same work, in `unit` (`--against` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<f64>,
    /// The upstream first call's time beyond a steady-state call: trace and compile, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_compile_s: Option<f64>,
    /// Above 1: ours is faster (`value / upstream` for rates, `upstream / value` for times).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_upstream: Option<f64>,
    /// How the upstream work was done and where it differs from ours.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_note: Option<String>,
    /// For a limit measured on both sides of the figures it bounds: its two readings (`value` is
    /// the faster, [`Bracket::limit`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bracket: Option<Bracket>,
    /// The limit figures this one was computed from (its limit; or its value, for a bound
    /// derived from a measured rate and for a ratio to a limit or bound), named by the code that
    /// computed it (counts such as the line search's evaluations are inputs, not limits, and
    /// are not listed): an area for the figures it derives from its own limit
    /// ([`Figure::limited_by`]), [`attach_limits`] for the limits it attaches. A limit made
    /// from another derived figure is followed through it when [`attach_limits`] looks for a
    /// [`Bracket`] that moved.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub limited_by: Vec<String>,
}

/// A limit's rate read just before and just after the figure it bounds, in the limit's unit.
///
/// The benchmark host changes speed within seconds: its gemm rate moved from 224 to 188 GFLOP/s
/// (f32) between two runs a few seconds apart, and its memory streams 10-20% faster in one state
/// than in the other. A limit read only on one side of its figure can catch the slow state while
/// the figure ran in the fast one; it then bounds nothing, and the ratio reads high (one run's f32
/// CNF step read 0.850 of a limit measured slow, against 0.72-0.73 in the runs beside it). Read
/// on both sides, the limit is the faster reading ([`Bracket::limit`]: the best the machine did
/// around the figure), and a spread between the two above [`HOST_DRIFT_RATIO`] is reported beside
/// every ratio that uses it ([`attach_limits`]): the host changed state while the figure ran, so
/// the figure may have run in the slower one and its ratio read low. [`Bracket::settled`] reads
/// the bracket again until one has not moved, in up to [`SETTLE_ROUNDS`] brackets in all.
///
/// # Example
/// ```
/// use harness::bench::Bracket;
/// let mut readings = vec![150.0, 100.0]; // popped: 100 before, 150 after
/// let mut order = Vec::new();
/// let (b, out) = Bracket::around(
///     || { order.push("limit"); readings.pop().unwrap() },
///     || { "figure" },
/// );
/// assert_eq!((b.before, b.after, out), (100.0, 150.0, "figure"));
/// assert_eq!(b.limit(), 150.0);
/// assert_eq!(b.drift(), 1.5);
/// assert_eq!(order, ["limit", "limit"]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Bracket {
    /// The limit's rate just before the figure.
    pub before: f64,
    /// The limit's rate just after the figure.
    pub after: f64,
    /// How many brackets of the figure were read to get this one ([`Bracket::settled`]); 1 for
    /// a single bracket.
    pub rounds: usize,
}

/// The most brackets [`Bracket::settled`] reads of one figure in a full run (a `--quick` run
/// reads one): on a shared host whose speed changes within seconds, a second or third bracket
/// often falls in a steady stretch where the first did not, for at most three times the
/// figure's time (a figure bounded by several limits reads them all in each bracket,
/// [`Bracket::settled_each`]).
pub const SETTLE_ROUNDS: usize = 3;

impl Bracket {
    /// One bracket from its two readings.
    pub const fn new(before: f64, after: f64) -> Bracket {
        Bracket {
            before,
            after,
            rounds: 1,
        }
    }

    /// Read the limit with `measure`, run `figure`, read the limit again; the figure's result
    /// with both readings.
    pub fn around<T>(mut measure: impl FnMut() -> f64, figure: impl FnOnce() -> T) -> (Bracket, T) {
        let before = measure();
        let out = figure();
        let after = measure();
        (Bracket::new(before, after), out)
    }

    /// Limit, figure, limit, up to `rounds` times (at least once), stopping at the first bracket
    /// that has not [moved](Bracket::moved): that bracket and its figure's result, or, when
    /// every one moved, the steadiest (the smallest [`Bracket::drift`], the earliest of equals).
    /// `rounds` in the result counts the brackets read. The choice looks at the limit's two
    /// readings only, never at the figure, so it does not pick a figure for being fast. The
    /// first error of `figure` ends the reading and is returned.
    ///
    /// ```
    /// use harness::bench::Bracket;
    /// // the limit reads 100 then 150 (moved), then 150 and 152 (steady): two rounds
    /// let mut readings = vec![152.0, 150.0, 150.0, 100.0];
    /// let mut figures = 0;
    /// let (b, figure) = Bracket::settled(3, || readings.pop().unwrap(), || {
    ///     figures += 1;
    ///     Ok::<_, String>(figures)
    /// })?;
    /// assert_eq!((b.before, b.after, b.rounds, figure), (150.0, 152.0, 2, 2));
    /// // never steady: the steadiest of the three, with its own figure
    /// let mut readings = vec![100.0, 200.0, 120.0, 100.0, 300.0, 100.0];
    /// let mut figures = 0;
    /// let (b, figure) = Bracket::settled(3, || readings.pop().unwrap(), || {
    ///     figures += 1;
    ///     Ok::<_, String>(figures)
    /// })?;
    /// assert_eq!((b.before, b.after, b.rounds, figure), (100.0, 120.0, 3, 2));
    /// // a failing figure stops the reading
    /// let failed = Bracket::settled(3, || 100.0, || Err::<(), _>("diverged".to_string()));
    /// assert_eq!(failed, Err("diverged".to_string()));
    /// # Ok::<(), String>(())
    /// ```
    pub fn settled<T, E>(
        rounds: usize,
        mut measure: impl FnMut() -> f64,
        figure: impl FnMut() -> Result<T, E>,
    ) -> Result<(Bracket, T), E> {
        let ([b], out) = Bracket::settled_each(rounds, [&mut measure], figure)?;
        Ok((b, out))
    }

    /// [`Bracket::settled`] for a figure bounded by `N` limits, each read on both sides of it:
    /// `measures` in order before the figure and in reverse order after it, so that each
    /// limit's bracket is centred on the figure (the first limit outermost). A bracket of
    /// readings is steady when no limit in it [moved](Bracket::moved), and the steadiest is the
    /// one whose most-moved limit moved least. The figure runs at most `rounds` times whatever
    /// `N` is.
    ///
    /// ```
    /// use harness::bench::Bracket;
    /// // limit a is steady both times; limit b moves in the first bracket only (popped from the end)
    /// let (mut a, mut b) = (vec![10.0, 10.0, 10.0, 10.0], vec![51.0, 50.0, 80.0, 50.0]);
    /// let mut figures = 0;
    /// let ([a, b], figure) = Bracket::settled_each(
    ///     3,
    ///     [&mut || a.pop().unwrap(), &mut || b.pop().unwrap()],
    ///     || {
    ///         figures += 1;
    ///         Ok::<_, String>(figures)
    ///     },
    /// )?;
    /// assert_eq!((a.rounds, b.before, b.after, figure), (2, 50.0, 51.0, 2));
    /// # Ok::<(), String>(())
    /// ```
    pub fn settled_each<const N: usize, T, E>(
        rounds: usize,
        mut measures: [&mut dyn FnMut() -> f64; N],
        mut figure: impl FnMut() -> Result<T, E>,
    ) -> Result<([Bracket; N], T), E> {
        // the drift a bracket of readings is judged by: its most-moved limit's
        let worst = |bs: &[Bracket; N]| bs.iter().map(Bracket::drift).fold(1.0, f64::max);
        let mut kept: Option<([Bracket; N], T)> = None;
        let mut read = 0;
        while read < rounds.max(1) {
            let mut before = [f64::NAN; N];
            for (reading, measure) in before.iter_mut().zip(measures.iter_mut()) {
                *reading = measure();
            }
            let out = figure()?;
            let mut after = [f64::NAN; N];
            for (reading, measure) in after.iter_mut().zip(measures.iter_mut()).rev() {
                *reading = measure();
            }
            read += 1;
            let bs: [Bracket; N] = std::array::from_fn(|i| Bracket::new(before[i], after[i]));
            let steady = bs.iter().all(|b| !b.moved());
            if kept.as_ref().is_none_or(|(k, _)| worst(&bs) < worst(k)) {
                kept = Some((bs, out));
            }
            if steady {
                break;
            }
        }
        let (bs, out) = kept.expect("at least one bracket is read");
        Ok((bs.map(|b| Bracket { rounds: read, ..b }), out))
    }

    /// The limit: the faster of the two readings (a NaN reading counts as none).
    pub fn limit(&self) -> f64 {
        self.before.max(self.after)
    }

    /// How far apart the readings are: the faster over the slower (1 = steady; infinite when a
    /// reading is not a positive number).
    pub fn drift(&self) -> f64 {
        let lo = self.before.min(self.after);
        if lo > 0.0 && self.before.is_finite() && self.after.is_finite() {
            self.limit() / lo
        } else {
            f64::INFINITY
        }
    }

    /// Whether the readings are further apart than [`HOST_DRIFT_RATIO`]: the host changed speed
    /// while the figure ran, and the ratios that use this limit are not a quiet-machine reading.
    pub fn moved(&self) -> bool {
        self.drift() > HOST_DRIFT_RATIO
    }
}

/// How many brackets [`Bracket::settled`] may read of a figure: [`SETTLE_ROUNDS`], or one in a
/// `--quick` (smoke) run.
pub(crate) fn settle_rounds(quick: bool) -> usize {
    if quick {
        1
    } else {
        SETTLE_ROUNDS
    }
}

/// A limit whose two readings ([`Bracket`]) are further apart than this was read across a change
/// of the host's state: the ratios it gives say so. Best-of-rounds readings of the same state
/// agree within 1-2% on the benchmark host; its two states differ by 10-20%.
pub const HOST_DRIFT_RATIO: f64 = 1.05;

/// The machine a run measured, recorded beside its figures (`"host"` in the JSON, a line under
/// the table): a figure is a reading of one machine, and two runs of the same command on two
/// kinds of machine (a cloud host can change kind between two sessions) are not comparable.
///
/// ```
/// use harness::bench::Host;
/// let h = Host::this();
/// assert!(h.logical_cpus >= 1);
/// assert!(["avx512", "avx2", "portable"].contains(&h.simd.as_str()));
/// assert_eq!(h.arch, std::env::consts::ARCH);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Host {
    /// The CPU model the operating system reports ([`cpu_model`] of Linux's `/proc/cpuinfo`), or
    /// `unknown`.
    pub cpu: String,
    /// The CPU's family, model and stepping numbers ([`cpu_signature`]), or `unknown`: a cloud
    /// host may give two generations of core the same model name (an Intel Cascade Lake,
    /// model 85, and an Emerald Rapids, model 207, both read `Intel(R) Xeon(R) Processor`).
    pub cpu_id: String,
    /// The second-level cache of CPU 0 in KiB (Linux's `/sys/devices/system/cpu/cpu0/cache`;
    /// one core's on the x86 servers measured so far, shared by a cluster of cores on some
    /// other CPUs), when the system says: the working sets of the CNF step and of the symmetric
    /// products were sized against it.
    pub l2_kib: Option<u64>,
    /// Logical CPUs this process may run on (`std::thread::available_parallelism`).
    pub logical_cpus: usize,
    /// The widest vector instructions the workspace's own kernels run at
    /// ([`crate::backend::Simd::best`]): `avx512`, `avx2` or `portable` (the `gemm` crate's
    /// products, `gemm_1024_gflops` among them, choose their own).
    pub simd: String,
    /// The architecture the binary was built for (`std::env::consts::ARCH`).
    pub arch: String,
}

impl Host {
    /// This machine, as the process sees it now.
    pub fn this() -> Host {
        use crate::backend::Simd;
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let known = |v: Option<String>| v.unwrap_or_else(|| "unknown".into());
        Host {
            cpu: known(cpu_model(&cpuinfo)),
            cpu_id: known(cpu_signature(&cpuinfo)),
            l2_kib: l2_cache_kib(std::path::Path::new("/sys/devices/system/cpu/cpu0/cache")),
            logical_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            simd: match Simd::best() {
                Simd::Avx512 => "avx512",
                Simd::Avx2 => "avx2",
                Simd::Portable => "portable",
            }
            .into(),
            arch: std::env::consts::ARCH.into(),
        }
    }
}

impl std::fmt::Display for Host {
    /// `cpu (cpu_id), N logical CPUs, L2 K KiB, simd (arch)`, as the bench's text output
    /// prints it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}), {} logical CPUs, ",
            self.cpu, self.cpu_id, self.logical_cpus
        )?;
        if let Some(kib) = self.l2_kib {
            write!(f, "L2 {kib} KiB, ")?;
        }
        write!(f, "{} ({})", self.simd, self.arch)
    }
}

/// The CPU's identifying numbers in the text of Linux's `/proc/cpuinfo`: `family F model M
/// stepping S` from the first `cpu family`, `model` and `stepping` lines (x86), else
/// `implementer I part P` from `CPU implementer` and `CPU part` (ARM); `None` when neither set
/// is complete.
///
/// ```
/// use harness::bench::cpu_signature;
/// let text = "model name\t: Intel(R) Xeon(R) Processor\ncpu family\t: 6\nmodel\t\t: 207\nstepping\t: 2\n";
/// assert_eq!(cpu_signature(text).as_deref(), Some("family 6 model 207 stepping 2"));
/// let arm = "CPU implementer\t: 0x41\nCPU part\t: 0xd0c\n";
/// assert_eq!(cpu_signature(arm).as_deref(), Some("implementer 0x41 part 0xd0c"));
/// assert_eq!(cpu_signature("cpu family\t: 6\n"), None);
/// ```
pub fn cpu_signature(cpuinfo: &str) -> Option<String> {
    let all = |keys: &[(&str, &str)]| {
        keys.iter()
            .map(|&(key, label)| cpuinfo_value(cpuinfo, key).map(|v| format!("{label} {v}")))
            .collect::<Option<Vec<_>>>()
            .map(|parts| parts.join(" "))
    };
    all(&[
        ("cpu family", "family"),
        ("model", "model"),
        ("stepping", "stepping"),
    ])
    .or_else(|| all(&[("CPU implementer", "implementer"), ("CPU part", "part")]))
}

/// The size in KiB of the level-2 data or unified cache among the `index*` folders of a Linux
/// CPU cache directory (`/sys/devices/system/cpu/cpu0/cache`: files `level`, `type`, and
/// `size` such as `2048K`); `None` when the directory or such a cache is not there, or its size
/// does not read.
///
/// ```
/// use harness::bench::l2_cache_kib;
/// let dir = std::env::temp_dir().join(format!("l2-cache-kib-{}", std::process::id()));
/// for (index, level, kind, size) in [(0, "1", "Data", "48K"), (2, "2", "Unified", "2048K")] {
///     let d = dir.join(format!("index{index}"));
///     std::fs::create_dir_all(&d).unwrap();
///     for (file, text) in [("level", level), ("type", kind), ("size", size)] {
///         std::fs::write(d.join(file), format!("{text}\n")).unwrap();
///     }
/// }
/// assert_eq!(l2_cache_kib(&dir), Some(2048));
/// assert_eq!(l2_cache_kib(&dir.join("missing")), None);
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn l2_cache_kib(dir: &std::path::Path) -> Option<u64> {
    let read = |d: &std::path::Path, file: &str| {
        std::fs::read_to_string(d.join(file))
            .ok()
            .map(|t| t.trim().to_string())
    };
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("index"))
        })
        .collect();
    entries.sort();
    entries.iter().find_map(|d| {
        let level2 = read(d, "level")? == "2";
        let holds_data = matches!(read(d, "type")?.as_str(), "Data" | "Unified");
        if !(level2 && holds_data) {
            return None;
        }
        let size = read(d, "size")?;
        let (digits, scale) = match size.strip_suffix('K') {
            Some(d) => (d, 1),
            None => match size.strip_suffix('M') {
                Some(d) => (d, 1024),
                None => (size.as_str(), 0),
            },
        };
        let n: u64 = digits.parse().ok()?;
        // a bare number is bytes (rounded up to whole KiB)
        Some(if scale == 0 {
            n.div_ceil(1024)
        } else {
            n * scale
        })
    })
}

/// The CPU model named in the text of Linux's `/proc/cpuinfo`: the value of the first
/// `model name` line (x86), else of the first `Hardware` line (some ARM kernels), with runs of
/// white space collapsed; `None` when neither is there or the value is empty.
///
/// ```
/// use harness::bench::cpu_model;
/// let text = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R)  Processor @ 2.50GHz\nflags\t: fpu\n";
/// assert_eq!(cpu_model(text).as_deref(), Some("Intel(R) Xeon(R) Processor @ 2.50GHz"));
/// assert_eq!(cpu_model("no such field"), None);
/// ```
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    ["model name", "Hardware"]
        .into_iter()
        .find_map(|key| cpuinfo_value(cpuinfo, key))
}

/// The value of the first `key : value` line of `/proc/cpuinfo`'s text whose key is `key`, with
/// runs of white space collapsed; `None` when there is none or its value is empty.
fn cpuinfo_value(cpuinfo: &str, key: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        let v = v.split_whitespace().collect::<Vec<_>>().join(" ");
        (k.trim() == key && !v.is_empty()).then_some(v)
    })
}

/// The machine's CPU time by kind, summed over its logical CPUs, in clock ticks: the aggregate
/// `cpu` line of Linux's `/proc/stat` ([`cpu_ticks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTicks {
    /// Running anything: user, nice, system, irq and softirq time (guest time is inside user).
    pub busy: u64,
    /// Idle and waiting for input or output.
    pub idle: u64,
    /// Time the hypervisor ran something else while this machine's CPUs wanted to run.
    pub steal: u64,
}

impl CpuTicks {
    /// Every tick counted: busy, idle and stolen.
    pub fn total(&self) -> u64 {
        self.busy + self.idle + self.steal
    }
}

/// The aggregate CPU time of the text of Linux's `/proc/stat` (its first `cpu ` line: user, nice,
/// system, idle, iowait, irq, softirq, steal, ...); `None` when the line is missing or has fewer
/// than eight numbers.
///
/// ```
/// use harness::bench::{cpu_ticks, CpuTicks};
/// let stat = "cpu  100 5 20 800 10 1 2 30 0 0\ncpu0 50 2 10 400 5 0 1 15 0 0\n";
/// assert_eq!(
///     cpu_ticks(stat),
///     Some(CpuTicks { busy: 100 + 5 + 20 + 1 + 2, idle: 800 + 10, steal: 30 })
/// );
/// assert_eq!(cpu_ticks("cpu  1 2 3"), None);
/// ```
pub fn cpu_ticks(stat: &str) -> Option<CpuTicks> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let n: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    let [user, nice, system, idle, iowait, irq, softirq, steal, ..] = n[..] else {
        return None;
    };
    Some(CpuTicks {
        busy: user + nice + system + irq + softirq,
        idle: idle + iowait,
        steal,
    })
}

/// Above this share of the machine's CPU time, stolen by the hypervisor or used by other
/// processes, a run was not on a quiet machine ([`HostLoad::quiet`]). A judgement: idle, the
/// benchmark host (a 2-CPU virtual machine) read 0-3% steal over 2-second windows, and up to 11%
/// in windows of a `bench cnf` run. Being under it is necessary, not sufficient: whatever shares
/// the physical cores, caches or memory without taking this machine's CPU time (another
/// machine on the sibling hyperthreads) does not show here; a run at 0.1% steal and 0.4% other
/// processes still saw its gemm rate move by 10% ([`Bracket`] catches that).
pub const QUIET_LOAD_PCT: f64 = 2.0;

/// What else the machine did while a run measured: the share of its CPU time (every logical CPU,
/// between two readings of [`CpuTicks`]) that the hypervisor gave to other machines (`steal`),
/// and the share other processes used (busy time less this process's own CPU time).
///
/// ```
/// use harness::bench::{CpuTicks, HostLoad};
/// // 2 CPUs for 10 s at 100 ticks a second: 2000 ticks; this process used 15 s of CPU
/// let before = CpuTicks { busy: 0, idle: 0, steal: 0 };
/// let after = CpuTicks { busy: 1560, idle: 400, steal: 40 };
/// let load = HostLoad::between(before, after, 100.0, 15.0, 10.0).unwrap();
/// assert_eq!((load.steal_pct, load.others_pct), (2.0, 3.0));
/// assert!(!load.quiet());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct HostLoad {
    /// Wall-clock seconds between the two readings.
    pub seconds: f64,
    /// Percent of the machine's CPU time stolen by the hypervisor.
    pub steal_pct: f64,
    /// Percent of the machine's CPU time used by processes other than this one (0 when this
    /// process's own time, measured otherwise, exceeds the busy time).
    pub others_pct: f64,
}

impl HostLoad {
    /// The load between two readings of the machine's ticks (`ticks_per_s` of them a second
    /// per CPU), this process having used `own_cpu_s` seconds of CPU time meanwhile, over
    /// `seconds` of wall-clock time; `None` when the counters did not advance (or went back).
    pub fn between(
        before: CpuTicks,
        after: CpuTicks,
        ticks_per_s: f64,
        own_cpu_s: f64,
        seconds: f64,
    ) -> Option<HostLoad> {
        let total = after.total().checked_sub(before.total())?;
        let busy = after.busy.checked_sub(before.busy)?;
        let steal = after.steal.checked_sub(before.steal)?;
        if total == 0 || ticks_per_s.is_nan() || ticks_per_s <= 0.0 {
            return None;
        }
        let pct = |ticks: f64| 100.0 * ticks / total as f64;
        Some(HostLoad {
            seconds,
            steal_pct: pct(steal as f64),
            others_pct: pct((busy as f64 - own_cpu_s * ticks_per_s).max(0.0)),
        })
    }

    /// Whether both shares are at most [`QUIET_LOAD_PCT`].
    pub fn quiet(&self) -> bool {
        self.steal_pct <= QUIET_LOAD_PCT && self.others_pct <= QUIET_LOAD_PCT
    }
}

impl std::fmt::Display for HostLoad {
    /// The line `bench` prints under its table.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "host load over {:.1} s: {:.1}% of CPU time stolen by the hypervisor, {:.1}% used by \
             other processes ({})",
            self.seconds,
            self.steal_pct,
            self.others_pct,
            if self.quiet() {
                format!(
                    "both at most {QUIET_LOAD_PCT}%: needed for a quiet machine, not proof of one"
                )
            } else {
                format!("other load above {QUIET_LOAD_PCT}%: not a quiet machine")
            }
        )
    }
}

/// A reading of the machine's CPU time and of this process's, to measure a [`HostLoad`] from
/// (Linux only: elsewhere [`LoadMark::now`] is `None`).
///
/// ```
/// use harness::bench::LoadMark;
/// if let Some(mark) = LoadMark::now() {
///     let x: f64 = (0..2_000_000).map(|i| (i as f64).sqrt()).sum();
///     assert!(x > 0.0);
///     // on a machine whose counters advanced, a load with shares between 0 and 100
///     if let Some(load) = mark.load() {
///         assert!((0.0..=100.0).contains(&load.steal_pct));
///         assert!((0.0..=100.0).contains(&load.others_pct));
///     }
/// }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct LoadMark {
    ticks: CpuTicks,
    own_cpu_s: f64,
    at: Instant,
}

impl LoadMark {
    /// The machine's ticks and this process's CPU time now.
    pub fn now() -> Option<LoadMark> {
        Some(LoadMark {
            ticks: cpu_ticks(&std::fs::read_to_string("/proc/stat").ok()?)?,
            own_cpu_s: own_cpu_seconds()?,
            at: Instant::now(),
        })
    }

    /// The load from this mark to now.
    pub fn load(&self) -> Option<HostLoad> {
        let now = LoadMark::now()?;
        HostLoad::between(
            self.ticks,
            now.ticks,
            ticks_per_second()?,
            now.own_cpu_s - self.own_cpu_s,
            now.at.duration_since(self.at).as_secs_f64(),
        )
    }
}

/// User and system CPU seconds of this process, all its threads (`getrusage`).
fn own_cpu_seconds() -> Option<f64> {
    #[cfg(unix)]
    {
        // SAFETY: `getrusage` writes one `rusage` into memory this function owns.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
            return None;
        }
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        Some(secs(u.ru_utime) + secs(u.ru_stime))
    }
    #[cfg(not(unix))]
    None
}

/// Clock ticks a second in `/proc/stat` (`sysconf(_SC_CLK_TCK)`).
fn ticks_per_second() -> Option<f64> {
    #[cfg(unix)]
    {
        // SAFETY: `sysconf` reads a constant of the system.
        let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        (t > 0).then_some(t as f64)
    }
    #[cfg(not(unix))]
    None
}

/// A limit read on both sides of its figures ([`Bracket`]) whose readings are further apart than
/// [`HOST_DRIFT_RATIO`]: the host changed speed during the figures it bounds.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MovedLimit {
    /// The limit figure's name.
    pub name: String,
    /// Its reading just before its figures.
    pub before: f64,
    /// Its reading just after.
    pub after: f64,
    /// [`Bracket::drift`]: the faster reading over the slower (infinite, written `null` like
    /// any non-finite reading, when a reading is not a finite positive number).
    pub drift: f64,
    /// [`Bracket::rounds`]: how many brackets were read; this one is the steadiest of them.
    pub rounds: usize,
}

/// Every bracketed limit among `figures` that moved by more than [`HOST_DRIFT_RATIO`], in the
/// order of the figures. An empty list is what a quiet machine gives; each entry is one limit
/// whose ratios the run cannot vouch for (in `bench all`, [`attach_limits`] also appends
/// `LIMIT MOVED` to every figure computed from it; a single area attaches no limits).
///
/// ```
/// use harness::bench::{moved_limits, Bracket, Figure};
/// let steady = Figure::bracketed("a_gflops", Bracket::new(100.0, 102.0), "GFLOP/s");
/// let moved = Figure::bracketed("b_gflops", Bracket::new(100.0, 150.0), "GFLOP/s");
/// let m = moved_limits(&[steady, moved]);
/// assert_eq!(m.len(), 1);
/// assert_eq!((m[0].name.as_str(), m[0].drift), ("b_gflops", 1.5));
/// ```
pub fn moved_limits(figures: &[Figure]) -> Vec<MovedLimit> {
    figures
        .iter()
        .filter_map(|f| MovedLimit::of(&f.name, f.bracket.as_ref()?))
        .collect()
}

impl MovedLimit {
    /// The limit `name` read as `bracket`, when its readings [moved](Bracket::moved) apart.
    ///
    /// ```
    /// use harness::bench::{Bracket, MovedLimit};
    /// assert_eq!(MovedLimit::of("a_gbps", &Bracket::new(20.0, 20.5)), None);
    /// let m = MovedLimit::of("a_gbps", &Bracket::new(20.0, 25.0)).unwrap();
    /// assert_eq!((m.before, m.after, m.drift, m.rounds), (20.0, 25.0, 1.25, 1));
    /// ```
    pub fn of(name: &str, bracket: &Bracket) -> Option<MovedLimit> {
        bracket.moved().then(|| MovedLimit {
            name: name.into(),
            before: bracket.before,
            after: bracket.after,
            drift: bracket.drift(),
            rounds: bracket.rounds,
        })
    }
}

/// The line `bench` prints under its table about the `bracketed` limits of a run (limits read
/// before and after their figures) and those of them that `moved` ([`moved_limits`]); `None`
/// when the run read no limit that way.
///
/// ```
/// use harness::bench::moved_summary;
/// assert_eq!(moved_summary(0, &[]), None);
/// assert_eq!(
///     moved_summary(6, &[]).as_deref(),
///     Some("limits read before and after their figures: 6, none moved by more than 5%")
/// );
/// ```
pub fn moved_summary(bracketed: usize, moved: &[MovedLimit]) -> Option<String> {
    if bracketed == 0 {
        return None;
    }
    let pct = (HOST_DRIFT_RATIO - 1.0) * 100.0;
    let head = format!("limits read before and after their figures: {bracketed}");
    if moved.is_empty() {
        return Some(format!("{head}, none moved by more than {pct:.0}%"));
    }
    let list: Vec<String> = moved
        .iter()
        .map(|m| {
            let of = if m.rounds > 1 {
                format!(", the steadiest of {} brackets", m.rounds)
            } else {
                String::new()
            };
            format!(
                "{} {:.1} -> {:.1} ({:.2}x{of})",
                m.name, m.before, m.after, m.drift
            )
        })
        .collect();
    Some(format!(
        "{head}, {} moved by more than {pct:.0}% ({}): the ratios that use them are not a \
         quiet-machine reading",
        moved.len(),
        list.join(", ")
    ))
}

impl Figure {
    /// A figure with only its name, value and unit (what `bench AREA` reports).
    pub fn new(name: &str, value: f64, unit: &str) -> Figure {
        fig(name, value, unit)
    }

    /// A limit figure read on both sides of the figures it bounds: its value is the faster
    /// reading, and it keeps both.
    pub fn bracketed(name: &str, bracket: Bracket, unit: &str) -> Figure {
        Figure {
            bracket: Some(bracket),
            ..fig(name, bracket.limit(), unit)
        }
    }

    /// This figure with the names of the limit figures its value was computed from (a bound
    /// derived from a measured rate, or a ratio to a limit or to such a bound).
    ///
    /// ```
    /// use harness::bench::Figure;
    /// let f = Figure::new("ns5_1024_vs_15_gemms", 0.74, "ratio").limited_by(&["gemm_1024_gflops"]);
    /// assert_eq!(f.limited_by, ["gemm_1024_gflops"]);
    /// ```
    pub fn limited_by(mut self, limits: &[&str]) -> Figure {
        self.limited_by = limits.iter().map(|l| l.to_string()).collect();
        self
    }
}

fn fig(name: &str, value: f64, unit: &str) -> Figure {
    Figure {
        name: name.into(),
        value,
        unit: unit.into(),
        area: None,
        limit: None,
        ratio: None,
        limit_source: None,
        upstream: None,
        upstream_compile_s: None,
        ratio_to_upstream: None,
        upstream_note: None,
        bracket: None,
        limited_by: Vec::new(),
    }
}

/// Wall time of one call of `f`, in seconds.
pub fn seconds(f: impl FnOnce()) -> f64 {
    let s = Instant::now();
    f();
    s.elapsed().as_secs_f64()
}

/// The median of `times` (the upper middle one of an even count; at least one time).
pub fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(|a, b| a.total_cmp(b));
    times[times.len() / 2]
}

/// Median wall time of `reps` runs of `f`, in seconds.
pub fn median_seconds(reps: usize, mut f: impl FnMut()) -> f64 {
    median((0..reps.max(1)).map(|_| seconds(&mut f)).collect())
}

/// A timing (`time`, given the call to time) of a call that can fail: the time, or the first
/// error of `call` (after which `call` is not run again).
///
/// ```
/// use harness::bench::{median_seconds, timed_fallibly};
/// let mut calls = 0;
/// let ok = timed_fallibly(|f| median_seconds(3, f), || Ok::<(), String>(calls += 1));
/// assert!(ok.is_ok() && calls == 3);
/// let failed = timed_fallibly(|f| median_seconds(3, f), || Err::<(), _>("diverged"));
/// assert_eq!(failed, Err("diverged"));
/// ```
pub fn timed_fallibly<E>(
    time: impl FnOnce(&mut dyn FnMut()) -> f64,
    mut call: impl FnMut() -> std::result::Result<(), E>,
) -> std::result::Result<f64, E> {
    let mut err = None;
    let secs = time(&mut || {
        if err.is_none() {
            err = call().err();
        }
    });
    err.map_or(Ok(secs), Err)
}

/// Shortest wall time of `reps` runs of `f`, in seconds: what a limit measures (the best the
/// machine does on that work in this run).
pub fn best_seconds(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps.max(1))
        .map(|_| seconds(&mut f))
        .fold(f64::INFINITY, f64::min)
}

/// A ratio above this is not a figure but a limit that does not bound (timing noise stays well
/// below 5%): [`attach_limits`] reports it as a broken limit instead of printing the ratio.
pub const BROKEN_LIMIT_RATIO: f64 = 1.05;

/// Keep freed memory in the process for the rest of the run (glibc's allocator only; elsewhere
/// nothing changes).
///
/// By default glibc serves a block above 128 KiB with its own mapping and unmaps it when freed, and
/// trims the heap's free top above 128 KiB: the next allocation of the same size faults every page
/// in again and the kernel zeroes it. A step that returns new vectors (the line search's gradient,
/// direction, update and point: 256 KiB each at 65,536 parameters) then spends its time in page
/// faults, 40% of the step as measured (376 us against 221 us with memory kept). XLA's allocator
/// keeps optax's buffers the same way, so the benches compare kernels, not the allocator's policy:
/// mappings stay for blocks up to 32 MiB (glibc's largest threshold) and the heap is trimmed only
/// above 1 GiB of free top. Blocks above 32 MiB are still fresh mappings (the stacked init's and
/// `fresh_write_gbps`'s buffers). Library users choose their own allocator and its settings.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only changes two thresholds of the allocator; it is called before the
    // benches allocate and is safe to call at any time.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

/// Run the figures of `area` (`all` runs every implemented area; `scaling` gives the fitted
/// exponents of [`scaling::run`] and its limits with their brackets as figures,
/// [`scaling::figures`]), after [`keep_freed_memory`].
pub fn run(area: &str, quick: bool) -> Result<Vec<Figure>> {
    keep_freed_memory();
    match area {
        "optim" => optim(quick),
        "ode" => ode(quick),
        "muon" => muon(quick),
        "stack" => stack(quick),
        "cnf" => cnf(quick),
        "faces" => faces(quick),
        "all" => all(quick, |_| {}).map(|a| a.figures),
        "scaling" => scaling::run(quick, |_| {}).map(|s| scaling::figures(&s)),
        other => Err(crate::reference::Error::InvalidHyper {
            name: "AREA",
            value: other.into(),
            expected: "one of optim, muon, ode, cnf, stack, faces, scaling, all".into(),
        }
        .into()),
    }
}

/// The areas `all` runs, in order (`optim` first: its copy bandwidth is the others' limit).
pub const AREAS: [&str; 5] = ["optim", "muon", "ode", "cnf", "stack"];

/// What `bench all` measured: every figure with its limit, and the areas it skipped.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AllBench {
    /// Every figure measured, in area order.
    pub figures: Vec<Figure>,
    /// One line per area that is not implemented in this build.
    pub skipped: Vec<String>,
}

/// Run every area (`on_area(name)` before each); an area that is not implemented is skipped
/// with a note, any other error fails the run. Then compare each figure with the physical limit
/// measured in the same run ([`attach_limits`]).
pub fn all(quick: bool, on_area: impl FnMut(&str)) -> Result<AllBench> {
    all_of(&AREAS, |a| run(a, quick), on_area)
}

/// [`all`] over `areas` with `run` producing each area's figures.
pub fn all_of(
    areas: &[&str],
    mut run: impl FnMut(&str) -> Result<Vec<Figure>>,
    mut on_area: impl FnMut(&str),
) -> Result<AllBench> {
    let mut figures = Vec::new();
    let mut skipped = Vec::new();
    for &area in areas {
        on_area(area);
        match run(area) {
            Ok(f) => figures.extend(f.into_iter().map(|mut f| {
                f.area = Some(area.to_string());
                f
            })),
            Err(Error::NotImplemented(what)) => skipped.push(format!(
                "{area}: skipped ({what} is not implemented in this build)"
            )),
            Err(e) => return Err(e),
        }
    }
    attach_limits(&mut figures);
    Ok(AllBench { figures, skipped })
}

/// Newton–Schulz flops the planned form computes for an `n x n` matrix, 5 iterations: per
/// iteration the symmetric products `A = X X^T` and `(cA) A` over the tiles covering their
/// upper triangle only ([`crate::optim::muon::newton_schulz::symmetric_fraction`] of a full
/// product, 0.53125 at 1024) and the full product `B X`; `2 n^3` flops per full product.
pub fn ns5_flops(n: usize) -> f64 {
    let sym = crate::optim::muon::newton_schulz::symmetric_fraction(n);
    let full = 2.0 * (n as f64).powi(3);
    5.0 * (2.0 * full * sym + full)
}

/// Give every figure of a run its limit, measured in the same run: for a rate the limit rate
/// (`ratio = value / limit`), for a time the ideal time (`ratio = limit / value`), and in both
/// cases `limit_source`, the words saying what the limit is. A figure whose limit was not
/// measured in this run (an area left out) keeps `limit` and `ratio` empty. A figure whose limit
/// was read on both sides of it ([`Bracket`]) with readings more than [`HOST_DRIFT_RATIO`] apart
/// gets both readings in `limit_source`, and so does every figure computed from it, directly or
/// through another derived figure ([`Figure::limited_by`]).
pub fn attach_limits(figures: &mut [Figure]) {
    let values: Vec<(String, f64)> = figures.iter().map(|f| (f.name.clone(), f.value)).collect();
    let get = |name: &str| values.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
    let ls_evals = get("linesearch_rosenbrock_65536_evals");
    let ode_steps = get("ode_lv_tsit5_1e-8_steps");
    let rng = get("counter_rng_gelems");
    // a limit made from the values of the figures `names` (None when one is not in this run);
    // the figure it is attached to records the names, so the figures it depends on are named
    // once, where they are read
    let made_of = |f: &mut Figure, names: &[&str], make: &dyn Fn(&[f64]) -> f64| {
        f.limited_by = names.iter().map(|n| n.to_string()).collect();
        let found: Option<Vec<f64>> = names.iter().map(|n| get(n)).collect();
        found.map(|v| make(&v)).filter(|l| *l > 0.0)
    };
    let rate = |f: &mut Figure, limit: &str, source: &str| {
        if let Some(l) = made_of(f, &[limit], &|v| v[0]) {
            f.limit = Some(l);
            f.ratio = Some(f.value / l);
        }
        f.limit_source = Some(source.into());
    };
    let time = |f: &mut Figure, names: &[&str], ideal: &dyn Fn(&[f64]) -> f64, source: String| {
        if let Some(l) = made_of(f, names, ideal) {
            f.limit = Some(l);
            f.ratio = Some(l / f.value);
        }
        f.limit_source = Some(source);
    };
    for f in figures.iter_mut() {
        match f.name.as_str() {
            "copy_bandwidth_gbps" => {
                f.limit_source = Some("is the limit: read+write of a 256 MiB copy".into())
            }
            "gemm_1024_gflops" => {
                f.limit_source = Some(
                    "is the limit: one 1024^3 f32 gemm, 2n^3 flops, every core, the faster of \
                     gemm 0.15 (dfdx's call) and gemm 0.19 (AVX-512 kernels), whole or split by rows"
                        .into(),
                )
            }
            "stream_4r3w_gbps" => {
                f.limit_source = Some(
                    "read 4 f32 arrays of 16M, write 3, every core, best of the run, on arrays of \
                     its own (the fused steps' limits run on theirs)"
                        .into(),
                )
            }
            "adam_fused_16m_gbps" => rate(
                f,
                "adam_arrays_4r3w_gbps",
                "adam_arrays_4r3w_gbps: the step's own traffic over its own arrays (28 B/param: \
                 read g,p,m,v; write p,m,v)",
            ),
            "radam_fused_16m_gbps" => rate(
                f,
                "radam_arrays_4r3w_gbps",
                "radam_arrays_4r3w_gbps: the step's own traffic over its own arrays (28 B/param: \
                 read g,p,m,v; write p,m,v)",
            ),
            "adam_arrays_4r3w_gbps" | "radam_arrays_4r3w_gbps" => {
                f.limit_source = Some(
                    "is the limit: stream_4r3w_gbps's traffic over the step's own params, grads \
                     and moments, every core, timed before each step, best of the run"
                        .into(),
                )
            }
            "init_chunked_gbps" => rate(
                f,
                "fresh_write_gbps",
                &format!(
                    "fresh_write_gbps: the model's bytes written once to new memory{}",
                    rng.map_or(String::new(), |r| format!(
                        "; the generator alone makes {:.2} GB/s of f16 on one thread",
                        r * 2.0
                    ))
                ),
            ),
            "fresh_write_gbps" => {
                f.limit_source = Some(
                    "is the limit: fresh (never touched) memory written once, every core".into(),
                )
            }
            "ns5_1024_ms" => time(
                f,
                &["gemm_1024_gflops"],
                &|g| ns5_flops(MUON_N) / (g[0] * 1e9) * 1e3,
                format!(
                    "gemm rate: {:.3e} flops computed (symmetric products over their upper \
                     tiles) / gemm_1024_gflops",
                    ns5_flops(MUON_N)
                ),
            ),
            "linesearch_rosenbrock_65536_ms" => time(
                f,
                &["cache_stream_65536_gbps", "f32_flops_gflops"],
                &|v| {
                    ls_evals.map_or(f64::NAN, |e| {
                        linesearch_limit_seconds(LINESEARCH_DIM, e, v[0], v[1]) * 1e3
                    })
                },
                "each pass of the step (LINESEARCH_PASSES, and one per evaluation) at the slower \
                 of its bytes at cache_stream_65536_gbps and its flops at f32_flops_gflops"
                    .into(),
            ),
            "f32_flops_gflops" => {
                f.limit_source = Some(
                    "is the limit: f32 products and sums (not fused) in cache, widest vectors, \
                     one core or two, best of the run"
                        .into(),
                )
            }
            "cache_stream_65536_gbps" => {
                f.limit_source = Some(
                    "is the limit: two cache-resident f32 vectors of 65536 read and summed, one \
                     core or two, best of the run"
                        .into(),
                )
            }
            "ns5_1024_15_gemms_ms" => {
                f.limit_source =
                    Some("a comparison: 15 plain gemms at the measured rate (not the limit)".into())
            }
            "init_chunked_16x1024x4096_ms" => time(
                f,
                &["fresh_write_gbps"],
                &|c| {
                    let bytes = stack_bench_config().map_or(0, |c| c.final_bytes());
                    bytes as f64 / (c[0] * 1e9) * 1e3
                },
                "fresh_write_gbps: the f16 model's bytes written once to new memory".into(),
            ),
            "train_step_w64_d3_b500_ms" => time(
                f,
                &["cnf_train_step_gemm_bound_ms"],
                &|b| b[0],
                "f64 gemm rate: the step's product flops (bench::cnf_product_macs) / \
                 gemm_f64_384x64x64_all_cores_gflops (= cnf_train_step_gemm_bound_ms)"
                    .into(),
            ),
            "cnf_loglik_b500_ms" => time(
                f,
                &["cnf_train_step_gemm_bound_ms"],
                &|b| {
                    let (solve, step) = cnf_product_macs(&cnf_bench_config(), CNF_BENCH_BATCH);
                    b[0] * solve / step
                },
                "f64 gemm rate: one forward solve's product flops / \
                 gemm_f64_384x64x64_all_cores_gflops"
                    .into(),
            ),
            "gemm_f64_384x64x64_all_cores_gflops" => {
                f.limit_source = Some(
                    "is the limit: f64, the faster of the step's own product kernel (gemm_into, \
                     dfdx's bits) and gemm 0.19 (AVX-512 kernels) on a 384-row layer product (a \
                     chunk's is 252 rows, run at the same rate), every core at once"
                        .into(),
                )
            }
            "cnf_train_step_gemm_bound_ms" => {
                f.limit_source = Some("is the train_step_w64_d3_b500_ms limit".into())
            }
            "train_step_w64_d3_b500_f32_ms" => time(
                f,
                &["cnf_train_step_f32_gemm_bound_ms"],
                &|b| b[0],
                "f32 gemm rate: the step's product flops (bench::cnf_product_macs) / \
                 gemm_f32_384x64x64_all_cores_gflops (= cnf_train_step_f32_gemm_bound_ms)"
                    .into(),
            ),
            "gemm_f32_384x64x64_all_cores_gflops" => {
                f.limit_source = Some(
                    "is the limit: f32, the faster of the step's own product kernel (gemm_into, \
                     dfdx's bits) and gemm 0.19 (AVX-512 kernels) on a 384-row layer product (a \
                     chunk's is 252 rows, run at the same rate), every core at once"
                        .into(),
                )
            }
            "cnf_train_step_f32_gemm_bound_ms" => {
                f.limit_source = Some("is the train_step_w64_d3_b500_f32_ms limit".into())
            }
            "radam_allocs_per_step" => f.limit_source = Some("ideal: 0".into()),
            "ode_lv_tsit5_1e-8_us" => {
                let per_step = ode_steps.map_or(String::new(), |n| {
                    format!(" ({:.0} ns per step)", f.value * 1e3 / n)
                });
                f.limit_source = Some(format!(
                    "n/a: no measured machine limit fits a 2-D scalar solve{per_step}"
                ))
            }
            "counter_rng_gelems" => {
                f.limit_source = Some("n/a: the generator's own rate (bounds init compute)".into())
            }
            _ if f.unit == "ratio" => f.limit_source = Some("a ratio figure".into()),
            _ if matches!(f.unit.as_str(), "steps" | "evaluations") => {
                f.limit_source = Some("a count".into())
            }
            _ => f.limit_source = Some("n/a".into()),
        }
        // a limit the figure beats is not a limit: say so instead of printing the ratio
        if let Some(r) = f.ratio.filter(|r| *r > BROKEN_LIMIT_RATIO) {
            f.ratio = None;
            f.limit_source = Some(format!(
                "BROKEN LIMIT: the figure reaches {r:.3} of it (above {BROKEN_LIMIT_RATIO}), so \
                 it does not bound; {}",
                f.limit_source.take().unwrap_or_default()
            ));
        }
    }
    // every bracketed limit a figure was computed from, followed through the derived figures
    // between (a step's bound in ms is made from a gemm rate)
    let made_from: Vec<(String, Vec<String>, Option<Bracket>)> = figures
        .iter()
        .map(|f| (f.name.clone(), f.limited_by.clone(), f.bracket))
        .collect();
    for f in figures.iter_mut() {
        let mut seen: Vec<&str> = Vec::new();
        let mut todo: Vec<&str> = f.limited_by.iter().map(String::as_str).collect();
        while let Some(name) = todo.pop() {
            if seen.contains(&name) {
                continue;
            }
            seen.push(name);
            let Some((_, deps, bracket)) = made_from.iter().find(|(n, _, _)| n == name) else {
                continue;
            };
            todo.extend(deps.iter().rev().map(String::as_str));
            if let Some(b) = bracket.filter(Bracket::moved) {
                let source = f.limit_source.get_or_insert_with(String::new);
                source.push_str(&format!(
                    "; LIMIT MOVED: {name} read {:.1} before this figure and {:.1} after \
                     ({:.2}x); the faster is the limit, so a figure that ran at the slower speed \
                     is judged against a limit faster than its own moment's",
                    b.before,
                    b.after,
                    b.drift()
                ));
            }
        }
    }
}

/// Parameters per fused-step figure (16,777,216).
pub const FUSED_PARAMS: usize = 1 << 24;
/// Bytes moved per parameter by a fused Adam/RAdam step: read g, p, m, v; write p, m, v (f32).
pub const FUSED_BYTES_PER_PARAM: usize = 28;
/// Bytes of the copy whose bandwidth is the limit (256 MiB).
pub const COPY_BYTES: usize = 256 << 20;

/// Copy bandwidth with the threads and chunking the fused update uses: (read + written) / time.
pub fn copy_bandwidth_gbps(reps: usize) -> f64 {
    let n = COPY_BYTES / 4;
    let src = vec![1.0f32; n];
    let mut dst = vec![0.0f32; n];
    let secs = median_seconds(reps, || {
        dst.par_chunks_mut(crate::optim::fused::CHUNK)
            .zip(src.par_chunks(crate::optim::fused::CHUNK))
            .for_each(|(d, s)| d.copy_from_slice(s));
    });
    std::hint::black_box(&dst);
    (2 * COPY_BYTES) as f64 / secs / 1e9
}

/// The optimizer steps' traffic at the machine's best: read 4 f32 arrays of [`FUSED_PARAMS`]
/// (`g, p, m, v`), write 3 (`p, m, v`), one add each, in the fused step's chunks on every core,
/// compiled for the CPU's widest vectors (as the fused step is);
/// bytes counted as the fused figures count them ([`FUSED_BYTES_PER_PARAM`]), best of `reps`.
pub fn stream_4r3w_gbps(reps: usize) -> f64 {
    stream_4r3w_gbps_at(FUSED_PARAMS, reps)
}

/// [`stream_4r3w_gbps`] over arrays of `n` elements (at least 1).
pub fn stream_4r3w_gbps_at(n: usize, reps: usize) -> f64 {
    let n = n.max(1);
    let chunk = crate::optim::fused::CHUNK;
    let g = vec![1e-3f32; n];
    let (mut p, mut m, mut v) = (vec![0.5f32; n], vec![0.0f32; n], vec![0.0f32; n]);
    use crate::backend::{vectorised, Kernel};
    /// One chunk: `m += g; v += g; p -= g`, compiled for the CPU's widest vectors.
    struct Chunk<'a>(&'a mut [f32], &'a mut [f32], &'a mut [f32], &'a [f32]);
    impl Kernel for Chunk<'_> {
        type Output = ();
        #[inline(always)]
        fn run(self) {
            let Chunk(p, m, v, g) = self;
            for (((p, m), v), &g) in p.iter_mut().zip(m).zip(v).zip(g) {
                *m += g;
                *v += g;
                *p -= g;
            }
        }
    }
    let secs = best_seconds(reps, || {
        p.par_chunks_mut(chunk)
            .zip(m.par_chunks_mut(chunk))
            .zip(v.par_chunks_mut(chunk))
            .zip(g.par_chunks(chunk))
            .for_each(|(((p, m), v), g)| vectorised(Chunk(p, m, v, g)));
    });
    std::hint::black_box((&p, &m, &v));
    (FUSED_BYTES_PER_PARAM * n) as f64 / secs / 1e9
}

/// One pass of [`stream_4r3w_gbps`]'s traffic over a fused step's own arrays: read `g, p, m, v`,
/// write `p, m, v`, each written value its own (`x + 0 g`, which the compiler cannot drop: `0 g`
/// is not zero for an infinite or NaN `g`), in the step's chunks on every core, compiled for the
/// CPU's widest vectors. The limit of `bench optim`'s fused figures, measured where their bytes
/// live. For finite gradients the values do not change (a `-0` may become `+0`).
pub fn own_arrays_pass(
    params: &mut Tree<f32>,
    grads: &Tree<f32>,
    state: &mut crate::optim::MomentState<f32>,
) {
    use crate::backend::{vectorised, Kernel};
    struct Keep<'a>(&'a mut [f32], &'a mut [f32], &'a mut [f32], &'a [f32], f32);
    impl Kernel for Keep<'_> {
        type Output = ();
        #[inline(always)]
        fn run(self) {
            let Keep(p, m, v, g, zero) = self;
            for (((p, m), v), &g) in p.iter_mut().zip(m).zip(v).zip(g) {
                let z = zero * g;
                *m += z;
                *v += z;
                *p += z;
            }
        }
    }
    let zero = std::hint::black_box(0.0f32);
    let chunk = crate::optim::fused::CHUNK;
    for (((p, g), m), v) in params
        .iter_mut()
        .zip(grads.iter())
        .zip(state.mu.iter_mut())
        .zip(state.nu.iter_mut())
    {
        let (p, g, m, v) = (p.1.data_mut(), g.1.data(), m.1.data_mut(), v.1.data_mut());
        p.par_chunks_mut(chunk)
            .zip(m.par_chunks_mut(chunk))
            .zip(v.par_chunks_mut(chunk))
            .zip(g.par_chunks(chunk))
            .for_each(|(((p, m), v), g)| vectorised(Keep(p, m, v, g, zero)));
    }
}

/// The f32 gemm rate of one `n x n x n` product on every core (`2 n^3` flops), GFLOP/s: the
/// faster of [`gemm_f32_gflops_on`]'s two kernels (dfdx's call, and the later `gemm` release
/// with AVX-512 kernels), each issued whole and split by rows across a pool of every core.
pub fn gemm_f32_gflops(n: usize, reps: usize) -> f64 {
    [GemmKernel::Dfdx, GemmKernel::Widest]
        .into_iter()
        .map(|kernel| gemm_f32_gflops_on(kernel, n, reps))
        .fold(0.0, f64::max)
}

/// The f32 gemm rate of one `n x n x n` product issued to `kernel` (`2 n^3` flops), GFLOP/s:
/// the best of `reps` after one warm-up product, of the product as one call (gemm's own rayon
/// parallelism from [`crate::backend::GEMM_PARALLEL_MIN`] multiply-adds) and split by rows
/// across a [`crate::pool::Pool`] of every core ([`crate::backend::gemm_into_pooled`], as the
/// Newton–Schulz iteration issues its `B X`).
///
/// ```
/// use harness::backend::GemmKernel;
/// use harness::bench::{gemm_f32_gflops, gemm_f32_gflops_on};
/// assert!(gemm_f32_gflops_on(GemmKernel::Widest, 64, 1) > 0.0);
/// assert!(gemm_f32_gflops(64, 1) > 0.0);
/// ```
pub fn gemm_f32_gflops_on(kernel: GemmKernel, n: usize, reps: usize) -> f64 {
    use crate::backend::{gemm_into_on, gemm_into_pooled, Dest, Operand, Product};
    let n = n.max(1);
    let x: Vec<f32> = (0..n * n).map(|i| ((i as f32) * 0.618).sin()).collect();
    let mut dst = vec![0.0f32; n * n];
    let op = |d| Operand {
        data: d,
        offset: 0,
        rs: n,
        cs: 1,
    };
    let product = || Product {
        m: n,
        n,
        k: n,
        lhs: op(&x),
        rhs: op(&x),
    };
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let mut pool = crate::pool::Pool::new(threads);
    let mut run = |pooled: bool| {
        let dest = Dest {
            data: &mut dst[..],
            offset: 0,
            rs: n,
        };
        if pooled {
            gemm_into_pooled(&mut pool, kernel, product(), dest)
        } else {
            gemm_into_on(kernel, product(), dest)
        }
    };
    run(false);
    let whole = best_seconds(reps, || run(false));
    run(true);
    let pooled = best_seconds(reps, || run(true));
    std::hint::black_box(&dst);
    2.0 * (n as f64).powi(3) / whole.min(pooled) / 1e9
}

/// Fresh memory written once on every core: GB/s of filling a newly allocated buffer of
/// `elems` f16 values (rayon's collect writes each chunk in place), the best of `reps`.
pub fn fresh_write_gbps(elems: usize, reps: usize) -> f64 {
    let n = elems.max(1);
    let secs = best_seconds(reps, || {
        let v: Vec<half::f16> = (0..n).into_par_iter().map(|_| half::f16::ONE).collect();
        std::hint::black_box(v);
    });
    (2 * n) as f64 / secs / 1e9
}

/// The passes of one line-search step on `f32` Rosenbrock, per parameter: `(name, bytes, flops)`
/// (flops counted from the formulas, each `+ - *` one flop, no fused multiply-add).
///
/// - value and gradient: read x, write g; the term's 7 flops and its lane add, the gradient's 12;
/// - `sgd(1)`: read g, write u = -g; 1;
/// - slope `<u, g>`: read u and g; a product and a lane add;
/// - each evaluation `f(w + eta u)`: read w and u; the candidate's 4 flops (two coordinates per
///   term), the term's 7 and its lane add;
/// - the scaled update `lr u`: read u, write it; 1;
/// - `apply_updates`: read x and the update, write the new point; 1.
pub const LINESEARCH_PASSES: [(&str, f64, f64); 5] = [
    ("value_and_grad", 8.0, 20.0),
    ("sgd", 8.0, 1.0),
    ("slope", 8.0, 2.0),
    ("scaled_update", 8.0, 1.0),
    ("apply_updates", 12.0, 1.0),
];
/// An evaluation's pass, per parameter: `(bytes, flops)` (see [`LINESEARCH_PASSES`]).
pub const LINESEARCH_EVAL_PASS: (f64, f64) = (8.0, 12.0);

/// The line-search step's limit in seconds: each pass at the slower of its bytes at
/// `stream_gbps` and its flops at `flops_gflops`, summed over the passes and `evals` evaluations.
pub fn linesearch_limit_seconds(
    dim: usize,
    evals: f64,
    stream_gbps: f64,
    flops_gflops: f64,
) -> f64 {
    let pass = |bytes: f64, flops: f64| {
        let n = dim as f64;
        (n * bytes / (stream_gbps * 1e9)).max(n * flops / (flops_gflops * 1e9))
    };
    let fixed: f64 = LINESEARCH_PASSES.iter().map(|&(_, b, f)| pass(b, f)).sum();
    fixed + evals * pass(LINESEARCH_EVAL_PASS.0, LINESEARCH_EVAL_PASS.1)
}

/// The best rate of f32 additions and multiplications (not fused) on this machine: an
/// element-wise recurrence `y <- (y a + b) a + b ...` (6 products, 6 sums per element) over an
/// array that stays in the first-level cache, compiled for the CPU's widest vectors, in passes of
/// an evaluation's flops, on one core or split over two per pass (a rayon join on a rayon worker,
/// or the spinning helper threads of [`crate::help`]), whichever is fastest.
pub fn f32_flops_gflops(reps: usize) -> f64 {
    use crate::backend::{vectorised, Kernel};
    struct Recurrence<'a>(&'a mut [f32], usize);
    impl Kernel for Recurrence<'_> {
        type Output = ();
        #[inline(always)]
        fn run(self) {
            let (a, b) = (0.999_f32, 1e-3_f32);
            for _ in 0..self.1 {
                for y in self.0.iter_mut() {
                    let mut v = *y;
                    for _ in 0..6 {
                        v = v * a + b;
                    }
                    *y = v;
                }
            }
        }
    }
    let n = 2048; // 8 KiB: first-level cache
    let sweeps = 32; // one pass: 786,432 flops, an evaluation's worth at 65,536 parameters
    let passes = 64;
    let mut y: Vec<f32> = (0..n).map(|i| (i as f32).sin()).collect();
    // on a rayon worker, as the line-search step runs: a pass split over two cores pays one join
    let (one, two) = rayon::scope(|_| {
        let one = best_seconds(reps, || {
            for _ in 0..passes {
                vectorised(Recurrence(&mut y, sweeps));
            }
        });
        let (lo, hi) = y.split_at_mut(n / 2);
        let two = best_seconds(reps, || {
            for _ in 0..passes {
                rayon::join(
                    || vectorised(Recurrence(lo, sweeps)),
                    || vectorised(Recurrence(hi, sweeps)),
                );
            }
        });
        // the same halves shared with the spinning helper threads ([`crate::help`])
        let halves = [std::sync::Mutex::new(lo), std::sync::Mutex::new(hi)];
        let helped = best_seconds(reps, || {
            for _ in 0..passes {
                crate::help::run_parts(2, &|i| {
                    let mut half = halves[i].lock().unwrap_or_else(|e| e.into_inner());
                    vectorised(Recurrence(&mut half, sweeps));
                });
            }
        });
        (one, two.min(helped))
    });
    std::hint::black_box(&y);
    let sweeps = sweeps * passes;
    (12 * n * sweeps) as f64 / one.min(two) / 1e9
}

/// The best rate at which this machine streams two f32 vectors of `n` elements that live in its
/// caches (a sum of `w_i + u_i`, compiled for the CPU's widest vectors), a pass at a time, on one
/// core or split over two per pass (a rayon join on a rayon worker, or the spinning helper
/// threads of [`crate::help`]), whichever is fastest: 8 bytes per element counted. The limit of work
/// that moves `n`-element vectors a pass at a time, as the line search does.
pub fn cache_stream_gbps(n: usize, reps: usize) -> f64 {
    use crate::backend::{vectorised, Kernel, Lanes, LANES};
    struct SumBoth<'a>(&'a [f32], &'a [f32]);
    impl Kernel for SumBoth<'_> {
        type Output = f32;
        #[inline(always)]
        fn run(self) -> f32 {
            // four independent sets of lanes, so that the adds' latency does not bound the rate
            let mut lanes = [Lanes::default(); 4];
            let width = 4 * LANES;
            for (a, b) in self.0.chunks_exact(width).zip(self.1.chunks_exact(width)) {
                for (j, l) in lanes.iter_mut().enumerate() {
                    let mut t = [0.0f32; LANES];
                    for k in 0..LANES {
                        t[k] = a[j * LANES + k] + b[j * LANES + k];
                    }
                    l.add_block(&t);
                }
            }
            lanes.iter().map(|l| l.total()).sum()
        }
    }
    let w: Vec<f32> = (0..n).map(|i| (i as f32).sin()).collect();
    let u: Vec<f32> = (0..n).map(|i| (i as f32).cos()).collect();
    let passes = 64; // each timing covers many passes: one pass is microseconds
                     // on a rayon worker, as the line-search step runs: a pass split over two cores pays one join
    let (one, two) = rayon::scope(|_| {
        let one = best_seconds(reps, || {
            for _ in 0..passes {
                std::hint::black_box(vectorised(SumBoth(&w, &u)));
            }
        });
        let h = n / 2;
        let two = best_seconds(reps, || {
            for _ in 0..passes {
                std::hint::black_box(rayon::join(
                    || vectorised(SumBoth(&w[..h], &u[..h])),
                    || vectorised(SumBoth(&w[h..], &u[h..])),
                ));
            }
        });
        // the same halves shared with the spinning helper threads ([`crate::help`])
        let helped = best_seconds(reps, || {
            for _ in 0..passes {
                crate::help::run_parts(2, &|i| {
                    let (a, b) = (&w[i * h..(i + 1) * h], &u[i * h..(i + 1) * h]);
                    std::hint::black_box(vectorised(SumBoth(a, b)));
                });
            }
        });
        (one, two.min(helped))
    });
    (8 * n * passes) as f64 / one.min(two) / 1e9
}

fn optim(quick: bool) -> Result<Vec<Figure>> {
    let reps = if quick { 3 } else { 11 };
    let copy = copy_bandwidth_gbps(reps);
    let stream = stream_4r3w_gbps(reps);
    let mk = |v: f32| -> Result<Tree<f32>> {
        Ok(Tree::from_leaves([(
            "w".to_string(),
            Array::new(vec![FUSED_PARAMS], vec![v; FUSED_PARAMS])?,
        )])?)
    };
    let mut params = mk(0.5)?;
    let grads = mk(0.01)?;
    let bytes = (FUSED_BYTES_PER_PARAM * FUSED_PARAMS) as f64;

    let mut adam = FusedMoments::adam(1e-3, AdamHyper::default(), &params)?;
    adam.step(&mut params, &grads)?;
    let mut radam = FusedMoments::radam(1e-3, RadamHyper::default(), Selection::Where, &params)?;
    for _ in 0..2 {
        radam.step(&mut params, &grads)?;
    }
    // Each step's limit is the same traffic over the step's own arrays, timed just before each
    // of its repetitions. On this shared host the speed of memory depends on where an array
    // lands (measured: in 20 interleaved rounds, the optimizer whose state was allocated second
    // streamed at 71-78 GB/s, the other and a separate stream's arrays at 53-62; allocating them
    // in the other order swapped the two) and changes within seconds, so a limit measured on
    // other arrays or at other moments need not bound the step.
    let (mut adam_lim_s, mut radam_lim_s) = (f64::INFINITY, f64::INFINITY);
    let (mut adam_t, mut radam_t) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        adam_lim_s = adam_lim_s.min(seconds(|| {
            own_arrays_pass(&mut params, &grads, adam.state_mut())
        }));
        adam_t.push(seconds(|| {
            adam.step(&mut params, &grads).expect("validated")
        }));
        radam_lim_s = radam_lim_s.min(seconds(|| {
            own_arrays_pass(&mut params, &grads, radam.state_mut())
        }));
        radam_t.push(seconds(|| {
            radam.step(&mut params, &grads).expect("validated")
        }));
    }
    drop(adam);
    let (adam_s, radam_s) = (median(adam_t), median(radam_t));
    let (adam_lim, radam_lim) = (bytes / adam_lim_s / 1e9, bytes / radam_lim_s / 1e9);
    // Counted on a rayon worker (every thread's allocations count): a call from outside the
    // pool also pushes its job into rayon's global queue, which allocates a block of slots every
    // 63 pushes — rayon's bookkeeping, not the step's, and depending only on how many calls came
    // before (measured: 1 allocation in a window of 20 steps after 2 + `reps` warm-up steps,
    // 0 after a different count).
    let steps = 20u64;
    let (r, m) = rayon::join(
        || {
            crate::probe::measure(|| {
                for _ in 0..steps {
                    radam.step(&mut params, &grads)?;
                }
                Ok::<(), Error>(())
            })
        },
        || (),
    )
    .0;
    r?;
    drop(radam);
    drop(params);
    drop(grads);
    // a step is a fraction of a millisecond: many repetitions steady its median; its two limit
    // rates are read on both sides of it
    let ([cache_stream, flops], (ls_ms, ls_evals)) = Bracket::settled_each(
        settle_rounds(quick),
        [&mut || cache_stream_gbps(LINESEARCH_DIM, reps), &mut || {
            f32_flops_gflops(reps)
        }],
        || linesearch_rosenbrock(LINESEARCH_DIM, 20 * reps + 1),
    )?;
    let (adam_gbps, radam_gbps) = (bytes / adam_s / 1e9, bytes / radam_s / 1e9);
    let (copy_name, adam_limit, radam_limit) = (
        "copy_bandwidth_gbps",
        "adam_arrays_4r3w_gbps",
        "radam_arrays_4r3w_gbps",
    );
    Ok(vec![
        fig(copy_name, copy, "GB/s"),
        fig("stream_4r3w_gbps", stream, "GB/s"),
        Figure::bracketed("cache_stream_65536_gbps", cache_stream, "GB/s"),
        Figure::bracketed("f32_flops_gflops", flops, "GFLOP/s"),
        fig("adam_fused_16m_gbps", adam_gbps, "GB/s"),
        fig("radam_fused_16m_gbps", radam_gbps, "GB/s"),
        fig("adam_fused_vs_copy", adam_gbps / copy, "ratio").limited_by(&[copy_name]),
        fig("radam_fused_vs_copy", radam_gbps / copy, "ratio").limited_by(&[copy_name]),
        fig(adam_limit, adam_lim, "GB/s"),
        fig(radam_limit, radam_lim, "GB/s"),
        fig("adam_fused_vs_limit", adam_gbps / adam_lim, "ratio").limited_by(&[adam_limit]),
        fig("radam_fused_vs_limit", radam_gbps / radam_lim, "ratio").limited_by(&[radam_limit]),
        fig(
            "radam_allocs_per_step",
            m.allocations as f64 / steps as f64,
            "allocations",
        ),
        fig("linesearch_rosenbrock_65536_ms", ls_ms, "ms"),
        fig(
            "linesearch_rosenbrock_65536_evals",
            ls_evals as f64,
            "evaluations",
        ),
    ])
}

/// Lotka–Volterra (1.1, 0.4, 0.4, 0.1) from (10, 10) over [0, 15], Tsit5, PID rtol 1e-8 atol 1e-10,
/// selected dt0 (diffrax 0.7.2: 0.01), f64: median microseconds per full solve (final state only).
fn ode(quick: bool) -> Result<Vec<Figure>> {
    use crate::ode::{fixtures::LotkaVolterra, solve, Controller, SolveOptions, Solver};
    let lv = LotkaVolterra::new(1.1, 0.4, 0.4, 0.1)?;
    let (tab, ctl) = (Solver::Tsit5.tableau(), Controller::pid(1e-8, 1e-10)?);
    let opts = SolveOptions {
        save_steps: false,
        ..Default::default()
    };
    let run = || {
        solve(
            &lv,
            &Integration::new(&tab, &ctl, 0.0, 15.0).with_options(opts),
            &[10.0f64, 10.0],
        )
    };
    let steps = run()?.stats.num_steps;
    let secs = median_seconds(if quick { 21 } else { 201 }, || {
        std::hint::black_box(run().expect("validated"));
    });
    Ok(vec![
        fig("ode_lv_tsit5_1e-8_us", secs * 1e6, "us"),
        fig("ode_lv_tsit5_1e-8_steps", steps as f64, "steps"),
    ])
}

/// The kernels `bench faces` times in both faces, with the work each does.
pub const FACE_KERNELS: [(&str, &str); 7] = [
    ("adam", "one step, 2^20 f32 parameters"),
    ("radam", "one step, 2^20 f32 parameters (rectified)"),
    ("newton_schulz", "5 iterations, 512 x 512 f32"),
    (
        "ode_solve",
        "Lotka-Volterra, Tsit5, PID 1e-8, f64 (the ode figure's solve)",
    ),
    (
        "linesearch",
        "one sgd + backtracking step, Rosenbrock 2^16, f32",
    ),
    ("stacked_init", "8 layers 512-2048-512, f16"),
    (
        "cnf_log_density",
        "256 points, width 64, depth 3, 1 block, f64, exact trace",
    ),
];

/// Each kernel in its fast form and its dfdx face, on the same work ([`FACE_KERNELS`]): median
/// milliseconds of each, and how many times slower the dfdx face is
/// (`faces_<kernel>_fast_ms`, `faces_<kernel>_dfdx_ms`, `faces_<kernel>_dfdx_over_fast`).
fn faces(quick: bool) -> Result<Vec<Figure>> {
    use crate::optim::linesearch::{
        point, sgd_linesearch, BacktrackingHyper, LineSearch, Objective, Rosenbrock, Staged,
    };
    use crate::optim::{adam, apply_updates, radam, Transform};
    use crate::reference::Face;
    let reps = if quick { 3 } else { 9 };
    let mut out = Vec::new();
    let mut pair = |name: &str, fast: f64, dfdx: f64| {
        out.push(fig(&format!("faces_{name}_fast_ms"), fast * 1e3, "ms"));
        out.push(fig(&format!("faces_{name}_dfdx_ms"), dfdx * 1e3, "ms"));
        out.push(fig(
            &format!("faces_{name}_dfdx_over_fast"),
            dfdx / fast,
            "ratio",
        ));
    };
    let leaf = |v: Vec<f32>| crate::tree::Tree::from_leaves([("w".to_string(), Array::vector(v))]);
    // Adam and RAdam: fused in place, or the composed update then apply_updates.
    let n = 1 << 20;
    let p0 = leaf((0..n).map(|i| (i as f32 * 0.37).sin()).collect())?;
    let g = leaf((0..n).map(|i| (i as f32 * 0.11).cos()).collect())?;
    let moments = AdamHyper::default();
    for (name, radam_rule) in [("adam", false), ("radam", true)] {
        let hyper = RadamHyper {
            moments,
            ..RadamHyper::default()
        };
        let mut p = p0.clone();
        let mut fused = if radam_rule {
            FusedMoments::radam(1e-3, hyper, Selection::Where, &p)?
        } else {
            FusedMoments::adam(1e-3, moments, &p)?
        };
        for _ in 0..8 {
            fused.step(&mut p, &g)?; // past RAdam's switch to the rectified branch
        }
        let fast = median_seconds(reps, || fused.step(&mut p, &g).expect("validated"));
        let composed_step = |p: &crate::tree::Tree<f32>| -> Result<crate::tree::Tree<f32>> {
            if radam_rule {
                let opt = radam(1e-3, hyper, Selection::Where)?;
                let mut s = Transform::init(&opt, p)?;
                s.0.count = 8;
                let (u, _) = Transform::update(&opt, &g, &s, p)?;
                Ok(apply_updates(p, &u)?)
            } else {
                let opt = adam(1e-3, moments)?;
                let s = Transform::init(&opt, p)?;
                let (u, _) = Transform::update(&opt, &g, &s, p)?;
                Ok(apply_updates(p, &u)?)
            }
        };
        let dfdx = median_seconds(reps, || {
            std::hint::black_box(composed_step(&p0).expect("validated"));
        });
        pair(name, fast, dfdx);
    }
    // Newton-Schulz: planned (symmetric products over a workspace) or composed dfdx matmuls.
    {
        use crate::optim::muon::{coeffs::STANDARD, orthogonalize_composed, NsPlan};
        let m = 512;
        let x: Vec<f32> = (0..m * m).map(|i| ((i as f32) * 0.618).sin()).collect();
        let coeffs = Array::new(vec![3], STANDARD.to_vec())?;
        let mut plan = NsPlan::<f32>::new(m, m);
        let mut y = vec![0.0f32; m * m];
        plan.run(&x, &coeffs, 5, 1e-8, &mut y);
        let fast = median_seconds(reps, || {
            plan.run(&x, &coeffs, 5, 1e-8, &mut y);
        });
        let xa = Array::new(vec![m, m], x.clone())?;
        let dfdx = median_seconds(reps, || {
            std::hint::black_box(orthogonalize_composed(&xa, &coeffs, 5, 1e-8f32));
        });
        pair("newton_schulz", fast, dfdx);
    }
    // The ODE figure's solve in each face.
    {
        use crate::ode::{fixtures::LotkaVolterra, solve, Controller, Solver};
        let lv = LotkaVolterra::new(1.1, 0.4, 0.4, 0.1)?;
        let (tab, ctl) = (Solver::Tsit5.tableau(), Controller::pid(1e-8, 1e-10)?);
        let time = |face| {
            let i = Integration::new(&tab, &ctl, 0.0, 15.0)
                .save_steps(false)
                .face(face);
            median_seconds(reps, || {
                std::hint::black_box(solve(&lv, &i, &[10.0f64, 10.0]).expect("validated"));
            })
        };
        pair("ode_solve", time(Face::Fast), time(Face::Dfdx));
    }
    // The line-search figure's step with each face's kernels.
    {
        let dim = LINESEARCH_DIM;
        let x0 = point::<f32>(
            &(0..dim)
                .map(|i| 0.5 + 0.1 * (i as f64).sin())
                .collect::<Vec<_>>(),
        );
        let time = |face| -> Result<f64> {
            let mut opt = sgd_linesearch(BacktrackingHyper::new(15))?;
            opt.1 = opt.1.with_face(face);
            let state = opt.init(&x0)?;
            let mut staged = Staged::new(opt).with_max_traces(1);
            let (v, g) = Rosenbrock.value_and_grad(&x0)?;
            Ok(median_seconds(reps, || {
                let (u, _) = staged
                    .update(&g, &state, &x0, v, &g, &Rosenbrock)
                    .expect("valid");
                std::hint::black_box(u);
            }))
        };
        let (fast, dfdx) = (time(Face::Fast)?, time(Face::Dfdx)?);
        pair("linesearch", fast, dfdx);
    }
    // Stacked init: chunked-direct, or the dfdx face (every layer in f32, to_dtype, stack).
    {
        use crate::stack::{build, dfdx_face, StackConfig, Strategy};
        let cfg = StackConfig::new(8, 512, 2048, crate::backend::DType::F16)?;
        let fast = median_seconds(reps, || {
            std::hint::black_box(
                build::<half::f16>(&cfg, 1, Strategy::ChunkedDirect, &mut ()).expect("valid"),
            );
        });
        let dfdx = median_seconds(reps, || {
            std::hint::black_box(dfdx_face::build::<half::f16>(&cfg, 1).expect("valid"));
        });
        pair("stacked_init", fast, dfdx);
    }
    // CNF log-density: the hand-written field, or the taped field with the dfdx step.
    {
        use crate::cnf::flow::log_likelihood_with;
        use crate::cnf::{CnfConfig, CnfParams};
        let cfg = CnfConfig {
            width: 64,
            depth: 3,
            blocks: 1,
            ..CnfConfig::default()
        };
        let params = CnfParams::<f64>::init(cfg, 3)?;
        let x: Vec<f64> = (0..512).map(|i| (i as f64 * 0.3).sin()).collect();
        let time = |face| {
            median_seconds(reps.min(3), || {
                std::hint::black_box(log_likelihood_with(&params, &x, None, face).expect("valid"));
            })
        };
        pair("cnf_log_density", time(Face::Fast), time(Face::Dfdx));
    }
    Ok(out)
}

/// Dimension of the line-search figure.
pub const LINESEARCH_DIM: usize = 1 << 16;

/// Median milliseconds of one chained step on a `dim`-dimensional Rosenbrock (f32, start
/// `x_i = 0.5 + 0.1 sin(i)`, 15 backtracking steps), and the evaluations it made; the steps run
/// on a rayon worker.
pub fn linesearch_rosenbrock(dim: usize, reps: usize) -> Result<(f64, i32)> {
    use crate::optim::linesearch::{
        point, sgd_linesearch, BacktrackingHyper, LineSearch, Objective, Rosenbrock, Staged,
    };
    let x0: Vec<f64> = (0..dim).map(|i| 0.5 + 0.1 * (i as f64).sin()).collect();
    let x0 = point::<f32>(&x0);
    let opt = sgd_linesearch(BacktrackingHyper::new(15))?;
    let state = opt.init(&x0)?;
    let mut staged = Staged::new(opt).with_max_traces(1);
    let mut step = || -> Result<i32> {
        let (v, g) = Rosenbrock.value_and_grad(&x0)?;
        let (u, s) = staged.update(&g, &state, &x0, v, &g, &Rosenbrock)?;
        std::hint::black_box(crate::tree::apply_updates(&x0, &u)?);
        Ok(s.1.info.num_linesearch_steps.value)
    };
    // the steps run on a rayon worker, as a training loop inside the pool does: there the
    // objective's long sums split over the cores ([`crate::backend::blocked_sum`])
    rayon::scope(|_| {
        let evals = step()?;
        let mut failure = None;
        let secs = median_seconds(reps, || {
            if let Err(e) = step() {
                failure = Some(e);
            }
        });
        match failure {
            Some(e) => Err(e),
            None => Ok((secs * 1e3, evals)),
        }
    })
}
/// Side of the Newton–Schulz and GEMM figures.
pub const MUON_N: usize = 1024;

fn muon(quick: bool) -> Result<Vec<Figure>> {
    use crate::optim::muon::NsPlan;
    let reps = if quick { 3 } else { 7 };
    let n = MUON_N;
    let x: Vec<f32> = (0..n * n).map(|i| ((i as f32) * 0.618).sin()).collect();
    let coeffs = Array::new(vec![3], crate::optim::muon::coeffs::STANDARD.to_vec())?;
    let mut plan = NsPlan::<f32>::new(n, n);
    let mut out = vec![0.0f32; n * n];
    plan.run(&x, &coeffs, 5, 1e-8, &mut out);
    // the limit's rate: the best product, read on both sides of the iteration's timing
    let (gemm, ns_s) = Bracket::settled(
        settle_rounds(quick),
        || gemm_f32_gflops(n, reps),
        || {
            Ok::<_, Error>(median_seconds(reps, || {
                plan.run(&x, &coeffs, 5, 1e-8, &mut out);
            }))
        },
    )?;
    std::hint::black_box(&out);
    Ok(muon_figures(n, gemm, ns_s))
}

/// The `muon` area's figures from its measurements: the gemm rate read around the iteration,
/// and the iteration's median time in seconds for `n x n`.
fn muon_figures(n: usize, gemm: Bracket, ns_s: f64) -> Vec<Figure> {
    let rate = "gemm_1024_gflops";
    let gemm_s = 2.0 * (n as f64).powi(3) / (gemm.limit() * 1e9);
    // a plain iteration is 3 full products; the planned one ~2.06 (the tiles covering the upper
    // triangles of A and (cA)A, 0.53 each at 1024, and B X)
    let full_products_ms = 15.0 * gemm_s * 1e3;
    vec![
        Figure::bracketed(rate, gemm, "GFLOP/s"),
        fig("ns5_1024_ms", ns_s * 1e3, "ms"),
        fig("ns5_1024_15_gemms_ms", full_products_ms, "ms").limited_by(&[rate]),
        fig(
            "ns5_1024_vs_15_gemms",
            ns_s * 1e3 / full_products_ms,
            "ratio",
        )
        .limited_by(&[rate]),
    ]
}

/// The stack figure's model: 16 layers of a 1024-4096-1024 block in f16 (256 MiB).
pub fn stack_bench_config() -> Result<crate::stack::StackConfig> {
    Ok(crate::stack::StackConfig::new(
        16,
        1024,
        4096,
        crate::backend::DType::F16,
    )?)
}

fn stack(quick: bool) -> Result<Vec<Figure>> {
    use crate::stack::{build, Strategy};
    let reps = if quick { 1 } else { 5 };
    let cfg = stack_bench_config()?;
    let bytes = cfg.final_bytes() as f64;
    let n = cfg.params();
    // fresh memory written once on every core (rayon's collect writes each chunk in place),
    // the best of the run, read on both sides of the init's timing
    let (fill, init_s) = Bracket::settled(
        settle_rounds(quick),
        || fresh_write_gbps(n, reps.max(3)),
        || {
            timed_fallibly(
                |f| median_seconds(reps, f),
                || {
                    build::<half::f16>(&cfg, 0, Strategy::ChunkedDirect, &mut ())
                        .map(|m| drop(std::hint::black_box(m)))
                },
            )
        },
    )?;
    // the generator alone, as the init runs it (hashed, scaled and rounded to f16 in one pass),
    // one thread, into a warm 32 KiB buffer: the compute half of the init
    let mut scratch = vec![half::f16::ZERO; crate::stack::init::CHUNK_ELEMS];
    let key = crate::stack::rng::stream_key(0, 0, 0);
    let rounds = 256u64;
    let rng_s = median_seconds(reps, || {
        for r in 0..rounds {
            let start = r * scratch.len() as u64;
            crate::stack::rng::fill_canonical(key, 0.5, start, &mut scratch);
            std::hint::black_box(&scratch);
        }
    });
    let rng_rate = (rounds as usize * scratch.len()) as f64 / rng_s / 1e9;
    Ok(stack_figures(bytes, init_s, fill, rng_rate))
}

/// The `stack` area's figures from its measurements: the model's bytes, the init's median time
/// in seconds, the fresh-write rate read around it, and the generator's rate in Gelem/s.
fn stack_figures(bytes: f64, init_s: f64, fill: Bracket, rng_rate: f64) -> Vec<Figure> {
    let limit = "fresh_write_gbps";
    let init = bytes / init_s / 1e9;
    vec![
        fig("init_chunked_gbps", init, "GB/s"),
        Figure::bracketed(limit, fill, "GB/s"),
        fig("init_chunked_vs_fresh_write", init / fill.limit(), "ratio").limited_by(&[limit]),
        fig("init_chunked_16x1024x4096_ms", init_s * 1e3, "ms"),
        fig("counter_rng_gelems", rng_rate, "Gelem/s"),
    ]
}

/// Multiply-adds of one CNF field evaluation over `n` samples with `k` tangents (the matrix
/// products: `(1 + k) n` rows through every layer's `out x in` weight).
pub fn cnf_eval_macs(cfg: &crate::cnf::CnfConfig, n: usize) -> f64 {
    let rows = ((1 + cfg.tangents()) * n) as f64;
    cfg.layer_dims()
        .iter()
        .map(|&(i, o)| rows * (i * o) as f64)
        .sum()
}

/// Multiply-adds of the matrix products of a CNF solve and of a training step on it, for one
/// block over a batch of `n`, counted as the code computes them: `(solve, step)`.
///
/// - The solve (the log-likelihood, or the states of a training step) evaluates the field once
///   per stage: `1 + steps (s - 1)` evaluations for a tableau whose last stage is the next
///   step's first (Tsit5: 61 for 10 steps), `steps s` otherwise.
/// - A training step adds, per step, the `s'` stages its VJP needs (all but an FSAL tableau's
///   last), evaluated again keeping their products, and for each the hand-written backward's
///   two products per layer ([`crate::cnf::adjoint`]: `W1bar = Pbar^T H` over every row, and
///   `Hbar = Pbar W1` over every row but the first layer's tangent rows, which are constants).
///
/// ```
/// use harness::bench::cnf_product_macs;
/// let cfg = harness::cnf::CnfConfig { width: 64, depth: 3, blocks: 1, ..Default::default() };
/// let (solve, step) = cnf_product_macs(&cfg, 500);
/// // one evaluation: 1500 rows (the exact trace in 2-D) through 2x64, 64x64, 64x64, 64x2
/// let eval = 1500.0 * (128.0 + 4096.0 + 4096.0 + 128.0);
/// assert_eq!(solve, 61.0 * eval);
/// // 60 kept evaluations, 60 backward passes less the first layer's 1000 tangent rows of Hbar
/// assert_eq!(step, solve + 60.0 * eval + 60.0 * (2.0 * eval - 1000.0 * 128.0));
/// ```
pub fn cnf_product_macs(cfg: &crate::cnf::CnfConfig, n: usize) -> (f64, f64) {
    let tab = cfg.solver.tableau();
    let s = tab.stages() as f64;
    let steps = ((cfg.t1 - cfg.t0) / cfg.dt0).round();
    let (solve_evals, kept_evals) = if tab.fsal() {
        (1.0 + steps * (s - 1.0), steps * (s - 1.0))
    } else {
        (steps * s, steps * s)
    };
    let eval = cnf_eval_macs(cfg, n);
    let (i0, o0) = cfg.layer_dims()[0];
    let first_tangent_hbar = (cfg.tangents() * n * i0 * o0) as f64;
    let backward = 2.0 * eval - first_tangent_hbar;
    let solve = solve_evals * eval;
    (solve, solve + kept_evals * (eval + backward))
}

/// The field of the `cnf` area: width 64, depth 3, one block (the rest as
/// [`crate::cnf::CnfConfig::default`]).
fn cnf_bench_config() -> crate::cnf::CnfConfig {
    crate::cnf::CnfConfig {
        width: 64,
        depth: 3,
        blocks: 1,
        ..crate::cnf::CnfConfig::default()
    }
}

/// The batch of the `cnf` area's training step and log-likelihood.
const CNF_BENCH_BATCH: usize = 500;

/// Area `cnf`: `train_step_w64_d3_b500_ms` (one full training step — batch draw, loss and
/// gradient through 10 constant Tsit5 steps with the exact trace and the full tape, AdamW
/// update — for width 64, depth 3, one block, batch 500, 2-D two-moons), the forward
/// log-likelihood of the same batch, and the limit: the step's matrix-product flops divided by
/// the f64 rate of a `384 x 64 x 64` layer product ([`CNF_LIMIT_SAMPLES`]) run on every core at once,
/// read just before and just after the step and the log-likelihood ([`Bracket`]; the step cuts the batch into chunks of at most
/// [`crate::cnf::flow::GRAD_CHUNK`] samples, one core each). The product is timed through
/// [`crate::backend::gemm_into`], the step's own entry point (on AVX-512 CPUs the register-tiled
/// outer products: 58 GFLOP/s a core in f64 on the benchmark machine, against `gemm` 0.15's 37),
/// and through `gemm` 0.19's AVX-512 kernels, which the step cannot use without changing its
/// bits; the faster of the two is the limit ([`cnf_chunk_gemm_gflops`]). The step's products are counted as the code computes them ([`cnf_product_macs`]).
/// The same step trained in f32 (`train_step_w64_d3_b500_f32_ms`) has its own limit:
/// the same flops at the f32 rate of the same product, read on both sides of that step.
fn cnf(quick: bool) -> Result<Vec<Figure>> {
    use crate::cnf::data::Dataset;
    use crate::cnf::train::{TrainConfig, Trainer};
    let cfg = cnf_bench_config();
    let tc = TrainConfig {
        batch: CNF_BENCH_BATCH,
        ..TrainConfig::default()
    };
    let reps = if quick { 2 } else { 7 };
    let gemm_reps = if quick { 50 } else { 400 };
    let trainer = Trainer::new(cfg, tc, Dataset::TwoMoons)?;
    let params = trainer.params_of(&trainer.init()?)?;
    let mut batch = vec![0.0; tc.batch * 2];
    trainer.batch_of(0, &mut batch);
    // each dtype's limit rate read on both sides of the figures it bounds
    let (gemm64, (step_s, fwd_s)) = Bracket::settled(
        settle_rounds(quick),
        || cnf_chunk_gemm_gflops::<f64>(&cfg, gemm_reps),
        || -> Result<(f64, f64)> {
            let step_s = cnf_train_step_seconds::<f64>(cfg, tc, reps)?;
            let fwd_s = timed_fallibly(
                |f| median_seconds(reps, f),
                || crate::cnf::flow::log_likelihood(&params, &batch, None).map(drop),
            )?;
            Ok((step_s, fwd_s))
        },
    )?;
    let (gemm32, step32_s) = Bracket::settled(
        settle_rounds(quick),
        || cnf_chunk_gemm_gflops::<f32>(&cfg, gemm_reps),
        || cnf_train_step_seconds::<f32>(cfg, tc, reps),
    )?;
    let timings = CnfTimings {
        step_f64_s: step_s,
        loglik_f64_s: fwd_s,
        gemm_f64: gemm64,
        step_f32_s: step32_s,
        gemm_f32: gemm32,
    };
    Ok(timings.figures(2.0 * cnf_product_macs(&cfg, tc.batch).1))
}

/// What the `cnf` area measures: each dtype's step time and the gemm rate read around it.
#[derive(Debug, Clone, Copy)]
struct CnfTimings {
    /// One f64 training step, seconds.
    step_f64_s: f64,
    /// The f64 log-likelihood of the batch, seconds.
    loglik_f64_s: f64,
    /// The f64 layer product's rate, GFLOP/s, read around the f64 step and log-likelihood.
    gemm_f64: Bracket,
    /// One f32 training step, seconds.
    step_f32_s: f64,
    /// The f32 layer product's rate, GFLOP/s, read around the f32 step.
    gemm_f32: Bracket,
}

impl CnfTimings {
    /// The area's figures, each step bounded by its `step_flops` at its dtype's rate.
    fn figures(&self, step_flops: f64) -> Vec<Figure> {
        // each dtype's measured figures, then (the rate, the bound made from it, the ratio made
        // from the bound)
        let dtypes = [
            (
                vec![
                    fig("train_step_w64_d3_b500_ms", self.step_f64_s * 1e3, "ms"),
                    fig("cnf_loglik_b500_ms", self.loglik_f64_s * 1e3, "ms"),
                ],
                [
                    "gemm_f64_384x64x64_all_cores_gflops",
                    "cnf_train_step_gemm_bound_ms",
                    "train_step_vs_gemm_bound",
                ],
                self.step_f64_s,
                self.gemm_f64,
            ),
            (
                vec![fig(
                    "train_step_w64_d3_b500_f32_ms",
                    self.step_f32_s * 1e3,
                    "ms",
                )],
                [
                    "gemm_f32_384x64x64_all_cores_gflops",
                    "cnf_train_step_f32_gemm_bound_ms",
                    "train_step_f32_vs_gemm_bound",
                ],
                self.step_f32_s,
                self.gemm_f32,
            ),
        ];
        let mut out = Vec::new();
        for (measured, [rate, bound, ratio], step_s, gemm) in dtypes {
            let bound_ms = step_flops / (gemm.limit() * 1e9) * 1e3;
            out.extend(measured);
            out.extend([
                Figure::bracketed(rate, gemm, "GFLOP/s"),
                fig(bound, bound_ms, "ms").limited_by(&[rate]),
                fig(ratio, bound_ms / (step_s * 1e3), "ratio").limited_by(&[bound]),
            ]);
        }
        out
    }
}

/// Seconds of one CNF training step in `A` (f32 or f64) for `cfg` and `tc` on two-moons: one
/// warm-up step (the trace), then the median of `reps` steps from the same state.
fn cnf_train_step_seconds<A: crate::backend::Real>(
    cfg: crate::cnf::CnfConfig,
    tc: crate::cnf::train::TrainConfig,
    reps: usize,
) -> Result<f64> {
    use crate::cnf::data::Dataset;
    use crate::cnf::train::Trainer;
    let mut trainer = Trainer::<A>::typed(cfg, tc, Dataset::TwoMoons)?;
    let state = trainer.init()?;
    trainer.step(&state)?;
    Ok(timed_fallibly(
        |f| median_seconds(reps, f),
        || trainer.step(&state).map(drop),
    )?)
}

/// Samples whose stacked rows set the CNF limit's product shape: `(1 + d) 128` rows, `384 x 64 x
/// 64` for the benchmark's field (the shape in the names `gemm_*_384x64x64_all_cores_gflops`).
/// The step's chunks hold at most [`crate::cnf::flow::GRAD_CHUNK`] = 84 samples (252 rows); the
/// product kernel runs both shapes at the same rate (ten `bench cnf` runs each: 252 rows
/// 112.8-113.6 GFLOP/s in f64 and 223.9-225.4 in f32, 384 rows 113.0-113.4 and 224.4-225.4).
pub const CNF_LIMIT_SAMPLES: usize = 128;

/// The gemm rate in `A` (f32 or f64; GFLOP/s, all threads together) of a CNF layer's
/// dominant product, a stand-in for a chunk's one at the same rate, `(1 + d) CNF_LIMIT_SAMPLES x
/// width x width` for the field of `cfg`: the faster of [`cnf_chunk_gemm_gflops_on`]'s two
/// kernels (the step's own, with dfdx's bits, and `gemm` 0.19 with AVX-512 kernels, which the
/// step cannot use but the machine has).
///
/// ```
/// use harness::bench::cnf_chunk_gemm_gflops;
/// let cfg = harness::cnf::CnfConfig { width: 8, ..Default::default() };
/// assert!(cnf_chunk_gemm_gflops::<f32>(&cfg, 1) > 0.0);
/// assert!(cnf_chunk_gemm_gflops::<f64>(&cfg, 1) > 0.0);
/// ```
pub fn cnf_chunk_gemm_gflops<A: crate::backend::Real>(
    cfg: &crate::cnf::CnfConfig,
    reps: usize,
) -> f64 {
    [GemmKernel::Dfdx, GemmKernel::Widest]
        .into_iter()
        .map(|kernel| cnf_chunk_gemm_gflops_on::<A>(kernel, cfg, reps))
        .fold(0.0, f64::max)
}

/// [`cnf_chunk_gemm_gflops`]'s product issued to `kernel` ([`crate::backend::gemm_into_on`]),
/// with every rayon thread running `reps` products of its own at once, as the chunks of a step
/// do: the best of 5 rounds after a warm-up round (a limit is the best the machine does in the
/// run; with the median of 3, one run's rate read 157 GFLOP/s in f32 against 222-224 in the runs
/// beside it, and the step read 1.01 of its limit).
///
/// ```
/// use harness::backend::GemmKernel;
/// use harness::bench::cnf_chunk_gemm_gflops_on;
/// let cfg = harness::cnf::CnfConfig { width: 8, ..Default::default() };
/// assert!(cnf_chunk_gemm_gflops_on::<f64>(GemmKernel::Widest, &cfg, 1) > 0.0);
/// ```
pub fn cnf_chunk_gemm_gflops_on<A: crate::backend::Real>(
    kernel: GemmKernel,
    cfg: &crate::cnf::CnfConfig,
    reps: usize,
) -> f64 {
    use crate::backend::{gemm_into_on, Dest, Operand, Product};
    let (m, k, n) = (
        (1 + cfg.tangents()) * CNF_LIMIT_SAMPLES,
        cfg.width,
        cfg.width,
    );
    let reps = reps.max(1);
    let run = || {
        let a: Vec<A> = (0..m * k)
            .map(|i| A::of_f64((i % 7) as f64 * 0.1))
            .collect();
        let b: Vec<A> = (0..k * n)
            .map(|i| A::of_f64((i % 5) as f64 * 0.1))
            .collect();
        let mut c = vec![A::zero(); m * n];
        let op = |data, rs| Operand {
            data,
            offset: 0,
            rs,
            cs: 1,
        };
        for _ in 0..reps {
            let p = Product {
                m,
                n,
                k,
                lhs: op(&a, k),
                rhs: op(&b, n),
            };
            gemm_into_on(
                kernel,
                p,
                Dest {
                    data: &mut c,
                    offset: 0,
                    rs: n,
                },
            );
        }
        std::hint::black_box(&c);
    };
    rayon::broadcast(|_| run()); // warm-up
    let threads = rayon::current_num_threads();
    let gemm_s = best_seconds(5, || {
        rayon::broadcast(|_| run());
    });
    threads as f64 * reps as f64 * 2.0 * (m * n * k) as f64 / gemm_s / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_model_takes_the_first_named_model_and_nothing_from_text_without_one() {
        let two = "model name\t: First  CPU\nmodel name\t: Second CPU\n";
        assert_eq!(cpu_model(two).as_deref(), Some("First CPU"));
        // ARM kernels that name no model but the board
        let arm = "processor\t: 0\nBogoMIPS\t: 50.00\nHardware\t: Board X\n";
        assert_eq!(cpu_model(arm).as_deref(), Some("Board X"));
        // an empty model name falls through to the next key, or to nothing
        assert_eq!(
            cpu_model("model name\t:   \nHardware: B\n").as_deref(),
            Some("B")
        );
        for text in [
            "",
            "model name",
            "model name\t:\n",
            "\u{0}:\u{0}",
            "modelname: X",
        ] {
            assert_eq!(cpu_model(text), None, "{text:?}");
        }
    }

    #[test]
    fn cpu_ticks_reads_the_aggregate_line_and_refuses_a_short_or_malformed_one() {
        // the aggregate line comes first; per-CPU lines and later fields are ignored
        let stat = "cpu  10 1 2 300 4 5 6 7 8 9\ncpu0 1 1 1 1 1 1 1 1 1 1\nintr 1\n";
        assert_eq!(
            cpu_ticks(stat),
            Some(CpuTicks {
                busy: 10 + 1 + 2 + 5 + 6,
                idle: 300 + 4,
                steal: 7
            })
        );
        // exactly eight fields (kernels before guest time) are enough
        assert_eq!(cpu_ticks("cpu 1 0 0 1 0 0 0 2").map(|t| t.total()), Some(4));
        assert_eq!(cpu_ticks("cpu 1 0 0 1 0 0 0"), None);
        assert_eq!(cpu_ticks("cpu 1 0 x 1 0 0 0 2"), None);
        assert_eq!(cpu_ticks("cpu0 1 0 0 1 0 0 0 2"), None);
        assert_eq!(cpu_ticks(""), None);
        #[cfg(target_os = "linux")]
        assert!(cpu_ticks(&std::fs::read_to_string("/proc/stat").unwrap()).is_some());
    }

    #[test]
    fn host_load_is_the_stolen_and_other_share_of_the_ticks_between_two_readings() {
        let t = |busy, idle, steal| CpuTicks { busy, idle, steal };
        let zero = t(0, 0, 0);
        // 1000 ticks: 10 stolen, 500 busy of which this process's 4.8 s at 100 a second
        let l = HostLoad::between(zero, t(500, 490, 10), 100.0, 4.8, 5.0).unwrap();
        assert_eq!((l.seconds, l.steal_pct, l.others_pct), (5.0, 1.0, 2.0));
        assert!(l.quiet());
        assert_eq!(
            l.to_string(),
            "host load over 5.0 s: 1.0% of CPU time stolen by the hypervisor, 2.0% used by \
             other processes (both at most 2%: needed for a quiet machine, not proof of one)"
        );
        let busy = HostLoad::between(zero, t(500, 460, 40), 100.0, 5.0, 5.0).unwrap();
        assert_eq!((busy.steal_pct, busy.others_pct), (4.0, 0.0));
        assert!(busy
            .to_string()
            .ends_with("(other load above 2%: not a quiet machine)"));
        // this process's time measured above the busy ticks (rounding): no negative share
        let own = HostLoad::between(zero, t(500, 500, 0), 100.0, 5.2, 5.0).unwrap();
        assert_eq!(own.others_pct, 0.0);
        // counters that did not advance or went back, and a clock rate that is no rate
        assert_eq!(HostLoad::between(zero, zero, 100.0, 0.0, 1.0), None);
        assert_eq!(
            HostLoad::between(t(5, 5, 5), t(4, 9, 5), 100.0, 0.0, 1.0),
            None
        );
        assert_eq!(HostLoad::between(zero, t(1, 1, 1), 0.0, 0.0, 1.0), None);
        assert_eq!(
            HostLoad::between(zero, t(1, 1, 1), f64::NAN, 0.0, 1.0),
            None
        );
    }

    #[test]
    fn the_host_record_agrees_with_what_the_system_says_directly() {
        let h = Host::this();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(h.logical_cpus, threads);
        assert_eq!(h.arch, std::env::consts::ARCH);
        #[cfg(target_arch = "x86_64")]
        {
            let avx512 = ["avx512f", "avx512dq", "avx512vl", "fma"];
            let has = |f: &str| match f {
                "avx512f" => std::arch::is_x86_feature_detected!("avx512f"),
                "avx512dq" => std::arch::is_x86_feature_detected!("avx512dq"),
                "avx512vl" => std::arch::is_x86_feature_detected!("avx512vl"),
                "avx2" => std::arch::is_x86_feature_detected!("avx2"),
                _ => std::arch::is_x86_feature_detected!("fma"),
            };
            let want = if avx512.iter().all(|f| has(f)) {
                "avx512"
            } else if has("avx2") && has("fma") {
                "avx2"
            } else {
                "portable"
            };
            assert_eq!(h.simd, want);
        }
        // on Linux x86 the model is the text after the first `model name` line's colon (when
        // that text is not empty)
        if let Ok(text) = std::fs::read_to_string("/proc/cpuinfo") {
            let named = text
                .lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .filter(|(_, v)| !v.trim().is_empty());
            if let Some((_, raw)) = named {
                assert_eq!(
                    h.cpu.split_whitespace().collect::<Vec<_>>(),
                    raw.split_whitespace().collect::<Vec<_>>()
                );
                assert!(!h.cpu.is_empty() && h.cpu != "unknown");
            }
        }
    }

    #[test]
    fn the_moved_summary_names_every_moved_limit_with_its_readings() {
        let moved = moved_limits(&[
            Figure::bracketed("gemm_1024_gflops", Bracket::new(77.8, 109.0), "GFLOP/s"),
            Figure::bracketed("fresh_write_gbps", Bracket::new(3.0, 3.01), "GB/s"),
            Figure::bracketed(
                "cache_stream_65536_gbps",
                Bracket {
                    rounds: 3,
                    ..Bracket::new(110.6, 96.8)
                },
                "GB/s",
            ),
        ]);
        assert_eq!(
            moved_summary(3, &moved).unwrap(),
            "limits read before and after their figures: 3, 2 moved by more than 5% \
             (gemm_1024_gflops 77.8 -> 109.0 (1.40x), cache_stream_65536_gbps 110.6 -> 96.8 \
             (1.14x, the steadiest of 3 brackets)): the ratios that use them are not a \
             quiet-machine reading"
        );
    }

    #[test]
    fn settled_reads_limit_figure_limit_until_a_bracket_is_steady_and_never_fewer_than_one() {
        type Infallible = std::convert::Infallible;
        // every call in order: a steady first bracket is one round
        let calls = std::cell::RefCell::new(Vec::new());
        let mut limits = vec![101.0, 100.0];
        let (b, _) = Bracket::settled(
            SETTLE_ROUNDS,
            || {
                calls.borrow_mut().push("limit");
                limits.pop().unwrap()
            },
            || {
                calls.borrow_mut().push("figure");
                Ok::<_, Infallible>(())
            },
        )
        .unwrap();
        assert_eq!((b.rounds, b.limit()), (1, 101.0));
        assert_eq!(*calls.borrow(), ["limit", "figure", "limit"]);
        // zero rounds asked: one bracket still read
        let (b, ()) = Bracket::settled(0, || 5.0, || Ok::<_, Infallible>(())).unwrap();
        assert_eq!(b, Bracket::new(5.0, 5.0));
        // `rounds` brackets over the limit readings in the order given, each figure numbered
        let numbered = |rounds: usize, readings: &[f64]| {
            let mut next = readings.iter().copied();
            let mut figure = 0;
            Bracket::settled(
                rounds,
                || next.next().unwrap(),
                || {
                    figure += 1;
                    Ok::<_, Infallible>(figure)
                },
            )
            .unwrap()
        };
        // a NaN reading is never steady: every round is read, and the one with numbers kept
        let (b, kept) = numbered(3, &[f64::NAN, 11.0, 12.0, 10.0, 10.0, f64::NAN]);
        assert_eq!((b.before, b.after, b.rounds, kept), (12.0, 10.0, 3, 2));
        assert!(b.moved());
        // equal drifts: the earliest bracket is kept
        let (b, kept) = numbered(2, &[10.0, 20.0, 10.0, 20.0]);
        assert_eq!((b.rounds, kept), (2, 1));
    }

    #[test]
    fn settled_stops_at_the_first_failing_figure_without_reading_its_closing_limit() {
        // the first bracket moves (10 -> 20), the second's figure fails: the error, and no
        // third bracket or closing reading
        let mut limits = vec![10.0, 20.0, 10.0];
        let mut figures = 0;
        let out = Bracket::settled(
            SETTLE_ROUNDS,
            || limits.pop().unwrap(),
            || {
                figures += 1;
                if figures == 2 {
                    Err("diverged")
                } else {
                    Ok(figures)
                }
            },
        );
        assert_eq!(out, Err("diverged"));
        assert_eq!((figures, limits.len()), (2, 0));
    }

    #[test]
    fn settled_each_centres_every_bracket_on_the_figure_and_keeps_the_least_worst_moved() {
        // two limits with their own readings in order (before, after of bracket 1, then 2, ...);
        // the figure numbers its runs; every call is logged
        let run = |rounds: usize, a: &[f64], b: &[f64]| {
            let log = std::cell::RefCell::new(Vec::new());
            let (mut a, mut b) = (a.iter().copied(), b.iter().copied());
            let mut figures = 0;
            let out = Bracket::settled_each(
                rounds,
                [
                    &mut || {
                        log.borrow_mut().push("a");
                        a.next().unwrap()
                    },
                    &mut || {
                        log.borrow_mut().push("b");
                        b.next().unwrap()
                    },
                ],
                || {
                    figures += 1;
                    log.borrow_mut().push("figure");
                    Ok::<_, std::convert::Infallible>(figures)
                },
            )
            .unwrap();
            (out, log.into_inner())
        };
        // b moves in bracket 1, a in bracket 2, bracket 3 steady: three runs, each bracket
        // a, b, figure, b, a
        let (([a, b], kept), log) = run(
            SETTLE_ROUNDS,
            &[10.0, 10.0, 10.0, 20.0, 10.0, 10.0],
            &[50.0, 80.0, 50.0, 50.0, 50.0, 51.0],
        );
        assert_eq!((kept, a.rounds, b.rounds), (3, 3, 3));
        assert_eq!(
            (a.before, a.after, b.before, b.after),
            (10.0, 10.0, 50.0, 51.0)
        );
        assert_eq!(log, ["a", "b", "figure", "b", "a"].repeat(3));
        // never steady: the bracket whose worse limit moved least, 1.2 against 1.6 and 2.0
        let ((bs, kept), _) = run(
            SETTLE_ROUNDS,
            &[10.0, 16.0, 10.0, 10.0, 10.0, 12.0],
            &[50.0, 50.0, 50.0, 100.0, 50.0, 55.0],
        );
        assert_eq!(kept, 3);
        assert_eq!(bs.map(|b| b.drift()), [1.2, 1.1]);
        // the worse limit decides, not the sum: bracket 1 (1.1 and 1.1) over bracket 2 (1.0 and
        // 1.15), and an earlier bracket is kept over later ones
        let ((bs, kept), _) = run(
            SETTLE_ROUNDS,
            &[10.0, 11.0, 10.0, 10.0, 10.0, 20.0],
            &[50.0, 55.0, 50.0, 57.5, 50.0, 50.0],
        );
        assert_eq!((kept, bs[0].rounds), (1, 3));
        // equal worst drifts: the earliest
        let ((_, kept), _) = run(2, &[10.0, 20.0, 10.0, 10.0], &[50.0, 50.0, 50.0, 100.0]);
        assert_eq!(kept, 1);
    }

    #[test]
    fn moved_limits_lists_each_bracketed_limit_beyond_the_drift_ratio_and_no_other() {
        let b = |before, after| Bracket::new(before, after);
        let figures = [
            Figure::bracketed("steady", b(100.0, 104.9), "GFLOP/s"),
            Figure::bracketed("slower_after", b(100.0, 80.0), "GFLOP/s"),
            fig("unbracketed", 1.0, "GB/s"),
            Figure::bracketed("nan_reading", b(f64::NAN, 10.0), "GB/s"),
            Figure::bracketed("faster_after", b(100.0, 106.0), "GB/s"),
        ];
        let m = moved_limits(&figures);
        let names: Vec<&str> = m.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["slower_after", "nan_reading", "faster_after"]);
        assert_eq!((m[0].before, m[0].after, m[0].drift), (100.0, 80.0, 1.25));
        assert!(m[1].drift.is_infinite());
        // the JSON writes an infinite drift as null, not as an invalid token
        let v = serde_json::to_value(&m[1]).unwrap();
        assert!(v["drift"].is_null(), "{v}");
    }

    #[test]
    fn limits_come_from_figures_of_the_same_run() {
        let mut f = vec![
            fig("adam_arrays_4r3w_gbps", 20.0, "GB/s"),
            fig("adam_fused_16m_gbps", 10.0, "GB/s"),
            fig("gemm_1024_gflops", 50.0, "GFLOP/s"),
            fig("ns5_1024_ms", 1000.0, "ms"),
            fig("ode_lv_tsit5_1e-8_us", 20.0, "us"),
            fig("ode_lv_tsit5_1e-8_steps", 200.0, "steps"),
            fig("stream_4r3w_gbps", 40.0, "GB/s"),
            fig("radam_arrays_4r3w_gbps", 30.0, "GB/s"),
            fig("radam_fused_16m_gbps", 27.0, "GB/s"),
        ];
        attach_limits(&mut f);
        // a rate: value / the stream kernel's rate on the same traffic over the step's own
        // arrays, each step its own (not the separate stream's)
        assert_eq!((f[1].limit, f[1].ratio), (Some(20.0), Some(0.5)));
        assert_eq!((f[8].limit, f[8].ratio), (Some(30.0), Some(0.9)));
        // a time: the flops computed, 5 x (2 symmetric products at 17/32 + 1 full) x 2n^3 =
        // 20.625 n^3 at 50 GFLOP/s = 442.9 ms ideal, over 1000 ms measured
        let ideal = 20.625 * 1024f64.powi(3) / 50e9 * 1e3;
        assert!((ns5_flops(1024) - 20.625 * 1024f64.powi(3)).abs() < 1.0);
        assert!((f[3].limit.unwrap() - ideal).abs() < 1e-9 * ideal);
        assert!((f[3].ratio.unwrap() - ideal / 1000.0).abs() < 1e-12);
        // no limit: none invented, the reason given
        assert_eq!((f[4].limit, f[4].ratio), (None, None));
        assert!(f[4]
            .limit_source
            .as_deref()
            .unwrap()
            .contains("100 ns per step"));
        assert!(f.iter().all(|x| x.limit_source.is_some()));
    }

    #[test]
    fn all_skips_a_not_implemented_area_with_a_note_and_fails_on_other_errors() {
        let fake = |a: &str| match a {
            "optim" => Ok(vec![
                fig("adam_arrays_4r3w_gbps", 10.0, "GB/s"),
                fig("adam_fused_16m_gbps", 5.0, "GB/s"),
            ]),
            "cnf" => Err(Error::NotImplemented("bench area `cnf`".into())),
            _ => Err(crate::reference::Error::InvalidHyper {
                name: "AREA",
                value: a.into(),
                expected: "a test area".into(),
            }
            .into()),
        };
        let mut seen = vec![];
        let r = all_of(&["optim", "cnf"], fake, |a| seen.push(a.to_string())).unwrap();
        assert_eq!(seen, ["optim", "cnf"]);
        assert_eq!(r.figures.len(), 2);
        assert_eq!(r.figures[1].area.as_deref(), Some("optim"));
        assert_eq!(r.figures[1].ratio, Some(0.5));
        assert_eq!(r.skipped.len(), 1);
        assert!(r.skipped[0].starts_with("cnf: skipped"), "{}", r.skipped[0]);
        assert!(all_of(&["optim", "cnf", "bad"], fake, |_| {}).is_err());
    }

    #[test]
    fn the_limit_pass_over_a_steps_own_arrays_leaves_their_values_as_they_were() {
        let n = 3 * crate::optim::fused::CHUNK + 5;
        let leaf = |f: &dyn Fn(usize) -> f32| {
            Tree::from_leaves([(
                "w".to_string(),
                Array::new(vec![n], (0..n).map(f).collect()).unwrap(),
            )])
            .unwrap()
        };
        let mut params = leaf(&|i| (i as f32 * 0.37).sin());
        let grads = leaf(&|i| (i as f32 * 0.11).cos() * 1e3);
        let mut adam = FusedMoments::adam(1e-3, AdamHyper::default(), &params).unwrap();
        adam.step(&mut params, &grads).unwrap();
        let (p0, s0) = (params.clone(), adam.state().clone());
        own_arrays_pass(&mut params, &grads, adam.state_mut());
        assert_eq!(params, p0);
        assert_eq!(adam.state(), &s0);
    }

    #[test]
    fn a_limit_the_figure_beats_is_reported_broken_not_printed() {
        // planted: a limit measured on less traffic than the step moves
        let mut f = vec![
            fig("adam_arrays_4r3w_gbps", 20.0, "GB/s"),
            fig("adam_fused_16m_gbps", 24.0, "GB/s"),
            fig("radam_fused_16m_gbps", 20.9, "GB/s"),
            fig("radam_arrays_4r3w_gbps", 20.0, "GB/s"),
        ];
        attach_limits(&mut f);
        assert_eq!(f[1].ratio, None);
        let why = f[1].limit_source.as_deref().unwrap();
        assert!(
            why.starts_with("BROKEN LIMIT: the figure reaches 1.200"),
            "{why}"
        );
        // within 5% of the limit: a figure, not a broken limit
        assert_eq!(f[2].ratio, Some(20.9 / 20.0));
        assert!(!f[2].limit_source.as_deref().unwrap().contains("BROKEN"));
    }

    #[test]
    fn the_f32_cnf_step_is_held_to_its_own_f32_gemm_bound() {
        let mut f = vec![
            fig("cnf_train_step_gemm_bound_ms", 90.0, "ms"),
            fig("train_step_w64_d3_b500_ms", 120.0, "ms"),
            fig("cnf_train_step_f32_gemm_bound_ms", 40.0, "ms"),
            fig("train_step_w64_d3_b500_f32_ms", 80.0, "ms"),
        ];
        attach_limits(&mut f);
        // a time: bound / measured, each step against the bound of its own dtype
        assert_eq!((f[1].limit, f[1].ratio), (Some(90.0), Some(0.75)));
        assert_eq!((f[3].limit, f[3].ratio), (Some(40.0), Some(0.5)));
        let why = f[3].limit_source.as_deref().unwrap();
        assert!(why.contains("gemm_f32_384x64x64_all_cores_gflops"), "{why}");
        // a step faster than its bound: the bound is reported broken, not printed
        let mut g = vec![
            fig("cnf_train_step_f32_gemm_bound_ms", 40.0, "ms"),
            fig("train_step_w64_d3_b500_f32_ms", 30.0, "ms"),
        ];
        attach_limits(&mut g);
        assert_eq!(g[1].ratio, None);
        let why = g[1].limit_source.as_deref().unwrap();
        assert!(
            why.starts_with("BROKEN LIMIT: the figure reaches 1.333"),
            "{why}"
        );
    }

    /// The `cnf` area's figures for a 40 ms f32 step and an 80 ms f64 step, each dtype's gemm
    /// rate read as given.
    fn cnf_figures_with(gemm_f64: Bracket, gemm_f32: Bracket) -> Vec<Figure> {
        let flops = 2.0 * cnf_product_macs(&cnf_bench_config(), CNF_BENCH_BATCH).1;
        CnfTimings {
            step_f64_s: 0.080,
            loglik_f64_s: 0.030,
            gemm_f64,
            step_f32_s: 0.040,
            gemm_f32,
        }
        .figures(flops)
    }

    #[test]
    fn a_limit_read_slow_on_one_side_of_its_figure_takes_the_faster_side_and_says_so() {
        // the host in its slow state while the f32 limit is first read, in its fast state after:
        // the f32 CNF step of 40 ms against the slow reading alone (bound 38.1 ms at 160
        // GFLOP/s) would read 0.95 of it; against the faster reading (30.1 ms at 202) 0.75
        let flops = 2.0 * cnf_product_macs(&cnf_bench_config(), CNF_BENCH_BATCH).1;
        let bound = |gflops: f64| flops / (gflops * 1e9) * 1e3;
        let mut readings = vec![202.0, 160.0];
        let (gemm32, _) = Bracket::around(|| readings.pop().unwrap(), || ());
        let steady = Bracket::new(112.0, 113.0);
        let mut f = cnf_figures_with(steady, gemm32);
        attach_limits(&mut f);
        let by_name = |f: &[Figure], n: &str| f.iter().find(|g| g.name == n).unwrap().clone();
        assert_eq!(
            by_name(&f, "gemm_f32_384x64x64_all_cores_gflops").value,
            202.0
        );
        let step = by_name(&f, "train_step_w64_d3_b500_f32_ms");
        let ratio = step.ratio.unwrap();
        assert!((ratio - bound(202.0) / 40.0).abs() < 1e-12, "{ratio}");
        assert!((0.74..0.76).contains(&ratio), "{ratio}");
        assert!((0.94..0.96).contains(&(bound(160.0) / 40.0)));
        assert_eq!(
            by_name(&f, "train_step_f32_vs_gemm_bound").value,
            ratio,
            "the area's ratio figure and the limit attached to the step agree"
        );
        let note = "LIMIT MOVED: gemm_f32_384x64x64_all_cores_gflops read 160.0 before this \
                    figure and 202.0 after (1.26x)";
        for g in &f {
            let why = g.limit_source.as_deref().unwrap();
            // the step, its bound and the ratio made from the bound; not the f64 figures
            let f32_dependent = g.name.contains("f32") && !g.name.starts_with("gemm_");
            assert_eq!(why.contains(note), f32_dependent, "{}: {why}", g.name);
            assert!(!why.contains("MOVED: gemm_f64"), "{}: {why}", g.name);
        }
        // the limit figure itself carries both readings in its JSON
        let v = serde_json::to_value(by_name(&f, "gemm_f32_384x64x64_all_cores_gflops")).unwrap();
        assert_eq!(
            v["bracket"],
            serde_json::json!({"before": 160.0, "after": 202.0, "rounds": 1})
        );
        // readings within HOST_DRIFT_RATIO of each other: no note
        let mut g = cnf_figures_with(steady, steady);
        attach_limits(&mut g);
        assert!(g
            .iter()
            .all(|f| !f.limit_source.as_deref().unwrap().contains("MOVED")));
        // a reading that is not a positive number is never steady
        let b = |before, after| Bracket::new(before, after).drift();
        assert_eq!(b(0.0, 10.0), f64::INFINITY);
        assert_eq!(b(f64::NAN, 10.0), f64::INFINITY);
        assert_eq!(b(10.0, 10.0), 1.0);
    }

    /// Every bracketed limit of `bench all`, with its name, as the areas' figure builders make
    /// them (the line search's, whose limit [`attach_limits`] computes, by hand) from `readings`.
    fn every_area_with(readings: [Bracket; 6]) -> Vec<Figure> {
        let [gemm_1024, fresh, gemm_f64, gemm_f32, cache, flops] = readings;
        let bytes = stack_bench_config().unwrap().final_bytes() as f64;
        let mut f = muon_figures(MUON_N, gemm_1024, 0.170);
        f.extend(stack_figures(bytes, 0.090, fresh, 0.3));
        f.extend(cnf_figures_with(gemm_f64, gemm_f32));
        f.extend([
            Figure::bracketed("cache_stream_65536_gbps", cache, "GB/s"),
            Figure::bracketed("f32_flops_gflops", flops, "GFLOP/s"),
            fig("linesearch_rosenbrock_65536_ms", 0.13, "ms"),
            fig("linesearch_rosenbrock_65536_evals", 16.0, "evaluations"),
        ]);
        attach_limits(&mut f);
        f
    }

    #[test]
    fn every_figure_that_moves_with_a_bracketed_limit_names_it_and_no_other() {
        // each limit in turn read 30% faster after its figure than before: the figures whose
        // value, limit or ratio change are exactly those whose note names that limit (the
        // names a figure was computed from are written where it is computed, so a figure
        // that forgot one, or named one it does not use, fails here)
        let steady = |v: f64| Bracket::new(v, v);
        let base = [
            steady(140.0),
            steady(3.8),
            steady(113.0),
            steady(224.0),
            steady(200.0),
            steady(195.0),
        ];
        let before = every_area_with(base);
        let bits = |f: &Figure| {
            (
                f.value.to_bits(),
                f.limit.map(f64::to_bits),
                f.ratio.map(f64::to_bits),
            )
        };
        let mut moved_any = 0;
        for k in 0..base.len() {
            let mut readings = base;
            readings[k].after *= 1.3;
            let after = every_area_with(readings);
            let limit = &after
                .iter()
                .filter(|f| f.bracket.is_some())
                .nth(k)
                .unwrap()
                .name;
            for (b, a) in before.iter().zip(&after) {
                assert_eq!(b.name, a.name);
                if &a.name == limit {
                    continue;
                }
                let changed = bits(b) != bits(a);
                let why = a.limit_source.as_deref().unwrap_or_default();
                let noted = why.contains(&format!("LIMIT MOVED: {limit} read"));
                assert_eq!(changed, noted, "{limit} moved: {}: {why}", a.name);
                moved_any += changed as usize;
            }
        }
        // Newton–Schulz's time, comparison and ratio; the init's rate, ratio and time; each CNF
        // step with its bound and ratio, and the log-likelihood; the line search under each of
        // its two limits (a figure that lost its limit altogether would change nothing and carry
        // no note, so the count is checked too)
        assert_eq!(moved_any, 15);
    }

    #[test]
    fn plain_figures_keep_the_cli_shape() {
        let v = serde_json::to_value(fig("x", 1.0, "ms")).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"name": "x", "value": 1.0, "unit": "ms"})
        );
    }
}
