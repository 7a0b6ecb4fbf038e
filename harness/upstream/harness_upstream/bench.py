"""Op ``bench``: time the real library on the work of one ``harness bench`` figure.

Each entry of ``FIGURES`` does the same work as the figure of the same name in
``harness/src/bench.rs`` (same sizes, dtype, start point, tolerances and evaluation counts) the
way a JAX user would write it: one ``jax.jit`` function, inputs donated where the step replaces
them. It returns

* ``seconds``: the median of ``reps`` steady-state calls, each ended by ``block_until_ready``;
* ``first_call_seconds``: the first call (trace, compile and one run), timed apart;
* ``counts``: what the run did that the figure's unit depends on (evaluations, steps);
* ``note``: where the upstream work differs from ours.

The harness turns ``seconds`` into the figure's unit (GB/s from the same byte count as ours).
"""

from __future__ import annotations

import math
import statistics
import time

from .protocol import BadArgs

FUSED_PARAMS = 1 << 24
LINESEARCH_DIM = 1 << 16
MUON_N = 1024


def _timed(fn, reps: int):
    """(first call seconds, median of `reps` later calls); `fn()` returns what to block on."""
    import jax

    start = time.perf_counter()
    jax.block_until_ready(fn())
    first = time.perf_counter() - start
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return first, statistics.median(times)


def _fused(name: str, reps: int):
    """optax.adam / optax.radam(1e-3) on one float32 leaf of 2^24 parameters, the update and
    `apply_updates` in one jitted step with params and state donated (updated in place)."""
    import jax
    import jax.numpy as jnp
    import optax

    jax.config.update("jax_enable_x64", False)
    opt = getattr(optax, name)(1e-3)
    params = {"w": jnp.full((FUSED_PARAMS,), 0.5, jnp.float32)}
    grads = {"w": jnp.full((FUSED_PARAMS,), 0.01, jnp.float32)}
    state = opt.init(params)

    def step(p, s, g):
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s

    step = jax.jit(step, donate_argnums=(0, 1))
    box = [params, state]

    def call():
        box[0], box[1] = step(box[0], box[1], grads)
        return box[0]

    first, secs = _timed(call, reps)
    return first, secs, {}, ("same update, XLA-fused; optax keeps the step count and moments "
                             "in the donated state as we do")


def _ns5(reps: int):
    """optax.contrib's Newton–Schulz: 5 standard iterations on a 1024x1024 float32 matrix."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from optax.contrib import _muon

    jax.config.update("jax_enable_x64", False)
    n = MUON_N
    x = jnp.asarray(np.sin(np.arange(n * n, dtype=np.float32) * np.float32(0.618))
                    .reshape(n, n))
    coeffs = jnp.asarray([3.4445, -4.7750, 2.0315], jnp.float32)
    ns = jax.jit(lambda x: _muon.orthogonalize_via_newton_schulz(x, coeffs, 5, eps=1e-8))
    first, secs = _timed(lambda: ns(x), reps)
    return first, secs, {}, ("plain iteration: 3 full products per step (XLA does not exploit "
                             "the symmetry of X X^T)")


def _linesearch(reps: int):
    """One chained sgd(1) + backtracking(15) step on a 65,536-dimensional float32 Rosenbrock
    from x_i = 0.5 + 0.1 sin(i): value and gradient, update, apply_updates, one jit."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    jax.config.update("jax_enable_x64", False)

    def f(x):
        return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)

    opt = optax.chain(optax.sgd(learning_rate=1.0),
                      optax.scale_by_backtracking_linesearch(max_backtracking_steps=15))
    x0 = jnp.asarray((0.5 + 0.1 * np.sin(np.arange(LINESEARCH_DIM))).astype(np.float32))
    state = opt.init(x0)

    @jax.jit
    def step(x, s):
        v, g = jax.value_and_grad(f)(x)
        u, s = opt.update(g, s, x, value=v, grad=g, value_fn=f)
        return optax.apply_updates(x, u), s

    first, secs = _timed(lambda: step(x0, state), reps)
    _, s = step(x0, state)
    evals = int(s[1].info.num_linesearch_steps)
    return first, secs, {"evaluations": evals}, (
        "the same search from the same start (same state each call)")


