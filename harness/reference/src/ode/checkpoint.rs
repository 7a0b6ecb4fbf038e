//! # Binomial checkpointing: the offline revolve schedule for reversing `n` steps with `c` states
//!
//! A reverse sweep over the steps `y_k -> y_{k+1}`, `k = n-1, ..., 0`, needs each `y_k` in turn,
//! last first. Storing all of them costs `n` states; this module schedules the sweep with at most
//! `c` stored states (checkpoints, the start state `y_0` among them) by recomputing states from
//! checkpoints. The schedule is *offline*: `n` is known before the sweep (the accepted step times
//! of the forward solve are kept), so the optimal split can be computed directly.
//!
//! ## The binomial bound (Griewank 1992, Griewank–Walther 2000)
//!
//! With `c` checkpoints and every step advanced (recomputed) at most `t` times, at most
//! `beta(c, t) = C(c + t, c)` steps can be reversed. For `n` steps let `t` be the *repetition
//! number*, the unique `t` with `beta(c, t-1) < n <= beta(c, t)`. Then the least number of
//! forward steps (plain steps, not counting the taped step each reversal records) is
//!
//! ```text
//! F(n, c) = t n - beta(c + 1, t - 1),     F(1, c) = 0,    F(n, 1) = n (n - 1) / 2.
//! ```
//!
//! (`t = 1`, `n <= c + 1`: `F = n - 1`, one sweep storing every state.)
//!
//! ## The recursion
//!
//! `reverse(a, b, c)`: the state `y_a` is the checkpoint on top of the stack, `c` checkpoint
//! slots (that one included) may be used; reverse steps `b-1, ..., a`.
//! - `b - a <= c + 1` (`t <= 1`): advance from `y_a` one step at a time storing
//!   `y_{a+1} .. y_{b-2}`, reverse the last step from the working state `y_{b-1}`, then each
//!   other step from its checkpoint (`b - a - 1` forward steps). The recursion stops here, so
//!   it is never deeper than the number of splits: at most `c`, and about `n / c` when `t = 2`.
//! - `c = 1`: for `k = b-1, ..., a`, restore `y_a` and advance `k - a` steps
//!   (`(b-a)(b-a-1)/2` forward steps).
//! - otherwise pick a split `m`, advance `y_a -> y_m` (`m - a` steps), store it, run
//!   `reverse(m, b, c - 1)`, drop `y_m`, run `reverse(a, m, c)`.
//!
//! The cost `m + F(l - m, c - 1) + F(m, c)` (with `l = b - a` and `m` now relative to `a`) is
//! minimal exactly when the left part `[a, a+m)` is reversed with `t - 1` repetitions and the
//! right part with `t`: `F` is continuous and piecewise linear in `l` with slope `t`, so the
//! derivative in `m` is `1 + (t_left) - (t_right)`, zero when `t_left = t - 1`, `t_right = t`.
//! That is
//!
//! ```text
//! max(beta(c, t-2), l - beta(c-1, t)) <= m <= min(beta(c, t-1), l - beta(c-1, t-1)),
//! ```
//!
//! and [`split`] takes the upper end (clamped to `[1, l-1]`). The module's tests check, for small
//! `n` and `c`, that the schedule's forward steps equal `F(n, c)` and that `F` equals the
//! minimum of the recursion over every split (exhaustive dynamic programme).
//!
//! ## Peak and recomputation
//! - At most `c` checkpoints are stored at any time (plus whatever state the driver advances).
//! - Forward steps: `F(n, c)`; with `c ~ sqrt(2n)` (diffrax's default budget) `t <= 2`, so each
//!   step is recomputed at most twice.
//! - The recursion is at most `c` calls deep (each nested call has one checkpoint fewer).
//!   `c >= n - 1` reverses in one sweep without recursing.
//!
//! # References
//! - A. Griewank, "Achieving logarithmic growth of temporal and spatial complexity in reverse
//!   automatic differentiation", *Optimization Methods and Software* 1(1), 1992.
//! - A. Griewank, A. Walther, "Algorithm 799: revolve: an implementation of checkpointing for
//!   the reverse or adjoint mode of computational differentiation", *ACM TOMS* 26(1), 2000
//!   (Proposition 1: `beta(c, t)`; the minimal forward-step count).
//! - P. Kidger, diffrax 0.7.2 `RecursiveCheckpointAdjoint` (the same bound, scheduled online).
//!
//! ```
//! use harness_reference::ode::checkpoint::{beta, forward_cost, repetitions};
//! assert_eq!(beta(3, 2), 10); // C(5, 3)
//! // 10 steps, 3 checkpoints: t = 2, F = 2*10 - beta(4, 1) = 15
//! assert_eq!((repetitions(10, 3), forward_cost(10, 3)), (2, 15));
//! ```

