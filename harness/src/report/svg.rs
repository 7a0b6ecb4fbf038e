//! Hand-written SVG charts: line charts (one polyline per series; linear, log-10 or log-2 axes,
//! dashed lines, markers and reference marks through [`line_chart_with`]) and grouped bar charts
//! (one `<rect>` per bar, linear or log-10 value axis; a histogram is a bar chart of bin counts),
//! with axes, ticks and a legend; [`panel_grid`] lays standalone charts out in rows.
//!
//! Guarantees: the output is a complete, standalone SVG 1.1 document; names are XML-escaped;
//! empty series are skipped; a chart with no points still renders its axes.

use std::fmt::Write;

/// One named line.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// `(x, y)` points, drawn in order.
    pub points: Vec<(f64, f64)>,
}

const PALETTE: [&str; 8] = [
    "#d62728", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" tick step covering `span` in about `n` steps (1, 2 or 5 times a power of ten).
fn tick_step(span: f64, n: f64) -> f64 {
    if span <= 0.0 || !span.is_finite() {
        return 1.0;
    }
    let raw = span / n;
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * p)
}

fn label(x: f64) -> String {
    if x == x.round() && x.abs() < 1e7 {
        format!("{x:.0}")
    } else {
        let s = format!("{x:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Render a line chart (500 high; 800 wide, wider when the legend's names are long).
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    line_chart_with(title, x_label, y_label, series, &LineOptions::default())
}

/// How one axis of [`line_chart_with`] maps values to positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Axis {
    /// Linear: the value axis from 0, the other from the smallest value, ticks at 1, 2 or 5
    /// times a power of ten.
    #[default]
    Linear,
    /// Log 10 over whole decades around the data: a labelled tick `10^k` (raised exponent) at
    /// every decade, light grid lines at 2..9 times each; values `<= 0` are not drawn.
    Log10,
    /// Log 2 over whole powers of two around the data: a tick at every power, labelled with the
    /// number itself up to 4096 and as `2^k` above (only even `k`, or multiples of a larger
    /// step, when there are more than 8); values `<= 0` are not drawn.
    Log2,
}

/// How one series of [`line_chart_with`] is drawn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Style {
    /// A dashed line (a limit or a model rather than a measurement).
    pub dashed: bool,
    /// A dot at every point.
    pub markers: bool,
    /// Index into the chart palette (default: the series' position among the drawn ones).
    pub color: Option<usize>,
}

/// Options of [`line_chart_with`]; the default is what [`line_chart`] draws.
#[derive(Debug, Clone, Default)]
pub struct LineOptions {
    /// How the x axis maps values.
    pub x: Axis,
    /// How the y axis maps values.
    pub y: Axis,
    /// One style per series, by position (missing ones are solid lines without markers).
    pub styles: Vec<Style>,
    /// The legend under the x axis, one entry per line, instead of right of the plot (keeps a
    /// panel narrow).
    pub legend_below: bool,
    /// Plot-area width and height in pixels (default 580 minus the margins by 400).
    pub plot_size: Option<(f64, f64)>,
    /// Vertical dotted reference lines: an x value and its label (drawn at the top of the
    /// line, rotated); marks outside the x range are left out.
    pub marks: Vec<(f64, String)>,
}

/// The exponent range `[lo, hi]` (whole numbers) of a log axis covering `values` in `base`,
/// at least one step wide.
fn log_range(values: impl Iterator<Item = f64>, base: f64) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| *v > 0.0 && v.is_finite()) {
        let e = v.log(base);
        lo = lo.min(e);
        hi = hi.max(e);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    // a little slack so that a point on a power is not taken for the next one by rounding
    let (lo, hi) = ((lo + 1e-9).floor(), (hi - 1e-9).ceil());
    (lo, hi.max(lo + 1.0))
}

/// The label of a tick: plain text, or a power `base^exp` drawn with a raised exponent.
#[derive(Debug, Clone, PartialEq)]
enum TickLabel {
    Plain(String),
    Power(u32, i32),
}

/// `base^e`: the plain number for a small power of two, else a raised exponent.
fn power_label(base: u32, e: i32) -> TickLabel {
    if base == 2 && (0..=12).contains(&e) {
        TickLabel::Plain(format!("{}", 1u32 << e))
    } else {
        TickLabel::Power(base, e)
    }
}

