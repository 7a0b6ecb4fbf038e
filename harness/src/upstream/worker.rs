//! A client for one long-lived upstream worker process (protocol v1 of
//! `harness/upstream/PROTOCOL.md`): JSON lines on stdin/stdout, one reply per request, in order.
//!
//! The process is started in its own process group so that a hung worker is killed together
//! with the processes it started (the stacked-init probe measures in a child process). Replies
//! are read on a reader thread and handed over through a channel, so every request has a time
//! limit (`recv_timeout`); stderr is drained on another thread into a bounded buffer (the last
//! [`STDERR_LINES`] lines), which error messages quote.
//!
//! What can go wrong is an [`Error::Worker`] with a [`WorkerErrorKind`](crate::WorkerErrorKind): the interpreter is
//! missing, the process cannot start, dies (exit status and stderr tail), hangs (killed at the
//! time limit), writes garbage (the line, truncated) or speaks another protocol version. After
//! any of these the worker is killed and every further request fails at once; start a new one.
//! An exception inside the library is not an error of the client: it is a [`Reply::Failure`].
//!
//! Memory: while a request waits, the resident bytes of the worker's process group are read
//! every [`MEMORY_POLL`] from `/proc`; above the memory budget (`HARNESS_MAX_MEMORY`, else half
//! of the available memory: [`crate::budget::Budget::resolve`]) the group is killed and the
//! request fails with `OverMemory`, naming the bytes seen and the budget. This is a watchdog,
//! not a hard limit: a process can overshoot the budget for up to one poll interval.

use super::observe::Hello;
use super::profile::{Locations, Profile};
use crate::error::{Error, Result, WorkerErrorKind as Kind};
use serde_json::{Map, Value};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest a request or an exit is waited for, whatever time limit is asked: a deadline
/// further out would overflow `Instant` (a week is longer than any case runs).
pub const LONGEST_WAIT: Duration = Duration::from_secs(7 * 86_400);

/// The protocol version this build speaks.
pub const PROTOCOL: u64 = 1;
/// How often a waiting request reads the worker's resident memory.
pub const MEMORY_POLL: Duration = Duration::from_millis(100);
/// Lines of the worker's stderr kept for error messages.
pub const STDERR_LINES: usize = 50;
/// Characters kept of one stderr line.
const STDERR_LINE_CHARS: usize = 500;
/// Bytes of one stderr line read into memory (the rest of a longer line is read and dropped):
/// room for [`STDERR_LINE_CHARS`] characters of up to four bytes each.
const STDERR_LINE_BYTES: usize = 4 * STDERR_LINE_CHARS;
/// The longest reply line read from a worker, in bytes: a reply carries at most a golden case's
/// data, so the limit of a golden case file ([`crate::golden::MAX_CASE_BYTES`]). A longer line
/// is [`Kind::Garbage`], found after reading this many bytes, whatever the worker writes next.
pub const MAX_REPLY_BYTES: usize = crate::golden::MAX_CASE_BYTES as usize;
/// Lines the stdout reader may hold that no request has taken yet (it waits beyond that, so a
/// worker writing lines nobody asked for fills its pipe and blocks, not this process's memory).
const QUEUED_LINES: usize = 8;
/// Characters of an unparsable reply quoted in the error.
const GARBAGE_CHARS: usize = 200;
/// Lines of the stderr tail quoted in an error message.
const QUOTED_STDERR_LINES: usize = 12;

/// glibc's threshold above which `malloc` maps memory of its own (and unmaps it on `free`),
/// fixed for the worker: left dynamic, glibc raises it after the first large `free`, keeps
/// later freed 16 MiB buffers on its heap and the stacked-init probe's RSS high-water mark
/// counts buffers XLA has already released (layerwise init measured 1.77x the final bytes
/// instead of 1.33x).
pub const MALLOC_MMAP_THRESHOLD: &str = "131072";

/// How to start a worker: the program, its arguments and extra environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerCommand {
    /// The profile the worker runs (used in error messages).
    pub profile: String,
    /// The program: the profile's interpreter, or a fake in tests.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Variables set on top of this process's environment.
    pub env: Vec<(OsString, OsString)>,
}

