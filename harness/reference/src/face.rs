//! Which form of a kernel runs. Every kernel of this crate has a *dfdx face*, written with dfdx
//! tensor operations so that it reads like the formulas of `docs/ALGORITHMS.md`, and most have a
//! *fast form* (hand-written loops over planned buffers) that a law in the `harness` crate proves
//! equal to the face: bit for bit where both perform the same sequence of roundings, otherwise
//! within a derived tolerance. The fast form is the default; the face is the reference a reader
//! checks first, and can be run end to end (`harness golden --face dfdx`).
//!
//! # References
//! - `docs/ALGORITHMS.md` (the formulas both faces implement); the README's table of kernels,
//!   faces and the laws that tie them.
//!
//! ```
//! use harness_reference::Face;
//! assert_eq!(Face::parse("dfdx"), Some(Face::Dfdx));
//! assert_eq!(Face::default(), Face::Fast);
//! assert_eq!(Face::Dfdx.name(), "dfdx");
//! ```

/// The form of a kernel that runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Face {
    /// The hand-written form over planned buffers (what the CLI and the benches run).
    #[default]
    Fast,
    /// The dfdx tensor form.
    Dfdx,
}

impl Face {
    /// Both faces, fast first.
    pub const ALL: [Face; 2] = [Face::Fast, Face::Dfdx];

    /// `"fast"` or `"dfdx"`.
    pub fn name(self) -> &'static str {
        match self {
            Face::Fast => "fast",
            Face::Dfdx => "dfdx",
        }
    }

    /// The face called `s` (`"fast"`, `"dfdx"`).
    pub fn parse(s: &str) -> Option<Face> {
        Face::ALL.into_iter().find(|f| f.name() == s)
    }
}

impl std::fmt::Display for Face {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
