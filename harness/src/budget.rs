//! Memory is checked before it is spent: every size a user can give goes through a footprint
//! estimate compared with a budget, so that a request that cannot fit is a usage error naming
//! the size asked, the estimate and the budget — never an allocation failure (an abort) or the
//! machine's memory exhausted half-way.
//!
//! The budget is `--max-memory` (bytes, with an optional `K`, `M`, `G` or `T` binary suffix),
//! else `HARNESS_MAX_MEMORY`, else half of the memory the kernel reports available
//! (`MemAvailable` in `/proc/meminfo`; 4 GiB where it cannot be read).
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

    /// `flag` (`--max-memory`), else `HARNESS_MAX_MEMORY`, else half of `MemAvailable`.
    pub fn resolve(flag: Option<&str>) -> Result<Self, String> {
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
            Err(format!(
                "{what} needs about {} (estimate), more than the memory budget of {} ({}); \
                 use smaller sizes or raise --max-memory",
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
