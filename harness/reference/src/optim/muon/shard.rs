//! Sharded execution: the parameter tree split across `K` worker threads, each updating its own
//! leaves with its own planned Newton–Schulz workspaces. Every leaf's update depends only on that
//! leaf's gradient, momentum, parameter and the state's coefficients, so any assignment of
//! leaves to shards gives bit-identical results; the laws check that it does.
//!
//! [`MuonStepper`] keeps the plans between steps: a plan (workspace buffers) is traced once per
//! (shard, leaf signature), and a step after the first allocates no Newton–Schulz workspace.

use super::newton_schulz::{orthogonalize_composed, NsPlan};
use super::{coeffs, is_muon_leaf, CoeffPolicy, Muon, MuonState};
use crate::backend::{device, Array, Float, Real, Ten};
use crate::optim::adam::{composed_denominator, composed_moments, composed_momentum};
use crate::optim::decay::decayed;
use crate::optim::moments::safe_increment;
use crate::optim::{MomentState, Transform};
use crate::stage::{HasSignature, KeyHasher, LeafSig, Signature, Stage};
use crate::tree::Tree;
use crate::{Error, Result};

/// `K` shards and the shard of every leaf (leaves in name order; leaf `i` beyond `assign`
/// goes to shard `i % K`; entries are taken modulo `K`).
#[derive(Clone, Debug, PartialEq)]
pub struct Sharding {
    /// Number of shards `K`, each run on a thread of its own; must be `>= 1` (checked by the
    /// update).
    pub shards: usize,
    /// Shard of each leaf by name order (taken modulo `K`); leaves beyond its end go to `i % K`.
    pub assign: Vec<usize>,
}

impl Sharding {
    /// Everything on the calling thread.
    pub fn single() -> Self {
        Self {
            shards: 1,
            assign: Vec::new(),
        }
    }
    /// Round-robin over `k` shards.
    pub fn round_robin(k: usize) -> Self {
        Self {
            shards: k,
            assign: Vec::new(),
        }
    }
    fn shard_of(&self, i: usize) -> usize {
        self.assign.get(i).copied().unwrap_or(i) % self.shards
    }
}

/// The planned workspaces of one shard, keyed by the signature of the matrix they serve.
pub type Plans<A> = Stage<NsPlan<A>>;

/// `k` empty plan caches.
pub fn fresh_plans<A>(k: usize) -> Vec<Plans<A>> {
    (0..k)
        .map(|s| Stage::new(format!("muon_ns[shard {s}]")))
        .collect()
}

/// A leaf's signature, matched without allocating.
struct LeafShape<'a, E>(&'a Array<E>);

impl<E: Float> HasSignature for LeafShape<'_, E> {
    fn signature(&self) -> Signature {
        let mut s = Signature::new();
        s.push("x", LeafSig::strong(self.0.shape(), E::DTYPE));
        s
    }
    fn matches(&self, sig: &Signature) -> bool {
        matches!(sig.leaves(), [(_, l)] if l.dtype == E::DTYPE && !l.weak && l.shape == self.0.shape())
    }
}

/// The outputs of one shard: `(leaf index, output)` pairs, or its first error.
type ShardResult<E> = Result<Vec<(usize, LeafOut<E>)>>;

enum LeafOut<E: Float> {
    Muon {
        out: Array<E>,
        mu: Array<E::Acc>,
        iterations: usize,
    },
    Adam {
        out: Array<E>,
        mu: Array<E::Acc>,
        nu: Array<E::Acc>,
    },
}

/// What an update did besides its outputs: Newton–Schulz iterations per Muon leaf.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UpdateInfo {
    /// `(leaf name, iterations run)` for every Muon leaf of the last update, in leaf order.
    pub iterations: Vec<(String, usize)>,
}

/// `x * -lr`, the learning rate rounded to `E` (optax `scale_by_learning_rate`).
fn scale_lr<E: Float>(x: E, lr: f64) -> E {
    E::from_acc(x.to_acc() * E::of_f64(-lr).to_acc())
}

