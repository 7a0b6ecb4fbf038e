//! Structured fuzz inputs: `Arbitrary` mirrors of the law inputs, shared by the cargo-fuzz
//! targets and the corpus/regression replay in `cargo test`. Their `Debug` prints a reproducer.

use super::strategies::OptCase;
use super::unsupported_dtype;
use crate::backend::DType;
use crate::ode::Integration;
use crate::optim::{AdamHyper, RadamHyper};
use arbitrary::{Arbitrary, Unstructured};

/// Raw RAdam run: every hyperparameter unvalidated (NaN, negative and out-of-range values
/// included), any dtype, up to 16 steps over up to 64 elements, any gradient values.
#[derive(Debug, Clone, Arbitrary)]
pub struct RadamInput {
    /// Adam `b1`, unvalidated.
    pub b1: f64,
    /// Adam `b2`, unvalidated.
    pub b2: f64,
    /// Adam `eps`, unvalidated.
    pub eps: f64,
    /// Adam `eps_root`, unvalidated.
    pub eps_root: f64,
    /// Nesterov form of the first moment.
    pub nesterov: bool,
    /// RAdam's rectification threshold, unvalidated.
    pub threshold: f64,
    /// Learning rate, unvalidated.
    pub learning_rate: f64,
    /// Parameter dtype: `dtype % 3` picks f16, f32 or f64.
    pub dtype: u8,
    /// Element count: `elements % 65` (0 to 64).
    pub elements: u8,
    /// Initial parameter values, reused cyclically (zeros when empty).
    pub params: Vec<f64>,
    /// Gradient values, reused cyclically over every step's elements (zeros when empty).
    pub grads: Vec<f64>,
    /// Step count: `1 + steps % 16`.
    pub steps: u8,
}

impl RadamInput {
    /// The law input this fuzz input stands for (sizes capped; gradients reused cyclically).
    pub fn to_case(&self) -> OptCase {
        let n = (self.elements % 65) as usize;
        let steps = 1 + (self.steps % 16) as usize;
        let pick = |v: &[f64], i: usize| if v.is_empty() { 0.0 } else { v[i % v.len()] };
        OptCase {
            hyper: RadamHyper {
                moments: AdamHyper {
                    b1: self.b1,
                    b2: self.b2,
                    eps: self.eps,
                    eps_root: self.eps_root,
                    nesterov: self.nesterov,
                },
                threshold: self.threshold,
            },
            learning_rate: self.learning_rate,
            dtype: [DType::F16, DType::F32, DType::F64][(self.dtype % 3) as usize],
            params: (0..n).map(|i| pick(&self.params, i)).collect(),
            grads: (0..steps)
                .map(|s| (0..n).map(|i| pick(&self.grads, s * n + i)).collect())
                .collect(),
        }
    }
}

/// The `radam` target: any input either is rejected with a typed error or satisfies every pure
/// RAdam/Adam law (NaN/inf/huge data: the bitwise laws; the finiteness laws where their domain,
/// [`super::radam::finiteness_domain`], holds). No input may panic.
pub fn radam(data: &[u8]) -> Result<(), String> {
    let Ok(input) = RadamInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return Ok(());
    };
    super::radam::check_case(&input.to_case())
}

/// Raw ODE solve: a small linear-plus-quadratic system `y_i' = sum_j A_ij y_j + c_i y_i^2`,
/// any interval, tolerances and controller settings (unvalidated).
#[derive(Debug, Clone, Arbitrary)]
pub struct OdeInput {
    /// Dimension: `n % 4` (0 to 3).
    pub n: u8,
    /// Entries of `A` (row-major `n x n`), reused cyclically (zeros when empty).
    pub a: Vec<f64>,
    /// Quadratic coefficients `c_i`, reused cyclically (zeros when empty).
    pub c: Vec<f64>,
    /// Initial state, reused cyclically (zeros when empty).
    pub y0: Vec<f64>,
    /// Start time (any value, including non-finite).
    pub t0: f64,
    /// End time (any value; either side of `t0`).
    pub t1: f64,
    /// First step for the PID controller, or the constant step (`0.1` when `None`).
    pub dt0: Option<f64>,
    /// PID relative tolerance, unvalidated.
    pub rtol: f64,
    /// PID absolute tolerance, unvalidated.
    pub atol: f64,
    /// PID proportional coefficient, unvalidated.
    pub pcoeff: f64,
    /// PID integral coefficient, unvalidated.
    pub icoeff: f64,
    /// PID derivative coefficient, unvalidated.
    pub dcoeff: f64,
    /// PID smallest shrink factor, unvalidated.
    pub factormin: f64,
    /// PID largest growth factor, unvalidated.
    pub factormax: f64,
    /// PID safety factor, unvalidated.
    pub safety: f64,
    /// PID minimum step, unvalidated.
    pub dtmin: Option<f64>,
    /// PID maximum step, unvalidated.
    pub dtmax: Option<f64>,
    /// Method: `solver % 7` indexes [`Solver::ALL`](crate::ode::Solver::ALL).
    pub solver: u8,
    /// Use a constant step (always so for Euler, which has no error estimate).
    pub constant: bool,
    /// Step budget: `1 + max_steps % 512`.
    pub max_steps: u16,
}

