//! Structured command lines for the command-line fuzz target: a subcommand, flags with values
//! drawn from the sizes, numbers and paths that have broken command-line tools before, and the
//! bytes of two input files, run in-process through [`super::run`] inside a fresh temporary
//! directory.
//!
//! What every accepted or refused command line must do ([`run_input`] checks it):
//! - return an exit status of 0, 1 or 2 (never panic, abort or exit the process);
//! - leave every file the command reads byte for byte as it was (no output may overwrite an
//!   input): the golden files or directory, `--golden`'s directory and `--data`'s image;
//! - finish within the fuzzer's time limit: the runs are given a memory budget of
//!   [`FUZZ_MAX_MEMORY`], and the few flags whose valid values mean long work by design (`steps`,
//!   `cases`) draw from values that are either small or refused up front; a `--law` pattern
//!   that selects more than [`FUZZ_MAX_LAWS`] laws is not drawn (an empty pattern selects all
//!   of them, and `check` then runs every law: about 0.5 s a run outside the fuzzer, several
//!   seconds instrumented, which left a nightly campaign a few dozen inputs).
//!
//! Commands that are long by design for any input (`bench`, `mutants`, `upstream setup`, which
//! installs packages) are not drawn; `upstream check`/`diff` are pointed at an empty virtual
//! environment directory, so they exercise the refusal path only.
//!
//! ```
//! // An input of zero bytes decodes to the bare command line, which clap refuses: exit 2.
//! harness::cli::fuzz::run_input(&[]).unwrap();
//! ```

use arbitrary::{Arbitrary, Unstructured};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The memory budget every fuzzed run gets (`HARNESS_MAX_MEMORY` and, where the command takes
/// it, `--max-memory`): small enough that admitted work finishes within seconds.
pub const FUZZ_MAX_MEMORY: &str = "64M";

/// Longest text value drawn (characters).
const MAX_TEXT: usize = 64;

/// The most laws a fuzzed `--law` pattern may select (by substring, as `check` selects them).
pub const FUZZ_MAX_LAWS: usize = 2;

/// One fuzzed command line and its input files.
#[derive(Debug, Arbitrary)]
pub struct CliInput {
    command: Command,
    args: Vec<Arg>,
    /// Bytes of `in/a.json` (a golden case, when well formed).
    file_a: Vec<u8>,
    /// Bytes of `in/b.pgm` (a greyscale image, when well formed).
    file_b: Vec<u8>,
}

#[derive(Debug, Clone, Copy, Arbitrary)]
enum Command {
    Bare,
    Version,
    Help,
    Unknown,
    Check,
    Golden,
    InitPeaks,
    TrainCnf,
    UpstreamCheck,
    UpstreamDiff,
}

#[derive(Debug, Arbitrary)]
enum Arg {
    Flag(Flag, Value),
    Switch(Switch),
    Positional(Value),
}

#[derive(Debug, Clone, Copy, Arbitrary)]
enum Flag {
    Law,
    Cases,
    Seed,
    Json,
    Report,
    Golden,
    Layers,
    Width,
    Hidden,
    Dtype,
    MaxMemory,
    Svg,
    Steps,
    Data,
    Depth,
    Blocks,
    Batch,
    Lr,
    Profile,
    Timeout,
    Kind,
    Out,
    Venvs,
}

#[derive(Debug, Clone, Copy, Arbitrary)]
enum Switch {
    Quick,
    Hutchinson,
    Checkpoint,
    Help,
    Version,
}

#[derive(Debug, Arbitrary)]
enum Value {
    Path(PathChoice),
    Number(Number),
    Text(String),
    Dtype(DtypeName),
    Dataset(DatasetName),
    Law(u8),
}

/// Paths relative to the run's temporary directory, plus the special files that have given
/// misleading errors before.
#[derive(Debug, Clone, Copy, Arbitrary)]
enum PathChoice {
    InputA,
    InputB,
    InputDir,
    OutJson,
    OutSvg,
    OutDir,
    MissingParent,
    DevNull,
    Empty,
    TooLong,
    Dot,
}

/// Numbers around the edges: zero, one, the int32 and u32 limits, beyond u64, negative, NaN,
/// infinities and floats that overflow when squared.
#[derive(Debug, Clone, Copy, Arbitrary)]
enum Number {
    Zero,
    One,
    Two,
    Three,
    Eight,
    Sixteen,
    Small(u8),
    Big,
    I32Max,
    U32Over,
    U64Max,
    BeyondU64,
    Negative,
    Nan,
    Infinity,
    Tiny,
    Huge,
    Half,
}

#[derive(Debug, Clone, Copy, Arbitrary)]
enum DtypeName {
    F16,
    Bf16,
    F32,
    F64,
    I32,
}

#[derive(Debug, Clone, Copy, Arbitrary)]
enum DatasetName {
    TwoMoons,
    Checkerboard,
    ImageB,
    PlainB,
    ImageMissing,
}

impl Command {
    fn words(self) -> &'static [&'static str] {
        match self {
            Command::Bare => &[],
            Command::Version => &["--version"],
            Command::Help => &["--help"],
            Command::Unknown => &["frobnicate"],
            Command::Check => &["check"],
            Command::Golden => &["golden"],
            Command::InitPeaks => &["init-peaks"],
            Command::TrainCnf => &["train-cnf"],
            Command::UpstreamCheck => &["upstream", "check"],
            Command::UpstreamDiff => &["upstream", "diff"],
        }
    }
    /// Flags appended unless the fuzzed line gives them (then clap refuses the repeat or the
    /// fuzzed value is used): they keep admitted work small.
    fn defaults(self, dir: &Path) -> Vec<(&'static str, OsString)> {
        let venvs = dir.join("no-venvs").into_os_string();
        match self {
            Command::Check => vec![("--cases", "1".into()), ("--law", "radam_where".into())],
            Command::InitPeaks => vec![("--max-memory", FUZZ_MAX_MEMORY.into())],
            Command::TrainCnf => vec![
                ("--steps", "1".into()),
                ("--max-memory", FUZZ_MAX_MEMORY.into()),
            ],
            Command::UpstreamCheck | Command::UpstreamDiff => vec![("--venvs", venvs)],
            _ => vec![],
        }
    }
}

