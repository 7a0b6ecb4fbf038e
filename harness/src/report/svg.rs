//! Hand-written SVG charts: line charts (one polyline per series) and grouped bar charts (one
//! `<rect>` per bar, linear or log-10 value axis; a histogram is a bar chart of bin counts), with
//! axes, ticks and a legend.
//!
//! Guarantees: the output is a complete, standalone SVG 1.1 document; names are XML-escaped;
//! empty series are skipped; a chart with no points still renders its axes.

use std::fmt::Write;

/// One named line.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
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
    let longest = series
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0) as f64;
    let right = (50.0 + longest * 7.0).max(220.0);
    let (w, h) = (580.0 + right, 500.0);
    let (left, top, bottom) = (80.0, 40.0, 60.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let pts = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if !x0.is_finite() || x1 <= x0 {
        (x0, x1) = (0.0, 1.0);
    }
    let ys = tick_step(y1, 5.0);
    let y1 = if y1 <= 0.0 {
        1.0
    } else {
        (y1 / ys).ceil() * ys
    };
    let sx = |x: f64| left + (x - x0) / (x1 - x0) * pw;
    let sy = |y: f64| top + ph - y / y1 * ph;
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        left + pw / 2.0,
        esc(title)
    );
    // grid and ticks
    let mut y = 0.0;
    while y <= y1 + ys * 1e-9 {
        let py = sy(y);
        let _ = writeln!(
            o,
            r##"<line x1="{left}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            left + pw,
            left - 6.0,
            py + 4.0,
            label(y)
        );
        y += ys;
    }
    let xs = tick_step(x1 - x0, 5.0);
    let mut x = (x0 / xs).ceil() * xs;
    while x <= x1 + xs * 1e-9 {
        let px = sx(x);
        let _ = writeln!(
            o,
            r##"<line x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{:.1}" stroke="#000"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            top + ph,
            top + ph + 5.0,
            top + ph + 18.0,
            label(x)
        );
        x += xs;
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
        h - 15.0,
        esc(x_label)
    );
    let _ = writeln!(
        o,
        r#"<text transform="translate(20,{}) rotate(-90)" text-anchor="middle">{}</text>"#,
        top + ph / 2.0,
        esc(y_label)
    );
    // lines and legend
    for (i, s) in series.iter().filter(|s| !s.points.is_empty()).enumerate() {
        let c = PALETTE[i % PALETTE.len()];
        let d: Vec<String> = s
            .points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
            .collect();
        let _ = writeln!(
            o,
            r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#,
            d.join(" ")
        );
        let ly = top + 10.0 + 20.0 * i as f64;
        let lx = left + pw + 15.0;
        let _ = writeln!(
            o,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
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
    pub name: String,
    pub values: Vec<f64>,
}

/// The value axis of a bar chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
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
    fn tick_steps_are_one_two_five() {
        assert_eq!(tick_step(10.0, 5.0), 2.0);
        assert_eq!(tick_step(768.0, 5.0), 200.0);
        assert_eq!(tick_step(1.0, 5.0), 0.2);
    }
}

/// A density on a regular grid over `[x0, x1] x [y0, y1]`, row 0 at `y0`.
#[derive(Debug, Clone)]
pub struct Grid {
    pub nx: usize,
    pub ny: usize,
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
    let w: f64 = dims.iter().map(|d| d.0).sum();
    let h = dims.iter().map(|d| d.1).fold(0.0, f64::max);
    let mut o = String::new();
    let _ = write!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">"#
    );
    let mut x = 0.0;
    for (p, (pw, _)) in panels.iter().zip(&dims) {
        let _ = write!(o, r#"<g transform="translate({x},0)">"#);
        o.push_str(p.trim_end());
        o.push_str("</g>");
        x += pw;
    }
    o.push_str("</svg>\n");
    o
}