/// `y_i' = sum_j A_ij y_j + c_i y_i^2` with `A` row-major `n x n`: the field of the ODE fuzz
/// inputs (linear growth, decay and rotation, plus a quadratic term that can blow up in finite
/// time).
#[derive(Debug, Clone, PartialEq)]
pub struct QuadraticSystem {
    /// `A`, row-major `n x n`.
    pub a: Vec<f64>,
    /// `c`, one coefficient per component (its length is the dimension).
    pub c: Vec<f64>,
}

impl crate::ode::VectorField<f64> for QuadraticSystem {
    fn eval(&self, _t: f64, y: &[f64], dy: &mut [f64]) {
        let n = y.len();
        for i in 0..n {
            dy[i] = (0..n).map(|j| self.a[i * n + j] * y[j]).sum::<f64>() + self.c[i] * y[i] * y[i];
        }
    }
    fn dim(&self) -> Option<usize> {
        Some(self.c.len())
    }
}

impl OdeInput {
    /// The system and start this input stands for: dimension `n % 4`, the entries of `A`, `c`
    /// and `y0` reused cyclically (zeros when a list is empty).
    pub fn system(&self) -> (QuadraticSystem, Vec<f64>) {
        let n = (self.n % 4) as usize;
        let pick = |v: &[f64], i: usize| if v.is_empty() { 0.0 } else { v[i % v.len()] };
        let system = QuadraticSystem {
            a: (0..n * n).map(|i| pick(&self.a, i)).collect(),
            c: (0..n).map(|i| pick(&self.c, i)).collect(),
        };
        (system, (0..n).map(|i| pick(&self.y0, i)).collect())
    }
}

/// The `ode` target: no panic; invalid settings are typed errors; a successful solve has
/// consistent statistics within `max_steps`, ends at `t1`, and saved times never go backwards
/// (zero-length steps are possible, as in diffrax, when a degenerate `safety`/`factormin` shrinks
/// the step below one ULP of `t`); a short one gives the same bits through the dfdx face.
pub fn ode(data: &[u8]) -> Result<(), String> {
    use crate::ode::{solve, Controller, Pid, SolveOptions, Solver};
    let Ok(x) = OdeInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return Ok(());
    };
    let (field, y0) = x.system();
    let solver = Solver::ALL[(x.solver % 7) as usize];
    let ctl = if x.constant || solver == Solver::Euler {
        Controller::constant(x.dt0.unwrap_or(0.1))
    } else {
        (|| {
            Pid::new(x.rtol, x.atol)?
                .pcoeff(x.pcoeff)?
                .icoeff(x.icoeff)?
                .dcoeff(x.dcoeff)?
                .factormin(x.factormin)?
                .factormax(x.factormax)?
                .safety(x.safety)?
                .dtmin(x.dtmin)?
                .dtmax(x.dtmax)?
                .dt0(x.dt0)
        })()
        .map(Controller::Pid)
    };
    let max_steps = 1 + (x.max_steps % 512) as usize;
    let opts = SolveOptions {
        max_steps,
        save_steps: true,
        ..Default::default()
    };
    let ctl_again = ctl.clone();
    let Ok(sol) = ctl.and_then(|ctl| {
        solve(
            &field,
            &Integration::new(&solver.tableau(), &ctl, x.t0, x.t1).with_options(opts),
            &y0,
        )
    }) else {
        return Ok(()); // a typed error: fine
    };
    let s = sol.stats;
    if s.num_steps != s.num_accepted_steps + s.num_rejected_steps || s.num_steps > max_steps {
        return Err(format!("inconsistent stats {s:?} (max_steps {max_steps})"));
    }
    if sol.ts.len() != s.num_accepted_steps || sol.ys.len() != sol.ts.len() {
        return Err(format!(
            "{} saved times for {} accepted steps",
            sol.ts.len(),
            s.num_accepted_steps
        ));
    }
    if x.t0 != x.t1 && sol.ts.last() != Some(&x.t1) {
        return Err(format!(
            "solve ended at {:?}, not t1 = {}",
            sol.ts.last(),
            x.t1
        ));
    }
    let dir = (x.t1 - x.t0).signum();
    if sol.ts.windows(2).any(|w| (w[1] - w[0]) * dir < 0.0) {
        return Err("saved times go backwards".into());
    }
    // The dfdx face steps the same solve to the same bits (law `ode_step_faces_agree`); checked
    // on short solves only, the face being ~75x slower.
    if s.num_steps <= FACE_CHECK_MAX_STEPS {
        let (ctl, tab) = (ctl_again.expect("built once already"), solver.tableau());
        let integration = Integration::new(&tab, &ctl, x.t0, x.t1)
            .with_options(opts)
            .face(crate::reference::Face::Dfdx);
        let face = solve(&field, &integration, &y0)
            .map_err(|e| format!("the dfdx face failed where the fast form solved: {e}"))?;
        if face.stats != sol.stats {
            return Err(format!(
                "dfdx face: {:?}, fast: {:?}",
                face.stats, sol.stats
            ));
        }
        if let Some(d) = super::first_bit_difference(&sol.ts, &face.ts) {
            return Err(format!("ts{d} (dfdx face)"));
        }
        let (fast_ys, face_ys) = (sol.ys.concat(), face.ys.concat());
        if let Some(d) = super::first_bit_difference(&fast_ys, &face_ys) {
            return Err(format!("ys (flattened){d} (dfdx face)"));
        }
    }
    Ok(())
}

