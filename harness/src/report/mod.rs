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
///
/// Cells come from files the harness does not trust (case names, shapes, details), so a row
/// shows each cell with its control characters escaped and at most [`MAX_CELL_CHARS`] of its
/// characters; the JSON results keep the full text.
///
/// ```
/// use harness::report::Table;
/// let mut t = Table::new(&["case", "result"]);
/// t.row(vec!["adam-basic".into(), "pass".into()]);
/// assert_eq!(t.render(), "case        result\n----------  ------\nadam-basic  pass\n");
/// ```
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

/// The most characters of a cell a [`Table`] shows; a longer cell is cut there and ends with
/// how many characters were left out.
pub const MAX_CELL_CHARS: usize = 240;

impl Table {
    /// An empty table with these column titles.
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: vec![],
        }
    }
    /// Add a row; control characters in a cell (from a file name or a case name, which the
    /// harness does not trust) are shown escaped, so no cell can break a line or forge a row,
    /// and a cell longer than [`MAX_CELL_CHARS`] is cut.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows
            .push(cells.into_iter().map(|c| shown_cell(&c)).collect());
    }
    /// The table as lines: the header, a rule, then the rows, each cell padded to its
    /// column's widest cell (trailing spaces trimmed).
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
                    // padded by hand: a `{:<width$}` width above 65535 panics
                    let c = r.get(i).map(String::as_str).unwrap_or("");
                    let pad = w[i].saturating_sub(c.chars().count());
                    format!("{c}{}", " ".repeat(pad))
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

/// `s` as a [`Table`] shows it: control characters escaped ([`escape_control`]), then cut to
/// [`MAX_CELL_CHARS`] characters with the count of those left out.
fn shown_cell(s: &str) -> String {
    let s = escape_control(s);
    let total = s.chars().count();
    if total <= MAX_CELL_CHARS {
        return s;
    }
    let kept: String = s.chars().take(MAX_CELL_CHARS).collect();
    format!("{kept}... ({} more characters)", total - MAX_CELL_CHARS)
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
