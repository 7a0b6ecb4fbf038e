//! # Built-in 2-D data sets, generated or loaded with no network
//!
//! Every sample is a pure function of `(key, index)` ([`super::random`]), so a batch is the same
//! whatever the batch split or thread count.
//!
//! - `two-moons`: scikit-learn's `make_moons` construction (outer arc `(cos a, sin a)`, inner
//!   arc `(1 - cos a, 1/2 - sin a)`, `a ~ U[0, pi]`, Gaussian noise 0.1), mapped by
//!   `2x + (-1, -0.2)` as in FFJORD's toy data.
//! - `checkerboard`: FFJORD's: `x1 ~ U[-2, 2)`, `x2 = U[0, 1) - 2 B + (floor(x1) mod 2)` with
//!   `B ~ Bernoulli(1/2)`, then `2 (x1, x2)`.
//! - an image (the diffrax example's density from a picture): a greyscale PGM file (`P2` or
//!   `P5`); darker pixels carry more mass (weight `1 - v/maxval`); a sample picks a pixel by
//!   inverse CDF and a uniform point inside it, then is standardised with the density's exact
//!   per-axis mean and standard deviation.
//!
//! # References
//! W. Grathwohl et al., FFJORD (ICLR 2019), `lib/toy_data.py`; scikit-learn `make_moons`;
//! diffrax `examples/continuous_normalising_flow.ipynb`; Netpbm PGM format specification.

use super::random::{normal, uniform01};
use crate::backend::Float;
use crate::{Error, Result};
use std::f64::consts::PI;
use std::path::Path;

/// Noise of the two-moons set (FFJORD's toy setting).
pub const MOONS_NOISE: f64 = 0.1;
/// Draws per sample reserved in the counter stream (keeps samples' draws disjoint).
const DRAWS_PER_SAMPLE: u64 = 8;

/// A density over the plane to train on.
#[derive(Debug, Clone, PartialEq)]
pub enum Dataset {
    /// Two interleaved half circles with Gaussian noise (`MOONS_NOISE`), scaled by 2 and shifted
    /// to `(2x - 1, 2y - 0.2)`.
    TwoMoons,
    /// Uniform over the 8 dark squares (side 2) of a 4x4 board covering `[-4, 4)^2`.
    Checkerboard,
    /// A density proportional to a greyscale image's darkness.
    Image(ImageDensity),
}

impl Dataset {
    /// `two-moons`, `checkerboard`, or a path to a `.pgm` file (optionally `image:PATH`).
    pub fn parse(name: &str) -> Result<Dataset> {
        match (name, Self::image_path(name)?) {
            (_, Some(path)) => Ok(Dataset::Image(ImageDensity::load(Path::new(path))?)),
            ("checkerboard", None) => Ok(Dataset::Checkerboard),
            (_, None) => Ok(Dataset::TwoMoons),
        }
    }

    /// The most bytes [`Dataset::parse`] of `name` holds at once: 0 for the built-in sets, an
    /// image's [`ImageDensity::load_footprint`] (read from its header alone). A name `parse`
    /// refuses is refused alike.
    ///
    /// ```
    /// use harness_reference::cnf::data::Dataset;
    /// assert_eq!(Dataset::footprint("two-moons")?, 0);
    /// assert!(Dataset::footprint("no-such.pgm").is_err());
    /// # Ok::<(), harness_reference::Error>(())
    /// ```
    pub fn footprint(name: &str) -> Result<u128> {
        match Self::image_path(name)? {
            Some(path) => ImageDensity::load_footprint(Path::new(path)),
            None => Ok(0),
        }
    }

    /// The image path `name` names, `None` for a built-in set, or `parse`'s error.
    fn image_path(name: &str) -> Result<Option<&str>> {
        match name {
            "two-moons" | "moons" | "checkerboard" => Ok(None),
            other => {
                let path = other.strip_prefix("image:").unwrap_or(other);
                if path.ends_with(".pgm") || other.starts_with("image:") {
                    Ok(Some(path))
                } else {
                    Err(Error::InvalidHyper {
                        name: "data",
                        value: other.into(),
                        expected: "two-moons, checkerboard, or a greyscale PGM image \
                                   (a path ending in .pgm, or image:PATH for any other name)"
                            .into(),
                    })
                }
            }
        }
    }

