//! Explicit Runge–Kutta methods as data: Butcher tableaus with an optional embedded error
//! estimate, and the [`Solver`] names the golden-v1 format uses.
//!
//! A tableau with `s` stages is the array
//!
//! ```text
//!  c_0 = 0 |
//!  c_1     | a_10
//!  c_2     | a_20  a_21
//!  ...     | ...
//!  c_{s-1} | a_{s-1,0} ... a_{s-1,s-2}
//!  --------+------------------------------
//!          | b_0   b_1  ...  b_{s-1}        (solution weights)
//!          | e_0   e_1  ...  e_{s-1}        (error weights `b_err`, optional)
//! ```
//!
//! read as `k_i = f(t0 + c_i*dt, y0 + dt*sum_j a_ij k_j)`, `y1 = y0 + dt*sum_i b_i k_i`,
//! `y_error = dt*sum_i e_i k_i`. A method is *FSAL* (first same as last) when its last stage is
//! evaluated at `(t1, y1)` — `c_{s-1} = 1`, row `a_{s-1} = b[..s-1]`, `b_{s-1} = 0` — so that stage
//! is reused as the first stage of the next step.
//!
//! Guarantees: every [`Tableau`] that exists passed [`Tableau::new`]'s shape and finiteness
//! checks, so the stepping code in `solve.rs` indexes it without further checks. The coefficients
//! of the built-in methods are the shortest round-trip f64 literals of diffrax 0.7.2 (so they are
//! bit-identical to the library's), including Dopri5's *Shampine* embedded weights rather than the
//! textbook `b*`.
//!
//! # References
//! - P. Kidger, diffrax 0.7.2, `diffrax/_solver/{euler,heun,midpoint,ralston,bosh3,tsit5,dopri5}.py`.
//! - E. Hairer, S. P. Nørsett, G. Wanner, *Solving Ordinary Differential Equations I*, 2nd ed.,
//!   Springer 1993, §II.1 (Butcher tableaus) and §II.4 (embedded pairs).
//! - Ch. Tsitouras, "Runge–Kutta pairs of order 5(4) satisfying only the first column simplifying
//!   assumption", *Computers & Mathematics with Applications* 62 (2011) 770–775.
//! - J. R. Dormand, P. J. Prince, "A family of embedded Runge–Kutta formulae", *J. Comput. Appl.
//!   Math.* 6 (1980) 19–26; L. F. Shampine, "Some practical Runge–Kutta formulas", *Math. Comp.*
//!   46 (1986) 135–150 (the error weights diffrax uses).
//! - P. Bogacki, L. F. Shampine, "A 3(2) pair of Runge–Kutta formulas", *Appl. Math. Lett.* 2
//!   (1989) 321–325.

use crate::error::ensure;
use crate::{Error, Result};

/// A validated explicit Runge–Kutta Butcher tableau (see the module docs for the diagram).
#[derive(Debug, Clone, PartialEq)]
pub struct Tableau {
    name: &'static str,
    c: Vec<f64>,
    a: Vec<Vec<f64>>,
    b: Vec<f64>,
    b_err: Option<Vec<f64>>,
    order: u32,
    fsal: bool,
}

fn all_finite(xs: &[f64]) -> bool {
    xs.iter().all(|x| x.is_finite())
}

