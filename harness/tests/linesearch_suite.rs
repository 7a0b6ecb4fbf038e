//! The backtracking line-search suite on the reference and on planted searches: a textbook
//! backtracking loop written here, passing every law when correct, and four versions of it with
//! one bug each, every one failed by the law meant for it with a counterexample.

use harness::subject::linesearch::{
    self, BacktrackingSearch, ReferenceSearch, SearchReport, SearchRequest, SuiteOptions,
};
use harness::subject::{Error, Result};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Bug {
    None,
    /// Takes the first candidate without checking the rule.
    NoArmijoCheck,
    /// Evaluates one candidate more than allowed (`0..=max_trials`), and accepts it.
    OneTrialTooMany,
    /// Passes over the first candidate that satisfies the rule and takes the next one.
    SkipsFirstSuccess,
    /// Checks `rho` by rejecting what lies outside `(0, 1)`, which a NaN does not: every
    /// candidate is then NaN, and the search answers "not accepted" instead of refusing.
    NanSlipsPastRhoCheck,
}

struct Textbook(Bug);

impl BacktrackingSearch for Textbook {
    fn name(&self) -> String {
        format!("textbook {:?}", self.0)
    }
    fn search(&self, r: &SearchRequest) -> Result<SearchReport> {
        let bad = |name: &'static str, value: f64| Error::InvalidHyper {
            name,
            value: value.to_string(),
            expected: "see SearchRequest".into(),
        };
        if !(0.0..1.0).contains(&r.slope_rtol) {
            return Err(bad("c", r.slope_rtol));
        }
        let rho_bad = match self.0 {
            // rejects what is outside (0, 1), so NaN, outside nothing, slips through
            Bug::NanSlipsPastRhoCheck => r.decrease_factor <= 0.0 || r.decrease_factor >= 1.0,
            _ => !(r.decrease_factor > 0.0 && r.decrease_factor < 1.0),
        };
        if rho_bad {
            return Err(bad("rho", r.decrease_factor));
        }
        if !(r.initial_step.is_finite() && r.initial_step > 0.0) {
            return Err(bad("alpha_0", r.initial_step));
        }
        if r.max_trials == 0 {
            return Err(bad("max_trials", 0.0));
        }
        let slope: f64 = r.grad0.iter().zip(&r.direction).map(|(g, d)| g * d).sum();
        let trials = if self.0 == Bug::OneTrialTooMany {
            r.max_trials + 1
        } else {
            r.max_trials
        };
        let (mut alpha, mut skipped) = (r.initial_step, false);
        for _ in 0..trials {
            let x: Vec<f64> =
                r.x0.iter()
                    .zip(&r.direction)
                    .map(|(x, d)| x + alpha * d)
                    .collect();
            let v = r.problem.value(&x)?;
            let holds = v <= r.value0 + r.slope_rtol * alpha * slope;
            if holds && self.0 == Bug::SkipsFirstSuccess && !skipped {
                skipped = true;
            } else if holds || self.0 == Bug::NoArmijoCheck {
                return Ok(SearchReport {
                    x,
                    value: v,
                    accepted: true,
                });
            }
            alpha *= r.decrease_factor;
        }
        Ok(SearchReport {
            x: r.x0.clone(),
            value: r.value0,
            accepted: false,
        })
    }
}

#[test]
fn the_reference_and_a_correct_textbook_search_pass_every_law() {
    let opts = SuiteOptions::default();
    for subject in [
        Arc::new(ReferenceSearch) as Arc<dyn BacktrackingSearch>,
        Arc::new(Textbook(Bug::None)),
    ] {
        let report = linesearch::check(subject, &opts);
        assert!(report.passed(), "{}", report.summary());
        assert_eq!(report.laws.len(), 4);
    }
}

#[test]
fn each_planted_search_bug_fails_its_law_with_a_counterexample() {
    for (bug, law, needle) in [
        (
            Bug::NoArmijoCheck,
            "ls_first_armijo_candidate",
            "f(x0) + c alpha slope",
        ),
        (
            Bug::OneTrialTooMany,
            "ls_trials_honoured",
            "candidates allowed",
        ),
        (
            Bug::SkipsFirstSuccess,
            "ls_first_armijo_candidate",
            "not the first candidate",
        ),
        (
            Bug::NanSlipsPastRhoCheck,
            "ls_bad_input_is_typed_error",
            "DecreaseFactor(NaN) accepted",
        ),
    ] {
        let report = linesearch::check(Arc::new(Textbook(bug)), &SuiteOptions::default());
        let row = report.laws.iter().find(|l| l.name == law).unwrap();
        assert!(!row.passed, "{bug:?}: {}", report.summary());
        let detail = row.counterexample.as_deref().unwrap_or_default();
        assert!(detail.contains(needle), "{bug:?}: {detail}");
        // the narrow bugs leave the other laws passing (taking any first candidate breaks
        // every law that looks at acceptance)
        if bug != Bug::NoArmijoCheck {
            let others = report.laws.iter().filter(|l| l.name != law && !l.passed);
            assert_eq!(others.count(), 0, "{bug:?}: {}", report.summary());
        }
    }
}