    /// A short label: `two-moons`, `checkerboard`, or `image WxH`.
    ///
    /// ```
    /// use harness_reference::cnf::data::Dataset;
    /// assert_eq!(Dataset::parse("moons")?.name(), "two-moons");
    /// # Ok::<(), harness_reference::Error>(())
    /// ```
    pub fn name(&self) -> String {
        match self {
            Dataset::TwoMoons => "two-moons".into(),
            Dataset::Checkerboard => "checkerboard".into(),
            Dataset::Image(im) => format!("image {}x{}", im.width, im.height),
        }
    }

    /// Samples `start .. start + n` of stream `key`, written as `n x 2` into `out`.
    pub fn sample_into(&self, key: u64, start: u64, out: &mut [f64]) {
        self.sample_as(key, start, out)
    }

    /// [`Dataset::sample_into`] in any float type: each sample drawn in f64 and rounded once to
    /// `E` (for f64, the same bits).
    ///
    /// ```
    /// use harness_reference::cnf::data::Dataset;
    /// let (mut wide, mut narrow) = ([0.0f64; 8], [0.0f32; 8]);
    /// Dataset::TwoMoons.sample_into(7, 0, &mut wide);
    /// Dataset::TwoMoons.sample_as(7, 0, &mut narrow);
    /// assert!(wide.iter().zip(&narrow).all(|(&w, &n)| w as f32 == n));
    /// ```
    pub fn sample_as<E: Float>(&self, key: u64, start: u64, out: &mut [E]) {
        for (i, xy) in out.chunks_exact_mut(2).enumerate() {
            let base = (start + i as u64) * DRAWS_PER_SAMPLE;
            let u = |j: u64| uniform01(key, base + j);
            let (x, y) = match self {
                Dataset::TwoMoons => {
                    let a = PI * u(0);
                    let (c, s) = (a.cos(), a.sin());
                    let (x, y) = if u(1) < 0.5 {
                        (c, s)
                    } else {
                        (1.0 - c, 0.5 - s)
                    };
                    // normal() consumes draws 2j, 2j+1 of its index: use indices past u(0..2)
                    let nx = normal(key, (base + 4) / 2) * MOONS_NOISE;
                    let ny = normal(key, (base + 6) / 2) * MOONS_NOISE;
                    (2.0 * (x + nx) - 1.0, 2.0 * (y + ny) - 0.2)
                }
                Dataset::Checkerboard => {
                    let x1 = 4.0 * u(0) - 2.0;
                    let b = if u(1) < 0.5 { 0.0 } else { 1.0 };
                    let x2 = u(2) - 2.0 * b + x1.floor().rem_euclid(2.0);
                    (2.0 * x1, 2.0 * x2)
                }
                Dataset::Image(im) => im.sample(u(0), u(1), u(2)),
            };
            xy[0] = E::of_f64(x);
            xy[1] = E::of_f64(y);
        }
    }
}

/// The longest PGM header read before the pixels (magic, sizes, maxval and comments).
const PGM_HEADER_MAX: usize = 4096;

/// What a PGM header says, and where its pixels start.
struct PgmHeader {
    binary: bool,
    width: usize,
    height: usize,
    maxval: usize,
    /// Offset just past the maxval token (the single whitespace byte before binary pixels).
    end: usize,
}

impl PgmHeader {
    /// The most bytes a pixel takes in the file: P5 one or two, P2 at most 6 (`"65535 "`).
    fn bytes_per_pixel(&self) -> usize {
        match self.binary {
            true if self.maxval < 256 => 1,
            true => 2,
            false => 6,
        }
    }
}

/// The longest token of a PGM header or ASCII raster, in bytes (a size, a maxval or a sample
/// has at most 5 digits; leading zeros are allowed up to this length).
const PGM_TOKEN_MAX: usize = 16;

