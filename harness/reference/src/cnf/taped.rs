//! # The block field on dfdx's tape: the field's dfdx face
//!
//! The reference form of the CNF field and its gradient, the one to read against
//! `docs/ALGORITHMS.md` §6: the same maths as the fast hand-written [`super::field`] and
//! [`super::adjoint`], written with taped dfdx operations so that one ordinary
//! backward pass gives `d/dtheta` and `d/dy` of both `f` and the trace — the trace's own
//! derivative included, because the hand-written tangents `du = (W1 dh) * s`,
//! `dh' = (1 - h'^2) du` are ordinary taped operations (dfdx has no higher-order autodiff; the
//! tangents make it unnecessary). Values used more than once (`W1`, `s`, `h'`) go through a
//! [`Graph`] so each operation is on the tape once.
//!
//! [`TrainBlock`] is a [`DiffField`]: [`crate::ode::grad`] takes it through a solve with the full
//! tape or checkpointing. Its forward values ([`super::flow::TapedField`], the log-density under
//! [`crate::Face::Dfdx`]) and its gradients are held to the fast forms by the laws
//! `cnf_field_faces_agree` and `cnf_hand_vjp_matches_tape`.

use super::adjoint::{self, BackScratch};
use super::config::Layout;
use super::field::{self, Kept};
use crate::backend::{
    device, reuse2, taped_add_row, taped_as_matrix, taped_concat, taped_const2, taped_flatten,
    taped_matmul_t, taped_mul_row, taped_one_minus_sq, taped_range, taped_reuse,
    taped_row_dot_const, taped_scale, taped_sigmoid, taped_tanh, Graph, Taped, Taped2,
};
use crate::ode::grad::{DiffField, ManualVjp};
use std::cell::RefCell;

/// One block's augmented field over a batch, with its parameters, for gradients.
pub struct TrainBlock {
    pub layout: Layout,
    pub n: usize,
    /// Hutchinson probes (`n x d`), or `None` for the exact trace.
    pub probes: Option<Vec<f64>>,
    pub theta: Vec<f64>,
    /// Differentiate on dfdx's tape instead of by the hand-written VJP of [`super::adjoint`]
    /// (the cross-check of the two).
    #[doc(hidden)]
    pub on_tape: bool,
    kept: RefCell<Vec<Kept<f64>>>,
    scratch: RefCell<Kept<f64>>,
    back: RefCell<BackScratch>,
}

impl TrainBlock {
    pub fn new(layout: Layout, n: usize, probes: Option<Vec<f64>>, theta: Vec<f64>) -> Self {
        Self {
            layout,
            n,
            probes,
            theta,
            on_tape: false,
            kept: RefCell::new(Vec::new()),
            scratch: RefCell::new(Kept::default()),
            back: RefCell::new(BackScratch::default()),
        }
    }
}

/// `n x d` rows, each the unit vector `e_j`.
fn unit_rows(n: usize, d: usize, j: usize) -> Vec<f64> {
    let mut e = vec![0.0; n * d];
    for row in e.chunks_exact_mut(d) {
        row[j] = 1.0;
    }
    e
}

impl TrainBlock {
    /// The field ([`field::forward`]) into `dy = [f; tr]`, keeping its products in `kept`.
    fn forward(&self, t: f64, y: &[f64], theta: &[f64], dy: &mut [f64], kept: &mut Kept<f64>) {
        let (f, tr) = dy.split_at_mut(self.n * self.layout.data_size);
        let probes = self.probes.as_deref();
        field::forward(&self.layout, theta, self.n, probes, t, y, f, tr, kept);
    }
}