/// Longest solve (attempted steps) of the `ode` target whose dfdx face is also checked.
pub const FACE_CHECK_MAX_STEPS: usize = 64;

/// Raw line-search run: unvalidated hyperparameters (NaN, negative, out of range), an arbitrary
/// quadratic (any matrix, not only convex) or fixture problem, any start point, and an optional
/// poison region where the objective returns NaN/`+inf`/`-inf`.
#[derive(Debug, Clone, Arbitrary)]
pub struct LineSearchInput {
    /// Backtracking limit: `max_backtracking_steps % 65`.
    pub max_backtracking_steps: u16,
    /// Armijo `slope_rtol`, unvalidated.
    pub slope_rtol: f64,
    /// `decrease_factor`, unvalidated.
    pub decrease_factor: f64,
    /// `increase_factor`, unvalidated.
    pub increase_factor: f64,
    /// `max_learning_rate`, unvalidated.
    pub max_learning_rate: f64,
    /// Acceptance tolerance `atol`, unvalidated.
    pub atol: f64,
    /// Relative slack `rtol`, unvalidated.
    pub rtol: f64,
    /// Keep the gradient in the state.
    pub store_grad: bool,
    /// Restart a round after a zero learning rate (not in optax).
    pub recover_from_zero_lr: bool,
    /// Run in f32 instead of f64.
    pub f32: bool,
    /// 0-1: quadratic, 2: rosenbrock, 3: himmelblau, 4: matyas.
    pub problem: u8,
    /// Quadratic dimension: `1 + dim % 6` (the fixture problems are 2-D).
    pub dim: u8,
    /// Quadratic matrix entries, row-major, reused cyclically (zeros when empty).
    pub matrix: Vec<f64>,
    /// Quadratic linear term, reused cyclically (zeros when empty).
    pub b: Vec<f64>,
    /// Start point, reused cyclically (zeros when empty).
    pub x0: Vec<f64>,
    /// Update count: `1 + steps % 8`.
    pub steps: u8,
    /// 0: none; 1: NaN, 2: +inf, 3: -inf beyond `poison_above`; 4: NaN everywhere.
    pub poison: u8,
    /// Threshold beyond which the poisoned value is returned (poison kinds 1-3).
    pub poison_above: f64,
}

