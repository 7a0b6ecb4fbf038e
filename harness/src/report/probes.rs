//! Live bytes over steps and trace counts of every optimizer form, and of the mutants that leak
//! or re-trace, for the report (`harness check --report DIR`).
//!
//! Each run builds its optimizer and parameters, starts a [`Timeline`] (baseline: live bytes
//! before the first step) and records live bytes after every step; its trace count is read from
//! the staged function afterwards (`optim::Jit`, the fused plan cache, the line search's
//! `Staged`, Muon's planned workspaces, or the mutant's own stage). Runs are sequential and the
//! caller holds [`crate::probe::exclusive`], so no other measurement overlaps.

use crate::laws::linesearch::{CaseObjective, LsCase, Problem, TraceSubject};
use crate::laws::radam::{leaf, JitStepper, Stepper};
use crate::optim::linesearch::{point, sgd_linesearch, BacktrackingHyper, Objective, Staged};
use crate::optim::muon::{CoeffPolicy, MuonStepper, Sharding};
use crate::optim::{self, AdamHyper, FusedMoments, Muon, MuonHyper, RadamHyper, Selection};
use crate::probe::Timeline;
use crate::reference::Result;
use crate::tree::{apply_updates, Tree};

/// Sizes of the step runs.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct StepConfig {
    /// Steps per run (live bytes recorded after each).
    pub steps: usize,
    /// Parameters of the Adam/RAdam tree (one f32 leaf).
    pub elements: usize,
    /// Side of Muon's square f32 matrix leaf.
    pub muon_side: usize,
    /// Dimension of the line search's Rosenbrock (f64).
    pub linesearch_dim: usize,
    /// Hidden width of the CNF trained (depth 2, one block, two-moons, exact trace).
    pub cnf_width: usize,
    /// Batch of the CNF training steps.
    pub cnf_batch: usize,
}

/// One optimizer (or mutant) run over `steps` steps.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StepRun {
    /// `adam`, `radam`, `muon`, `linesearch` or `cnf`: the chart the run is drawn on.
    pub family: &'static str,
    /// The optimizer's (or mutant's) name as the chart labels it.
    pub name: String,
    /// The re-created upstream bug this run is, if any.
    pub mutant: Option<&'static str>,
    /// What is staged, and where its trace count comes from.
    pub staged: &'static str,
    /// Traces the staged part made over the run.
    pub traces: usize,
    /// Live bytes after each step, above the live bytes before the first step.
    pub live_bytes: Vec<usize>,
    /// `(last - second) / (steps - 2)`: bytes retained per step once the first update (its
    /// trace, its workspace) and a second (a re-trace of a drifting signature) are done.
    pub growth_per_step: f64,
}

fn record(steps: usize, mut step: impl FnMut() -> Result<()>) -> Result<Vec<usize>> {
    let mut tl = Timeline::with_capacity(steps);
    tl.start();
    for _ in 0..steps {
        step()?;
        tl.record();
    }
    Ok(tl.samples().iter().map(|s| s.live_bytes).collect())
}

fn finish(
    family: &'static str,
    name: &str,
    mutant: Option<&'static str>,
    staged: &'static str,
    traces: usize,
    live_bytes: Vec<usize>,
) -> StepRun {
    let growth_per_step = match live_bytes.len() {
        n if n > 2 => (live_bytes[n - 1] as f64 - live_bytes[1] as f64) / (n - 2) as f64,
        _ => 0.0,
    };
    StepRun {
        family,
        name: name.into(),
        mutant,
        staged,
        traces,
        live_bytes,
        growth_per_step,
    }
}

fn stepper_run(
    cfg: &StepConfig,
    family: &'static str,
    name: &str,
    mutant: Option<&'static str>,
    staged: &'static str,
    make: impl FnOnce(&Tree<f32>) -> Result<Box<dyn Stepper>>,
) -> Result<StepRun> {
    let n = cfg.elements;
    let mut params = leaf::<f32>(&vec![0.5; n]);
    let grads = leaf::<f32>(&(0..n).map(|i| (i as f64 * 0.37).sin()).collect::<Vec<_>>());
    let mut opt = make(&params)?;
    let live = record(cfg.steps, || opt.step(&mut params, &grads))?;
    Ok(finish(
        family,
        name,
        mutant,
        staged,
        opt.traces().unwrap_or(0),
        live,
    ))
}