/// The `<text>` elements of a tick label at `(x, y)` anchored `end` or `middle` (a power is
/// two elements: the base at 12 px, then the exponent at 10 px, raised 6 px).
fn tick_text(x: f64, y: f64, anchor: &str, l: &TickLabel) -> String {
    match l {
        TickLabel::Plain(t) => {
            format!(
                r#"<text x="{x:.1}" y="{y:.1}" text-anchor="{anchor}">{}</text>"#,
                esc(t)
            )
        }
        TickLabel::Power(base, e) => {
            let b = base.to_string();
            let sign = if *e < 0 { "\u{2212}" } else { "" };
            let ex = format!("{sign}{}", e.unsigned_abs());
            // widths at 12 px and 10 px sans-serif digits
            let (bw, ew) = (6.7 * b.len() as f64, 5.8 * ex.chars().count() as f64);
            let start = if anchor == "end" {
                x - bw - ew
            } else {
                x - (bw + ew) / 2.0
            };
            format!(
                r#"<text x="{start:.1}" y="{y:.1}">{b}</text><text x="{:.1}" y="{:.1}" font-size="10">{ex}</text>"#,
                start + bw,
                y - 6.0
            )
        }
    }
}

/// Ticks of an axis over `[t0, t1]` in position units (the value, or its log): labelled
/// ticks `(position, label)` and unlabelled grid lines; a linear axis ticks every `step` from
/// the first multiple of it.
fn axis_ticks(axis: Axis, t0: f64, t1: f64, step: f64) -> (Vec<(f64, TickLabel)>, Vec<f64>) {
    match axis {
        Axis::Linear => {
            let mut v = (t0 / step).ceil() * step;
            let mut out = Vec::new();
            while v <= t1 + step * 1e-9 {
                out.push((v, TickLabel::Plain(label(v))));
                v += step;
            }
            (out, Vec::new())
        }
        Axis::Log10 => {
            let (a, b) = (t0 as i32, t1 as i32);
            let major = (a..=b).map(|e| (e as f64, power_label(10, e))).collect();
            let minor = if b - a <= 6 {
                (a..b)
                    .flat_map(|e| (2..10).map(move |m| e as f64 + (m as f64).log10()))
                    .collect()
            } else {
                Vec::new()
            };
            (major, minor)
        }
        Axis::Log2 => {
            let (a, b) = (t0 as i32, t1 as i32);
            let every = ((b - a) as usize).div_ceil(8).max(1) as i32;
            let mut major = Vec::new();
            let mut minor = Vec::new();
            for e in a..=b {
                if e.rem_euclid(every) == 0 {
                    major.push((e as f64, power_label(2, e)));
                } else {
                    minor.push(e as f64);
                }
            }
            (major, minor)
        }
    }
}