impl<P: CoeffPolicy> Muon<P> {
    /// `update` with the leaves spread over `sharding.shards` threads; `plans` holds one plan cache
    /// per shard (see [`fresh_plans`]). Bit-identical to `update` for every sharding.
    pub fn update_sharded<E: Float>(
        &self,
        grads: &Tree<E>,
        state: &MuonState<E::Acc>,
        params: &Tree<E>,
        sharding: &Sharding,
        plans: &mut [Plans<E::Acc>],
    ) -> Result<(Tree<E>, MuonState<E::Acc>, UpdateInfo)> {
        crate::error::ensure(
            sharding.shards >= 1 && plans.len() >= sharding.shards,
            "shards",
            sharding.shards,
            "must be >= 1, with one plan cache per shard",
        )?;
        check_inputs(grads, state, params)?;
        self.hyper.adam().validate_for::<E::Acc>()?;
        let t = safe_increment(state.count);
        let t_adam = safe_increment(state.adam.count);
        let leaves: Vec<(&String, &Array<E>, &Array<E>)> = grads
            .iter()
            .zip(params.0.values())
            .map(|((k, g), p)| (k, g, p))
            .collect();
        let run_shard = |s: usize, plans: &mut Plans<E::Acc>| -> ShardResult<E> {
            let mut outs = Vec::new();
            for (i, (name, g, p)) in leaves.iter().enumerate() {
                if sharding.shard_of(i) != s {
                    continue;
                }
                let o = if is_muon_leaf(g.shape()) {
                    self.muon_leaf(g, &state.mu.0[*name], p, t, &state.ns_coeffs, plans)?
                } else {
                    self.adam_leaf(
                        g,
                        &state.adam.mu.0[*name],
                        &state.adam.nu.0[*name],
                        p,
                        t_adam,
                    )?
                };
                outs.push((i, o));
            }
            Ok(outs)
        };
        let per_shard: Vec<ShardResult<E>> = if sharding.shards == 1 {
            vec![run_shard(0, &mut plans[0])]
        } else {
            std::thread::scope(|scope| {
                let handles: Vec<_> = plans[..sharding.shards]
                    .iter_mut()
                    .enumerate()
                    .map(|(s, p)| {
                        let run_shard = &run_shard;
                        scope.spawn(move || run_shard(s, p))
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("a shard thread panicked"))
                    .collect()
            })
        };
        let mut slots: Vec<Option<LeafOut<E>>> = (0..leaves.len()).map(|_| None).collect();
        for r in per_shard {
            for (i, o) in r? {
                slots[i] = Some(o);
            }
        }
        let (mut out, mut mu, mut amu, mut anu) =
            (Tree::new(), Tree::new(), Tree::new(), Tree::new());
        let mut info = UpdateInfo::default();
        for ((name, _, _), slot) in leaves.iter().zip(slots) {
            match slot.expect("every leaf belongs to a shard") {
                LeafOut::Muon {
                    out: o,
                    mu: m,
                    iterations,
                } => {
                    out.0.insert((*name).clone(), o);
                    mu.0.insert((*name).clone(), m);
                    info.iterations.push(((*name).clone(), iterations));
                }
                LeafOut::Adam {
                    out: o,
                    mu: m,
                    nu: v,
                } => {
                    out.0.insert((*name).clone(), o);
                    amu.0.insert((*name).clone(), m);
                    anu.0.insert((*name).clone(), v);
                }
            }
        }
        let next = MuonState {
            count: t,
            mu,
            ns_coeffs: state.ns_coeffs.clone(),
            adam: MomentState {
                count: t_adam,
                mu: amu,
                nu: anu,
            },
        };
        Ok((out, next, info))
    }

    /// One 2-D leaf: momentum, Newton–Schulz (planned, or composed under the dfdx face), shape scaling, weight decay, `-lr`.
    fn muon_leaf<E: Float>(
        &self,
        g: &Array<E>,
        m: &Array<E::Acc>,
        p: &Array<E>,
        t: i32,
        state_coeffs: &Array<f64>,
        plans: &mut Plans<E::Acc>,
    ) -> Result<LeafOut<E>> {
        let h = &self.hyper;
        let mh = h.momentum();
        let (c, s) = (mh.consts::<E::Acc>(), mh.scalars::<E::Acc>(t));
        let dev = device();
        let (m_t, m_hat) = composed_momentum(
            &dev,
            &c,
            &s,
            Ten::from_array(&dev, &g.map(|x| x.to_acc())),
            m,
        );
        let shape = g.shape();
        let (rows, cols) = (shape[0], shape[1]);
        let m_hat = m_hat.to_array(shape)?;
        let coeffs = self.policy.convert::<E::Acc>(state_coeffs);
        let eps = <E::Acc>::of_f64(h.eps);
        let (x, iterations) = match self.face() {
            crate::Face::Dfdx => {
                let (x, k) = orthogonalize_composed(&m_hat, &coeffs, h.ns_steps, eps);
                (x.into_data(), k)
            }
            crate::Face::Fast => {
                let plan = plans.call(0, &LeafShape(g), |_| Ok(NsPlan::new(rows, cols)))?;
                let mut x = vec![<E::Acc>::default(); m_hat.len()];
                let k = plan.run(m_hat.data(), &coeffs, h.ns_steps, eps, &mut x);
                (x, k)
            }
        };
        let scale = <E::Acc>::of_f64(shape_scale(rows, cols));
        let wd = <E::Acc>::of_f64(h.weight_decay);
        let out: Vec<E> = x
            .iter()
            .zip(p.data())
            .map(|(&x, &p)| {
                scale_lr(
                    E::from_acc(decayed(x * scale, wd, p.to_acc())),
                    h.learning_rate,
                )
            })
            .collect();
        Ok(LeafOut::Muon {
            out: Array::new(shape.to_vec(), out)?,
            mu: m_t.to_array(shape)?,
            iterations,
        })
    }

    /// One leaf of the AdamW branch.
    fn adam_leaf<E: Float>(
        &self,
        g: &Array<E>,
        m: &Array<E::Acc>,
        v: &Array<E::Acc>,
        p: &Array<E>,
        t: i32,
    ) -> Result<LeafOut<E>> {
        let h = &self.hyper;
        let ah = h.adam();
        let (c, s) = (ah.consts::<E::Acc>(), ah.scalars::<E::Acc>(t));
        let dev = device();
        let (m, v, m_hat, v_hat) = composed_moments(&dev, &c, &s, &g.map(|x| x.to_acc()), m, v);
        let shape = g.shape();
        let o = (m_hat / composed_denominator(&c, v_hat)).to_array(shape)?;
        let wd = <E::Acc>::of_f64(h.adam_weight_decay);
        let out: Vec<E> = o
            .data()
            .iter()
            .zip(p.data())
            .map(|(&o, &p)| scale_lr(E::from_acc(decayed(o, wd, p.to_acc())), h.adam_lr()))
            .collect();
        Ok(LeafOut::Adam {
            out: Array::new(shape.to_vec(), out)?,
            mu: m.to_array(shape)?,
            nu: v.to_array(shape)?,
        })
    }
}

/// `sqrt(max(1, fan_out / fan_in))` with `fan_in = rows`, `fan_out = cols`, in f64 (optax's
/// Python-float scale); 1 for `rows = 0` (an empty matrix, where optax divides by zero).
pub fn shape_scale(rows: usize, cols: usize) -> f64 {
    if rows == 0 {
        return 1.0;
    }
    (cols as f64 / rows as f64).max(1.0).sqrt()
}

fn check_inputs<E: Float, A: Real>(
    grads: &Tree<E>,
    state: &MuonState<A>,
    params: &Tree<E>,
) -> Result<()> {
    grads.check_like(params, "params")?;
    let known = state.mu.len() + state.adam.mu.len();
    if known != grads.len() {
        return Err(Error::Structure(format!(
            "grads have {} leaves, the state {known}",
            grads.len()
        )));
    }
    for (k, g) in grads.iter() {
        let m = if is_muon_leaf(g.shape()) {
            state.mu.get(k)
        } else {
            state.adam.mu.get(k)
        };
        match m {
            Some(m) if m.shape() == g.shape() => {}
            Some(m) => {
                return Err(Error::ShapeMismatch {
                    leaf: format!("grads.{k}"),
                    expected: m.shape().to_vec(),
                    got: g.shape().to_vec(),
                })
            }
            None => return Err(Error::Structure(format!("grads.{k} is not in the state"))),
        }
    }
    if !matches!(state.ns_coeffs.shape(), [3] | [_, 3]) {
        return Err(Error::ShapeMismatch {
            leaf: "state.ns_coeffs".into(),
            expected: vec![3],
            got: state.ns_coeffs.shape().to_vec(),
        });
    }
    let _ = coeffs::iterations;
    Ok(())
}

/// Muon owning its state and its per-shard plans: `params += update(grads)` in place.
pub struct MuonStepper<'m, E: Float, P: CoeffPolicy = super::PerUse> {
    muon: &'m Muon<P>,
    state: MuonState<E::Acc>,
    plans: Vec<Plans<E::Acc>>,
    sharding: Sharding,
    last: UpdateInfo,
}