/// What a schedule asks of the sweep that runs it. The sweep owns a *working* state and a stack
/// of checkpoints; the schedule's arguments name the step index of each state involved. `A` is
/// the element type of the states (the sweep's arithmetic type).
pub trait Sweep<A = f64> {
    /// Advance the working state from `y_from` to `y_to` (`to - from` forward steps).
    fn advance(&mut self, from: usize, to: usize);
    /// Push the working state, `y_at`, onto the checkpoint stack.
    fn store(&mut self, at: usize);
    /// Copy the checkpoint on top of the stack, `y_at`, into the working state.
    fn restore(&mut self, at: usize);
    /// Pop the checkpoint on top of the stack, `y_at`.
    fn discard(&mut self, at: usize);
    /// Reverse step `k` (`y_k -> y_{k+1}`); the working state is `y_k`.
    fn reverse(&mut self, k: usize);
    /// The working state itself, for schedules that change what they store (a compressing
    /// schedule rounds it before [`Sweep::store`]).
    fn state_mut(&mut self) -> &mut [A];
}

/// A checkpointing schedule: how a reverse sweep over `n` steps keeps and recomputes states.
/// Methods are data: the gradient is generic over the schedule, [`Binomial`] is the default,
/// and any other schedule (a user's, or a deliberately wrong one) plugs in the same way.
///
/// A correct schedule starts from the working state `y_0`, calls [`Sweep::reverse`] exactly
/// once for each `k = n-1, ..., 0` in that order with the working state equal to `y_k`, and
/// discards every checkpoint it stores. Every correct schedule gives the same gradient bit for
/// bit; they differ in forward steps and stored states. `A` is the states' element type.
pub trait Schedule<A = f64>: Sync {
    /// Reverse `n` steps on `sweep` with a budget of `c` stored states (`1 <= c`).
    fn run(&self, n: usize, c: usize, sweep: &mut dyn Sweep<A>);
}

/// The offline binomial (revolve) schedule of [`binomial`]: at most `c` stored states and the
/// fewest forward steps any schedule with `c` states can take.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Binomial;

impl<A> Schedule<A> for Binomial {
    fn run(&self, n: usize, c: usize, sweep: &mut dyn Sweep<A>) {
        binomial(n, c, sweep)
    }
}

/// `beta(c, t) = C(c + t, c)`, saturating at `u128::MAX`.
pub fn beta(c: usize, t: usize) -> u128 {
    // C(c + t, t) = prod_{j=1..t} (c + j) / j; each partial product is itself C(c + j, j),
    // so the division is exact.
    let mut b: u128 = 1;
    for j in 1..=t as u128 {
        b = match b.checked_mul(c as u128 + j) {
            Some(p) => p / j,
            None => return u128::MAX,
        };
    }
    b
}

/// The repetition number: the least `t` with `n <= beta(c, t)` (`c >= 1`; `0` for `n <= 1`).
pub fn repetitions(n: usize, c: usize) -> usize {
    let c = c.max(1);
    let (mut t, mut b) = (0usize, 1u128); // b = beta(c, t)
    while b < n as u128 {
        t += 1;
        b = b * (c + t) as u128 / t as u128;
    }
    t
}