impl Tableau {
    /// A tableau from its full arrays: `c` (length `s`, `c[0] == 0`), `a` (row `i` has length
    /// `i`, so `a[0]` is empty), `b` and optional `b_err` (length `s`), the order `p >= 1` (also
    /// the error order the PID controller uses) and the FSAL flag (checked: `c[s-1] == 1`,
    /// `a[s-1] == b[..s-1]`, `b[s-1] == 0`). All coefficients must be finite.
    ///
    /// ```
    /// use harness_reference::ode::Tableau;
    /// // Heun's method: two stages, trapezoidal weights, Euler as the embedded method.
    /// let heun = Tableau::new(
    ///     "heun",
    ///     vec![0.0, 1.0],
    ///     vec![vec![], vec![1.0]],
    ///     vec![0.5, 0.5],
    ///     Some(vec![0.5, -0.5]),
    ///     2,
    ///     false,
    /// )?;
    /// assert_eq!(heun.stages(), 2);
    /// assert!(Tableau::new("bad", vec![0.0], vec![vec![1.0]], vec![1.0], None, 1, false).is_err());
    /// # Ok::<(), harness_reference::Error>(())
    /// ```
    pub fn new(
        name: &'static str,
        c: Vec<f64>,
        a: Vec<Vec<f64>>,
        b: Vec<f64>,
        b_err: Option<Vec<f64>>,
        order: u32,
        fsal: bool,
    ) -> Result<Tableau> {
        let s = b.len();
        ensure(
            s >= 1,
            "tableau.b",
            format!("{b:?}"),
            "needs at least one stage",
        )?;
        ensure(
            c.len() == s,
            "tableau.c",
            format!("{} entries", c.len()),
            &format!("must have one entry per stage ({s})"),
        )?;
        ensure(
            c[0] == 0.0,
            "tableau.c[0]",
            c[0],
            "must be 0 (explicit method)",
        )?;
        ensure(
            a.len() == s,
            "tableau.a",
            format!("{} rows", a.len()),
            &format!("must have one row per stage ({s})"),
        )?;
        for (i, row) in a.iter().enumerate() {
            if row.len() != i {
                return Err(Error::InvalidHyper {
                    name: "tableau.a",
                    value: format!("row {i} has {} entries", row.len()),
                    expected: format!("row i must have exactly i entries (strictly lower triangular); row {i} needs {i}"),
                });
            }
            ensure(
                all_finite(row),
                "tableau.a",
                format!("{row:?}"),
                "must be finite",
            )?;
        }
        ensure(
            all_finite(&c),
            "tableau.c",
            format!("{c:?}"),
            "must be finite",
        )?;
        ensure(
            all_finite(&b),
            "tableau.b",
            format!("{b:?}"),
            "must be finite",
        )?;
        if let Some(e) = &b_err {
            ensure(
                e.len() == s,
                "tableau.b_err",
                format!("{} entries", e.len()),
                &format!("must have one entry per stage ({s})"),
            )?;
            ensure(
                all_finite(e),
                "tableau.b_err",
                format!("{e:?}"),
                "must be finite",
            )?;
        }
        ensure(order >= 1, "tableau.order", order, "must be >= 1")?;
        if fsal {
            ensure(
                s >= 2 && c[s - 1] == 1.0 && a[s - 1][..] == b[..s - 1] && b[s - 1] == 0.0,
                "tableau.fsal",
                true,
                "FSAL needs c[s-1] == 1, a[s-1] == b[..s-1] and b[s-1] == 0",
            )?;
        }
        Ok(Tableau {
            name,
            c,
            a,
            b,
            b_err,
            order,
            fsal,
        })
    }