impl WorkerCommand {
    /// `<venv>/bin/python -u <upstream>/worker.py --profile P` with `JAX_PLATFORMS=cpu`,
    /// `XLA_FLAGS=--xla_force_host_platform_device_count=2` (two CPU devices for the sharded
    /// probe) and `MALLOC_MMAP_THRESHOLD_` ([`MALLOC_MMAP_THRESHOLD`]).
    pub fn for_profile(loc: &Locations, profile: &Profile) -> Self {
        Self {
            profile: profile.name.clone(),
            program: loc.interpreter(profile),
            args: vec![
                "-u".into(),
                loc.worker_script().into_os_string(),
                "--profile".into(),
                profile.name.clone().into(),
            ],
            env: vec![
                ("JAX_PLATFORMS".into(), "cpu".into()),
                (
                    "XLA_FLAGS".into(),
                    "--xla_force_host_platform_device_count=2".into(),
                ),
                (
                    "MALLOC_MMAP_THRESHOLD_".into(),
                    MALLOC_MMAP_THRESHOLD.into(),
                ),
            ],
        }
    }

    /// `Err(InterpreterMissing)` when the program is a path (not a name looked up on `PATH`)
    /// that does not exist: a cheap check before work that the worker will join later.
    pub fn check_interpreter(&self) -> Result<()> {
        if self.program.components().count() > 1 && !self.program.exists() {
            return Err(self.interpreter_missing());
        }
        Ok(())
    }

    fn interpreter_missing(&self) -> Error {
        worker_error(
            &self.profile,
            Kind::InterpreterMissing,
            format!(
                "no interpreter at {} (run `harness upstream setup --profile {}`)",
                self.program.display(),
                self.profile
            ),
        )
    }

    /// `/bin/sh -c SCRIPT`: a stand-in worker for tests (prints garbage, exits, sleeps, ...).
    pub fn shell(profile: &str, script: &str) -> Self {
        Self {
            profile: profile.to_string(),
            program: PathBuf::from("/bin/sh"),
            args: vec!["-c".into(), script.into()],
            env: Vec::new(),
        }
    }
}

/// A failure reply: the exception the worker (or the library inside it) raised.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Failure {
    /// `BadRequest`, `UnknownSubject`, `SubjectUnavailable`, `BadArgs`, ... or the class name
    /// of a library exception (`TypeError`, `JaxRuntimeError`, ...).
    pub error_type: String,
    /// The exception's message.
    pub message: String,
    /// The Python traceback (may be empty).
    pub traceback: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.error_type, self.message)
    }
}

/// One reply of the worker.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `ok: true`: the result object and the worker's own seconds for the request.
    Success {
        /// The `result` object.
        result: Value,
        /// The `seconds` field (0 when absent).
        seconds: f64,
    },
    /// `ok: false`: the typed error.
    Failure {
        /// The `error` object.
        failure: Failure,
        /// The `seconds` field (0 when absent).
        seconds: f64,
    },
}

impl Reply {
    /// The result of a success, or the failure.
    pub fn into_result(self) -> std::result::Result<Value, Failure> {
        match self {
            Reply::Success { result, .. } => Ok(result),
            Reply::Failure { failure, .. } => Err(failure),
        }
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let cut: String = s.chars().take(n).collect();
        format!("{cut}... ({} chars)", s.chars().count())
    }
}

fn worker_error(profile: &str, kind: Kind, detail: impl Into<String>) -> Error {
    Error::Worker {
        profile: profile.to_string(),
        kind,
        detail: detail.into(),
    }
}