impl Flag {
    fn name(self) -> &'static str {
        match self {
            Flag::Law => "--law",
            Flag::Cases => "--cases",
            Flag::Seed => "--seed",
            Flag::Json => "--json",
            Flag::Report => "--report",
            Flag::Golden => "--golden",
            Flag::Layers => "--layers",
            Flag::Width => "--width",
            Flag::Hidden => "--hidden",
            Flag::Dtype => "--dtype",
            Flag::MaxMemory => "--max-memory",
            Flag::Svg => "--svg",
            Flag::Steps => "--steps",
            Flag::Data => "--data",
            Flag::Depth => "--depth",
            Flag::Blocks => "--blocks",
            Flag::Batch => "--batch",
            Flag::Lr => "--lr",
            Flag::Profile => "--profile",
            Flag::Timeout => "--timeout",
            Flag::Kind => "--kind",
            Flag::Out => "--out",
            Flag::Venvs => "--venvs",
        }
    }
    /// Flags whose every valid value is long work by design, or that would leave the sandbox of
    /// the run: their values are restricted (see [`Flag::admit`]).
    fn admit(self, v: &Value) -> bool {
        match self {
            // Step and case counts: only the refused values and small ones.
            Flag::Steps | Flag::Cases => !matches!(
                v,
                Value::Number(Number::Small(_) | Number::Big | Number::I32Max | Number::Sixteen)
            ),
            // A larger budget would admit work that takes minutes.
            Flag::MaxMemory => {
                !matches!(
                    v,
                    Value::Number(Number::Big | Number::I32Max | Number::U32Over | Number::U64Max)
                ) && !matches!(v, Value::Text(_))
            }
            // Virtual environments: only the run's own (empty) paths.
            Flag::Venvs => matches!(v, Value::Path(_)),
            // Patterns selecting many laws run each of them: refused (see the module docs).
            Flag::Law => match v {
                Value::Text(t) => {
                    let pattern: String = t.chars().take(MAX_TEXT).collect();
                    let selected = crate::laws::registry()
                        .iter()
                        .filter(|l| l.name.contains(pattern.as_str()))
                        .count();
                    selected <= FUZZ_MAX_LAWS
                }
                _ => true,
            },
            _ => true,
        }
    }
}