impl LineSearchInput {
    /// The law input this stands for (dimension <= 6, steps <= 8, backtracking steps <= 64).
    pub fn to_case(&self) -> super::linesearch::LsCase {
        use super::linesearch::{LsCase, Poison, Problem};
        use crate::optim::linesearch::{BacktrackingHyper, Quadratic};
        let pick = |v: &[f64], i: usize| if v.is_empty() { 0.0 } else { v[i % v.len()] };
        let kind = self.problem % 5;
        let n = match kind {
            3 | 4 => 2,
            _ => 1 + (self.dim % 6) as usize,
        };
        let problem = match kind {
            0 | 1 => Problem::Quadratic(
                Quadratic::new(
                    (0..n * n).map(|i| pick(&self.matrix, i)).collect(),
                    (0..n).map(|i| pick(&self.b, i)).collect(),
                )
                .expect("n x n"),
            ),
            2 => Problem::Rosenbrock,
            3 => Problem::Himmelblau,
            _ => Problem::Matyas,
        };
        let poison = match self.poison % 5 {
            0 => None,
            k @ 1..=3 => Some(Poison {
                above: self.poison_above,
                value: [f64::NAN, f64::INFINITY, f64::NEG_INFINITY][k as usize - 1],
            }),
            _ => Some(Poison {
                above: f64::NEG_INFINITY,
                value: f64::NAN,
            }),
        };
        LsCase {
            problem,
            hyper: BacktrackingHyper {
                max_backtracking_steps: (self.max_backtracking_steps % 65) as u32,
                slope_rtol: self.slope_rtol,
                decrease_factor: self.decrease_factor,
                increase_factor: self.increase_factor,
                max_learning_rate: self.max_learning_rate,
                atol: self.atol,
                rtol: self.rtol,
                store_grad: self.store_grad,
                recover_from_zero_lr: self.recover_from_zero_lr,
            },
            x0: (0..n).map(|i| pick(&self.x0, i)).collect(),
            steps: 1 + (self.steps % 8) as usize,
            f32: self.f32,
            poison,
        }
    }
}

/// The `linesearch` target: any input is rejected with a typed error (invalid hyperparameters)
/// or satisfies every line-search law; no input may panic.
pub fn linesearch(data: &[u8]) -> Result<(), String> {
    let Ok(input) = LineSearchInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return Ok(());
    };
    super::linesearch::check_case(&input.to_case())
}
/// Raw Muon run: a matrix of up to 48x48 (1xN, Nx1 and zero-size included) plus a bias, any
/// coefficient tensor (shape `[3]`, `[k,3]` or malformed, any values), unvalidated scalars, any
/// dtype, up to 4 steps of any gradient values.
#[derive(Debug, Clone, Arbitrary)]
pub struct MuonInput {
    /// Parameter dtype: `dtype % 3` picks f16, f32 or f64.
    pub dtype: u8,
    /// Matrix rows: `rows % 49` (0 to 48).
    pub rows: u8,
    /// Matrix columns: `cols % 49` (0 to 48).
    pub cols: u8,
    /// Bias length (the AdamW leaf): `bias % 8`.
    pub bias: u8,
    /// 0: `[3]`, 1: `[k,3]`, 2: `[k]` (malformed), 3: preset "dion", 4: preset "standard".
    pub coeff_kind: u8,
    /// `k` of a `[k, 3]` or `[k]` coefficient tensor: `coeff_rows % 8`.
    pub coeff_rows: u8,
    /// Raw coefficient values, reused cyclically (ones when empty).
    pub coeffs: Vec<f64>,
    /// Newton–Schulz steps: `ns_steps % 9` (0 included).
    pub ns_steps: u8,
    /// Momentum decay `beta`, unvalidated.
    pub beta: f64,
    /// `eps`, unvalidated.
    pub eps: f64,
    /// Muon weight decay, unvalidated.
    pub weight_decay: f64,
    /// Nesterov momentum.
    pub nesterov: bool,
    /// Learning rate, unvalidated.
    pub learning_rate: f64,
    /// Shards of the sharded comparison run: `1 + shards % 4`.
    pub shards: u8,
    /// Initial parameter values (matrix then bias), reused cyclically (zeros when empty).
    pub params: Vec<f64>,
    /// Gradient values, consecutive per step, reused cyclically (zeros when empty).
    pub grads: Vec<f64>,
    /// Step count: `1 + steps % 4`.
    pub steps: u8,
}

impl MuonInput {
    /// The optimizer configuration this input stands for.
    pub fn hyper(&self) -> crate::optim::MuonHyper {
        use crate::optim::CoeffSpec;
        let k = (self.coeff_rows % 8) as usize;
        let pick = |i: usize| {
            if self.coeffs.is_empty() {
                1.0
            } else {
                self.coeffs[i % self.coeffs.len()]
            }
        };
        let ns_coeffs = match self.coeff_kind % 5 {
            0 => CoeffSpec::Raw {
                shape: vec![3],
                data: (0..3).map(pick).collect(),
            },
            1 => CoeffSpec::Raw {
                shape: vec![k, 3],
                data: (0..3 * k).map(pick).collect(),
            },
            2 => CoeffSpec::Raw {
                shape: vec![k],
                data: (0..k).map(pick).collect(),
            },
            3 => CoeffSpec::Preset("dion".into()),
            _ => CoeffSpec::Preset("standard".into()),
        };
        crate::optim::MuonHyper {
            ns_coeffs,
            ns_steps: (self.ns_steps % 9) as usize,
            beta: self.beta,
            eps: self.eps,
            weight_decay: self.weight_decay,
            nesterov: self.nesterov,
            ..crate::optim::MuonHyper::new(self.learning_rate)
        }
    }
}