    /// The method's name (the golden-v1 `solver` string for the built-in methods).
    pub fn name(&self) -> &'static str {
        self.name
    }
    /// Number of stages `s`.
    pub fn stages(&self) -> usize {
        self.b.len()
    }
    /// Nodes `c` (length `s`, `c[0] = 0`).
    pub fn c(&self) -> &[f64] {
        &self.c
    }
    /// Row `i` of the strictly lower-triangular `a` (length `i`).
    pub fn a(&self, i: usize) -> &[f64] {
        &self.a[i]
    }
    /// Solution weights `b`.
    pub fn b(&self) -> &[f64] {
        &self.b
    }
    /// Error weights (`b - b_embedded`), if the method has an embedded estimate.
    pub fn b_err(&self) -> Option<&[f64]> {
        self.b_err.as_deref()
    }
    /// Order `p` of the method (also the error order used by the PID controller, as in diffrax).
    pub fn order(&self) -> u32 {
        self.order
    }
    /// Whether the last stage is `f(t1, y1)` and is reused as the next step's first stage.
    pub fn fsal(&self) -> bool {
        self.fsal
    }
    /// Largest `|sum_j a_ij - c_i|` over the rows: the row-sum (consistency) condition defect.
    pub fn row_sum_defect(&self) -> f64 {
        self.a
            .iter()
            .zip(&self.c)
            .map(|(row, &ci)| (row.iter().sum::<f64>() - ci).abs())
            .fold(0.0, f64::max)
    }

    /// Forward Euler (order 1, no error estimate).
    pub fn euler() -> Tableau {
        Self::builtin("euler", vec![0.0], vec![vec![]], vec![1.0], None, 1, false)
    }

    /// Heun's method (order 2) with Euler as the embedded method.
    pub fn heun() -> Tableau {
        Self::builtin(
            "heun",
            vec![0.0, 1.0],
            vec![vec![], vec![1.0]],
            vec![0.5, 0.5],
            Some(vec![0.5, -0.5]),
            2,
            false,
        )
    }

    /// The explicit midpoint method (order 2) with Euler as the embedded method.
    pub fn midpoint() -> Tableau {
        Self::builtin(
            "midpoint",
            vec![0.0, 0.5],
            vec![vec![], vec![0.5]],
            vec![0.0, 1.0],
            Some(vec![1.0, -1.0]),
            2,
            false,
        )
    }

    /// Ralston's second-order method (minimum truncation-error bound) with Euler embedded.
    pub fn ralston() -> Tableau {
        Self::builtin(
            "ralston",
            vec![0.0, 0.6666666666666666],
            vec![vec![], vec![0.6666666666666666]],
            vec![0.25, 0.75],
            Some(vec![0.75, -0.75]),
            2,
            false,
        )
    }

    /// Bogacki–Shampine 3(2), FSAL (diffrax `Bosh3`).
    pub fn bosh3() -> Tableau {
        Self::builtin(
            "bosh3",
            vec![0.0, 0.5, 0.75, 1.0],
            vec![
                vec![],
                vec![0.5],
                vec![0.0, 0.75],
                vec![0.2222222222222222, 0.3333333333333333, 0.4444444444444444],
            ],
            vec![
                0.2222222222222222,
                0.3333333333333333,
                0.4444444444444444,
                0.0,
            ],
            Some(vec![
                -0.06944444444444448,
                0.08333333333333331,
                0.1111111111111111,
                -0.125,
            ]),
            3,
            true,
        )
    }

    /// Tsitouras 5(4), FSAL (diffrax `Tsit5`).
    pub fn tsit5() -> Tableau {
        let b = vec![
            0.09646076681806523,
            0.01,
            0.4798896504144996,
            1.379008574103742,
            -3.290069515436081,
            2.324710524099774,
            0.0,
        ];
        Self::builtin(
            "tsit5",
            vec![0.0, 0.161, 0.327, 0.9, 0.9800255409045097, 1.0, 1.0],
            vec![
                vec![],
                vec![0.161],
                vec![-0.008480655492356989, 0.335480655492357],
                vec![2.8971530571054935, -6.359448489975075, 4.3622954328695815],
                vec![
                    5.325864828439257,
                    -11.748883564062828,
                    7.4955393428898365,
                    -0.09249506636175525,
                ],
                vec![
                    5.86145544294642,
                    -12.92096931784711,
                    8.159367898576159,
                    -0.071584973281401,
                    -0.028269050394068383,
                ],
                b[..6].to_vec(),
            ],
            b,
            Some(vec![
                0.0017800110522257773,
                0.0008164344596567463,
                -0.007880878010261994,
                0.1447110071732629,
                -0.5823571654525552,
                0.45808210592918686,
                -0.015151515151515152,
            ]),
            5,
            true,
        )
    }

    /// Dormand–Prince 5(4), FSAL, with Shampine's embedded weights (diffrax `Dopri5`).
    pub fn dopri5() -> Tableau {
        let b = vec![
            0.09114583333333333,
            0.0,
            0.44923629829290207,
            0.6510416666666666,
            -0.322376179245283,
            0.13095238095238096,
            0.0,
        ];
        Self::builtin(
            "dopri5",
            vec![0.0, 0.2, 0.3, 0.8, 0.8888888888888888, 1.0, 1.0],
            vec![
                vec![],
                vec![0.2],
                vec![0.075, 0.225],
                vec![0.9777777777777777, -3.7333333333333334, 3.5555555555555554],
                vec![
                    2.9525986892242035,
                    -11.595793324188385,
                    9.822892851699436,
                    -0.2908093278463649,
                ],
                vec![
                    2.8462752525252526,
                    -10.757575757575758,
                    8.906422717743473,
                    0.2784090909090909,
                    -0.2735313036020583,
                ],
                b[..6].to_vec(),
            ],
            b,
            Some(vec![
                0.0008217592592592582,
                0.0,
                -0.002835180193670739,
                0.024652777777777746,
                -0.03390919811320753,
                0.02793650793650794,
                -0.016666666666666666,
            ]),
            5,
            true,
        )
    }

    fn builtin(
        name: &'static str,
        c: Vec<f64>,
        a: Vec<Vec<f64>>,
        b: Vec<f64>,
        b_err: Option<Vec<f64>>,
        order: u32,
        fsal: bool,
    ) -> Tableau {
        // The built-in literals are fixed; the unit tests prove they pass validation, so this
        // cannot fail. Constructed directly to keep the constructors infallible.
        debug_assert!(Tableau::new(
            name,
            c.clone(),
            a.clone(),
            b.clone(),
            b_err.clone(),
            order,
            fsal
        )
        .is_ok());
        Tableau {
            name,
            c,
            a,
            b,
            b_err,
            order,
            fsal,
        }
    }
}