impl Flag {
    /// Flags naming a file or directory the command writes.
    fn writes(self) -> bool {
        matches!(self, Flag::Json | Flag::Report | Flag::Svg | Flag::Out)
    }
}

impl Switch {
    fn name(self) -> &'static str {
        match self {
            Switch::Quick => "--quick",
            Switch::Hutchinson => "--hutchinson",
            Switch::Checkpoint => "--checkpoint",
            Switch::Help => "--help",
            Switch::Version => "--version",
        }
    }
}

impl PathChoice {
    fn path(self, dir: &Path) -> PathBuf {
        match self {
            PathChoice::InputA => dir.join("in/a.json"),
            PathChoice::InputB => dir.join("in/b.pgm"),
            PathChoice::InputDir => dir.join("in"),
            PathChoice::OutJson => dir.join("out/r.json"),
            PathChoice::OutSvg => dir.join("out/r.svg"),
            PathChoice::OutDir => dir.join("out/report"),
            PathChoice::MissingParent => dir.join("missing/x.json"),
            PathChoice::DevNull => "/dev/null".into(),
            PathChoice::Empty => "".into(),
            PathChoice::TooLong => dir.join("n".repeat(300)),
            PathChoice::Dot => dir.join("."),
        }
    }
}

impl Number {
    fn text(self) -> String {
        match self {
            Number::Zero => "0".into(),
            Number::One => "1".into(),
            Number::Two => "2".into(),
            Number::Three => "3".into(),
            Number::Eight => "8".into(),
            Number::Sixteen => "16".into(),
            Number::Small(n) => (n % 64).to_string(),
            Number::Big => "1000000000".into(),
            Number::I32Max => i32::MAX.to_string(),
            Number::U32Over => "4294967296".into(),
            Number::U64Max => u64::MAX.to_string(),
            Number::BeyondU64 => "18446744073709551616".into(),
            Number::Negative => "-1".into(),
            Number::Nan => "NaN".into(),
            Number::Infinity => "inf".into(),
            Number::Tiny => "1e-320".into(),
            Number::Huge => "1e300".into(),
            Number::Half => "0.5".into(),
        }
    }
}

impl Value {
    fn render(&self, dir: &Path) -> OsString {
        match self {
            Value::Path(p) => p.path(dir).into_os_string(),
            Value::Number(n) => n.text().into(),
            Value::Text(t) => t.chars().take(MAX_TEXT).collect::<String>().into(),
            Value::Dtype(d) => match d {
                DtypeName::F16 => "f16",
                DtypeName::Bf16 => "bf16",
                DtypeName::F32 => "f32",
                DtypeName::F64 => "f64",
                DtypeName::I32 => "i32",
            }
            .into(),
            Value::Dataset(d) => match d {
                DatasetName::TwoMoons => "two-moons".into(),
                DatasetName::Checkerboard => "checkerboard".into(),
                DatasetName::ImageB => {
                    let mut s = OsString::from("image:");
                    s.push(dir.join("in/b.pgm"));
                    s
                }
                DatasetName::PlainB => dir.join("in/b.pgm").into_os_string(),
                DatasetName::ImageMissing => {
                    let mut s = OsString::from("image:");
                    s.push(dir.join("missing.pgm"));
                    s
                }
            },
            Value::Law(i) => {
                let laws = crate::laws::registry();
                laws[*i as usize % laws.len()].name.into()
            }
        }
    }
}

