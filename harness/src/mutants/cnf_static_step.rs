//! `cnf-static-step`: the training step counter passed as static configuration — what a Python
//! int does under `jax.jit` (diffrax #574: every step re-traced and the compilation cache, one
//! executable per step, grew). Here the counter's value joins the static cache key, so each step
//! is a new trace and the cache keeps every plan; `cnf_train_trace_once` catches it with N = 2.

use super::Mutant;
use crate::cnf::train::Mutation;
use crate::laws::cnf::{train_case, train_trace_once_with, TrainCase};
use crate::laws::{check_property, DEFAULT_SEED};
use proptest::strategy::Strategy;

pub fn mutant() -> Mutant {
    Mutant {
        name: "cnf-static-step",
        incident: "diffrax #574 (CNF training re-traced every step; memory grew)",
        law: "cnf_train_trace_once",
        run: || {
            let _g = crate::probe::exclusive();
            check_property(
                "cnf_train_trace_once",
                16,
                DEFAULT_SEED,
                train_case().prop_map(|c| TrainCase { steps: 2, ..c }),
                |c| train_trace_once_with(c, Some(Mutation::StaticStep)),
            )
        },
    }
}