/// `F(n, c) = t n - beta(c + 1, t - 1)`: the forward steps of the optimal schedule for `n`
/// steps and `c >= 1` checkpoints (0 for `n <= 1`; `c` above `n` behaves as `n`).
pub fn forward_cost(n: usize, c: usize) -> u128 {
    if n <= 1 {
        return 0;
    }
    let c = c.clamp(1, n);
    let t = repetitions(n, c);
    t as u128 * n as u128 - beta(c + 1, t - 1)
}

/// `beta(c, t)` for a possibly negative `t` (0 then), capped at `usize::MAX`.
fn beta_or_zero(c: usize, t: isize) -> usize {
    if t < 0 {
        0
    } else {
        beta(c, t as usize).min(usize::MAX as u128) as usize
    }
}

/// The split (relative to the range start) for reversing `l >= 2` steps with `c >= 2`
/// checkpoints: `min(beta(c, t-1), l - beta(c-1, t-1))` clamped to `[1, l-1]` (module docs).
pub fn split(l: usize, c: usize) -> usize {
    let t = repetitions(l, c) as isize;
    let m = beta_or_zero(c, t - 1).min(l.saturating_sub(beta_or_zero(c - 1, t - 1)));
    m.clamp(1, l - 1)
}

/// Run the binomial schedule for `n` steps with `c` checkpoints (clamped to `[1, n]`) on
/// `sweep`, whose working state must be `y_0`. Stores `y_0` first and discards every checkpoint
/// it stores; calls `reverse(k)` for `k = n-1, ..., 0` in that order.
pub fn binomial<A, S: Sweep<A> + ?Sized>(n: usize, c: usize, sweep: &mut S) {
    if n == 0 {
        return;
    }
    sweep.store(0);
    reverse_range(0, n, c.clamp(1, n), sweep);
    sweep.discard(0);
}