fn muon_tree(side: usize, seed: u64) -> Tree<f32> {
    crate::laws::muon::tree::<f32>(&[vec![side, side], vec![side]], seed, 1.0)
}

fn linesearch_run<S: TraceSubject>(
    cfg: &StepConfig,
    name: &str,
    mutant: Option<&'static str>,
    subject: &S,
) -> Result<StepRun> {
    let case = LsCase {
        problem: Problem::Rosenbrock,
        hyper: BacktrackingHyper::new(15),
        x0: (0..cfg.linesearch_dim)
            .map(|i| 0.5 + 0.1 * (i as f64).sin())
            .collect(),
        steps: cfg.steps,
        f32: false,
        poison: None,
    };
    let obj = CaseObjective::new(&case);
    let opt = sgd_linesearch(case.hyper)?;
    let mut x = point::<f64>(&case.x0);
    let mut state = subject.init(&opt, &x)?;
    let mut staged = Staged::new(opt);
    let live = record(cfg.steps, || {
        let (v, g) = obj.value_and_grad(&x)?;
        let (u, next) = subject.update(&mut staged, &g, &state, &x, v, &obj)?;
        x = apply_updates(&x, &u)?;
        state = next;
        Ok(())
    })?;
    Ok(finish(
        "linesearch",
        name,
        mutant,
        "optim::linesearch::Staged (update keyed by objective)",
        staged.traces(),
        live,
    ))
}

fn muon_planned<P: CoeffPolicy>(
    cfg: &StepConfig,
    name: &str,
    mutant: Option<&'static str>,
    muon: &Muon<P>,
    grads: &Tree<f32>,
) -> Result<StepRun> {
    let mut params = muon_tree(cfg.muon_side, 1);
    let mut st = MuonStepper::<f32, P>::new(muon, &params, Sharding::single())?;
    let live = record(cfg.steps, || st.step(&mut params, grads).map(drop))?;
    Ok(finish(
        "muon",
        name,
        mutant,
        "MuonStepper Newton-Schulz plans",
        st.traces(),
        live,
    ))
}

fn cnf_run(cfg: &StepConfig, name: &str, static_step: bool) -> Result<StepRun> {
    use crate::cnf::data::Dataset;
    use crate::cnf::train::{TrainConfig, Trainer};
    use crate::cnf::CnfConfig;
    let c = CnfConfig {
        width: cfg.cnf_width,
        depth: 2,
        blocks: 1,
        ..CnfConfig::default()
    };
    let tc = TrainConfig {
        batch: cfg.cnf_batch,
        ..TrainConfig::default()
    };
    let mutant = static_step.then_some("diffrax #574");
    let trainer = Trainer::new(c, tc, Dataset::TwoMoons)?;
    let mut trainer: Box<dyn crate::laws::cnf::TrainSubject> = if static_step {
        crate::mutants::cnf_static_step::subject(trainer)
    } else {
        Box::new(trainer)
    };
    let mut state = trainer.init()?;
    let live = record(cfg.steps, || {
        state = trainer.step(&state)?.0;
        Ok(())
    })?;
    Ok(finish(
        "cnf",
        name,
        mutant,
        if mutant.is_some() {
            "cnf::train::Trainer step (Stage; step counter static)"
        } else {
            "cnf::train::Trainer step (Stage; step counter dynamic)"
        },
        trainer.traces(),
        live,
    ))
}

/// The names of the runs [`run_all`] makes, in order (for progress bars).
pub const RUNS: [&str; 15] = [
    "adam composed",
    "adam fused",
    "radam composed where",
    "radam composed branch",
    "radam fused where",
    "radam fused branch",
    "radam-cond-leak",
    "muon composed",
    "muon planned",
    "muon-captured-coeffs",
    "linesearch",
    "linesearch-weak-init",
    "linesearch-rebuilt-objective",
    "cnf train",
    "cnf-static-step",
];

