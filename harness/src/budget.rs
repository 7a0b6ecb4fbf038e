//! Memory is checked before it is spent: every size a user can give goes through a footprint
//! estimate compared with a budget, so that a request that cannot fit is a usage error naming
//! the size asked, the estimate and the budget — never an allocation failure (an abort) or the
//! machine's memory exhausted half-way.
//!
//! The budget is `--max-memory` (bytes, with an optional `K`, `M`, `G` or `T` binary suffix),
//! else `HARNESS_MAX_MEMORY`, else half of the memory the kernel reports available
//! (`MemAvailable` in `/proc/meminfo`; 4 GiB where it cannot be read). Whichever it is, it is
//! capped by what this process may still allocate ([`process_headroom`]): the address-space and
//! data-segment limits (`ulimit -v`, `ulimit -d`) less what the process already maps, and the
//! memory cgroup's limit less its current use. Under such a limit an allocation past it fails,
//! and Rust aborts on a failed allocation; capping the budget turns it into a refusal.
//!
//! ```
//! use harness::budget::{parse_bytes, Budget};
//! assert_eq!(parse_bytes("8G").unwrap(), 8 << 30);
//! let b = Budget::bytes(1 << 20);
//! assert!(b.admit("a model", 4 << 20).unwrap_err().contains("a model"));
//! assert!(b.admit("a model", 1 << 10).is_ok());
//! ```

/// The environment variable that sets the budget when `--max-memory` is not given.
pub const ENV_MAX_MEMORY: &str = "HARNESS_MAX_MEMORY";
use crate::cnf::CnfConfig;
use crate::stack::{bounds, StackConfig, Strategy};

/// A memory budget in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The budget.
    pub bytes: u128,
    /// Where the number came from (for messages).
    pub source: &'static str,
}

impl Budget {
    /// A fixed budget.
    pub fn bytes(bytes: u128) -> Self {
        Budget {
            bytes,
            source: "given",
        }
    }

    /// `flag` (`--max-memory`), else `HARNESS_MAX_MEMORY`, else half of `MemAvailable`; then
    /// capped by [`process_headroom`] when that is smaller.
    pub fn resolve(flag: Option<&str>) -> Result<Self, String> {
        let chosen = Self::chosen(flag)?;
        Ok(match process_headroom() {
            Some(h) if h.bytes < chosen.bytes => Budget {
                bytes: h.bytes,
                source: h.source,
            },
            _ => chosen,
        })
    }

    /// The budget before [`process_headroom`]'s cap.
    fn chosen(flag: Option<&str>) -> Result<Self, String> {
        if let Some(v) = flag {
            return parse_bytes(v)
                .map(|b| Budget {
                    bytes: b,
                    source: "--max-memory",
                })
                .map_err(|e| format!("--max-memory {v:?}: {e}"));
        }
        if let Ok(v) = std::env::var(ENV_MAX_MEMORY) {
            return parse_bytes(&v)
                .map(|b| Budget {
                    bytes: b,
                    source: "HARNESS_MAX_MEMORY",
                })
                .map_err(|e| format!("HARNESS_MAX_MEMORY={v:?}: {e}"));
        }
        Ok(match mem_available() {
            Some(avail) => Budget {
                bytes: avail / 2,
                source: "half of MemAvailable",
            },
            None => Budget {
                bytes: 4 << 30,
                source: "default (MemAvailable unreadable)",
            },
        })
    }

    /// `Ok` when `estimate` bytes fit; else the message naming `what`, the estimate and the
    /// budget.
    pub fn admit(&self, what: &str, estimate: u128) -> Result<(), String> {
        if estimate <= self.bytes {
            Ok(())
        } else {
            // a budget capped by the process's own limit is not raised by --max-memory
            let advice = if self.source.starts_with("ulimit") || self.source.contains("cgroup") {
                "use smaller sizes or run under a higher limit"
            } else {
                "use smaller sizes or raise --max-memory"
            };
            Err(format!(
                "{what} needs about {} (estimate), more than the memory budget of {} ({}); \
                 {advice}",
                human(estimate),
                human(self.bytes),
                self.source
            ))
        }
    }
}