/// `reverse(a, b, c)` of the module docs; `y_a` is on top of the stack.
fn reverse_range<A, S: Sweep<A> + ?Sized>(a: usize, mut b: usize, c: usize, sweep: &mut S) {
    // The left part `reverse(a, m, c)` is a tail call: loop on it, recurse only to the right.
    loop {
        let l = b - a;
        if l <= c + 1 {
            // t <= 1: one sweep storing y_{a+1} .. y_{b-2} (with y_a, l - 1 <= c checkpoints);
            // y_{b-1} is the working state, reversed at once.
            sweep.restore(a);
            for k in a + 1..b - 1 {
                sweep.advance(k - 1, k);
                sweep.store(k);
            }
            sweep.advance(b.saturating_sub(2).max(a), b - 1);
            sweep.reverse(b - 1);
            for k in (a..b - 1).rev() {
                sweep.restore(k);
                sweep.reverse(k);
                if k > a {
                    sweep.discard(k);
                }
            }
            return;
        }
        if c == 1 {
            for k in (a..b).rev() {
                sweep.restore(a);
                sweep.advance(a, k);
                sweep.reverse(k);
            }
            return;
        }
        let m = a + split(l, c);
        sweep.restore(a);
        sweep.advance(a, m);
        sweep.store(m);
        reverse_range(m, b, c - 1, sweep);
        sweep.discard(m);
        b = m;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records what a schedule does, checking it is a valid reverse sweep.
    #[derive(Default)]
    struct Audit {
        working: Option<usize>,
        stack: Vec<usize>,
        peak: usize,
        forward: u128,
        reversed: Vec<usize>,
    }

    impl Sweep for Audit {
        fn advance(&mut self, from: usize, to: usize) {
            assert_eq!(self.working, Some(from), "advance from a state not held");
            assert!(to >= from);
            self.forward += (to - from) as u128;
            self.working = Some(to);
        }
        fn store(&mut self, at: usize) {
            assert_eq!(self.working, Some(at));
            self.stack.push(at);
            self.peak = self.peak.max(self.stack.len());
        }
        fn restore(&mut self, at: usize) {
            assert_eq!(self.stack.last(), Some(&at));
            self.working = Some(at);
        }
        fn discard(&mut self, at: usize) {
            assert_eq!(self.stack.pop(), Some(at));
        }
        fn reverse(&mut self, k: usize) {
            assert_eq!(self.working, Some(k), "reverse of step {k} without y_{k}");
            self.reversed.push(k);
        }
        fn state_mut(&mut self) -> &mut [f64] {
            &mut []
        }
    }

    fn audit(n: usize, c: usize) -> Audit {
        let mut a = Audit {
            working: Some(0),
            ..Default::default()
        };
        binomial(n, c, &mut a);
        a
    }

    /// The least forward steps of the recursion over every split: the definition of `F`.
    fn exhaustive_min(nmax: usize, cmax: usize) -> Vec<Vec<u128>> {
        // f[c][l], c >= 1, l >= 1
        let mut f = vec![vec![0u128; nmax + 1]; cmax + 1];
        for (l, v) in f[1].iter_mut().enumerate() {
            *v = (l * l.saturating_sub(1) / 2) as u128;
        }
        for c in 2..=cmax {
            for l in 2..=nmax {
                f[c][l] = (1..l)
                    .map(|m| m as u128 + f[c - 1][l - m] + f[c][m])
                    .min()
                    .unwrap();
            }
        }
        f
    }

    #[test]
    fn beta_is_the_binomial_coefficient() {
        // C(c + t, c), computed by hand
        assert_eq!(beta(0, 5), 1);
        assert_eq!(beta(5, 0), 1);
        assert_eq!(beta(1, 9), 10);
        assert_eq!(beta(2, 3), 10);
        assert_eq!(beta(40, 2), 861); // 42*41/2
        assert_eq!(beta(90, 2), 4186); // 92*91/2 >= 4096: diffrax's default, t = 2
        assert_eq!(beta(u64::MAX as usize, 3), u128::MAX);
        assert_eq!(repetitions(4096, 90), 2);
    }

    #[test]
    fn closed_form_cost_is_the_minimum_over_every_split() {
        let (nmax, cmax) = (80, 7);
        let f = exhaustive_min(nmax, cmax);
        for (c, row) in f.iter().enumerate().skip(1) {
            for (n, &want) in row.iter().enumerate().skip(1) {
                assert_eq!(forward_cost(n, c), want, "n={n} c={c}");
            }
        }
    }

    #[test]
    fn schedule_forward_steps_match_the_binomial_cost_and_peak_is_c() {
        for c in 1..=9 {
            for n in 0..=120 {
                let a = audit(n, c);
                let want: Vec<usize> = (0..n).rev().collect();
                assert_eq!(a.reversed, want, "n={n} c={c}: reversal order");
                assert_eq!(a.forward, forward_cost(n, c), "n={n} c={c}");
                assert!(a.peak <= c.max(1), "n={n} c={c}: {} checkpoints", a.peak);
                assert!(a.stack.is_empty());
            }
        }
    }

    #[test]
    fn binomial_schedules_take_the_hand_counted_forward_steps_and_peak() {
        // n = 4, c = 1: restore y0 and advance 3, 2, 1, 0 steps = 6 = 4*3/2.
        assert_eq!(audit(4, 1).forward, 6);
        // n = 4, c >= 4: one sweep y0 -> y3 storing each = 3.
        assert_eq!(audit(4, 4).forward, 3);
        // n = 10, c = 3: t = 2 (beta(3,1) = 4 < 10 <= beta(3,2) = 10), F = 20 - beta(4,1) = 15.
        assert_eq!(audit(10, 3).forward, 15);
        // n = 1600, c = 40 (the memory law): t = 3, F = 4800 - beta(41, 2) = 4800 - 903.
        assert_eq!(audit(1600, 40).forward, 3897);
        assert_eq!(audit(1600, 40).peak, 40);
    }

    #[test]
    fn large_budgets_reverse_without_deep_recursion() {
        // c >= n - 1: one sweep (t = 1), no recursion at all, n - 1 forward steps; c = n/2:
        // t = 2 and one level per split, on a test thread's 2 MiB stack.
        let n = 100_000;
        for c in [n - 1, n, n / 2, 1000] {
            let a = audit(n, c);
            assert_eq!(a.forward, forward_cost(n, c), "c={c}");
            assert!(a.peak <= c, "c={c}: {}", a.peak);
        }
        assert_eq!(forward_cost(n, n - 1), (n - 1) as u128);
    }
}