/// Parse one reply line of protocol v1, expecting the reply to request `expected_id`.
///
/// A line that is not a JSON object with `protocol`, `id` and `ok` is [`Kind::Garbage`] (the
/// line is quoted, truncated), as is a reply to another request; a reply of another protocol
/// version is [`Kind::ProtocolMismatch`]. A failure reply whose id is `null` (the worker could
/// not read the request's id) is accepted as the reply to the request sent.
pub fn parse_reply(profile: &str, line: &str, expected_id: u64) -> Result<Reply> {
    let garbage = |why: &str| {
        worker_error(
            profile,
            Kind::Garbage,
            format!("{why}: {:?}", truncate(line.trim_end(), GARBAGE_CHARS)),
        )
    };
    let v: Value = serde_json::from_str(line).map_err(|_| garbage("not JSON"))?;
    let obj = v.as_object().ok_or_else(|| garbage("not a JSON object"))?;
    match obj.get("protocol") {
        Some(p) if p.as_u64() == Some(PROTOCOL) => {}
        Some(p) => {
            return Err(worker_error(
                profile,
                Kind::ProtocolMismatch,
                format!(
                    "the worker replied with protocol {p}, this build speaks protocol {PROTOCOL}"
                ),
            ))
        }
        None => return Err(garbage("no `protocol` field")),
    }
    let ok = obj
        .get("ok")
        .and_then(Value::as_bool)
        .ok_or_else(|| garbage("no boolean `ok` field"))?;
    let id = obj.get("id").ok_or_else(|| garbage("no `id` field"))?;
    let id_matches = id.as_u64() == Some(expected_id);
    if !(id_matches || (!ok && id.is_null())) {
        return Err(garbage(&format!(
            "reply to request {id}, expected {expected_id}"
        )));
    }
    let seconds = obj.get("seconds").and_then(Value::as_f64).unwrap_or(0.0);
    if ok {
        let result = obj
            .get("result")
            .filter(|r| r.is_object())
            .ok_or_else(|| garbage("success without a `result` object"))?;
        return Ok(Reply::Success {
            result: result.clone(),
            seconds,
        });
    }
    let err = obj
        .get("error")
        .and_then(Value::as_object)
        .ok_or_else(|| garbage("failure without an `error` object"))?;
    let text = |k: &str| err.get(k).and_then(Value::as_str).map(str::to_string);
    Ok(Reply::Failure {
        failure: Failure {
            error_type: text("type").ok_or_else(|| garbage("failure without `error.type`"))?,
            message: text("message").unwrap_or_default(),
            traceback: text("traceback").unwrap_or_default(),
        },
        seconds,
    })
}

enum Event {
    Line(String),
    /// A line longer than [`MAX_REPLY_BYTES`]; the reader stopped.
    TooLong,
    Eof,
    ReadError(String),
}

/// A running worker (module docs). Dropping it closes stdin (the worker exits) and kills the
/// process group if it has not exited within two seconds.
pub struct Worker {
    profile: String,
    child: Child,
    stdin: Option<ChildStdin>,
    events: Receiver<Event>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    stderr_done: Receiver<()>,
    next_id: u64,
    /// Set once the worker failed fatally: every further request returns it.
    broken: Option<Error>,
    /// Resident bytes the process group may hold, and where the figure came from.
    memory_limit: Option<(u64, &'static str)>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("profile", &self.profile)
            .field("pid", &self.child.id())
            .field("next_id", &self.next_id)
            .field("broken", &self.broken)
            .finish()
    }
}