impl Value {
    /// The value as an output path. The run's own paths are kept; any other value (a number,
    /// a law name, text given where a path is expected) keeps only its plain name components,
    /// taken inside `dir`: no run writes outside its directory, whatever `/` or `..` it holds.
    fn render_output(&self, dir: &Path) -> OsString {
        if let Value::Path(p) = self {
            return p.path(dir).into_os_string();
        }
        let text = self.render(dir);
        let mut path = dir.to_path_buf();
        for part in Path::new(&text).components() {
            if let std::path::Component::Normal(name) = part {
                path.push(name);
            }
        }
        path.into_os_string()
    }
}

impl Value {
    /// The input files (relative to the run's directory) this value names when it is read.
    fn reads(&self) -> &'static [&'static str] {
        match self {
            Value::Path(PathChoice::InputA) => &["in/a.json"],
            Value::Path(PathChoice::InputB) => &["in/b.pgm"],
            Value::Path(PathChoice::InputDir) => &["in/a.json", "in/b.pgm"],
            Value::Dataset(DatasetName::ImageB | DatasetName::PlainB) => &["in/b.pgm"],
            _ => &[],
        }
    }
}

impl CliInput {
    /// The command line (program name first) for a run in `dir`, and the input files (relative
    /// to `dir`) that it reads.
    pub fn command_line(&self, dir: &Path) -> (Vec<OsString>, Vec<&'static str>) {
        let mut line: Vec<OsString> = vec!["harness".into()];
        line.extend(self.command.words().iter().map(OsString::from));
        let mut given = Vec::new();
        let mut reads = Vec::new();
        for a in &self.args {
            match a {
                Arg::Flag(f, v) if f.admit(v) => {
                    given.push(f.name());
                    if matches!(f, Flag::Golden | Flag::Data) {
                        reads.extend(v.reads());
                    }
                    line.push(f.name().into());
                    line.push(if f.writes() {
                        v.render_output(dir)
                    } else {
                        v.render(dir)
                    });
                }
                Arg::Flag(..) => {}
                Arg::Switch(s) => line.push(s.name().into()),
                Arg::Positional(v) => {
                    if matches!(self.command, Command::Golden) {
                        reads.extend(v.reads());
                    }
                    line.push(v.render(dir))
                }
            }
        }
        for (flag, value) in self.command.defaults(dir) {
            if !given.contains(&flag) {
                line.push(flag.into());
                line.push(value);
            }
        }
        (line, reads)
    }
}

