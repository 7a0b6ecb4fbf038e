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
    /// Gives up after 10 candidates whatever the trials allowed.
    GivesUpAfterTen,
    /// Steps along `-grad f(x0)` whatever the direction asked.
    IgnoresDirection,
    /// Reports the Armijo bound `f(x0) + c alpha slope` as the accepted value.
    ReportsTheBound,
    /// Evaluates one candidate fewer than allowed.
    OneTrialTooFew,
    /// Evaluates the next candidate before accepting the current one.
    LooksAhead,
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
        let trials = match self.0 {
            Bug::OneTrialTooMany => r.max_trials + 1,
            Bug::OneTrialTooFew => r.max_trials - 1,
            Bug::GivesUpAfterTen => r.max_trials.min(10),
            _ => r.max_trials,
        };
        let direction: Vec<f64> = match self.0 {
            Bug::IgnoresDirection => r.grad0.iter().map(|g| -g).collect(),
            _ => r.direction.clone(),
        };
        let point = |alpha: f64| -> Vec<f64> {
            r.x0.iter()
                .zip(&direction)
                .map(|(x, d)| x + alpha * d)
                .collect()
        };
        let (mut alpha, mut skipped) = (r.initial_step, false);
        for _ in 0..trials {
            let x = point(alpha);
            let v = r.problem.value(&x)?;
            let bound = r.value0 + r.slope_rtol * alpha * slope;
            let holds = v <= bound;
            if holds && self.0 == Bug::SkipsFirstSuccess && !skipped {
                skipped = true;
            } else if holds || self.0 == Bug::NoArmijoCheck {
                if self.0 == Bug::LooksAhead {
                    r.problem.value(&point(alpha * r.decrease_factor))?;
                }
                let value = if self.0 == Bug::ReportsTheBound {
                    bound
                } else {
                    v
                };
                return Ok(SearchReport {
                    x,
                    value,
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
fn the_reference_and_a_correct_textbook_search_pass_every_law_under_three_seeds() {
    let subjects = [
        Arc::new(ReferenceSearch) as Arc<dyn BacktrackingSearch>,
        Arc::new(Textbook(Bug::None)),
    ];
    for subject in subjects {
        for seed in [harness::laws::DEFAULT_SEED, 1, 2] {
            let opts = SuiteOptions {
                seed,
                ..SuiteOptions::default()
            };
            let report = linesearch::check(Arc::clone(&subject), &opts);
            assert!(report.passed(), "seed {seed}: {}", report.summary());
            assert_eq!(report.laws.len(), 4);
        }
    }
}

#[test]
fn each_planted_search_bug_fails_its_law_with_a_counterexample_under_three_seeds() {
    for (bug, law, needle) in [
        (
            Bug::NoArmijoCheck,
            "ls_first_armijo_candidate",
            "f(x0) + c alpha slope",
        ),
        (Bug::OneTrialTooMany, "ls_trials_honoured", "none of the"),
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
        (Bug::GivesUpAfterTen, "ls_first_armijo_candidate", "gave up"),
        (
            Bug::IgnoresDirection,
            "ls_first_armijo_candidate",
            "none of the",
        ),
        (
            Bug::ReportsTheBound,
            "ls_first_armijo_candidate",
            "reports f =",
        ),
        (Bug::OneTrialTooFew, "ls_trials_honoured", "trials allowed"),
        (
            Bug::LooksAhead,
            "ls_first_armijo_candidate",
            "after evaluating candidates",
        ),
    ] {
        for seed in [harness::laws::DEFAULT_SEED, 1, 2] {
            let opts = SuiteOptions {
                seed,
                ..SuiteOptions::default()
            };
            let report = linesearch::check(Arc::new(Textbook(bug)), &opts);
            let row = report.laws.iter().find(|l| l.name == law).unwrap();
            assert!(!row.passed, "{bug:?}, seed {seed}: {}", report.summary());
            let detail = row.counterexample.as_deref().unwrap_or_default();
            assert!(detail.contains(needle), "{bug:?}, seed {seed}: {detail}");
            // the narrowest bugs leave the other laws passing (the others break every law that
            // looks at which candidate is accepted after which evaluations)
            if [
                Bug::NanSlipsPastRhoCheck,
                Bug::OneTrialTooMany,
                Bug::OneTrialTooFew,
            ]
            .contains(&bug)
            {
                let others = report.laws.iter().filter(|l| l.name != law && !l.passed);
                assert_eq!(
                    others.count(),
                    0,
                    "{bug:?}, seed {seed}: {}",
                    report.summary()
                );
            }
        }
    }
}