/// The whitespace-separated tokens of a PGM file, `#` comments skipped.
struct PgmTokens<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl PgmTokens<'_> {
    /// The next token; one longer than [`PGM_TOKEN_MAX`] bytes is an error (no PGM token is
    /// that long), never cut into two.
    fn next(&mut self) -> std::result::Result<&str, String> {
        let b = self.bytes;
        loop {
            while self.pos < b.len() && b[self.pos].is_ascii_whitespace() {
                self.pos += 1;
            }
            if self.pos < b.len() && b[self.pos] == b'#' {
                while self.pos < b.len() && b[self.pos] != b'\n' {
                    self.pos += 1;
                }
                continue;
            }
            break;
        }
        let start = self.pos;
        while self.pos < b.len() && !b[self.pos].is_ascii_whitespace() {
            if self.pos - start == PGM_TOKEN_MAX {
                return Err(format!(
                    "a token longer than {PGM_TOKEN_MAX} bytes (`{}...`)",
                    b[start..self.pos].escape_ascii()
                ));
            }
            self.pos += 1;
        }
        if start == self.pos {
            return Err("truncated".into());
        }
        std::str::from_utf8(&b[start..self.pos])
            .map_err(|_| format!("`{}` is not text", b[start..self.pos].escape_ascii()))
    }

    /// The next token as a number.
    fn number(&mut self) -> std::result::Result<usize, String> {
        let t = self.next()?;
        t.parse::<usize>()
            .map_err(|_| format!("bad number `{}`", t.escape_default()))
    }
}

/// Parse and check the header at the start of `bytes` (magic `P2`/`P5`, sides in
/// `1..=16384`, maxval in `1..=65535`), within the first [`PGM_HEADER_MAX`] bytes.
fn pgm_header(bytes: &[u8]) -> std::result::Result<PgmHeader, String> {
    let head = &bytes[..bytes.len().min(PGM_HEADER_MAX)];
    let mut t = PgmTokens {
        bytes: head,
        pos: 0,
    };
    let incomplete = |e: String| {
        if e == "truncated" {
            format!("header: {e} (no complete header in the first {PGM_HEADER_MAX} bytes)")
        } else {
            format!("header: {e}")
        }
    };
    let binary = match t.next() {
        Ok("P5") => true,
        Ok("P2") => false,
        Ok(other) => {
            return Err(format!(
                "magic `{}` is not P2 or P5",
                other.escape_default()
            ))
        }
        // a first token too long to be a magic number: the file's first bytes
        Err(e) if e != "truncated" => {
            return Err(format!(
                "magic `{}...` is not P2 or P5",
                head[..head.len().min(PGM_TOKEN_MAX)].escape_ascii()
            ))
        }
        Err(e) => return Err(incomplete(e)),
    };
    let width = t.number().map_err(incomplete)?;
    let height = t.number().map_err(incomplete)?;
    let maxval = t.number().map_err(incomplete)?;
    if width == 0 || height == 0 || width > 1 << 14 || height > 1 << 14 {
        return Err(format!(
            "size {width}x{height} must be in 1..=16384 per side"
        ));
    }
    if maxval == 0 || maxval > 65535 {
        return Err(format!("maxval {maxval} must be in 1..=65535"));
    }
    Ok(PgmHeader {
        binary,
        width,
        height,
        maxval,
        end: t.pos,
    })
}

/// A density proportional to the darkness of a greyscale image.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageDensity {
    /// Image width in pixels.
    pub width: usize,
    /// Image height in pixels.
    pub height: usize,
    /// Cumulative pixel weights, row-major (last = total).
    cdf: Vec<f64>,
    mean: (f64, f64),
    std: (f64, f64),
}

impl ImageDensity {
    /// Read a PGM file: a regular file whose header is checked before the pixels are read, and
    /// of which no more is read than the header's size allows (a stream such as `/dev/zero`
    /// is refused at once, never read to its end).
    pub fn load(path: &Path) -> Result<Self> {
        use std::io::Read;
        let bad = |what: String| Error::InvalidHyper {
            name: "data",
            value: path.display().to_string(),
            expected: what,
        };
        let (mut file, mut bytes, header, file_len) = Self::open(path)?;
        let limit = PGM_HEADER_MAX + header.width * header.height * header.bytes_per_pixel() + 1;
        // read into one allocation of the size to be read (growing by doubling would hold up to
        // twice the file)
        let to_read = limit.min(usize::try_from(file_len).unwrap_or(usize::MAX));
        bytes.reserve_exact(to_read.saturating_sub(bytes.len()));
        (&mut file)
            .take((limit - bytes.len().min(limit)) as u64)
            .read_to_end(&mut bytes)
            .map_err(|e| bad(format!("a readable PGM file ({e})")))?;
        Self::from_pgm(&bytes).map_err(|msg| Error::InvalidHyper {
            name: "data",
            value: path.display().to_string(),
            expected: format!("a greyscale PGM (P2/P5) image: {msg}"),
        })
    }