/// The explicit Runge–Kutta methods golden-v1 names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Solver {
    /// Forward Euler, order 1 (no error estimate).
    Euler,
    /// Heun's method, order 2, with an embedded Euler error estimate.
    Heun,
    /// Explicit midpoint method, order 2, with an embedded Euler error estimate.
    Midpoint,
    /// Ralston's method, order 2 (minimum truncation-error weights), with Euler embedded.
    Ralston,
    /// Bogacki–Shampine 3(2), FSAL.
    Bosh3,
    /// Tsitouras 5(4), diffrax's `Tsit5`.
    Tsit5,
    /// Dormand–Prince 5(4), diffrax's `Dopri5`.
    Dopri5,
}

impl Solver {
    /// Every method, lowest order first.
    pub const ALL: [Solver; 7] = [
        Solver::Euler,
        Solver::Heun,
        Solver::Midpoint,
        Solver::Ralston,
        Solver::Bosh3,
        Solver::Tsit5,
        Solver::Dopri5,
    ];

    /// Parse a golden-v1 `solver` string (`"euler"`, `"heun"`, `"midpoint"`, `"ralston"`,
    /// `"bosh3"`, `"tsit5"`, `"dopri5"`).
    ///
    /// ```
    /// use harness_reference::ode::Solver;
    /// assert_eq!(Solver::parse("tsit5")?, Solver::Tsit5);
    /// assert!(Solver::parse("rk4").is_err());
    /// # Ok::<(), harness_reference::Error>(())
    /// ```
    pub fn parse(s: &str) -> Result<Solver> {
        Solver::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| Error::InvalidHyper {
                name: "solver",
                value: format!("{s:?}"),
                expected: "one of euler, heun, midpoint, ralston, bosh3, tsit5, dopri5".into(),
            })
    }

    /// The golden-v1 name.
    pub fn name(self) -> &'static str {
        match self {
            Solver::Euler => "euler",
            Solver::Heun => "heun",
            Solver::Midpoint => "midpoint",
            Solver::Ralston => "ralston",
            Solver::Bosh3 => "bosh3",
            Solver::Tsit5 => "tsit5",
            Solver::Dopri5 => "dopri5",
        }
    }

    /// The method's tableau.
    pub fn tableau(self) -> Tableau {
        match self {
            Solver::Euler => Tableau::euler(),
            Solver::Heun => Tableau::heun(),
            Solver::Midpoint => Tableau::midpoint(),
            Solver::Ralston => Tableau::ralston(),
            Solver::Bosh3 => Tableau::bosh3(),
            Solver::Tsit5 => Tableau::tsit5(),
            Solver::Dopri5 => Tableau::dopri5(),
        }
    }
}

impl std::str::FromStr for Solver {
    type Err = Error;
    fn from_str(s: &str) -> Result<Solver> {
        Solver::parse(s)
    }
}

