//! Each optimizer law that passes on a candle-optimisers subject, shown failing on the same peer
//! with a bug planted in its adapter. One test in its own binary: the memory law measures the
//! whole process.

use harness::reference::Result;
use harness::stage::{HasSignature, LeafSig, Signature};
use harness::subject::optimizer::{self, Optimizer, OptimizerSpec, SuiteOptions, SuiteReport};
use harness::tree::Tree;
use peers::candle_optimisers_adapter::{
    make_adam, make_adamw, make_nadam, make_radam, CandleOptimiser, PeerFloat, PeerState,
};
use peers::pytorch_convention::{Torch, PYTORCH_ADAMW_WEIGHT_DECAY, PYTORCH_NADAM_MOMENTUM_DECAY};

harness::install_counting_allocator!();

#[derive(Clone, Copy, Debug, PartialEq)]
enum Bug {
    /// `init` takes one step with zero gradients (moments stay zero, the peer's step counter
    /// moves): every bias correction is off by one step.
    WarmUpStepInInit,
    /// Hands the peer `eps = 0`: a zero gradient gives `0 / 0`.
    DropsEps,
    /// Keeps an f32 copy of every update in the state (a history that grows).
    KeepsHistory,
    /// Builds the peer's plain Adam whatever it is asked for: an AdamW adapter that forgets the
    /// weight decay.
    ForgetsWeightDecay,
}

struct Planted {
    inner: CandleOptimiser,
    bug: Bug,
}

#[derive(Clone)]
struct PlantedState {
    inner: PeerState,
    history: Vec<Vec<f32>>,
}

impl HasSignature for PlantedState {
    fn signature(&self) -> Signature {
        let mut s = self.inner.signature();
        if !self.history.is_empty() {
            s.push(
                "history",
                LeafSig::strong(&[self.history.len()], harness::backend::DType::F32),
            );
        }
        s
    }
}

impl<E: PeerFloat> Optimizer<E> for Planted {
    type State = PlantedState;
    fn updates_read_through_params(&self) -> bool {
        Optimizer::<E>::updates_read_through_params(&self.inner)
    }
    fn init(&mut self, params: &Tree<E>) -> Result<PlantedState> {
        let mut inner = Optimizer::<E>::init(&mut self.inner, params)?;
        if self.bug == Bug::WarmUpStepInInit {
            let zeros = params.map(|a| a.map(|_| E::of_f64(0.0)));
            inner = self.inner.update(&zeros, &inner, params)?.1;
        }
        Ok(PlantedState {
            inner,
            history: Vec::new(),
        })
    }
    fn update(
        &mut self,
        grads: &Tree<E>,
        state: &PlantedState,
        params: &Tree<E>,
    ) -> Result<(Tree<E>, PlantedState)> {
        let (u, inner) = self.inner.update(grads, &state.inner, params)?;
        let mut history = state.history.clone();
        if self.bug == Bug::KeepsHistory {
            history.push(
                u.iter()
                    .flat_map(|(_, a)| a.data().iter().map(|x| x.as_f64() as f32))
                    .collect(),
            );
        }
        Ok((u, PlantedState { inner, history }))
    }
}

fn planted(
    make: fn(&OptimizerSpec) -> Result<CandleOptimiser>,
    bug: Bug,
) -> impl Fn(&OptimizerSpec) -> Result<Planted> {
    move |spec: &OptimizerSpec| {
        let mut spec = *spec;
        if bug == Bug::DropsEps {
            spec.hyper.moments.eps = 0.0;
        }
        let make = if bug == Bug::ForgetsWeightDecay {
            make_adam
        } else {
            make
        };
        Ok(Planted {
            inner: make(&spec)?,
            bug,
        })
    }
}

fn failed(report: &SuiteReport) -> Vec<(String, String)> {
    report
        .laws
        .iter()
        .filter(|l| !l.passed)
        .map(|l| (l.name.clone(), l.counterexample.clone().unwrap_or_default()))
        .collect()
}

#[test]
fn each_optimizer_law_passing_on_candle_optimisers_fails_on_a_bug_planted_in_its_adapter() {
    let opts = SuiteOptions::default();
    for (subject, make, bug, law) in [
        (
            "Adam",
            make_adam as fn(&OptimizerSpec) -> Result<CandleOptimiser>,
            Bug::WarmUpStepInInit,
            "optimizer_matches_reference",
        ),
        ("Adam", make_adam, Bug::DropsEps, "optimizer_updates_finite"),
        (
            "Adam",
            make_adam,
            Bug::KeepsHistory,
            "optimizer_state_signature_fixed",
        ),
        (
            "Adam",
            make_adam,
            Bug::KeepsHistory,
            "optimizer_live_bytes_flat",
        ),
        (
            "RAdam",
            make_radam,
            Bug::KeepsHistory,
            "optimizer_state_signature_fixed",
        ),
        (
            "RAdam",
            make_radam,
            Bug::WarmUpStepInInit,
            "optimizer_matches_pytorch_convention",
        ),
        (
            "AdamW",
            make_adamw,
            Bug::ForgetsWeightDecay,
            "optimizer_matches_pytorch_convention",
        ),
        (
            "NAdam",
            make_nadam,
            Bug::WarmUpStepInInit,
            "optimizer_matches_pytorch_convention",
        ),
        (
            "NAdam",
            make_nadam,
            Bug::KeepsHistory,
            "optimizer_live_bytes_flat",
        ),
    ] {
        let make = planted(make, bug);
        let torch = match subject {
            "AdamW" => Torch::AdamW {
                weight_decay: PYTORCH_ADAMW_WEIGHT_DECAY,
            },
            "NAdam" => Torch::NAdam {
                momentum_decay: PYTORCH_NADAM_MOMENTUM_DECAY,
            },
            _ => Torch::RAdam,
        };
        let report = if subject == "Adam" {
            optimizer::check(subject, &make, &opts)
        } else {
            peers::check_pytorch_convention(subject, &make, &[torch], &opts)
        };
        let failed = failed(&report);
        let hit = failed.iter().find(|(name, _)| name == law);
        assert!(
            hit.is_some(),
            "{subject} with {bug:?}: {law} held; failed: {failed:?}"
        );
        println!("{law} on {subject} with {bug:?}:\n{}\n", hit.unwrap().1);
    }
}