/// Render a line chart with the axes, styles, legend placement and reference marks of `opts`
/// (a complete SVG document; series with no drawable point are skipped, and a chart with none
/// still renders its axes). On a log axis only positive values are drawn, and a series is cut
/// into pieces where it has a value that cannot be drawn.
///
/// ```
/// use harness::report::svg::{line_chart_with, Axis, LineOptions, Series, Style};
/// let n2 = Series { name: "n^2".into(), points: (1..=10).map(|i| {
///     let n = 2f64.powi(i);
///     (n, 1e-9 * n * n)
/// }).collect() };
/// let opts = LineOptions {
///     x: Axis::Log2,
///     y: Axis::Log10,
///     styles: vec![Style { markers: true, ..Style::default() }],
///     ..LineOptions::default()
/// };
/// let svg = line_chart_with("time", "n", "seconds", &[n2], &opts);
/// assert!(svg.contains(r#">10</text>"#)); // 10^k ticks on y
/// assert!(!svg.contains("stroke-dasharray"));
/// assert!(svg.contains(">1024</text>"));
/// ```
pub fn line_chart_with(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    opts: &LineOptions,
) -> String {
    let drawable = |axis: Axis, v: f64| v.is_finite() && (axis == Axis::Linear || v > 0.0);
    let pos = |axis: Axis, v: f64| match axis {
        Axis::Linear => v,
        Axis::Log10 => v.log10(),
        Axis::Log2 => v.log2(),
    };
    let keep = |&(x, y): &(f64, f64)| drawable(opts.x, x) && drawable(opts.y, y);
    let longest = series
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0) as f64;
    let drawn: Vec<(usize, &Series)> = series
        .iter()
        .enumerate()
        .filter(|(_, s)| s.points.iter().any(keep))
        .collect();
    let (left, top) = (80.0, 40.0);
    let bottom = 60.0;
    let legend_h = if opts.legend_below {
        18.0 * drawn.len() as f64 + 10.0
    } else {
        0.0
    };
    let right = if opts.legend_below {
        30.0
    } else {
        (50.0 + longest * 7.0).max(220.0)
    };
    // the default chart: 580 wide before the legend, 500 high
    let (pw, ph) = opts.plot_size.unwrap_or((500.0, 400.0));
    let (w, h) = (left + pw + right, top + ph + bottom + legend_h);
    let pts = || {
        drawn
            .iter()
            .flat_map(|(_, s)| s.points.iter().copied())
            .filter(keep)
    };
    // the x range: linear from the smallest value, log over whole powers
    let (x0, x1) = match opts.x {
        Axis::Linear => {
            let (mut x0, mut x1) = (f64::INFINITY, f64::NEG_INFINITY);
            for (x, _) in pts() {
                x0 = x0.min(x);
                x1 = x1.max(x);
            }
            if !x0.is_finite() || x1 <= x0 {
                (0.0, 1.0)
            } else {
                (x0, x1)
            }
        }
        Axis::Log10 => log_range(pts().map(|p| p.0), 10.0),
        Axis::Log2 => log_range(pts().map(|p| p.0), 2.0),
    };
    // the y range: linear from 0 to a whole tick, log over whole powers
    let (y0, y1, ys) = match opts.y {
        Axis::Linear => {
            let y1 = pts().fold(0f64, |m, p| m.max(p.1));
            let ys = tick_step(y1, 5.0);
            (
                0.0,
                if y1 <= 0.0 {
                    1.0
                } else {
                    (y1 / ys).ceil() * ys
                },
                ys,
            )
        }
        Axis::Log10 => {
            let (a, b) = log_range(pts().map(|p| p.1), 10.0);
            (a, b, 1.0)
        }
        Axis::Log2 => {
            let (a, b) = log_range(pts().map(|p| p.1), 2.0);
            (a, b, 1.0)
        }
    };
    let sx = |x: f64| left + (pos(opts.x, x) - x0) / (x1 - x0) * pw;
    let sy = |y: f64| top + ph - (pos(opts.y, y) - y0) / (y1 - y0) * ph;
    let mut o = String::new();
    svg_open(&mut o, w, h, title, left + pw / 2.0);
    // grid and ticks (positions in axis units)
    let (y_ticks, y_minor) = axis_ticks(opts.y, y0, y1, ys);
    let py_of = |t: f64| top + ph - (t - y0) / (y1 - y0) * ph;
    let px_of = |t: f64| left + (t - x0) / (x1 - x0) * pw;
    for t in &y_minor {
        let py = py_of(*t);
        let _ = writeln!(
            o,
            r##"<line x1="{left}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#f0f0f0"/>"##,
            left + pw
        );
    }
    for (t, text) in &y_ticks {
        let py = py_of(*t);
        let _ = writeln!(
            o,
            r##"<line x1="{left}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/>{}"##,
            left + pw,
            tick_text(left - 6.0, py + 4.0, "end", text)
        );
    }
    let (x_ticks, x_minor) = axis_ticks(opts.x, x0, x1, tick_step(x1 - x0, 5.0));
    let logx = opts.x != Axis::Linear;
    for t in &x_minor {
        let px = px_of(*t);
        let _ = writeln!(
            o,
            r##"<line x1="{px:.1}" y1="{top}" x2="{px:.1}" y2="{:.1}" stroke="#f0f0f0"/>"##,
            top + ph
        );
    }
    for (t, text) in &x_ticks {
        let px = px_of(*t);
        if logx {
            let _ = writeln!(
                o,
                r##"<line x1="{px:.1}" y1="{top}" x2="{px:.1}" y2="{:.1}" stroke="#ddd"/>"##,
                top + ph
            );
        }
        let _ = writeln!(
            o,
            r##"<line x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{:.1}" stroke="#000"/>{}"##,
            top + ph,
            top + ph + 5.0,
            tick_text(px, top + ph + 18.0, "middle", text)
        );
    }
    // reference marks, in x order; labels of marks closer than 12 px share one line of text
    let mut marks: Vec<(f64, &str)> = opts
        .marks
        .iter()
        .filter(|(x, _)| drawable(opts.x, *x) && (x0..=x1).contains(&pos(opts.x, *x)))
        .map(|(x, t)| (sx(*x), t.as_str()))
        .collect();
    marks.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut groups: Vec<(f64, Vec<&str>)> = Vec::new();
    for &(px, text) in &marks {
        let _ = writeln!(
            o,
            r##"<line x1="{px:.1}" y1="{top}" x2="{px:.1}" y2="{:.1}" stroke="#999" stroke-dasharray="2,3"/>"##,
            top + ph
        );
        match groups.last_mut() {
            Some((gx, texts)) if px - *gx < 12.0 => texts.push(text),
            _ => groups.push((px, vec![text])),
        }
    }
    for (px, texts) in &groups {
        let _ = writeln!(
            o,
            r##"<text transform="translate({:.1},{:.1}) rotate(-90)" text-anchor="end" font-size="10" fill="#666">{}</text>"##,
            px + 11.0,
            top + 4.0,
            esc(&texts.join("; "))
        );
    }
    let _ = writeln!(
        o,
        r##"<path d="M{left},{top} V{} H{}" fill="none" stroke="#000"/>"##,
        top + ph,
        left + pw
    );
    let _ = writeln!(
        o,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        left + pw / 2.0,
        top + ph + bottom - 15.0,
        esc(x_label)
    );
    let _ = writeln!(
        o,
        r#"<text transform="translate(20,{}) rotate(-90)" text-anchor="middle">{}</text>"#,
        top + ph / 2.0,
        esc(y_label)
    );
    // lines and legend
    for (i, &(k, s)) in drawn.iter().enumerate() {
        let style = opts.styles.get(k).copied().unwrap_or_default();
        let c = PALETTE[style.color.unwrap_or(i) % PALETTE.len()];
        let dash = if style.dashed {
            r#" stroke-dasharray="7,5""#
        } else {
            ""
        };
        // pieces between points that cannot be drawn
        let mut pieces: Vec<Vec<String>> = vec![Vec::new()];
        for p in &s.points {
            if keep(p) {
                pieces.last_mut().expect("one piece").push(format!(
                    "{:.1},{:.1}",
                    sx(p.0),
                    sy(p.1)
                ));
            } else if !pieces.last().expect("one piece").is_empty() {
                pieces.push(Vec::new());
            }
        }
        for d in pieces.iter().filter(|d| !d.is_empty()) {
            let _ = writeln!(
                o,
                r#"<polyline fill="none" stroke="{c}" stroke-width="2"{dash} points="{}"/>"#,
                d.join(" ")
            );
        }
        if style.markers {
            for p in s.points.iter().filter(|p| keep(p)) {
                let _ = writeln!(
                    o,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#,
                    sx(p.0),
                    sy(p.1)
                );
            }
        }
        let (lx, ly) = if opts.legend_below {
            (left, top + ph + bottom + 8.0 + 18.0 * i as f64)
        } else {
            (left + pw + 15.0, top + 10.0 + 20.0 * i as f64)
        };
        let _ = writeln!(
            o,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="3"{dash}/><text x="{}" y="{}">{}</text>"#,
            lx + 20.0,
            lx + 26.0,
            ly + 4.0,
            esc(&s.name)
        );
    }
    o.push_str("</svg>\n");
    o
}

