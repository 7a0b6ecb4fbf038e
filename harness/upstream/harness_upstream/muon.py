"""Subjects ``muon`` (``optax.contrib.muon``) and ``muon-prefix`` (the pre-fix pattern of optax
issue #1186, written here: see ``muon_prefix``).

Parameters are the tree ``{"w": <matrix of args.shape>}`` (one 2-D leaf, which both optimizers
orthogonalise); gradients are standard normal draws.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .common import require, signatures
from .protocol import BadArgs, SubjectUnavailable, take_args


def check_available(subject):
    require("jax")
    (optax,) = require("optax")
    if subject == "muon":
        contrib = getattr(optax, "contrib", None)
        if contrib is None or not hasattr(contrib, "muon"):
            raise SubjectUnavailable(f"optax {optax.__version__} has no optax.contrib.muon "
                                     "(first released in 0.2.5)")


# ------------------------------------------------------------------------------ muon-prefix


class PrefixMuonState(NamedTuple):
    mu: object  # momentum, same tree as the params


def muon_prefix(learning_rate, ns_coeffs=(3.4445, -4.7750, 2.0315), ns_steps=5, beta=0.95,
                eps=1e-8, nesterov=True):
    """A small Muon-like gradient transformation that re-creates the PRE-FIX pattern of
    https://github.com/google-deepmind/optax/issues/1186 (fixed upstream by PR #1193, before
    muon was first released): the Newton-Schulz coefficients are converted with
    ``jnp.asarray`` when the transform is BUILT and captured by the ``update`` closure, instead
    of being created in ``init`` and carried in the state. When the transform is built inside a
    jitted function, the captured array is a tracer of that trace, and an ``update`` called
    outside it raises ``UnexpectedTracerError``.

    Written for this harness (not optax's code): momentum ``mu = beta*mu + g``, Nesterov
    direction ``beta*mu + g`` (or ``mu``), 2-D leaves orthogonalised by ``ns_steps`` quintic
    Newton-Schulz iterations ``X <- a X + (b A + c A^2) X`` with ``A = X X^T`` on the
    Frobenius-normalised wide orientation, scaled by ``sqrt(max(1, rows/cols))``; other leaves
    pass the direction through; the update is ``-learning_rate * direction``.
    """
    import jax
    import jax.numpy as jnp
    import optax

    coeffs = jnp.asarray(ns_coeffs)  # <- the pattern under test: built at construction time

    def newton_schulz(g):
        tall = g.shape[0] > g.shape[1]
        x = g.T if tall else g
        x = x / (jnp.linalg.norm(x) + eps)
        c = coeffs.astype(x.dtype)
        for _ in range(ns_steps):
            a = x @ x.T
            x = c[0] * x + (c[1] * a + c[2] * (a @ a)) @ x
        x = x.T if tall else x
        return x * math.sqrt(max(1.0, g.shape[0] / g.shape[1]))

    def init(params):
        return PrefixMuonState(mu=jax.tree_util.tree_map(jnp.zeros_like, params))

    def update(updates, state, params=None):
        del params
        mu = jax.tree_util.tree_map(lambda m, g: beta * m + g, state.mu, updates)
        if nesterov:
            d = jax.tree_util.tree_map(lambda m, g: beta * m + g, mu, updates)
        else:
            d = mu
        d = jax.tree_util.tree_map(lambda x: newton_schulz(x) if x.ndim == 2 else x, d)
        return (jax.tree_util.tree_map(lambda x: -learning_rate * x, d),
                PrefixMuonState(mu=mu))

    return optax.GradientTransformation(init, update)


def make(subject, lr):
    import optax
    if subject == "muon":
        return optax.contrib.muon(learning_rate=lr)
    return muon_prefix(lr)


def _dtype(x64):
    import numpy as np
    return np.float64 if x64 else np.float32


def _draws(shape, n, seed, dtype):
    """Params then n gradients, standard normal, from ``numpy.random.default_rng(seed)`` (the
    same numbers in every profile)."""
    import jax.numpy as jnp
    import numpy as np
    rng = np.random.default_rng(seed)
    return [jnp.asarray(rng.standard_normal(shape).astype(dtype)) for _ in range(n + 1)]


def _shape_caps(a, key="shape"):
    r, c = a[key]
    if r * c > 4_000_000:
        raise BadArgs(f"{key} {a[key]} has more than 4e6 elements")


# ------------------------------------------------------------------------------ build-under-jit

BUILD_DEFAULTS = {"shape": [8, 6], "lr": 0.02, "seed": 0}
BUILD_CAPS = {"shape": (1, 4096), "lr": (-1e6, 1e6)}


def parse_build(args):
    a = take_args(args, BUILD_DEFAULTS, BUILD_CAPS)
    _shape_caps(a)
    return a


def build_under_jit(subject, a, x64):
    """A jitted function builds the optimizer (inside the trace) and returns ``init(params)``;
    then ``update`` of that optimizer is called outside jit. A raised exception is data."""
    import jax

    params, grads = _draws(tuple(a["shape"]), 1, a["seed"], _dtype(x64))
    params, grads = {"w": params}, {"w": grads}
    holder = {}

    @jax.jit
    def build_and_init(p):
        opt = make(subject, a["lr"])
        holder["opt"] = opt
        return opt.init(p)

    raised = None
    state = None
    try:
        state = build_and_init(params)
    except Exception as e:  # noqa: BLE001
        raised = {"type": type(e).__name__, "message": str(e), "where": "build_and_init"}
    leaves = signatures(state, "s") if state is not None else []
    update_finite = None
    if raised is None:
        try:
            u, _ = holder["opt"].update(grads, state, params)
            jax.block_until_ready(u)
            import numpy as np
            update_finite = bool(np.all(np.isfinite(np.asarray(u["w"]))))
        except Exception as e:  # noqa: BLE001
            raised = {"type": type(e).__name__, "message": str(e), "where": "update"}
    holder.clear()
    return {"raised": raised, "state_leaves": leaves,
            "coeffs_in_state": any("ns_coeffs" in leaf["path"] for leaf in leaves),
            "update_finite": update_finite}


# ------------------------------------------------------------------------------ sharded

SHARD_DEFAULTS = {"shape": [16, 8], "steps": 3, "seed": 0}
SHARD_CAPS = {"shape": (1, 4096), "steps": (1, 100)}


def parse_sharded(args):
    a = take_args(args, SHARD_DEFAULTS, SHARD_CAPS)
    _shape_caps(a)
    if a["shape"][0] % 2:
        raise BadArgs("shape[0] must be even (rows are split over 2 devices)")
    return a


def sharded(subject, a, x64):
    """The same run twice with ``jax.jit(opt.update)``: once on single-device arrays, once with
    params and gradients placed by ``jax.device_put`` with
    ``NamedSharding(Mesh(2 CPU devices, ("x",)), PartitionSpec("x", None))`` (rows split over
    the 2 devices; jit/GSPMD partitions the update). Compares every step's updates and the
    final params."""
    import jax
    import numpy as np
    import optax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = jax.devices("cpu")
    if len(devices) < 2:
        raise SubjectUnavailable("the sharded probe needs 2 CPU devices "
                                 "(XLA_FLAGS=--xla_force_host_platform_device_count=2)")
    mesh = Mesh(np.array(devices[:2]), ("x",))
    spec = NamedSharding(mesh, PartitionSpec("x", None))
    draws = _draws(tuple(a["shape"]), a["steps"], a["seed"], _dtype(x64))

    def run(shard):
        put = (lambda t: jax.device_put(t, spec)) if shard else (lambda t: t)
        opt = make(subject, 0.02)
        update = jax.jit(opt.update)
        params = put({"w": draws[0]})
        state = opt.init(params)
        ups, shardings = [], []
        for g in draws[1:]:
            u, state = update(put({"w": g}), state, params)
            params = optax.apply_updates(params, u)
            shardings.append(str(u["w"].sharding))
            ups.append(np.asarray(u["w"]))
        return ups, np.asarray(params["w"]), shardings

    u1, p1, _ = run(False)
    u2, p2, sh = run(True)
    diffs = [float(np.max(np.abs(x - y))) for x, y in zip(u1 + [p1], u2 + [p2])]
    bitwise = all(np.array_equal(x.view(np.uint8), y.view(np.uint8))
                  for x, y in zip(u1 + [p1], u2 + [p2]))
    return {"max_abs_diff": max(diffs), "bitwise_equal": bitwise, "devices": 2,
            "per_step_max_abs_diff": diffs[:-1], "final_params_max_abs_diff": diffs[-1],
            "max_abs_update": max(float(np.max(np.abs(x))) for x in u1),
            "max_abs_params": float(np.max(np.abs(p1))),
            "update_sharding": sh[-1],
            "method": "NamedSharding(Mesh(2 cpu, ('x',)), P('x', None)) + jax.jit"}


# ------------------------------------------------------------------------------ jit-steps

STEPS_DEFAULTS = {"shape": [8, 6], "steps": 5, "seed": 0}
STEPS_CAPS = {"shape": (1, 4096), "steps": (1, 100)}


def parse_steps(args):
    a = take_args(args, STEPS_DEFAULTS, STEPS_CAPS)
    _shape_caps(a)
    return a


def jit_steps(subject, a, x64):
    import jax
    import optax

    from .common import explain_cache_misses

    draws = _draws(tuple(a["shape"]), a["steps"], a["seed"], _dtype(x64))
    opt = make(subject, 0.02)
    traces = [0]

    def step(p, s, g):
        traces[0] += 1
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s

    jstep = jax.jit(step)
    p = {"w": draws[0]}
    s = opt.init(p)
    sigs = [signatures(s, "s")]
    with explain_cache_misses() as log:
        for g in draws[1:]:
            log.active = True
            p, s = jstep(p, s, {"w": g})
            jax.block_until_ready((p, s))
            log.active = False
            sigs.append(signatures(s, "s"))
    return {"traces": traces[0], **log.result("step"), "signatures": sigs}


PROBES = {s: {"build-under-jit": (build_under_jit, parse_build),
              "sharded": (sharded, parse_sharded),
              "jit-steps": (jit_steps, parse_steps)}
          for s in ("muon", "muon-prefix")}