/// Decode `data`, run its command line in a fresh temporary directory, and check the contract
/// of the module documentation. `Err` names the broken rule and the command line.
pub fn run_input(data: &[u8]) -> Result<(), String> {
    let Ok(input) = CliInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return Ok(());
    };
    let dir = scratch_dir().map_err(|e| format!("temporary directory: {e}"))?;
    let result = run_in(&input, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn run_in(input: &CliInput, dir: &Path) -> Result<(), String> {
    let io = |e: std::io::Error| format!("setting up {}: {e}", dir.display());
    std::fs::create_dir_all(dir.join("in")).map_err(io)?;
    std::fs::create_dir_all(dir.join("out")).map_err(io)?;
    std::fs::write(dir.join("in/a.json"), &input.file_a).map_err(io)?;
    std::fs::write(dir.join("in/b.pgm"), &input.file_b).map_err(io)?;
    let (line, reads) = input.command_line(dir);
    // The budget for any command that does not take `--max-memory`.
    std::env::set_var(crate::budget::ENV_MAX_MEMORY, FUZZ_MAX_MEMORY);
    let status = super::run(line.iter().cloned());
    contract(input, dir, &line, &reads, status)
}

/// The rules of the module documentation, checked after a run of `line` in `dir`.
fn contract(
    input: &CliInput,
    dir: &Path,
    line: &[OsString],
    reads: &[&str],
    status: ExitCode,
) -> Result<(), String> {
    let shown = || {
        line.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    };
    if ![0u8, 1, 2].iter().any(|&c| status == ExitCode::from(c)) {
        return Err(format!("exit status {status:?} for `{}`", shown()));
    }
    for &name in reads {
        let want = if name == "in/a.json" {
            &input.file_a
        } else {
            &input.file_b
        };
        let now = std::fs::read(dir.join(name)).unwrap_or_default();
        if &now != want {
            return Err(format!("input {name} was changed by `{}`", shown()));
        }
    }
    Ok(())
}

/// A new empty directory under the system's temporary directory, unique within the process.
fn scratch_dir() -> std::io::Result<PathBuf> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("harness-cli-fuzz-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn golden_a_to_json_b() -> CliInput {
        CliInput {
            command: Command::Golden,
            args: vec![
                Arg::Positional(Value::Path(PathChoice::InputA)),
                Arg::Flag(Flag::Json, Value::Path(PathChoice::InputA)),
            ],
            file_a: b"{}".to_vec(),
            file_b: vec![],
        }
    }

    #[test]
    fn an_input_changed_by_the_run_breaks_the_contract() {
        let input = golden_a_to_json_b();
        let dir = scratch_dir().unwrap();
        let (line, reads) = input.command_line(&dir);
        assert_eq!(reads, ["in/a.json"]);
        std::fs::create_dir_all(dir.join("in")).unwrap();
        // planted: the run wrote its results over the case it replayed
        std::fs::write(dir.join("in/a.json"), b"{\"results\": []}").unwrap();
        let e = contract(&input, &dir, &line, &reads, ExitCode::SUCCESS).unwrap_err();
        assert!(e.contains("in/a.json was changed"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_exit_status_other_than_0_1_2_breaks_the_contract() {
        let input = golden_a_to_json_b();
        let dir = scratch_dir().unwrap();
        let (line, reads) = input.command_line(&dir);
        let e = contract(&input, &dir, &line, &reads, ExitCode::from(101)).unwrap_err();
        assert!(e.contains("exit status"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_golden_case_written_over_itself_is_refused_and_left_untouched() {
        let input = golden_a_to_json_b();
        let dir = scratch_dir().unwrap();
        let r = run_in(&input, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        r.unwrap();
    }

    #[test]
    fn law_patterns_that_select_many_laws_are_not_drawn() {
        let check_with = |pattern: &str| CliInput {
            command: Command::Check,
            args: vec![Arg::Flag(Flag::Law, Value::Text(pattern.into()))],
            file_a: vec![],
            file_b: vec![],
        };
        let law_value = |input: &CliInput| {
            let (line, _) = input.command_line(Path::new("/run-dir"));
            let at = line.iter().position(|a| a == "--law").unwrap();
            line[at + 1].clone().into_string().unwrap()
        };
        // every law, or every CNF law: dropped, so the default pattern applies
        assert_eq!(law_value(&check_with("")), "radam_where");
        assert_eq!(law_value(&check_with("cnf_")), "radam_where");
        // one law, and a pattern that selects none (refused by `check` itself): kept
        assert_eq!(
            law_value(&check_with("ode_step_control")),
            "ode_step_control"
        );
        assert_eq!(law_value(&check_with("no such law")), "no such law");
    }

    #[test]
    fn outputs_named_by_any_value_stay_inside_the_run_directory() {
        // A dtype, a number and a law name given where an output path is expected were once
        // written into the working directory of the fuzzer (`f16`, `0/`, a law's folder).
        let input = CliInput {
            command: Command::Check,
            args: vec![
                Arg::Flag(Flag::Report, Value::Dtype(DtypeName::F16)),
                Arg::Flag(Flag::Json, Value::Number(Number::Zero)),
                Arg::Flag(Flag::Svg, Value::Law(0)),
                Arg::Flag(Flag::Out, Value::Text("/../up".into())),
            ],
            file_a: vec![],
            file_b: vec![],
        };
        let dir = Path::new("/run-dir");
        let (line, _) = input.command_line(dir);
        for flag in ["--report", "--json", "--svg", "--out"] {
            let at = line.iter().position(|a| a == flag).unwrap();
            let value = Path::new(&line[at + 1]);
            assert!(value.starts_with(dir), "{flag} {}", value.display());
            assert!(!value
                .components()
                .any(|c| c == std::path::Component::ParentDir));
        }
    }
}