impl ManualVjp for TrainBlock {
    fn eval_kept(&self, slot: usize, t: f64, y: &[f64], theta: &[f64], dy: &mut [f64]) {
        let mut kept = self.kept.borrow_mut();
        if kept.len() <= slot {
            kept.resize_with(slot + 1, Kept::default);
        }
        self.forward(t, y, theta, dy, &mut kept[slot]);
    }
    fn vjp_kept(
        &self,
        slot: usize,
        theta: &[f64],
        fbar: &[f64],
        ybar: &mut [f64],
        thetabar: &mut [f64],
    ) {
        adjoint::backward(
            &self.layout,
            theta,
            self.n,
            self.probes.as_deref(),
            &self.kept.borrow()[slot],
            fbar,
            ybar,
            thetabar,
            &mut self.back.borrow_mut(),
        );
    }
}

impl DiffField for TrainBlock {
    fn manual_vjp(&self) -> Option<&dyn ManualVjp> {
        if self.on_tape {
            None
        } else {
            Some(self)
        }
    }
    fn dim(&self) -> usize {
        self.n * (self.layout.data_size + 1)
    }
    fn theta(&self) -> Vec<f64> {
        self.theta.clone()
    }
    fn eval(&self, t: f64, y: &[f64], theta: &[f64], dy: &mut [f64]) {
        self.forward(t, y, theta, dy, &mut self.scratch.borrow_mut());
    }
    fn eval_taped(&self, t: f64, y: Taped, theta: Taped) -> Taped {
        let dev = device();
        let (n, d) = (self.n, self.layout.data_size);
        let mut g = Graph::new();
        let theta = g.share(theta);
        let th = |off: usize, len: usize| taped_range(taped_reuse(&theta), off, len);
        let mut h: Taped2 = taped_as_matrix(taped_range(y, 0, n * d), n, d);
        // Initial tangents: e_j for every sample (exact), or the probes.
        let mut dh: Vec<Taped2> = match &self.probes {
            None => (0..d)
                .map(|j| taped_const2(&dev, n, d, unit_rows(n, d, j)))
                .collect(),
            Some(p) => vec![taped_const2(&dev, n, d, p.clone())],
        };
        let nl = self.layout.layers.len();
        let mut u_last = None;
        for (li, l) in self.layout.layers.iter().enumerate() {
            let w1 = g.share(taped_as_matrix(th(l.w1, l.out * l.inp), l.out, l.inp));
            // s = sigmoid(w2 t + b2), c = w3 t
            let s = g.share(taped_sigmoid(
                taped_scale(th(l.w2, l.out), t) + th(l.b2, l.out),
            ));
            let c = taped_scale(th(l.w3, l.out), t);
            // u = (h W1^T + b1) * s + c ; du = (dh W1^T) * s
            let u = taped_add_row(
                taped_mul_row(
                    taped_add_row(taped_matmul_t(h, reuse2(&w1)), th(l.b1, l.out)),
                    taped_reuse(&s),
                ),
                c,
            );
            let du: Vec<Taped2> = dh
                .into_iter()
                .map(|t| taped_mul_row(taped_matmul_t(t, reuse2(&w1)), taped_reuse(&s)))
                .collect();
            if li + 1 == nl {
                u_last = Some((u, du));
                break;
            }
            // h' = tanh(u), dh' = (1 - h'^2) du
            let hn = g.share(taped_tanh(u));
            let gd = g.share(taped_one_minus_sq(reuse2(&hn)));
            dh = du.into_iter().map(|t| reuse2(&gd) * t).collect();
            h = hn;
        }
        let (u, du) = u_last.expect("a block has at least one layer");
        // trace: sum_j (J e_j)_j (exact) or eps . (J eps) (Hutchinson), per sample
        let trace = match &self.probes {
            None => du
                .into_iter()
                .enumerate()
                .map(|(j, t)| taped_row_dot_const(t, unit_rows(n, d, j)))
                .reduce(|a, b| a + b)
                .expect("data_size >= 1"),
            Some(p) => du
                .into_iter()
                .map(|t| taped_row_dot_const(t, p.clone()))
                .next()
                .expect("one probe tangent"),
        };
        g.finish(taped_concat(taped_flatten(u), trace))
    }
}