/// Every run, sequentially; `tick(name)` is called before each. The caller holds
/// [`crate::probe::exclusive`].
pub fn run_all(cfg: &StepConfig, mut tick: impl FnMut(&str)) -> Result<Vec<StepRun>> {
    let lr = 1e-3;
    let (ah, rh) = (AdamHyper::default(), RadamHyper::default());
    const JIT: &str = "optim::Jit (update)";
    const FUSED: &str = "FusedMoments plan cache";
    let mut out = Vec::new();
    // Warm-up: lazily built process state (rayon's pool, dfdx's device) is not charged to a run.
    let warm = StepConfig { steps: 2, ..*cfg };
    stepper_run(&warm, "", "", None, "", |p| {
        Ok(Box::new(FusedMoments::radam(lr, rh, Selection::Where, p)?))
    })?;
    stepper_run(&warm, "", "", None, "", |p| {
        Ok(Box::new(JitStepper::new(optim::adam(lr, ah)?, p)?))
    })?;
    tick(RUNS[0]);
    let mut next = |out: &mut Vec<StepRun>, r: Result<StepRun>| -> Result<()> {
        out.push(r?);
        if let Some(name) = RUNS.get(out.len()) {
            tick(name);
        }
        Ok(())
    };
    let r = stepper_run(cfg, "adam", RUNS[0], None, JIT, |p| {
        Ok(Box::new(JitStepper::new(optim::adam(lr, ah)?, p)?))
    });
    next(&mut out, r)?;
    let r = stepper_run(cfg, "adam", RUNS[1], None, FUSED, |p| {
        Ok(Box::new(FusedMoments::adam(lr, ah, p)?))
    });
    next(&mut out, r)?;
    for (name, sel) in [(RUNS[2], Selection::Where), (RUNS[3], Selection::Branch)] {
        let r = stepper_run(cfg, "radam", name, None, JIT, |p| {
            Ok(Box::new(JitStepper::new(optim::radam(lr, rh, sel)?, p)?))
        });
        next(&mut out, r)?;
    }
    for (name, sel) in [(RUNS[4], Selection::Where), (RUNS[5], Selection::Branch)] {
        let r = stepper_run(cfg, "radam", name, None, FUSED, |p| {
            Ok(Box::new(FusedMoments::radam(lr, rh, sel, p)?))
        });
        next(&mut out, r)?;
    }
    let r = stepper_run(
        cfg,
        "radam",
        RUNS[6],
        Some("optax #580/#969"),
        "mutant stage keyed by the step count",
        |p| Ok(Box::new(crate::mutants::CondLeak::new(p)?)),
    );
    next(&mut out, r)?;
    // Muon: one square matrix leaf (Newton–Schulz) and one vector leaf (Adam).
    let hyper = MuonHyper::new(0.02);
    let grads = muon_tree(cfg.muon_side, 7);
    {
        let mut params = muon_tree(cfg.muon_side, 1);
        let mut jit = JitStepper::new(Muon::new(hyper.clone())?, &params)?;
        let live = record(cfg.steps, || jit.step(&mut params, &grads))?;
        let r = finish("muon", RUNS[7], None, JIT, jit.traces().unwrap_or(0), live);
        next(&mut out, Ok(r))?;
    }
    let r = muon_planned(cfg, RUNS[8], None, &Muon::new(hyper.clone())?, &grads);
    next(&mut out, r)?;
    let captured = Muon::with_policy(hyper.clone(), crate::mutants::CapturedCoeffs::default())?;
    let r = muon_planned(cfg, RUNS[9], Some("optax #1186"), &captured, &grads);
    next(&mut out, r)?;
    use crate::laws::linesearch::Reference;
    use crate::mutants::linesearch_rebuilt_objective::RebuiltObjective;
    use crate::mutants::linesearch_weak_init::WeakInit;
    let r = linesearch_run(cfg, RUNS[10], None, &Reference);
    next(&mut out, r)?;
    let r = linesearch_run(cfg, RUNS[11], Some("optax #1171 / PR #1175"), &WeakInit);
    next(&mut out, r)?;
    let r = linesearch_run(cfg, RUNS[12], Some("optax #1171"), &RebuiltObjective);
    next(&mut out, r)?;
    let r = cnf_run(cfg, RUNS[13], false);
    next(&mut out, r)?;
    let r = cnf_run(cfg, RUNS[14], true);
    next(&mut out, r)?;
    Ok(out)
}