/// The `muon` target: invalid scalars are typed errors from the constructor, invalid
/// coefficients typed `ns_coeffs` errors from `init`; otherwise every step runs without panic,
/// keeps the state signature and the coefficient bits, runs the prescribed iterations, and a
/// run on 1-4 shards equals the unsharded one bit for bit (any two NaNs equal).
pub fn muon(data: &[u8]) -> Result<(), String> {
    let Ok(input) = MuonInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return Ok(());
    };
    let dtype = [DType::F16, DType::F32, DType::F64][usize::from(input.dtype % 3)];
    by_dtype!(float dtype, muon_e(&input), else unsupported_dtype(dtype))
}

fn muon_e<E: crate::backend::Float>(input: &MuonInput) -> Result<(), String> {
    use crate::backend::Array;
    use crate::optim::muon::{coeffs, MuonStepper, Sharding};
    use crate::optim::{Muon, Transform};
    use crate::stage::HasSignature;
    use crate::tree::Tree;
    let hyper = input.hyper();
    let Ok(muon) = Muon::new(hyper.clone()) else {
        return Ok(()); // invalid scalar hyperparameter: a typed error
    };
    let (r, c) = ((input.rows % 49) as usize, (input.cols % 49) as usize);
    let nb = (input.bias % 8) as usize;
    let val = |v: &[f64], i: usize| if v.is_empty() { 0.0 } else { v[i % v.len()] };
    let mk = |v: &[f64], off: usize| -> Tree<E> {
        let w = Array::new(
            vec![r, c],
            (0..r * c).map(|i| E::of_f64(val(v, off + i))).collect(),
        )
        .expect("sized");
        let b = Array::vector(
            (0..nb)
                .map(|i| E::of_f64(val(v, off + r * c + i)))
                .collect(),
        );
        Tree::from_leaves([("b".to_string(), b), ("w".to_string(), w)]).expect("two leaves")
    };
    let mut params = mk(&input.params, 0);
    let valid = coeffs::build(&hyper.ns_coeffs, hyper.ns_steps);
    let state = match (Transform::<E>::init(&muon, &params), &valid) {
        (Ok(s), Ok(_)) => s,
        (Err(crate::reference::Error::InvalidHyper { name, .. }), _) if name != "ns_coeffs" => {
            return Ok(())
        }
        (
            Err(crate::reference::Error::InvalidHyper {
                name: "ns_coeffs", ..
            }),
            Err(_),
        ) => return Ok(()),
        (got, _) => {
            return Err(format!(
                "init: {:?} but coefficient validation says {:?}",
                got.map(|_| "Ok"),
                valid.map(|_| "Ok")
            ))
        }
    };
    let want_iters = coeffs::iterations(&state.ns_coeffs, hyper.ns_steps);
    let sig0 = state.signature();
    let bits0: Vec<u64> = state.ns_coeffs.data().iter().map(|x| x.to_bits()).collect();
    let mut p_sharded = params.clone();
    let k = 1 + (input.shards % 4) as usize;
    let mut sharded =
        MuonStepper::new(&muon, &params, Sharding::round_robin(k)).map_err(|e| e.to_string())?;
    let mut st = state;
    for t in 0..(input.steps % 4) as usize + 1 {
        let g = mk(&input.grads, t * (r * c + nb));
        let (u, next) = muon.update(&g, &st, &params).map_err(|e| e.to_string())?;
        let d = sig0.diff(&next.signature());
        if !d.is_empty() {
            return Err(format!("step {t}: signature changed: {d}"));
        }
        if next
            .ns_coeffs
            .data()
            .iter()
            .map(|x| x.to_bits())
            .ne(bits0.iter().copied())
        {
            return Err(format!("step {t}: ns_coeffs changed"));
        }
        let us = sharded
            .step(&mut p_sharded, &g)
            .map_err(|e| e.to_string())?;
        super::bitwise_equal(&format!("step {t} sharded updates"), &us, &u)?;
        for (leaf, k) in &sharded.last_info().iterations {
            if *k != want_iters {
                return Err(format!(
                    "step {t}: {leaf} ran {k} iterations, want {want_iters}"
                ));
            }
        }
        params = crate::tree::apply_updates(&params, &u).map_err(|e| e.to_string())?;
        st = next;
    }
    Ok(())
}