    /// The most bytes [`ImageDensity::load`] holds at once for the image at `path`, read from its
    /// header alone (the file's bytes, the pixel values and the cumulative weights), so that a
    /// caller can weigh an image against a memory budget before loading it. The errors are
    /// `load`'s for a missing file or a bad header.
    ///
    /// ```no_run
    /// use harness_reference::cnf::data::ImageDensity;
    /// let bytes = ImageDensity::load_footprint(std::path::Path::new("face.pgm"))?;
    /// # Ok::<(), harness_reference::Error>(())
    /// ```
    pub fn load_footprint(path: &Path) -> Result<u128> {
        let (_, _, h, _) = Self::open(path)?;
        let count = (h.width * h.height) as u128;
        Ok(PGM_HEADER_MAX as u128 + count * (h.bytes_per_pixel() as u128 + 16))
    }

    /// `path` opened, its first [`PGM_HEADER_MAX`] bytes read and its header checked; with the
    /// file's length.
    fn open(path: &Path) -> Result<(std::fs::File, Vec<u8>, PgmHeader, u64)> {
        use std::io::Read;
        let bad = |what: String| Error::InvalidHyper {
            name: "data",
            value: path.display().to_string(),
            expected: what,
        };
        let meta =
            std::fs::metadata(path).map_err(|e| bad(format!("a readable PGM file ({e})")))?;
        if !meta.is_file() {
            return Err(bad("a PGM file (this is not a regular file)".into()));
        }
        let mut file =
            std::fs::File::open(path).map_err(|e| bad(format!("a readable PGM file ({e})")))?;
        let mut bytes = Vec::new();
        (&mut file)
            .take(PGM_HEADER_MAX as u64)
            .read_to_end(&mut bytes)
            .map_err(|e| bad(format!("a readable PGM file ({e})")))?;
        let header =
            pgm_header(&bytes).map_err(|m| bad(format!("a greyscale PGM (P2/P5) image: {m}")))?;
        Ok((file, bytes, header, meta.len()))
    }

    /// Parse PGM bytes (`P2` ASCII or `P5` binary, 8 or 16 bit).
    pub fn from_pgm(bytes: &[u8]) -> std::result::Result<Self, String> {
        let PgmHeader {
            binary,
            width,
            height,
            maxval,
            end,
        } = pgm_header(bytes)?;
        let count = width * height;
        let values: Vec<usize> = if binary {
            let start = end + 1; // one whitespace byte after maxval
            let bpp = if maxval < 256 { 1 } else { 2 };
            let data = bytes
                .get(start..start + count * bpp)
                .ok_or_else(|| "truncated pixel data".to_string())?;
            data.chunks_exact(bpp)
                .map(|c| {
                    if bpp == 1 {
                        c[0] as usize
                    } else {
                        (c[0] as usize) << 8 | c[1] as usize
                    }
                })
                .collect()
        } else {
            // one allocation of the image's size (collecting `Result`s would grow by doubling)
            let mut t = PgmTokens { bytes, pos: end };
            let mut values = Vec::with_capacity(count);
            for _ in 0..count {
                values.push(t.number().map_err(|e| format!("pixel values: {e}"))?);
            }
            values
        };
        if let Some(v) = values.iter().find(|&&v| v > maxval) {
            return Err(format!("pixel value {v} exceeds maxval {maxval}"));
        }
        Self::from_pixels(width, height, maxval, &values)
    }