impl Worker {
    /// Start the process. A program path that does not exist is [`Kind::InterpreterMissing`]
    /// (with the hint to run `harness upstream setup`).
    pub fn spawn(cmd: &WorkerCommand) -> Result<Worker> {
        let profile = cmd.profile.clone();
        let missing = || cmd.interpreter_missing();
        cmd.check_interpreter()?;
        let mut command = Command::new(&cmd.program);
        command
            .args(&cmd.args)
            .envs(cmd.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            command.process_group(0);
        }
        let mut child = command.spawn().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                missing()
            } else {
                worker_error(
                    &profile,
                    Kind::SpawnFailed,
                    format!("{}: {e}", cmd.program.display()),
                )
            }
        })?;
        let (stdin, stdout, stderr) =
            match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
                (Some(i), Some(o), Some(e)) => (i, o, e),
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(worker_error(
                        &profile,
                        Kind::SpawnFailed,
                        "no pipes to the process",
                    ));
                }
            };
        let (tx, events) = mpsc::sync_channel(QUEUED_LINES);
        std::thread::Builder::new()
            .name(format!("upstream-{profile}-stdout"))
            .spawn(move || read_lines(stdout, tx))
            .map_err(|e| {
                worker_error(&profile, Kind::SpawnFailed, format!("reader thread: {e}"))
            })?;
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_LINES)));
        let (done_tx, stderr_done) = mpsc::channel();
        let tail2 = Arc::clone(&tail);
        std::thread::Builder::new()
            .name(format!("upstream-{profile}-stderr"))
            .spawn(move || {
                drain_stderr(stderr, &tail2);
                let _ = done_tx.send(());
            })
            .map_err(|e| {
                worker_error(&profile, Kind::SpawnFailed, format!("stderr thread: {e}"))
            })?;
        Ok(Worker {
            profile,
            child,
            stdin: Some(stdin),
            events,
            stderr: tail,
            stderr_done,
            next_id: 1,
            broken: None,
            memory_limit: crate::budget::Budget::resolve(None)
                .ok()
                .map(|b| (u64::try_from(b.bytes).unwrap_or(u64::MAX), b.source)),
        })
    }

    /// Replace the memory budget of the module docs (`None`: no watchdog).
    pub fn set_memory_limit(&mut self, bytes: Option<u64>) {
        self.memory_limit = bytes.map(|b| (b, "given"));
    }

    /// The profile this worker runs.
    pub fn profile(&self) -> &str {
        &self.profile
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether a fatal error ended this worker.
    pub fn is_broken(&self) -> bool {
        self.broken.is_some()
    }

    /// The last lines the worker wrote on stderr (at most [`STDERR_LINES`]).
    pub fn stderr_tail(&self) -> Vec<String> {
        self.stderr
            .lock()
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Send `{"protocol": 1, "id": n, "op": op, ...fields}` and wait up to `timeout` for the
    /// reply. `Err` only for the failures of the module docs; a failure reply is `Ok`.
    pub fn request(
        &mut self,
        op: &str,
        fields: Map<String, Value>,
        timeout: Duration,
    ) -> Result<Reply> {
        if let Some(e) = &self.broken {
            return Err(worker_error(
                &self.profile,
                Kind::Died,
                format!("the worker is no longer running (earlier: {e})"),
            ));
        }
        let what = describe(op, &fields);
        let id = self.next_id;
        self.next_id += 1;
        let mut obj = Map::new();
        obj.insert("protocol".into(), PROTOCOL.into());
        obj.insert("id".into(), id.into());
        obj.insert("op".into(), op.into());
        obj.extend(fields);
        let mut line = Value::Object(obj).to_string();
        line.push('\n');
        let written = match self.stdin.as_mut() {
            Some(stdin) => stdin
                .write_all(line.as_bytes())
                .and_then(|()| stdin.flush())
                .map_err(|e| e.to_string()),
            None => Err("stdin is closed".to_string()),
        };
        if let Err(e) = written {
            return Err(self.died(&what, &format!("writing the request failed ({e}); ")));
        }
        let deadline = Instant::now() + timeout.min(LONGEST_WAIT);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let wait = if self.memory_limit.is_some() {
                left.min(MEMORY_POLL)
            } else {
                left
            };
            match self.events.recv_timeout(wait) {
                Ok(Event::Line(l)) if l.trim().is_empty() => continue,
                Ok(Event::Line(l)) => {
                    return match parse_reply(&self.profile, &l, id) {
                        Ok(r) => Ok(r),
                        Err(e) => {
                            self.kill();
                            Err(self.remember(e))
                        }
                    }
                }
                Ok(Event::TooLong) => {
                    self.kill();
                    let e = worker_error(
                        &self.profile,
                        Kind::Garbage,
                        format!(
                            "a line of more than {MAX_REPLY_BYTES} bytes on stdout in reply to \
                             {what} (the longest reply read); the process was killed"
                        ),
                    );
                    return Err(self.remember(e));
                }
                Ok(Event::ReadError(e)) => {
                    return Err(self.died(&what, &format!("reading its stdout failed ({e}); ")))
                }
                Ok(Event::Eof) | Err(RecvTimeoutError::Disconnected) => {
                    return Err(self.died(&what, ""))
                }
                Err(RecvTimeoutError::Timeout) if !left.is_zero() && wait < left => {
                    if let Some(e) = self.over_memory(&what) {
                        return Err(e);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.kill();
                    let tail = self.quoted_stderr();
                    let e = worker_error(
                        &self.profile,
                        Kind::TimedOut,
                        format!(
                            "no reply to {what} within {:.1} s; the process was killed{tail}",
                            timeout.as_secs_f64()
                        ),
                    );
                    return Err(self.remember(e));
                }
            }
        }
    }

    /// `hello`: the profile's interpreter and package versions. A reply announcing another
    /// protocol version is [`Kind::ProtocolMismatch`].
    pub fn hello(&mut self, timeout: Duration) -> Result<Hello> {
        match self.request("hello", Map::new(), timeout)? {
            Reply::Success { result, .. } => {
                let hello: Hello = super::observe::parse(&self.profile, &result)?;
                if hello.protocol != PROTOCOL {
                    let e = worker_error(
                        &self.profile,
                        Kind::ProtocolMismatch,
                        format!(
                            "hello announces protocol {}, this build speaks protocol {PROTOCOL}",
                            hello.protocol
                        ),
                    );
                    self.kill();
                    return Err(self.remember(e));
                }
                Ok(hello)
            }
            Reply::Failure { failure, .. } => Err(worker_error(
                &self.profile,
                Kind::BadResult,
                format!("hello failed: {failure}"),
            )),
        }
    }

    /// `observe`: run `probe` on `subject` with `args` (the probe's defaults for missing keys).
    pub fn observe(
        &mut self,
        subject: &str,
        probe: &str,
        args: &Value,
        x64: bool,
        timeout: Duration,
    ) -> Result<Reply> {
        let mut f = Map::new();
        f.insert("subject".into(), subject.into());
        f.insert("probe".into(), probe.into());
        f.insert("args".into(), args.clone());
        f.insert("x64".into(), x64.into());
        self.request("observe", f, timeout)
    }

    /// `shutdown`, then wait up to `timeout` for the process to exit; returns its status.
    pub fn shutdown(mut self, timeout: Duration) -> Result<ExitStatus> {
        let reply = self.request("shutdown", Map::new(), timeout)?;
        if let Reply::Failure { failure, .. } = reply {
            return Err(worker_error(
                &self.profile,
                Kind::BadResult,
                format!("shutdown failed: {failure}"),
            ));
        }
        self.stdin = None;
        match self.wait_exit(timeout) {
            Some(s) => Ok(s),
            None => {
                self.kill();
                Err(worker_error(
                    &self.profile,
                    Kind::TimedOut,
                    format!(
                        "did not exit within {:.1} s of shutdown; killed",
                        timeout.as_secs_f64()
                    ),
                ))
            }
        }
    }

    fn remember(&mut self, e: Error) -> Error {
        self.broken = Some(e.clone());
        e
    }

    /// The process closed stdout (or stdin): wait briefly for its exit status, and report it
    /// with the stderr tail.
    fn died(&mut self, what: &str, how: &str) -> Error {
        let status = self.wait_exit(Duration::from_secs(5));
        if status.is_none() {
            self.kill();
        }
        // the stderr thread ends when the process (group) has closed stderr
        let _ = self.stderr_done.recv_timeout(Duration::from_secs(2));
        let status = status.map_or_else(
            || "closed its stdout and was killed".to_string(),
            |s| describe_status(&s),
        );
        let tail = self.quoted_stderr();
        let e = worker_error(
            &self.profile,
            Kind::Died,
            format!("{how}{status} while waiting for the reply to {what}{tail}"),
        );
        self.remember(e)
    }

    fn quoted_stderr(&self) -> String {
        let tail = self.stderr_tail();
        if tail.is_empty() {
            return "; no stderr".to_string();
        }
        let skip = tail.len().saturating_sub(QUOTED_STDERR_LINES);
        format!(
            "; stderr (last {} lines):\n    {}",
            tail.len() - skip,
            tail[skip..].join("\n    ")
        )
    }

    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout.min(LONGEST_WAIT);
        loop {
            match self.child.try_wait() {
                Ok(Some(s)) => return Some(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => return None,
            }
        }
    }

    /// When the group's resident bytes exceed the limit: kill it and return the error.
    fn over_memory(&mut self, what: &str) -> Option<Error> {
        let (limit, source) = self.memory_limit?;
        let held = group_resident_bytes(self.child.id())?;
        if held <= limit {
            return None;
        }
        self.kill();
        let e = worker_error(
            &self.profile,
            Kind::OverMemory,
            format!(
                "its processes held {held} bytes resident during {what}, more than the memory \
                 budget of {limit} bytes ({source}); the process group was killed (raise \
                 HARNESS_MAX_MEMORY to allow more)"
            ),
        );
        Some(self.remember(e))
    }

    /// Kill the process group (the worker and whatever it started) and reap the worker.
    fn kill(&mut self) {
        self.stdin = None;
        #[cfg(unix)]
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill(2) with a negative pid signals the process group the worker leads
            // (spawned with process_group(0)); it touches no memory of this process.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stdin = None;
        if self.wait_exit(Duration::from_secs(2)).is_none() {
            self.kill();
        }
    }
}

/// Resident bytes of every process in process group `pgid`, read from Linux's `/proc` (`None`
/// where it cannot be read: then there is no watchdog).
pub fn group_resident_bytes(pgid: u32) -> Option<u64> {
    // SAFETY: sysconf reads a configuration value; no memory of this process is touched.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
    let mut total = 0u64;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue; // exited meanwhile
        };
        // `pid (comm) state ppid pgrp ...`: comm may hold spaces and parentheses.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        if after.split_whitespace().nth(2).and_then(|g| g.parse().ok()) != Some(pgid) {
            continue;
        }
        // `/proc/PID/statm`: size resident shared ... (pages)
        let resident = std::fs::read_to_string(format!("/proc/{pid}/statm"))
            .ok()
            .and_then(|m| m.split_whitespace().nth(1)?.parse::<u64>().ok())
            .unwrap_or(0);
        total = total.saturating_add(resident.saturating_mul(page));
    }
    Some(total)
}

