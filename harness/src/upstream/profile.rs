//! Where the upstream bridge finds its pieces: the worker script and the pinned requirement
//! files (the *upstream directory*, `harness/upstream/` of this repository), the virtual
//! environments (under the cargo target directory), and the profiles.
//!
//! | what | default | override |
//! |---|---|---|
//! | upstream directory | `<repository>/harness/upstream` (the repository this binary was built from) | `--upstream-dir DIR`, `HARNESS_UPSTREAM_DIR` |
//! | virtual environments | `<CARGO_TARGET_DIR or <repository>/target>/upstream/<profile>/` | `--venvs DIR`, `HARNESS_UPSTREAM_VENVS` |
//! | base interpreter (setup only) | `python3` | `--python PATH`, `HARNESS_PYTHON` |

use std::path::{Path, PathBuf};

/// The built-in profiles, in the order `upstream setup` and `upstream check` run them.
pub const BUILTIN_PROFILES: [&str; 3] = ["optax-0.2.2", "optax-0.2.3", "current"];

/// Environment variable overriding the upstream directory.
pub const ENV_UPSTREAM_DIR: &str = "HARNESS_UPSTREAM_DIR";
/// Environment variable overriding the root of the virtual environments.
pub const ENV_VENVS: &str = "HARNESS_UPSTREAM_VENVS";
/// Environment variable choosing the base interpreter of `upstream setup`.
pub const ENV_PYTHON: &str = "HARNESS_PYTHON";

/// The repository this binary was built from (`CARGO_MANIFEST_DIR/..` at compile time).
pub fn default_repository() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The cargo target directory: `CARGO_TARGET_DIR` if set, else `<repository>/target`.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| default_repository().join("target"))
}

/// Where the worker script and the profile files are, and where the virtual environments go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Locations {
    /// The directory holding `worker.py` and `profiles/` (`harness/upstream/`).
    pub upstream_dir: PathBuf,
    /// The directory holding one virtual environment per profile.
    pub venvs: PathBuf,
}

impl Locations {
    /// From explicit flags, else the environment variables, else the defaults (module table).
    pub fn new(upstream_dir: Option<PathBuf>, venvs: Option<PathBuf>) -> Self {
        let env = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let repo = default_repository();
        let upstream_dir = upstream_dir
            .or_else(|| env(ENV_UPSTREAM_DIR))
            .unwrap_or_else(|| repo.join("harness").join("upstream"));
        let venvs = venvs
            .or_else(|| env(ENV_VENVS))
            .unwrap_or_else(|| target_dir().join("upstream"));
        Self {
            upstream_dir,
            venvs,
        }
    }

    /// `worker.py` in the upstream directory.
    pub fn worker_script(&self) -> PathBuf {
        self.upstream_dir.join("worker.py")
    }

    /// The directory of the built-in requirement files.
    pub fn profiles_dir(&self) -> PathBuf {
        self.upstream_dir.join("profiles")
    }

    /// The virtual environment of `profile`.
    pub fn venv(&self, profile: &Profile) -> PathBuf {
        self.venvs.join(&profile.name)
    }

    /// The interpreter of `profile`'s virtual environment (`<venv>/bin/python`).
    pub fn interpreter(&self, profile: &Profile) -> PathBuf {
        self.venv(profile).join("bin").join("python")
    }
}

/// Whether `name` can name a profile's venv directory: ASCII letters, digits, `.`, `_` and
/// `-`, not empty and not starting with `.` (so never `.` or `..`).
pub(crate) fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// A pinned set of packages: a built-in profile or a user's requirement file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// `optax-0.2.2`, `optax-0.2.3`, `current`, or the stem of a user's file.
    pub name: String,
    /// The requirement file pip installs.
    pub requirements: PathBuf,
    /// Whether this is one of [`BUILTIN_PROFILES`] (whose expected verdicts are known).
    pub builtin: bool,
}

impl Profile {
    /// A built-in profile by name, or a requirement file by path (any argument ending in `.txt`
    /// or containing a `/`; its profile name is the file stem). The error is one line for the
    /// user.
    pub fn resolve(arg: &str, loc: &Locations) -> Result<Profile, String> {
        if arg.ends_with(".txt") || arg.contains('/') {
            let path = PathBuf::from(arg);
            if !path.is_file() {
                return Err(format!("--profile {arg}: no such requirement file"));
            }
            // the name becomes a directory under --venvs, which setup may delete and rebuild:
            // only a plain file name, never `..`, a hidden name or another profile's venv
            let name = path
                .file_stem()
                .and_then(|s| s.to_str())
                .filter(|s| is_plain_name(s))
                .ok_or_else(|| {
                    format!(
                        "--profile {arg}: cannot name a profile after this file (its name before \
                         .txt must be letters, digits, '.', '_' or '-', not starting with '.')"
                    )
                })?
                .to_string();
            let builtin = BUILTIN_PROFILES.contains(&name.as_str());
            if builtin && !same_file(&path, &loc.profiles_dir().join(format!("{name}.txt"))) {
                return Err(format!(
                    "--profile {arg}: a requirement file named after the built-in profile \
                     `{name}` would replace its venv; rename the file"
                ));
            }
            return Ok(Profile {
                builtin,
                name,
                requirements: path,
            });
        }
        if !BUILTIN_PROFILES.contains(&arg) {
            return Err(format!(
                "--profile {arg}: not a profile (built-in: {}; or the path of a requirement file ending in .txt)",
                BUILTIN_PROFILES.join(", ")
            ));
        }
        let requirements = loc.profiles_dir().join(format!("{arg}.txt"));
        if !requirements.is_file() {
            return Err(format!(
                "profile {arg}: requirement file {} not found (set --upstream-dir or {ENV_UPSTREAM_DIR})",
                requirements.display()
            ));
        }
        Ok(Profile {
            name: arg.to_string(),
            requirements,
            builtin: true,
        })
    }

    /// The profiles named on the command line, or every built-in profile when none is.
    pub fn resolve_all(args: &[String], loc: &Locations) -> Result<Vec<Profile>, String> {
        let names: Vec<&str> = if args.is_empty() {
            BUILTIN_PROFILES.to_vec()
        } else {
            args.iter().map(String::as_str).collect()
        };
        let mut out: Vec<Profile> = Vec::new();
        for n in names {
            let p = Profile::resolve(n, loc)?;
            if out.iter().any(|q| q.name == p.name) {
                return Err(format!("--profile {n}: profile {} given twice", p.name));
            }
            out.push(p);
        }
        Ok(out)
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}