impl std::fmt::Display for Solver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Consistency tolerance for the row-sum condition: the literals are shortest round-trip f64
    /// values of rationals, so a row sum may be off by a few ULPs of the largest entry (~12).
    const ROW_SUM_TOL: f64 = 1e-12;

    fn revalidate(t: &Tableau) -> Result<Tableau> {
        Tableau::new(
            t.name,
            t.c.clone(),
            t.a.clone(),
            t.b.clone(),
            t.b_err.clone(),
            t.order,
            t.fsal,
        )
    }

    #[test]
    fn every_builtin_tableau_passes_validation() {
        for m in Solver::ALL {
            let t = m.tableau();
            assert_eq!(revalidate(&t).unwrap(), t, "{m}");
            assert_eq!(t.name(), m.name());
        }
    }

    #[test]
    fn row_sum_defect_is_the_largest_row_error() {
        // Rows: sum() - 0 = 0, 0.5 - 0.5 = 0, (0.25 + 0.5) - 1 = -0.25: the defect is 0.25.
        let t = Tableau::new(
            "inconsistent",
            vec![0.0, 0.5, 1.0],
            vec![vec![], vec![0.5], vec![0.25, 0.5]],
            vec![0.25, 0.25, 0.5],
            None,
            1,
            false,
        )
        .unwrap();
        assert_eq!(t.row_sum_defect(), 0.25);
    }

    #[test]
    fn every_builtin_row_sum_equals_its_node() {
        for m in Solver::ALL {
            let t = m.tableau();
            assert!(
                t.row_sum_defect() <= ROW_SUM_TOL,
                "{m}: defect {}",
                t.row_sum_defect()
            );
        }
    }

    #[test]
    fn weights_sum_to_one_and_error_weights_to_zero() {
        for m in Solver::ALL {
            let t = m.tableau();
            let sb: f64 = t.b().iter().sum();
            assert!((sb - 1.0).abs() <= ROW_SUM_TOL, "{m}: sum b = {sb}");
            if let Some(e) = t.b_err() {
                let se: f64 = e.iter().sum();
                assert!(se.abs() <= ROW_SUM_TOL, "{m}: sum b_err = {se}");
            }
        }
    }

    #[test]
    fn only_euler_lacks_an_error_estimate() {
        for m in Solver::ALL {
            assert_eq!(m.tableau().b_err().is_none(), m == Solver::Euler, "{m}");
        }
    }

    #[test]
    fn fsal_methods_are_bosh3_tsit5_dopri5() {
        for m in Solver::ALL {
            let expect = matches!(m, Solver::Bosh3 | Solver::Tsit5 | Solver::Dopri5);
            assert_eq!(m.tableau().fsal(), expect, "{m}");
        }
    }

    #[test]
    fn orders_match_the_methods() {
        let orders: Vec<u32> = Solver::ALL.iter().map(|m| m.tableau().order()).collect();
        assert_eq!(orders, vec![1, 2, 2, 2, 3, 5, 5]);
    }

    #[test]
    fn parse_round_trips_every_name_and_rejects_unknown() {
        for m in Solver::ALL {
            assert_eq!(Solver::parse(m.name()).unwrap(), m);
            assert_eq!(m.name().parse::<Solver>().unwrap(), m);
        }
        assert!(matches!(
            Solver::parse("Tsit5"),
            Err(Error::InvalidHyper { name: "solver", .. })
        ));
        assert!(Solver::parse("").is_err());
    }

    #[test]
    fn malformed_tableaus_are_rejected_with_the_offending_field() {
        let name_of = |r: Result<Tableau>| match r {
            Err(Error::InvalidHyper { name, .. }) => name,
            other => panic!("expected InvalidHyper, got {other:?}"),
        };
        // a row of the wrong length
        assert_eq!(
            name_of(Tableau::new(
                "x",
                vec![0.0, 1.0],
                vec![vec![], vec![0.5, 0.5]],
                vec![0.5, 0.5],
                None,
                2,
                false
            )),
            "tableau.a"
        );
        // c of the wrong length
        assert_eq!(
            name_of(Tableau::new(
                "x",
                vec![0.0],
                vec![vec![], vec![1.0]],
                vec![0.5, 0.5],
                None,
                2,
                false
            )),
            "tableau.c"
        );
        // implicit first node
        assert_eq!(
            name_of(Tableau::new(
                "x",
                vec![0.5],
                vec![vec![]],
                vec![1.0],
                None,
                1,
                false
            )),
            "tableau.c[0]"
        );
        // non-finite weight
        assert_eq!(
            name_of(Tableau::new(
                "x",
                vec![0.0],
                vec![vec![]],
                vec![f64::NAN],
                None,
                1,
                false
            )),
            "tableau.b"
        );
        // error weights of the wrong length
        assert_eq!(
            name_of(Tableau::new(
                "x",
                vec![0.0],
                vec![vec![]],
                vec![1.0],
                Some(vec![1.0, 2.0]),
                1,
                false
            )),
            "tableau.b_err"
        );
        // a false FSAL claim (Heun's last stage is not evaluated at y1)
        let h = Tableau::heun();
        assert_eq!(
            name_of(Tableau::new(
                "x",
                h.c.clone(),
                h.a.clone(),
                h.b.clone(),
                h.b_err.clone(),
                2,
                true
            )),
            "tableau.fsal"
        );
        assert_eq!(
            name_of(Tableau::new(
                "x",
                vec![0.0],
                vec![vec![]],
                vec![1.0],
                None,
                0,
                false
            )),
            "tableau.order"
        );
        assert_eq!(
            name_of(Tableau::new("x", vec![], vec![], vec![], None, 1, false)),
            "tableau.b"
        );
    }
}