/// Raw stack build: any layer count, width, hidden size (zeros included), dtype and seed. Sizes
/// are reduced modulo `N <= 32`, `D <= 128`, `H <= 256`, and the layer count is then capped so
/// that the largest transient (`N*P*(4+8)` bytes) stays within [`STACK_FUZZ_CAP`].
#[derive(Debug, Clone, Arbitrary)]
pub struct StackInput {
    /// Layer count `N`: `layers % 33`, then capped by [`STACK_FUZZ_CAP`].
    pub layers: u8,
    /// Width `D`: `width % 129` (0 included).
    pub width: u16,
    /// Hidden size `H`: `hidden % 257` (0 included).
    pub hidden: u16,
    /// Dtype: `dtype % 3` picks f16, f32 or f64.
    pub dtype: u8,
    /// Initialisation seed.
    pub seed: u64,
}

/// Memory cap of one `stack` fuzz input: 8 MiB.
pub const STACK_FUZZ_CAP: usize = 8 << 20;

impl StackInput {
    /// The law input this fuzz input stands for.
    pub fn to_case(&self) -> super::stack::StackCase {
        let (d, h) = ((self.width % 129) as usize, (self.hidden % 257) as usize);
        let p = 2 * d * h + d + h;
        let n = ((self.layers % 33) as usize).min(STACK_FUZZ_CAP / (12 * p).max(1));
        super::stack::StackCase {
            layers: n,
            width: d,
            hidden: h,
            dtype: [DType::F16, DType::F32, DType::F64][(self.dtype % 3) as usize],
            seed: self.seed,
        }
    }
}

/// The `stack` target: a zero size is rejected with a typed error naming the field; any other
/// input satisfies every stack law (all strategies bit-identical, f16 = cast(f32), scan = loop,
/// measured peaks within their bounds). No input may panic.
pub fn stack(data: &[u8]) -> Result<(), String> {
    crate::probe::require_installed().map_err(|e| e.to_string())?;
    let Ok(input) = StackInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return Ok(());
    };
    let case = input.to_case();
    match case.config() {
        Err(e) if case.layers == 0 || case.width == 0 || case.hidden == 0 => {
            if e.contains("must be >= 1") {
                Ok(())
            } else {
                Err(format!("zero size rejected with the wrong error: {e}"))
            }
        }
        Err(e) => Err(format!("valid sizes rejected: {e}")),
        Ok(_) => super::stack::check_case(&case),
    }
}

/// Input of the `cnf` target: a small flow, weights, points and settings.
#[derive(Debug, Clone, arbitrary::Arbitrary)]
pub struct CnfInput {
    /// Data dimension: `data_size % 4` (0 is rejected by validation).
    pub data_size: u8,
    /// Hidden width: `width % 9`.
    pub width: u8,
    /// Hidden layers per block: `depth % 4`.
    pub depth: u8,
    /// Blocks: `blocks % 3` (0 is rejected by validation).
    pub blocks: u8,
    /// Start time of each block (unvalidated).
    pub t0: f64,
    /// End time of each block (unvalidated).
    pub t1: f64,
    /// Constant step (unvalidated); inputs with more than [`CNF_FUZZ_MAX_STEPS`] steps are skipped.
    pub dt0: f64,
    /// Evaluate in f32 (the gradient is always taken in f64).
    pub f32: bool,
    /// Use Rademacher Hutchinson probes instead of the exact trace.
    pub hutchinson: bool,
    /// Also take the loss gradient (full tape).
    pub gradient: bool,
    /// Flat weights of every block, reused cyclically (zeros when empty).
    pub weights: Vec<f64>,
    /// Points, row-major `n x d` (at most 8 points; a trailing partial row is dropped).
    pub points: Vec<f64>,
    /// Hutchinson probe values, reused cyclically (zeros when empty).
    pub probes: Vec<f64>,
}

/// Most constant steps per block the target integrates (keeps an execution in milliseconds).
pub const CNF_FUZZ_MAX_STEPS: f64 = 64.0;

