//! Human tables on stdout, the JSON files of `docs/CLI.md`, SVG charts ([`svg`]) and the directory
//! report of `harness check --report DIR` ([`full`], measuring through [`probes`]).

#[cfg(feature = "mutants")]
pub mod full;
pub mod output;
#[cfg(feature = "mutants")]
pub mod probes;
pub mod svg;

use std::path::Path;

/// A plain-text table with a header row, columns padded to their widest cell.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: vec![],
        }
    }
    /// Add a row; control characters in a cell (from a file name or a case name, which the
    /// harness does not trust) are shown escaped, so no cell can break a line or forge a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows
            .push(cells.into_iter().map(|c| escape_control(&c)).collect());
    }
    pub fn render(&self) -> String {
        let n = self.header.len();
        let mut w = vec![0; n];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |r: &Vec<String>| {
            let cells: Vec<String> = (0..n)
                .map(|i| {
                    format!(
                        "{:<width$}",
                        r.get(i).map(String::as_str).unwrap_or(""),
                        width = w[i]
                    )
                })
                .collect();
            cells.join("  ").trim_end().to_string()
        };
        let mut out = line(&self.header) + "\n";
        out += &(w
            .iter()
            .map(|&k| "-".repeat(k))
            .collect::<Vec<_>>()
            .join("  ")
            + "\n");
        for r in &self.rows {
            out += &(line(r) + "\n");
        }
        out
    }
}

/// Write `value` as pretty JSON to `path`, atomically ([`output::write_atomic`]; an error names
/// the file).
pub fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<(), String> {
    let mut text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    text.push('\n');
    output::write_atomic(path, text.as_bytes())
}

/// `s` with every control character (newline, carriage return, escape, ...) written as its
/// escape sequence (`\n`, `\u{1b}`), the rest unchanged.
pub fn escape_control(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Format a float compactly for tables (`1.23e-7`, `0.5`).
pub fn num(x: f64) -> String {
    if x == 0.0 || (1e-3..1e6).contains(&x.abs()) {
        format!("{x:.4}")
    } else {
        format!("{x:.3e}")
    }
}