impl<'m, E: Float, P: CoeffPolicy> MuonStepper<'m, E, P> {
    /// A stepper over `params` starting from `muon.init(params)`, with one plan cache per shard.
    pub fn new(muon: &'m Muon<P>, params: &Tree<E>, sharding: Sharding) -> Result<Self> {
        let state = muon.init(params)?;
        let plans = fresh_plans(sharding.shards.max(1));
        Ok(Self {
            muon,
            state,
            plans,
            sharding,
            last: UpdateInfo::default(),
        })
    }
    /// One Muon step in place: `params += update(grads)`, the leaves dealt over the stepper's
    /// shards; returns the update. The state advances only when the step succeeds.
    pub fn step(&mut self, params: &mut Tree<E>, grads: &Tree<E>) -> Result<Tree<E>> {
        let (u, s, info) = self.muon.update_sharded(
            grads,
            &self.state,
            params,
            &self.sharding,
            &mut self.plans,
        )?;
        *params = crate::tree::apply_updates(params, &u)?;
        self.state = s;
        self.last = info;
        Ok(u)
    }
    /// The Muon state after the last step.
    pub fn state(&self) -> &MuonState<E::Acc> {
        &self.state
    }
    /// Plans traced so far, over all shards.
    pub fn traces(&self) -> usize {
        self.plans.iter().map(|p| p.traces()).sum()
    }
    /// Newton–Schulz iterations of the last step, per Muon leaf.
    pub fn last_info(&self) -> &UpdateInfo {
        &self.last
    }
    /// Static key of the configuration (for logs).
    pub fn static_key(&self) -> u64 {
        KeyHasher::default()
            .val(Transform::<E>::static_key(self.muon))
            .finish()
    }
}