/// The `cnf` target: arbitrary small weights, points and settings. Invalid settings and
/// non-finite data are typed errors; otherwise the log-density (f32 or f64), the samples and
/// (f64, few steps) the loss gradient are finite or a typed overflow error — never a panic and
/// never a NaN handed back.
pub fn cnf(data: &[u8]) -> Result<(), String> {
    use crate::backend::Real;
    use crate::cnf::{flow, CnfConfig, CnfParams, Layout, Probe, TraceEstimator};
    let Ok(x) = CnfInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return Ok(());
    };
    let cfg = CnfConfig {
        data_size: (x.data_size % 4) as usize,
        width: (x.width % 9) as usize,
        depth: (x.depth % 4) as usize,
        blocks: (x.blocks % 3) as usize,
        t0: x.t0,
        t1: x.t1,
        dt0: x.dt0,
        trace: if x.hutchinson {
            TraceEstimator::Hutchinson(Probe::Rademacher)
        } else {
            TraceEstimator::Exact
        },
        ..CnfConfig::default()
    };
    if cfg.validate().is_err() {
        return Ok(()); // a typed error: fine
    }
    if (cfg.t1 - cfg.t0) / cfg.dt0 > CNF_FUZZ_MAX_STEPS {
        return Ok(());
    }
    let layout = Layout::new(&cfg);
    let pick = |v: &[f64], i: usize| if v.is_empty() { 0.0 } else { v[i % v.len()] };
    let blocks: Vec<Vec<f64>> = (0..cfg.blocks)
        .map(|b| {
            (0..layout.len)
                .map(|i| pick(&x.weights, b * layout.len + i))
                .collect()
        })
        .collect();
    let n = x.points.len().min(8 * cfg.data_size) / cfg.data_size;
    let pts = &x.points[..n * cfg.data_size];
    let probes: Vec<f64> = (0..pts.len()).map(|i| pick(&x.probes, i)).collect();
    fn check<A: Real>(p: &CnfParams<A>, pts: &[A], probes: Option<&[A]>) -> Result<(), String> {
        match flow::log_likelihood(p, pts, probes) {
            Ok(lp) => {
                if lp.len() != pts.len() / p.cfg.data_size {
                    return Err(format!(
                        "{} log-densities for {} points",
                        lp.len(),
                        pts.len()
                    ));
                }
                if let Some(v) = lp.iter().find(|v| !v.as_f64().is_finite()) {
                    return Err(format!("non-finite log-density {v:?} returned as Ok"));
                }
            }
            Err(
                crate::reference::Error::NonFinite(_)
                | crate::reference::Error::InvalidHyper { .. },
            ) => {}
            Err(e) => return Err(format!("unexpected error kind: {e}")),
        }
        match flow::sample(p, pts, probes) {
            Ok((xs, lp)) => {
                if xs.iter().chain(&lp).any(|v| !v.as_f64().is_finite()) {
                    return Err("non-finite sample or density returned as Ok".into());
                }
            }
            Err(
                crate::reference::Error::NonFinite(_)
                | crate::reference::Error::InvalidHyper { .. },
            ) => {}
            Err(e) => return Err(format!("unexpected error kind: {e}")),
        }
        Ok(())
    }
    let params = match CnfParams::from_blocks(cfg, blocks) {
        Ok(p) => p,
        Err(_) => return Ok(()), // non-finite weights: typed error
    };
    let probes64 = x.hutchinson.then_some(&probes[..]);
    if x.f32 {
        let p32 = params.cast::<f32>();
        let pts32: Vec<f32> = pts.iter().map(|&v| v as f32).collect();
        let pr32: Vec<f32> = probes.iter().map(|&v| v as f32).collect();
        check(&p32, &pts32, x.hutchinson.then_some(&pr32[..]))?;
    } else {
        check(&params, pts, probes64)?;
    }
    if x.gradient {
        match flow::loss_and_grad(&params, pts, probes64, crate::ode::grad::GradMode::FullTape) {
            Ok(g) => {
                if !g.loss.is_finite() || g.grads.iter().flatten().any(|v| !v.is_finite()) {
                    return Err("non-finite loss or gradient returned as Ok".into());
                }
            }
            Err(
                crate::reference::Error::NonFinite(_)
                | crate::reference::Error::InvalidHyper { .. },
            ) => {}
            Err(e) => return Err(format!("unexpected error kind: {e}")),
        }
    }
    Ok(())
}

/// The name the `golden` target gives the text it parses (errors must name it).
pub const GOLDEN_FUZZ_FILE: &str = "fuzz.json";

/// The `golden` target: arbitrary bytes as the text of a golden file (`docs/GOLDEN-FORMAT.md`).
/// Text that is not UTF-8 is skipped (reading such a file is an I/O error before parsing). The
/// parser returns a case or an [`crate::Error::Golden`] naming the file and saying what is
/// wrong; a parsed case replays (through the fast kernels) to a result whose detail says what
/// was compared or what failed, or to a format error naming the file; and replaying it again
/// gives the same verdict, detail and output bits. Never a panic: a golden file is user input.
///
/// ```
/// use harness::laws::fuzz::golden;
/// golden(b"{\"format\": \"golden-v1\"}").unwrap(); // refused with a typed error: fine
/// golden(b"[[[[[[[[").unwrap();
/// ```
pub fn golden(data: &[u8]) -> Result<(), String> {
    golden_with(data, &crate::golden::replay)
}