/// `123`, `64K`, `8M`, `2G`, `1T` (binary multiples) as bytes.
pub fn parse_bytes(s: &str) -> Result<u128, String> {
    let s = s.trim();
    let (num, shift) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 30),
        Some('T' | 't') => (&s[..s.len() - 1], 40),
        _ => (s, 0),
    };
    let n: u128 = num
        .trim()
        .parse()
        .map_err(|_| "not a byte count (e.g. 512M, 8G)".to_string())?;
    if n == 0 {
        return Err("a budget of 0 bytes admits nothing".into());
    }
    n.checked_shl(shift)
        .filter(|b| b >> shift == n)
        .ok_or_else(|| "too large".to_string())
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
pub fn mem_available() -> Option<u128> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u128 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// What this process may still allocate, and which limit says so: the smallest of
/// - `RLIMIT_AS` (`ulimit -v`) less the process's mapped size (`VmSize` of `/proc/self/status`),
/// - `RLIMIT_DATA` (`ulimit -d`) less its data segments (`VmData`),
/// - its memory cgroup's `memory.max` less `memory.current` (cgroup v2), or
///   `memory.limit_in_bytes` less `memory.usage_in_bytes` (v1).
///
/// `None` when no limit is set or none can be read (then only `MemAvailable` bounds).
///
/// ```
/// // with no limits set it is None; under one it is what is left below it
/// if let Some(h) = harness::budget::process_headroom() {
///     assert!(!h.source.is_empty());
/// }
/// ```
pub fn process_headroom() -> Option<Budget> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let status_kib = |key: &str| -> Option<u128> {
        let line = status.lines().find(|l| l.starts_with(key))?;
        Some(line.split_whitespace().nth(1)?.parse::<u128>().ok()? * 1024)
    };
    let mut best: Option<Budget> = None;
    let mut consider = |bytes: Option<u128>, source: &'static str| {
        if let Some(b) = bytes {
            if best.is_none_or(|x| b < x.bytes) {
                best = Some(Budget { bytes: b, source });
            }
        }
    };
    consider(
        rlimit(libc::RLIMIT_AS).map(|l| l.saturating_sub(status_kib("VmSize:").unwrap_or(0))),
        "ulimit -v (RLIMIT_AS) less the memory this process maps",
    );
    consider(
        rlimit(libc::RLIMIT_DATA).map(|l| l.saturating_sub(status_kib("VmData:").unwrap_or(0))),
        "ulimit -d (RLIMIT_DATA) less this process's data",
    );
    consider(
        cgroup_headroom(),
        "the memory cgroup's limit less its current use",
    );
    best
}

/// The soft limit `resource` in bytes, `None` when unlimited or unreadable.
fn rlimit(resource: libc::__rlimit_resource_t) -> Option<u128> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through a valid pointer and reads nothing else.
    let ok = unsafe { libc::getrlimit(resource, &mut r) } == 0;
    (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur as u128)
}

/// `limit - usage` of this process's memory cgroup (v2, else v1); `None` without a limit. The
/// group's directory is looked up from `/proc/self/cgroup`, and at the mount's root when that
/// path is not there (inside a container the mount shows the container's own group).
fn cgroup_headroom() -> Option<u128> {
    let read = |p: String| std::fs::read_to_string(p).ok();
    let number = |t: Option<String>| t.and_then(|t| t.trim().parse::<u128>().ok());
    let groups = read("/proc/self/cgroup".into()).unwrap_or_default();
    let path_of = |controller: &str| {
        groups.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
            let wanted = if controller.is_empty() {
                controllers.is_empty()
            } else {
                controllers.split(',').any(|c| c == controller)
            };
            wanted.then(|| path.trim_end_matches('/').to_string())
        })
    };
    // (mount, the group's path under it, limit file, usage file); an unlimited v1 group
    // reports a number near 2^63, v2 the word `max` (not a number)
    let layouts = [
        (
            "/sys/fs/cgroup",
            path_of(""),
            "memory.max",
            "memory.current",
        ),
        (
            "/sys/fs/cgroup/memory",
            path_of("memory"),
            "memory.limit_in_bytes",
            "memory.usage_in_bytes",
        ),
    ];
    layouts.iter().find_map(|(mount, path, limit, usage)| {
        let dirs = [
            format!("{mount}{}", path.as_deref().unwrap_or("")),
            mount.to_string(),
        ];
        dirs.iter().find_map(|dir| {
            let max = number(read(format!("{dir}/{limit}")))?;
            if max >= 1 << 60 {
                return None;
            }
            let used = number(read(format!("{dir}/{usage}"))).unwrap_or(0);
            Some(max.saturating_sub(used))
        })
    })
}