fn describe(op: &str, fields: &Map<String, Value>) -> String {
    match (
        fields.get("subject").and_then(Value::as_str),
        fields.get("probe").and_then(Value::as_str),
    ) {
        (Some(s), Some(p)) => format!("`{op} {s}/{p}`"),
        _ => format!("`{op}`"),
    }
}

fn describe_status(s: &ExitStatus) -> String {
    if let Some(code) = s.code() {
        return format!("exited with status {code}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = s.signal() {
            return format!("killed by signal {sig}");
        }
    }
    format!("exited ({s})")
}

/// Reads one line (through its `\n`, or to the end of the stream) from `r` into `buf` (cleared
/// first), keeping at most `cap` bytes: `Ok(None)` at the end of the stream with nothing read,
/// `Ok(Some(false))` for a whole line, `Ok(Some(true))` as soon as the line proves longer than
/// `cap` (its first `cap` bytes in `buf`, the rest not yet read). Holds at most `cap` bytes of
/// the line, whatever its length.
fn read_capped_line(
    r: &mut impl BufRead,
    buf: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<Option<bool>> {
    buf.clear();
    loop {
        let avail = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if avail.is_empty() {
            return Ok((!buf.is_empty()).then_some(false));
        }
        let (end, whole) = match avail.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (avail.len(), false),
        };
        let room = cap - buf.len();
        if end > room {
            buf.extend_from_slice(&avail[..room]);
            r.consume(room);
            return Ok(Some(true));
        }
        buf.extend_from_slice(&avail[..end]);
        r.consume(end);
        if whole {
            return Ok(Some(false));
        }
    }
}