/// One named group member of a bar chart: a value per category (`NaN`: none, and no slot).
#[derive(Debug, Clone)]
pub struct Bars {
    /// Legend entry.
    pub name: String,
    /// One value per category, in category order.
    pub values: Vec<f64>,
}

/// The value axis of a bar chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Linear from 0.
    Linear,
    /// Log 10 from half a decade below the smallest positive value; values `<= 0` draw no bar.
    Log,
}

fn svg_open(o: &mut String, w: f64, h: f64, title: &str, center: f64) {
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="{center}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        esc(title)
    );
}

fn sci(x: f64) -> String {
    if (1e-3..1e5).contains(&x) {
        let s = format!("{x}");
        if s.len() <= 6 {
            return s;
        }
    }
    format!("{x:.0e}")
}

/// Render a grouped bar chart: one group per category, one bar per series in each group, the
/// categories' labels slanted under the axis. Width grows with the number of bars (at least 800).
pub fn bar_chart(
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[Bars],
    scale: Scale,
) -> String {
    let series: Vec<&Bars> = series.iter().filter(|s| !s.values.is_empty()).collect();
    let k = series.len().max(1) as f64;
    let n = categories.len().max(1) as f64;
    let longest = categories
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(1) as f64;
    let longest_name = series
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0) as f64;
    let legend = if series.len() > 1 {
        (50.0 + longest_name * 7.0).max(200.0)
    } else {
        30.0
    };
    let (left, top) = (80.0, 40.0);
    let bottom = 45.0 + longest * 5.2; // labels slanted at 45 degrees, ~7.3 px per character
    let group = (k * 18.0 + 12.0).max(40.0);
    let pw = (n * group).max(800.0 - left - legend);
    let (w, ph) = (left + pw + legend, 320.0);
    let h = top + ph + bottom;
    let vals = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .filter(|v| v.is_finite());
    let mut o = String::new();
    svg_open(&mut o, w, h, title, left + pw / 2.0);
    // value axis: a value's position t (the value, or its log10) in [t0, t1], and the ticks
    let log = scale == Scale::Log;
    let (t0, t1, ticks): (f64, f64, Vec<(f64, String)>) = if log {
        let pos: Vec<f64> = vals.filter(|&v| v > 0.0).collect();
        let lo = pos.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = pos.iter().copied().fold(0f64, f64::max);
        // half a decade below the smallest value, so that its bar has a visible height
        let (t0, d1) = if pos.is_empty() {
            (0.0, 1.0)
        } else {
            let t0 = lo.log10().floor() - 0.5;
            (t0, hi.log10().ceil().max(t0 + 1.0))
        };
        let ticks = (t0.ceil() as i32..=d1 as i32)
            .map(|d| (10f64.powi(d), sci(10f64.powi(d))))
            .collect();
        (t0, d1, ticks)
    } else {
        let hi = vals.fold(0f64, f64::max);
        let step = tick_step(hi, 5.0);
        let hi = if hi <= 0.0 {
            1.0
        } else {
            (hi / step).ceil() * step
        };
        let ticks = (0..)
            .map(|i| i as f64 * step)
            .take_while(|&y| y <= hi + step * 1e-9)
            .map(|y| (y, label(y)))
            .collect();
        (0.0, hi, ticks)
    };
    let sy = |v: f64| {
        let t = if log { v.log10() } else { v };
        top + ph - (t - t0) / (t1 - t0) * ph
    };
    for (y, text) in &ticks {
        let py = sy(*y);
        let _ = writeln!(
            o,
            r##"<line x1="{left}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            left + pw,
            left - 6.0,
            py + 4.0,
            esc(text)
        );
    }
    let base = top + ph;
    let bar_w = ((group - 12.0) / k).min(40.0);
    for (c, cat) in categories.iter().enumerate() {
        let gx = left + c as f64 * (pw / n);
        // series without a value here (NaN) take no slot: the others are centred
        let present: Vec<(usize, f64)> = series
            .iter()
            .enumerate()
            .map(|(i, s)| (i, s.values.get(c).copied().unwrap_or(f64::NAN)))
            .filter(|(_, v)| !v.is_nan())
            .collect();
        let x0 = gx + (pw / n - bar_w * present.len() as f64) / 2.0;
        for (slot, &(i, v)) in present.iter().enumerate() {
            if !v.is_finite() || (scale == Scale::Log && v <= 0.0) {
                continue;
            }
            let y = sy(v).min(base);
            let _ = writeln!(
                o,
                r#"<rect x="{:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}: {}</title></rect>"#,
                x0 + slot as f64 * bar_w,
                bar_w - 1.0,
                base - y,
                PALETTE[i % PALETTE.len()],
                esc(&format!("{} / {cat}", series[i].name)),
                v
            );
        }
        let lx = gx + pw / n / 2.0;
        let ly = top + ph + 14.0;
        let _ = writeln!(
            o,
            r#"<text transform="translate({lx:.1},{ly:.1}) rotate(-45)" text-anchor="end">{}</text>"#,
            esc(cat)
        );
    }
    let _ = writeln!(
        o,
        r##"<path d="M{left},{top} V{} H{}" fill="none" stroke="#000"/>"##,
        top + ph,
        left + pw
    );
    let _ = writeln!(
        o,
        r#"<text transform="translate(20,{}) rotate(-90)" text-anchor="middle">{}</text>"#,
        top + ph / 2.0,
        esc(y_label)
    );
    if series.len() > 1 {
        for (i, s) in series.iter().enumerate() {
            let ly = top + 10.0 + 20.0 * i as f64;
            let lx = left + pw + 15.0;
            let _ = writeln!(
                o,
                r#"<rect x="{lx}" y="{}" width="14" height="14" fill="{}"/><text x="{}" y="{}">{}</text>"#,
                ly - 7.0,
                PALETTE[i % PALETTE.len()],
                lx + 20.0,
                ly + 4.0,
                esc(&s.name)
            );
        }
    }
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_lines_legend_and_escapes_names() {
        let s = line_chart(
            "t",
            "x",
            "y",
            &[Series {
                name: "a<b".into(),
                points: vec![(0.0, 0.0), (1.0, 2.0)],
            }],
        );
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
        assert_eq!(s.matches("<polyline").count(), 1);
        assert!(s.contains("a&lt;b"));
    }

    #[test]
    fn bars_are_rects_and_log_scale_skips_zeros() {
        let cats = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let s = bar_chart(
            "t",
            "count",
            &cats,
            &[Bars {
                name: "s".into(),
                values: vec![1.0, 0.0, 100.0],
            }],
            Scale::Log,
        );
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
        // background + two bars (the zero draws none); the bar of 1 is not flat
        assert_eq!(s.matches("<rect").count(), 3);
        assert!(!s.contains(r#"height="0.0""#));
        assert!(s.contains(">100</text>"), "decade ticks 1, 10, 100");
        let lin = bar_chart(
            "t",
            "n",
            &cats,
            &[Bars {
                name: "s".into(),
                values: vec![1.0, 0.0, 3.0],
            }],
            Scale::Linear,
        );
        assert_eq!(lin.matches("<rect").count(), 4);
    }

    #[test]
    fn log_log_charts_tick_powers_dash_limits_and_escape_names() {
        let pts = |f: fn(f64) -> f64| -> Vec<(f64, f64)> {
            (10..=24).map(|e| 2f64.powi(e)).map(|n| (n, f(n))).collect()
        };
        let opts = LineOptions {
            x: Axis::Log2,
            y: Axis::Log10,
            styles: vec![
                Style {
                    markers: true,
                    ..Style::default()
                },
                Style {
                    dashed: true,
                    color: Some(7),
                    ..Style::default()
                },
            ],
            legend_below: true,
            plot_size: Some((400.0, 300.0)),
            marks: vec![(1048576.0, "L2 <1 MiB>".into()), (1e12, "outside".into())],
        };
        let s = line_chart_with(
            "a & b",
            "parameters",
            "seconds",
            &[
                Series {
                    name: "adam <b = 1.00>".into(),
                    points: pts(|n| 1e-9 * n),
                },
                Series {
                    name: "limit".into(),
                    // a zero cannot be drawn on a log axis: the line is cut there
                    points: vec![
                        (1024.0, 1e-6),
                        (2048.0, 0.0),
                        (4096.0, 4e-6),
                        (8192.0, 8e-6),
                    ],
                },
            ],
            &opts,
        );
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
        // 1e-6 .. 1.7e-2 s: decades 10^-6 .. 10^-1, the exponent raised
        for e in 1..=6 {
            let tick = format!(r#"font-size="10">{}{e}</text>"#, '\u{2212}');
            assert!(s.contains(&tick), "missing 10^-{e}");
        }
        assert!(!s.contains(">\u{2212}7<"));
        assert!(s.contains(">10</text>"));
        // 2^10 .. 2^24: 1024 plain, the larger powers as 2^k, every other one (15 > 8)
        assert!(s.contains(">1024</text>"));
        assert!(s.contains(r#">2</text>"#) && s.contains(r#"font-size="10">24</text>"#));
        assert!(!s.contains(r#"font-size="10">11</text>"#));
        // markers, a dashed limit in two pieces, names escaped
        assert_eq!(s.matches("<circle").count(), 15);
        assert_eq!(s.matches("stroke-dasharray=\"7,5\"").count(), 2 + 1);
        assert_eq!(s.matches("<polyline").count(), 3);
        assert!(s.contains("adam &lt;b = 1.00&gt;") && s.contains("a &amp; b"));
        assert!(s.contains("L2 &lt;1 MiB&gt;") && !s.contains("outside"));
    }

    #[test]
    fn log_ranges_cover_whole_powers() {
        assert_eq!(log_range([1e-6, 1.7e-2].into_iter(), 10.0), (-6.0, -1.0));
        assert_eq!(log_range([1024.0, 1024.0].into_iter(), 2.0), (10.0, 11.0));
        assert_eq!(log_range([0.0, -1.0].into_iter(), 10.0), (0.0, 1.0));
        assert_eq!(power_label(2, 5), TickLabel::Plain("32".into()));
        assert_eq!(power_label(2, 13), TickLabel::Power(2, 13));
        // a raised exponent right of its base, the pair ending at the anchor
        let t = tick_text(100.0, 50.0, "end", &TickLabel::Power(10, -3));
        assert_eq!(
            t,
            "<text x=\"75.0\" y=\"50.0\">10</text><text x=\"88.4\" y=\"44.0\" \
             font-size=\"10\">\u{2212}3</text>"
        );
    }

    #[test]
    fn panels_fill_rows_of_the_given_width() {
        let p = |w: u32, h: u32| {
            format!(r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}"></svg>"#)
        };
        let g = panel_grid(&[p(100, 50), p(80, 70), p(120, 40)], 2);
        assert!(g.contains(r#"width="180" height="110""#), "{g}");
        assert!(g.contains("translate(0,0)") && g.contains("translate(100,0)"));
        assert!(g.contains("translate(0,70)"));
        assert_eq!(
            side_by_side(&[p(100, 50), p(80, 70)]),
            panel_grid(&[p(100, 50), p(80, 70)], 2)
        );
    }

    #[test]
    fn tick_steps_are_one_two_five() {
        assert_eq!(tick_step(10.0, 5.0), 2.0);
        assert_eq!(tick_step(768.0, 5.0), 200.0);
        assert_eq!(tick_step(1.0, 5.0), 0.2);
    }
}

/// A density on a regular grid over `[x0, x1] x [y0, y1]`, row 0 at `y0`.
#[derive(Debug, Clone)]
pub struct Grid {
    /// Cells per row.
    pub nx: usize,
    /// Rows.
    pub ny: usize,
    /// `(x0, x1, y0, y1)`.
    pub extent: (f64, f64, f64, f64),
    /// `ny * nx` non-negative values (NaN cells are drawn grey).
    pub values: Vec<f64>,
}

/// Perceptually ordered colour for `v` in `[0, 1]` (a 5-stop viridis-like ramp).
fn ramp(v: f64) -> String {
    const STOPS: [(f64, f64, f64); 5] = [
        (68.0, 1.0, 84.0),
        (59.0, 82.0, 139.0),
        (33.0, 145.0, 140.0),
        (94.0, 201.0, 98.0),
        (253.0, 231.0, 37.0),
    ];
    let v = v.clamp(0.0, 1.0) * (STOPS.len() - 1) as f64;
    let i = (v.floor() as usize).min(STOPS.len() - 2);
    let f = v - i as f64;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    let c = |p: f64, q: f64| (p + (q - p) * f).round() as u8;
    format!("#{:02x}{:02x}{:02x}", c(a.0, b.0), c(a.1, b.1), c(a.2, b.2))
}

/// A heat map of `grid` (scaled to its maximum) with `points` overlaid, `size` pixels square.
pub fn heatmap(title: &str, grid: &Grid, points: &[(f64, f64)], size: f64) -> String {
    let (left, top, bottom) = (50.0, 40.0, 40.0);
    let (w, h) = (size + left + 20.0, size + top + bottom);
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(
        o,
        r#"<rect width="{w}" height="{h}" fill="white"/><text x="{}" y="24" text-anchor="middle" font-size="15">{}</text>"#,
        left + size / 2.0,
        esc(title)
    );
    let (x0, x1, y0, y1) = grid.extent;
    let max = grid
        .values
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let (cw, ch) = (size / grid.nx as f64, size / grid.ny as f64);
    for r in 0..grid.ny {
        for c in 0..grid.nx {
            let v = grid.values[r * grid.nx + c];
            let fill = if v.is_finite() && max > 0.0 {
                ramp(v / max)
            } else {
                "#888888".into()
            };
            // row 0 is y0 (bottom)
            let _ = write!(
                o,
                r#"<rect x="{:.2}" y="{:.2}" width="{:.2}" height="{:.2}" fill="{fill}"/>"#,
                left + c as f64 * cw,
                top + size - (r + 1) as f64 * ch,
                cw + 0.3,
                ch + 0.3
            );
        }
    }
    for &(x, y) in points {
        if !(x0..=x1).contains(&x) || !(y0..=y1).contains(&y) {
            continue;
        }
        let _ = write!(
            o,
            r#"<circle cx="{:.2}" cy="{:.2}" r="1.2" fill="white" fill-opacity="0.6"/>"#,
            left + (x - x0) / (x1 - x0) * size,
            top + size - (y - y0) / (y1 - y0) * size
        );
    }
    let _ = write!(
        o,
        r#"<rect x="{left}" y="{top}" width="{size}" height="{size}" fill="none" stroke="black"/>"#
    );
    for (i, (xv, yv)) in [(x0, y0), (x1, y1)].into_iter().enumerate() {
        let _ = write!(
            o,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            left + i as f64 * size,
            top + size + 16.0,
            label(xv),
            left - 4.0,
            top + size - i as f64 * size + 4.0,
            label(yv)
        );
    }
    o.push_str("</svg>\n");
    o
}

/// Standalone SVG documents side by side (each nested as an `<svg>` element).
pub fn side_by_side(panels: &[String]) -> String {
    panel_grid(panels, panels.len().max(1))
}

/// Standalone SVG documents in rows of `columns` (at least 1), left to right then top to
/// bottom, each nested as an `<svg>` element; a row is as high as its highest panel, the
/// document as wide as its widest row.
///
/// ```
/// use harness::report::svg::panel_grid;
/// let p = r#"<svg xmlns="http://www.w3.org/2000/svg" width="100" height="50"></svg>"#.to_string();
/// let g = panel_grid(&[p.clone(), p.clone(), p], 2);
/// assert!(g.starts_with(r#"<svg xmlns="http://www.w3.org/2000/svg" width="200" height="100""#));
/// assert!(g.contains(r#"translate(0,50)"#));
/// ```
pub fn panel_grid(panels: &[String], columns: usize) -> String {
    let dims: Vec<(f64, f64)> = panels
        .iter()
        .map(|p| {
            let attr = |name: &str| {
                p.split_once(&format!(" {name}=\""))
                    .and_then(|(_, rest)| rest.split_once('"'))
                    .and_then(|(v, _)| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            (attr("width"), attr("height"))
        })
        .collect();
    let columns = columns.max(1);
    let rows: Vec<&[(f64, f64)]> = dims.chunks(columns).collect();
    let w = rows
        .iter()
        .map(|r| r.iter().map(|d| d.0).sum::<f64>())
        .fold(0.0, f64::max);
    let row_h: Vec<f64> = rows
        .iter()
        .map(|r| r.iter().map(|d| d.1).fold(0.0, f64::max))
        .collect();
    let h: f64 = row_h.iter().sum();
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">"#
    );
    let mut y = 0.0;
    for (r, (row, rh)) in panels.chunks(columns).zip(&row_h).enumerate() {
        let mut x = 0.0;
        for (p, (pw, _)) in row.iter().zip(&dims[r * columns..]) {
            let _ = write!(o, r#"<g transform="translate({x},{y})">"#);
            o.push_str(p.trim_end());
            o.push_str("</g>");
            x += pw;
        }
        y += rh;
    }
    o.push_str("</svg>\n");
    o
}
