//! Each line-search law that passes on argmin, shown failing on argmin with a bug planted in its
//! adapter (the request changed on its way in, or the answer on its way out): a law that never
//! fails on a peer would otherwise prove nothing about it.

use harness::subject::linesearch::{
    self, BacktrackingSearch, SearchReport, SearchRequest, SuiteOptions,
};
use harness::subject::Result;
use peers::argmin_adapter::Argmin;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Bug {
    /// Passes `rho^2` for `rho` (a factor squared on its way in): every other candidate skipped.
    SquaredFactor,
    /// Allows one trial more than asked (`max_iters(max_trials)`).
    OneTrialOver,
    /// Starts from `2 alpha_0` (a first step doubled on its way in).
    DoubledFirstStep,
    /// Reports the start point as the answer of an accepted search (the point not copied out).
    StartPointReturned,
}

struct Planted(Bug);

impl BacktrackingSearch for Planted {
    fn name(&self) -> String {
        format!("{} with {:?}", Argmin.name(), self.0)
    }
    fn accepts_zero_slope_rtol(&self) -> bool {
        Argmin.accepts_zero_slope_rtol()
    }
    fn search(&self, r: &SearchRequest) -> Result<SearchReport> {
        let mut r = r.clone();
        match self.0 {
            Bug::SquaredFactor => r.decrease_factor *= r.decrease_factor,
            Bug::OneTrialOver => r.max_trials += 1,
            Bug::DoubledFirstStep => r.initial_step *= 2.0,
            Bug::StartPointReturned => {}
        }
        let mut s = Argmin.search(&r)?;
        if self.0 == Bug::StartPointReturned && s.accepted {
            s.x = r.x0.clone();
        }
        Ok(s)
    }
}

#[test]
fn each_law_passing_on_argmin_fails_on_a_bug_planted_in_its_adapter() {
    let clean = linesearch::check(Arc::new(Argmin), &SuiteOptions::default());
    for (bug, law) in [
        (Bug::SquaredFactor, "ls_first_armijo_candidate"),
        (Bug::DoubledFirstStep, "ls_first_armijo_candidate"),
        (Bug::StartPointReturned, "ls_first_armijo_candidate"),
        (Bug::OneTrialOver, "ls_trials_honoured"),
    ] {
        let passed = |report: &harness::subject::optimizer::SuiteReport| {
            report.laws.iter().find(|l| l.name == law).unwrap().passed
        };
        assert!(passed(&clean), "{law} fails on argmin itself");
        let report = linesearch::check(Arc::new(Planted(bug)), &SuiteOptions::default());
        let row = report.laws.iter().find(|l| l.name == law).unwrap();
        assert!(!row.passed, "{bug:?}: {}", report.summary());
        assert!(row.counterexample.is_some(), "{bug:?}");
    }
    // the convex-decrease law: an adapter that reports every search as not accepted
    struct NeverAccepts;
    impl BacktrackingSearch for NeverAccepts {
        fn name(&self) -> String {
            format!("{} reporting no acceptance", Argmin.name())
        }
        fn accepts_zero_slope_rtol(&self) -> bool {
            false
        }
        fn search(&self, r: &SearchRequest) -> Result<SearchReport> {
            let s = Argmin.search(r)?;
            Ok(SearchReport {
                accepted: false,
                ..s
            })
        }
    }
    let report = linesearch::check(Arc::new(NeverAccepts), &SuiteOptions::default());
    let row = report
        .laws
        .iter()
        .find(|l| l.name == "ls_convex_quadratic_decreases")
        .unwrap();
    assert!(!row.passed, "{}", report.summary());
}
