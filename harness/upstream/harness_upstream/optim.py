"""Subjects ``adam`` and ``radam``: optax.adam / optax.radam with default hyperparameters
except the learning rate (and b1/b2 for ``update-gradients``)."""

from __future__ import annotations

import gc

from .common import num, require
from .protocol import take_args


def check_available(subject):
    require("jax", "optax")


def _make(subject, lr, **kw):
    import optax
    return getattr(optax, subject)(lr, **kw)


# ------------------------------------------------------------------------------ eager-live-arrays

EAGER_DEFAULTS = {"steps": 30, "size": 1000, "lr": 1e-3, "seed": 0}
EAGER_CAPS = {"steps": (1, 1000), "size": (1, 10_000_000), "lr": (-1e6, 1e6)}


def parse_eager(args):
    return take_args(args, EAGER_DEFAULTS, EAGER_CAPS)


def eager_live_arrays(subject, a, x64):
    """Not jitted: per step ``grads = 2*params`` (the gradient of sum(params**2)), ``update``,
    ``apply_updates``; then ``del grads, updates``, ``gc.collect()`` and the live arrays. What
    the probe keeps alive by design after a step: params and the optimizer state's count, mu,
    nu (4 arrays). Params start as ``N(0, 1)`` from ``numpy.random.default_rng(seed)``."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    gc.collect()
    baseline = len(jax.live_arrays())
    opt = _make(subject, a["lr"])
    dtype = np.float64 if x64 else np.float32
    params = jnp.asarray(np.random.default_rng(a["seed"]).standard_normal(a["size"]).astype(dtype))
    state = opt.init(params)
    counts, nbytes = [], []
    for _ in range(a["steps"]):
        grads = 2.0 * params
        updates, state = opt.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        del updates, grads
        gc.collect()
        live = jax.live_arrays()
        counts.append(len(live))
        nbytes.append(sum(int(x.nbytes) for x in live))
        del live
    jax.block_until_ready(params)
    del params, state
    gc.collect()
    after = len(jax.live_arrays())
    return {"live_arrays": counts, "live_bytes": nbytes, "baseline_live_arrays": baseline,
            "live_arrays_after_release": after, "dtype": "float64" if x64 else "float32"}


# ------------------------------------------------------------------------------ update-gradients

GRAD_DEFAULTS = {"steps": 6, "size": 8, "lr": 1e-3, "b1": 0.9, "b2": 0.999, "seed": 0}
GRAD_CAPS = {"steps": (1, 64), "size": (1, 100_000), "lr": (-1e6, 1e6), "b1": (0.0, 1.0),
             "b2": (0.0, 1.0)}


def parse_grad(args):
    a = take_args(args, GRAD_DEFAULTS, GRAD_CAPS)
    return a


def loss(params):
    """The loss used for the lr gradient: sum(params**2)."""
    import jax.numpy as jnp
    return jnp.sum(params ** 2)


def update_gradients(subject, a, x64):
    """For t = 1..steps:

    * ``grad_nan`` / ``grad_total``: NaN count of d sum(update_t) / d g_t (reverse mode,
      jitted), evaluated at the state after t-1 real steps. The real steps use a fixed
      gradient sequence: ``rng = numpy.random.default_rng(seed)``, params = ``N(0, 1)`` draws
      of ``size``, then g_1 .. g_steps likewise (so inputs are identical in every profile).
    * ``lr_grad``: d/d lr of ``sum(params_t**2)`` after t unrolled steps of a jitted training
      loop from the same start params, where each step's gradient is the gradient of that same
      loss, ``2*params`` (so the learning rate reaches the updates through the params).
    * ``rho_t``: RAdam's rho_t from b2, computed in float64 with numpy.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    n, size, lr = a["steps"], a["size"], a["lr"]
    kw = {"b1": a["b1"], "b2": a["b2"]}
    rng = np.random.default_rng(a["seed"])
    dtype = np.float64 if x64 else np.float32
    params0 = jnp.asarray(rng.standard_normal(size).astype(dtype))
    grads = [jnp.asarray(rng.standard_normal(size).astype(dtype)) for _ in range(n)]

    opt = _make(subject, lr, **kw)
    update = jax.jit(opt.update)

    @jax.jit
    def d_sum_update(g, state, params):
        return jax.grad(lambda g: jnp.sum(opt.update(g, state, params)[0]))(g)

    def lr_loss(lr_, t):
        o = _make(subject, lr_, **kw)
        p = params0
        s = o.init(p)
        for _ in range(t):
            g = jax.grad(loss)(p)
            u, s = o.update(g, s, p)
            p = optax.apply_updates(p, u)
        return loss(p)

    b2 = np.float64(a["b2"])
    rho_inf = 2.0 / (1.0 - b2) - 1.0 if b2 < 1 else np.inf
    out = []
    params = params0
    state = opt.init(params)
    for t in range(1, n + 1):
        g = grads[t - 1]
        dg = np.asarray(d_sum_update(g, state, params))
        lr_grad = jax.jit(jax.grad(lr_loss), static_argnums=1)(jnp.asarray(lr), t)
        b2t = b2 ** np.float64(t)
        rho_t = rho_inf - 2.0 * t * b2t / (1.0 - b2t) if b2t != 1 else float("nan")
        out.append({"t": t, "rho_t": num(rho_t), "grad_nan": int(np.isnan(dg).sum()),
                    "grad_total": int(dg.size), "lr_grad": num(lr_grad)})
        u, state = update(g, state, params)
        params = optax.apply_updates(params, u)
    return {"steps": out, "loss": "sum(params**2)", "rho_inf": num(rho_inf)}


PROBES = {
    s: {"eager-live-arrays": (eager_live_arrays, parse_eager),
        "update-gradients": (update_gradients, parse_grad)}
    for s in ("adam", "radam")
}