    fn from_pixels(
        width: usize,
        height: usize,
        maxval: usize,
        values: &[usize],
    ) -> std::result::Result<Self, String> {
        let mut cdf = Vec::with_capacity(values.len());
        let (mut total, mut sx, mut sy, mut sxx, mut syy) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for (i, &v) in values.iter().enumerate() {
            let w = 1.0 - v as f64 / maxval as f64;
            let (cx, cy) = Self::centre(width, height, i);
            total += w;
            sx += w * cx;
            sy += w * cy;
            sxx += w * cx * cx;
            syy += w * cy * cy;
            cdf.push(total);
        }
        if total <= 0.0 {
            return Err("the image is white everywhere (no mass)".into());
        }
        let mean = (sx / total, sy / total);
        // uniform within a unit pixel adds variance 1/12 per axis
        let var = |s2: f64, m: f64| s2 / total - m * m + 1.0 / 12.0;
        Ok(ImageDensity {
            width,
            height,
            cdf,
            mean,
            std: (var(sxx, mean.0).sqrt(), var(syy, mean.1).sqrt()),
        })
    }

    /// A standardised point `(x, y)`, as [`Dataset::sample_into`] draws them, back in pixel
    /// units: `(x std_x + mean_x, y std_y + mean_y)`, where the image covers `[0, width] x
    /// [0, height]` with `y` pointing up (the inverse of the standardisation, up to rounding).
    ///
    /// ```
    /// use harness_reference::cnf::data::ImageDensity;
    /// // one dark pixel: every point drawn lies in [0, 1]^2 in pixel units
    /// let im = ImageDensity::from_pgm(b"P2 1 1 255 0").unwrap();
    /// let (px, py) = im.to_pixels(0.0, 0.0);
    /// assert_eq!((px, py), (0.5, 0.5));
    /// ```
    pub fn to_pixels(&self, x: f64, y: f64) -> (f64, f64) {
        (x * self.std.0 + self.mean.0, y * self.std.1 + self.mean.1)
    }

    /// The sampling weight of the pixel whose unit square holds the point `(px, py)` in pixel
    /// units ([`ImageDensity::to_pixels`]; a square includes its left and lower edges): the
    /// pixel's darkness `1 - value / maxval` as the cumulative sums hold it, 0 outside the
    /// image. A pixel of weight 0 is never drawn.
    ///
    /// ```
    /// use harness_reference::cnf::data::ImageDensity;
    /// // 2x1: a black pixel on the left, a white one on the right
    /// let im = ImageDensity::from_pgm(b"P2 2 1 255 0 255").unwrap();
    /// assert_eq!(im.weight_at(0.5, 0.5), 1.0);
    /// assert_eq!(im.weight_at(1.5, 0.5), 0.0);
    /// assert_eq!(im.weight_at(-0.5, 0.5), 0.0);
    /// ```
    pub fn weight_at(&self, px: f64, py: f64) -> f64 {
        let (w, h) = (self.width as f64, self.height as f64);
        if !(px >= 0.0 && px < w && py >= 0.0 && py < h) {
            return 0.0;
        }
        let col = px.floor() as usize;
        let row = self.height - 1 - py.floor() as usize;
        let i = row * self.width + col;
        let below = if i == 0 { 0.0 } else { self.cdf[i - 1] };
        self.cdf[i] - below
    }

    /// Centre of pixel `i` with y pointing up.
    fn centre(width: usize, height: usize, i: usize) -> (f64, f64) {
        let (row, col) = (i / width, i % width);
        (col as f64 + 0.5, (height - row) as f64 - 0.5)
    }