def _ode(reps: int):
    """diffrax Tsit5 on Lotka–Volterra (1.1, 0.4, 0.4, 0.1) from (10, 10) over [0, 15], PID
    rtol 1e-8 atol 1e-10, dt0 chosen by diffrax, float64, final state only."""
    import diffrax
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)

    def lv(t, y, args):
        x, p = y[0], y[1]
        return jnp.stack([1.1 * x - 0.4 * x * p, 0.1 * x * p - 0.4 * p])

    term = diffrax.ODETerm(lv)
    solver = diffrax.Tsit5()
    ctl = diffrax.PIDController(rtol=1e-8, atol=1e-10)

    @jax.jit
    def solve(y0):
        sol = diffrax.diffeqsolve(term, solver, 0.0, 15.0, None, y0, stepsize_controller=ctl,
                                  saveat=diffrax.SaveAt(t1=True))
        return sol.ys, sol.stats["num_steps"]

    y0 = jnp.asarray([10.0, 10.0])
    first, secs = _timed(lambda: solve(y0)[0], reps)
    steps = int(solve(y0)[1])
    return first, secs, {"steps": steps}, "the same solve (diffrax's step count in counts)"


def _cnf_train_step(reps: int):
    """One training step of the diffrax CNF example's model (cnf.py's, width 64, depth 3, one
    block) on a batch of 500 2-D points in float64: loss -mean(log p) through the backward Tsit5
    solve (10 constant steps of 0.05, exact trace), its gradient (diffrax's default
    RecursiveCheckpointAdjoint), optax.adamw(1e-3, weight_decay=1e-5), one eqx.filter_jit."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import optax

    from . import cnf

    jax.config.update("jax_enable_x64", True)
    model, batch = cnf.build(0, width=64, depth=3, n_data=500, dt0=0.05)
    dtypes = {leaf.dtype for leaf in jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_array))}
    if dtypes != {jnp.dtype(jnp.float64)} or batch.dtype != jnp.float64:
        raise RuntimeError(f"the model is not float64: {dtypes}, batch {batch.dtype}")
    optim = optax.adamw(1e-3, weight_decay=1e-5)
    opt_state = optim.init(eqx.filter(model, eqx.is_inexact_array))

    @eqx.filter_value_and_grad
    def loss(model, x):
        return -jnp.mean(jax.vmap(model.log_likelihood)(x))

    @eqx.filter_jit
    def step(model, opt_state, x):
        value, grads = loss(model, x)
        updates, opt_state = optim.update(grads, opt_state,
                                          eqx.filter(model, eqx.is_inexact_array))
        return value, eqx.apply_updates(model, updates), opt_state

    box = [model, opt_state]

    def call():
        value, box[0], box[1] = step(box[0], box[1], batch)
        return value

    first, secs = _timed(call, reps)
    return first, secs, {}, (
        "dt0 0.05 over [0, 0.5] as ours; standard-normal points instead of a fresh two-moons "
        "draw per step; diffrax stores every step for the adjoint as ours does")


def _stacked_init(reps: int):
    """16 blocks of eqx.nn.Linear(1024 -> 4096) and (4096 -> 1024), with biases, built directly
    in float16 by eqx.filter_vmap inside one eqx.filter_jit (256 MiB of output)."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    jax.config.update("jax_enable_x64", False)

    def block(key):
        k1, k2 = jr.split(key)
        return (eqx.nn.Linear(1024, 4096, key=k1, dtype=jnp.float16),
                eqx.nn.Linear(4096, 1024, key=k2, dtype=jnp.float16))

    build = eqx.filter_jit(lambda keys: eqx.filter_vmap(block)(keys))
    keys = jr.split(jr.PRNGKey(0), 16)
    first, secs = _timed(lambda: build(keys), reps)
    return first, secs, {}, (
        "jax's threefry uniform draws, ours a counter-based generator; both write the f16 "
        "model once")


FIGURES = {
    "adam_fused_16m_gbps": lambda reps: _fused("adam", reps),
    "radam_fused_16m_gbps": lambda reps: _fused("radam", reps),
    "ns5_1024_ms": _ns5,
    "linesearch_rosenbrock_65536_ms": _linesearch,
    "ode_lv_tsit5_1e-8_us": _ode,
    "train_step_w64_d3_b500_ms": _cnf_train_step,
    "init_chunked_16x1024x4096_ms": _stacked_init,
}


def run(args) -> dict:
    if not isinstance(args, dict):
        raise BadArgs("bench args must be an object")
    unknown = set(args) - {"figure", "reps"}
    if unknown:
        raise BadArgs(f"unknown bench args {sorted(unknown)}")
    figure = args.get("figure")
    if figure not in FIGURES:
        raise BadArgs(f"no upstream figure {figure!r}; known: {sorted(FIGURES)}")
    reps = args.get("reps", 7)
    if isinstance(reps, bool) or not isinstance(reps, int) or not 1 <= reps <= 1000:
        raise BadArgs("reps must be an integer in 1..1000")
    import gc

    import jax

    jax.clear_caches()
    gc.collect()
    first, secs, counts, note = FIGURES[figure](reps)
    if not (math.isfinite(secs) and secs > 0):
        raise RuntimeError(f"{figure}: timed {secs} s")
    return {"figure": figure, "seconds": secs, "first_call_seconds": first, "reps": reps,
            "counts": counts, "note": note}