/// Reads and drops the rest of the current line of `r` (through its `\n`).
fn skip_line(r: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let avail = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if avail.is_empty() {
            return Ok(());
        }
        match avail.iter().position(|&b| b == b'\n') {
            Some(i) => {
                r.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = avail.len();
                r.consume(n);
            }
        }
    }
}

fn read_lines(stdout: impl Read, tx: mpsc::SyncSender<Event>) {
    let mut r = BufReader::new(stdout);
    let mut buf = Vec::new();
    loop {
        let event = match read_capped_line(&mut r, &mut buf, MAX_REPLY_BYTES) {
            Ok(None) => Event::Eof,
            Ok(Some(true)) => Event::TooLong,
            Ok(Some(false)) => Event::Line(String::from_utf8_lossy(&buf).into_owned()),
            Err(e) => Event::ReadError(e.to_string()),
        };
        let last = !matches!(event, Event::Line(_));
        if tx.send(event).is_err() || last {
            return;
        }
    }
}

fn drain_stderr(stderr: impl Read, tail: &Mutex<VecDeque<String>>) {
    let mut r = BufReader::new(stderr);
    let mut buf = Vec::new();
    loop {
        match read_capped_line(&mut r, &mut buf, STDERR_LINE_BYTES) {
            Ok(None) | Err(_) => return,
            Ok(Some(cut)) => {
                if cut && skip_line(&mut r).is_err() {
                    return;
                }
                let text = String::from_utf8_lossy(&buf);
                let line = if cut {
                    let kept: String = text.chars().take(STDERR_LINE_CHARS).collect();
                    format!("{kept}... (a line of more than {STDERR_LINE_BYTES} bytes)")
                } else {
                    truncate(text.trim_end(), STDERR_LINE_CHARS)
                };
                if let Ok(mut t) = tail.lock() {
                    if t.len() == STDERR_LINES {
                        t.pop_front();
                    }
                    t.push_back(line);
                }
            }
        }
    }
}
