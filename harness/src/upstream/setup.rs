//! `harness upstream setup`: one virtual environment per profile, made with the base
//! interpreter's `venv` module and filled by pip from the profile's requirement file, then
//! checked with `pip check`.
//!
//! A venv is up to date when it has an interpreter and a stamp file ([`STAMP`]) whose content is
//! exactly the requirement file it was installed from; such a profile is skipped. A venv made
//! from another file is removed and made again (installing over it would keep packages the new
//! file does not list). Progress (a spinner with pip's latest line) is drawn on stderr only
//! when stderr is a terminal. Failures are [`Error::Setup`] with one line naming the missing
//! interpreter, module or package.

use super::profile::{Locations, Profile, ENV_PYTHON};
use crate::error::{Error, Result};
use std::io::{BufRead, BufReader, IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The stamp file in a venv: a copy of the requirement file it was installed from.
pub const STAMP: &str = "harness-requirements.txt";

/// The Python version the profiles were frozen with (another may lack some wheels).
pub const FROZEN_WITH: &str = "3.11";

/// What `setup` did for one profile.
#[derive(Debug, Clone, PartialEq)]
pub struct SetupOutcome {
    /// The profile.
    pub profile: String,
    /// Its venv.
    pub venv: PathBuf,
    /// Whether the venv was already up to date (nothing installed).
    pub skipped: bool,
    /// Wall seconds.
    pub seconds: f64,
    /// A warning for the user (for example a base interpreter other than Python 3.11).
    pub warning: Option<String>,
}

/// The base interpreter: `--python`, else `HARNESS_PYTHON`, else `python3`.
pub fn base_python(flag: Option<PathBuf>) -> PathBuf {
    flag.or_else(|| {
        std::env::var_os(ENV_PYTHON)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    })
    .unwrap_or_else(|| PathBuf::from("python3"))
}

/// Whether `venv` has an interpreter and was installed from exactly `requirements` (module
/// docs).
pub fn is_current(venv: &Path, requirements: &Path) -> bool {
    let python = venv.join("bin").join("python");
    match (std::fs::read(venv.join(STAMP)), std::fs::read(requirements)) {
        (Ok(stamp), Ok(req)) => python.exists() && stamp == req,
        _ => false,
    }
}

fn setup_error(profile: &Profile, detail: impl Into<String>) -> Error {
    Error::Setup {
        profile: profile.name.clone(),
        detail: detail.into(),
    }
}

/// The most telling line of a failed command's output: pip's first `ERROR:` line, else the last
/// non-empty line.
pub fn telling_line(output: &str) -> String {
    let line = output
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("ERROR:"))
        .or_else(|| output.lines().map(str::trim).rfind(|l| !l.is_empty()))
        .unwrap_or("(no output)");
    if line.chars().count() > 300 {
        format!("{}...", line.chars().take(300).collect::<String>())
    } else {
        line.to_string()
    }
}