    /// A standardised point from three uniforms (pixel choice, position inside it).
    fn sample(&self, u_pick: f64, ux: f64, uy: f64) -> (f64, f64) {
        let total = *self.cdf.last().expect("non-empty");
        let target = u_pick * total;
        let i = self
            .cdf
            .partition_point(|&c| c <= target)
            .min(self.cdf.len() - 1);
        let (cx, cy) = Self::centre(self.width, self.height, i);
        let (x, y) = (cx - 0.5 + ux, cy - 0.5 + uy);
        (
            (x - self.mean.0) / self.std.0,
            (y - self.mean.1) / self.std.1,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cnf::random::key;

    #[test]
    fn moons_are_deterministic_and_roughly_centred() {
        let mut a = vec![0.0; 2000];
        let mut b = vec![0.0; 2000];
        Dataset::TwoMoons.sample_into(key(1, 2, 3), 0, &mut a);
        Dataset::TwoMoons.sample_into(key(1, 2, 3), 0, &mut b);
        assert_eq!(a, b);
        // Closed form: E[x] over both arcs is 2*(1/2) - 1 = 0; E[y] = 2*(1/4) - 0.2 = 0.3
        // (E sin a = 2/pi, arcs give 2/pi and 1/2 - 2/pi, mean 1/4). 1000 samples: SE ~ 0.05.
        let mx = a.chunks(2).map(|p| p[0]).sum::<f64>() / 1000.0;
        let my = a.chunks(2).map(|p| p[1]).sum::<f64>() / 1000.0;
        assert!(mx.abs() < 0.15 && (my - 0.3).abs() < 0.15, "{mx} {my}");
    }

    #[test]
    fn a_split_batch_equals_the_whole_batch() {
        let k = key(5, 2, 7);
        let mut whole = vec![0.0; 20];
        Dataset::Checkerboard.sample_into(k, 0, &mut whole);
        let mut part = vec![0.0; 10];
        Dataset::Checkerboard.sample_into(k, 5, &mut part);
        assert_eq!(&whole[10..], &part[..]);
    }

    #[test]
    fn checkerboard_points_fall_evenly_on_the_eight_dark_squares_of_the_board() {
        // The board is [-4, 4)^2 in 2x2 squares; the square index floor(x1/2) + floor(x2/2) is
        // always even (FFJORD), and each of the 8 dark squares holds 1/8 of the mass.
        let n = 4000;
        let mut pts = vec![0.0; 2 * n];
        Dataset::Checkerboard.sample_into(key(0, 0, 0), 0, &mut pts);
        let mut per_square = [0usize; 16];
        for p in pts.chunks(2) {
            assert!(
                p.iter().all(|v| (-4.0..4.0).contains(v)),
                "{p:?} off the board"
            );
            let (i, j) = ((p[0] / 2.0).floor(), (p[1] / 2.0).floor());
            assert_eq!((i + j).rem_euclid(2.0), 0.0, "{p:?}");
            per_square[((i + 2.0) * 4.0 + (j + 2.0)) as usize] += 1;
        }
        // Binomial(4000, 1/8): mean 500, sd 21; 5 sd either side.
        let dark: Vec<usize> = per_square.iter().copied().filter(|&c| c > 0).collect();
        assert_eq!(dark.len(), 8, "{per_square:?}");
        assert!(
            dark.iter().all(|&c| c.abs_diff(n / 8) < 105),
            "{per_square:?}"
        );
    }

    #[test]
    fn pgm_image_samples_land_on_dark_pixels_only() {
        // 2x2: only the top-left pixel is black; samples must be in that pixel (standardised:
        // the density is uniform on one pixel, so every coordinate is within sqrt(3) of 0).
        let im = ImageDensity::from_pgm(b"P2\n2 2\n255\n0 255\n255 255\n").unwrap();
        let ds = Dataset::Image(im);
        let mut pts = vec![0.0; 200];
        ds.sample_into(key(0, 0, 0), 0, &mut pts);
        assert!(pts.iter().all(|v| v.abs() <= 3f64.sqrt() + 1e-12));
    }

    #[test]
    fn malformed_pgm_is_a_clear_error() {
        for bad in [
            &b"P2\n2 2\n255\n0 1 2"[..],
            b"P6\n1 1\n255\n0",
            b"P2\n1 1\n255\n255\n",
            b"P5\n4 4\n255\n\x00",
        ] {
            assert!(
                ImageDensity::from_pgm(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn a_header_number_longer_than_a_token_is_refused_not_split_in_two() {
        // 18 digits, once read as a width of 2 (the first 16 bytes) and a height of 22 (the rest)
        let mut split = b"P5\n000000000000000222\n255\n".to_vec();
        split.extend([0u8; 44]);
        let Err(e) = ImageDensity::from_pgm(&split) else {
            panic!("refused")
        };
        assert!(e.contains("longer than 16 bytes"), "{e}");
        assert!(e.contains("0000000000000002"), "{e}");
        let Err(e) = ImageDensity::from_pgm(b"P5\n99999999999999999999999 2\n255\n") else {
            panic!("refused")
        };
        assert!(e.contains("longer than 16 bytes"), "{e}");
        // 16 bytes with leading zeros still read as the number
        let mut padded = b"P5\n0000000000000002 1\n255\n".to_vec();
        padded.extend([0u8, 255]);
        assert!(ImageDensity::from_pgm(&padded).is_ok());
    }
}