/// [`golden`] with the replay under test: `replay` stands for [`crate::golden::replay`].
pub fn golden_with(
    data: &[u8],
    replay: &dyn Fn(&crate::golden::Case) -> crate::Result<crate::golden::CaseResult>,
) -> Result<(), String> {
    use crate::golden::Case;
    let Ok(text) = std::str::from_utf8(data) else {
        return Ok(());
    };
    let named = |e: crate::Error| -> Result<String, String> {
        match e {
            crate::Error::Golden { file, msg } if file == GOLDEN_FUZZ_FILE && !msg.is_empty() => {
                Ok(msg)
            }
            other => Err(format!("not a golden error naming the file: {other}")),
        }
    };
    let case = match Case::parse(GOLDEN_FUZZ_FILE, text) {
        Ok(c) => c,
        Err(e) => return named(e).map(|_| ()),
    };
    let verdict = |r: crate::Result<crate::golden::CaseResult>| -> Result<String, String> {
        match r {
            Ok(r) if r.detail.is_empty() => Err(format!("case `{}`: empty detail", r.name)),
            Ok(r) => Ok(format!("{} {} {}", r.passed, r.output_bits, r.detail)),
            Err(e) => named(e).map(|m| format!("error {m}")),
        }
    };
    let first = verdict(replay(&case))?;
    let again = verdict(replay(&case))?;
    if first != again {
        return Err(format!(
            "replaying case `{}` twice: `{first}`, then `{again}`",
            case.name
        ));
    }
    Ok(())
}

/// Points the `pgm` target draws from each image it accepts.
pub const PGM_FUZZ_SAMPLES: usize = 64;

/// The `pgm` target: arbitrary bytes as a greyscale image for `train-cnf --data`
/// ([`crate::cnf::data::ImageDensity::from_pgm`], P2 or P5). Malformed images are refused with
/// a message; an accepted one gives a density from which [`PGM_FUZZ_SAMPLES`] points are drawn:
/// every point finite, and, back in pixel units, on a pixel of positive weight (never on a white
/// pixel or outside the image; a point within `1e-6` of such a pixel's edge counts for it, for
/// the rounding of the standardisation). The f32 draw is the f64 draw rounded once.
///
/// ```
/// use harness::laws::fuzz::pgm;
/// pgm(b"P2 2 2 255 0 255 255 10").unwrap();
/// pgm(b"P5 99999999 1 255 ").unwrap(); // refused: fine
/// ```
pub fn pgm(data: &[u8]) -> Result<(), String> {
    use crate::cnf::data::{Dataset, ImageDensity};
    let im = match ImageDensity::from_pgm(data) {
        Ok(im) => im,
        Err(msg) if msg.is_empty() => return Err("refused with an empty message".into()),
        Err(_) => return Ok(()),
    };
    let ds = Dataset::Image(im.clone());
    let mut wide = vec![0.0f64; 2 * PGM_FUZZ_SAMPLES];
    let mut narrow = vec![0.0f32; 2 * PGM_FUZZ_SAMPLES];
    ds.sample_into(17, 0, &mut wide);
    ds.sample_as(17, 0, &mut narrow);
    image_draws_hold(&im, &wide, &narrow)
}

/// The checks of [`pgm`] on draws from `im`: `wide` (f64) and `narrow` (f32) hold the same
/// points as `n x 2` rows.
pub fn image_draws_hold(
    im: &crate::cnf::data::ImageDensity,
    wide: &[f64],
    narrow: &[f32],
) -> Result<(), String> {
    const EDGE: f64 = 1e-6;
    for (i, p) in wide.chunks_exact(2).enumerate() {
        if !(p[0].is_finite() && p[1].is_finite()) {
            return Err(format!(
                "{}x{} image: sample {i} = ({}, {})",
                im.width, im.height, p[0], p[1]
            ));
        }
        let (px, py) = im.to_pixels(p[0], p[1]);
        let dark = [-EDGE, 0.0, EDGE].iter().any(|&dx| {
            [-EDGE, 0.0, EDGE]
                .iter()
                .any(|&dy| im.weight_at(px + dx, py + dy) > 0.0)
        });
        if !dark {
            return Err(format!(
                "{}x{} image: sample {i} at pixel coordinates ({px}, {py}) lies on no pixel of \
                 positive weight",
                im.width, im.height
            ));
        }
    }
    if let Some(i) = (0..wide.len()).find(|&i| narrow[i] != wide[i] as f32) {
        return Err(format!(
            "f32 draw {} is not the f64 draw {} rounded",
            narrow[i], wide[i]
        ));
    }
    Ok(())
}