/// The version of the interpreter `python` (`3.11.7`), or one line saying why it cannot run.
pub fn python_version(python: &Path) -> std::result::Result<String, String> {
    let out =
        run(Command::new(python)
            .args(["-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"]))
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                format!(
                "Python interpreter `{}` not found (choose one with --python PATH or {ENV_PYTHON})",
                python.display()
            )
            } else {
                format!("cannot run `{}`: {e}", python.display())
            }
        })?;
    if !out.status.success() {
        return Err(format!(
            "`{}` did not run: {}",
            python.display(),
            telling_line(&String::from_utf8_lossy(&out.stderr))
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn run(cmd: &mut Command) -> std::io::Result<Output> {
    cmd.stdin(Stdio::null()).output()
}

/// Create (or skip) the venv of `profile` with the base interpreter `python` (module docs).
pub fn setup(
    profile: &Profile,
    loc: &Locations,
    python: &Path,
    show_progress: bool,
) -> Result<SetupOutcome> {
    let started = Instant::now();
    let venv = loc.venv(profile);
    let outcome = |skipped: bool, warning: Option<String>| SetupOutcome {
        profile: profile.name.clone(),
        venv: venv.clone(),
        skipped,
        seconds: started.elapsed().as_secs_f64(),
        warning,
    };
    let requirements = std::fs::read(&profile.requirements).map_err(|e| {
        setup_error(
            profile,
            format!("cannot read {}: {e}", profile.requirements.display()),
        )
    })?;
    if is_current(&venv, &profile.requirements) {
        return Ok(outcome(true, None));
    }
    let version = python_version(python).map_err(|e| setup_error(profile, e))?;
    let warning = (!version.starts_with(&format!("{FROZEN_WITH}.")))
        .then(|| format!(
            "{}: base interpreter {} is Python {version}; the profiles were frozen with Python {FROZEN_WITH} and pip may find no wheels for some pins",
            profile.name,
            python.display()
        ));
    // a fresh venv
    if venv.exists() {
        if venv.join("pyvenv.cfg").is_file() {
            std::fs::remove_dir_all(&venv).map_err(|e| {
                setup_error(
                    profile,
                    format!("cannot remove the outdated venv {}: {e}", venv.display()),
                )
            })?;
        } else if std::fs::read_dir(&venv).is_ok_and(|mut d| d.next().is_some()) {
            return Err(setup_error(
                profile,
                format!(
                    "{} exists and is not a virtual environment; remove it or choose --venvs",
                    venv.display()
                ),
            ));
        }
    }
    if let Some(parent) = venv.parent() {
        std::fs::create_dir_all(parent).map_err(|e| {
            setup_error(profile, format!("cannot create {}: {e}", parent.display()))
        })?;
    }
    let spinner = spinner(show_progress, &profile.name);
    spinner.set_message(format!("{}: python -m venv", profile.name));
    let made = run(Command::new(python).arg("-m").arg("venv").arg(&venv))
        .map_err(|e| setup_error(profile, format!("`{} -m venv`: {e}", python.display())))?;
    if !made.status.success() {
        spinner.finish_and_clear();
        return Err(setup_error(
            profile,
            format!(
                "`{} -m venv` failed: {} (the venv module and ensurepip are needed: on Debian/Ubuntu the python3-venv package)",
                python.display(),
                telling_line(&String::from_utf8_lossy(&made.stderr))
            ),
        ));
    }
    let vpython = venv.join("bin").join("python");
    let installed = pip_install(&vpython, &profile.requirements, &spinner, &profile.name);
    let installed = match installed {
        Ok(o) => o,
        Err(e) => {
            spinner.finish_and_clear();
            return Err(setup_error(profile, format!("cannot run pip: {e}")));
        }
    };
    if !installed.0 {
        spinner.finish_and_clear();
        return Err(setup_error(
            profile,
            format!(
                "pip could not install {}: {}",
                profile.requirements.display(),
                telling_line(&installed.1)
            ),
        ));
    }
    spinner.set_message(format!("{}: pip check", profile.name));
    let checked =
        run(Command::new(&vpython).args(["-m", "pip", "check", "--disable-pip-version-check"]))
            .map_err(|e| setup_error(profile, format!("cannot run pip check: {e}")))?;
    spinner.finish_and_clear();
    if !checked.status.success() {
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&checked.stdout),
            String::from_utf8_lossy(&checked.stderr)
        );
        return Err(setup_error(
            profile,
            format!(
                "pip check found broken requirements: {}",
                telling_line(&text)
            ),
        ));
    }
    std::fs::write(venv.join(STAMP), &requirements).map_err(|e| {
        setup_error(
            profile,
            format!("cannot write {}: {e}", venv.join(STAMP).display()),
        )
    })?;
    Ok(outcome(false, warning))
}

fn spinner(show: bool, profile: &str) -> indicatif::ProgressBar {
    if !show || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new_spinner();
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} [{elapsed}] {wide_msg}") {
        bar.set_style(style);
    }
    bar.set_message(profile.to_string());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// `pip install -r requirements`, showing pip's latest stdout line on the spinner; returns
/// whether it succeeded and its stderr (where pip writes its errors).
fn pip_install(
    vpython: &Path,
    requirements: &Path,
    spinner: &indicatif::ProgressBar,
    profile: &str,
) -> std::io::Result<(bool, String)> {
    let mut child = Command::new(vpython)
        .args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "-r",
        ])
        .arg(requirements)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = child.stderr.take();
    let collector = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut e) = stderr {
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    let mut stdout_tail = String::new();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
            let l = line.trim();
            if !l.is_empty() {
                spinner.set_message(format!("{profile}: {l}"));
                stdout_tail = l.to_string();
            }
        }
    }
    let status = child.wait()?;
    let mut err = collector.join().unwrap_or_default();
    if err.trim().is_empty() {
        err = stdout_tail;
    }
    Ok((status.success(), err))
}