/// Bytes in a readable unit.
pub fn human(b: u128) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

/// Admit `init-peaks` for `cfg`: the final model must fit, then the final model plus the largest
/// analytic peak over every strategy it builds (the strategies run one after another, each
/// freed before the next). The first check keeps the bound's arithmetic far from overflow.
pub fn admit_init_peaks(budget: &Budget, cfg: &StackConfig) -> Result<(), String> {
    let what = format!(
        "a stack of {} layers of {}-{}-{} {}",
        cfg.layers(),
        cfg.width(),
        cfg.hidden(),
        cfg.width(),
        cfg.dtype()
    );
    budget.admit(&what, cfg.final_bytes() as u128)?;
    let peak = Strategy::ALL
        .iter()
        .map(|&s| bounds::peak_bound(cfg, s) as u128)
        .max()
        .unwrap_or(0);
    budget.admit(
        &format!("building {what} with every strategy"),
        cfg.final_bytes() as u128 + peak,
    )
}

/// Peak bytes of CNF training, an upper estimate from the sizes alone (f64 throughout), in
/// parameters `P` (all blocks) and rows (`n (1 + k)`, `k` the trace tangents):
///
/// - `16 P` for the parameters and the optimizer around one step: the parameters, their
///   gradient, the two AdamW moments, the update and the next parameters and moments built
///   beside the current ones, and the copies the step works on;
/// - `P` per chunk of the batch ([`crate::cnf::flow::GRAD_CHUNK`] samples): every chunk's
///   gradient is kept until they are summed in chunk order;
/// - per chunk running at once (one a thread): its workspace, sized for a whole chunk whatever
///   the batch: one step's kept evaluations (every stage's rows through every layer, four
///   times: pre- and post-activation and their cotangents) and a copy of the weights;
/// - the full tape of states, `n (1 + k) d` values per step.
///
/// Measured against the counting allocator's peak for one step (widths 8-2048, depths 1-4, 1-3
/// blocks, batches 1-4000, `tests/memory.rs`): the estimate is never below the peak.
pub fn train_estimate(cfg: &CnfConfig, batch: usize) -> u128 {
    let layers = cfg.layer_dims();
    let params: u128 = layers
        .iter()
        .map(|&(inp, out)| (out as u128) * (inp as u128 + 4))
        .sum::<u128>()
        * cfg.blocks as u128;
    let steps = ((cfg.t1 - cfg.t0).abs() / cfg.dt0.abs()).ceil().max(1.0) as u128;
    let stages = cfg.solver.tableau().stages() as u128;
    let tangents = 1 + cfg.tangents() as u128;
    let widest = layers.iter().map(|&(_, o)| o as u128).max().unwrap_or(1);
    let chunk = crate::cnf::flow::GRAD_CHUNK as u128;
    let chunks = (batch as u128).div_ceil(chunk).max(1);
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get()) as u128;
    let running = chunks.min(threads);
    let kept = stages * chunk * tangents * widest * layers.len() as u128 * 4;
    let tape = steps * batch as u128 * tangents * cfg.data_size as u128;
    8 * (16 * params + chunks * params + running * (kept + params) + tape)
}
