"""Subjects ``linesearch`` and ``linesearch-int32-counter``:
``optax.chain(optax.sgd(1.0), optax.scale_by_backtracking_linesearch(max_backtracking_steps=15))``
on a quadratic, stepped by a jitted function (optax issue #1171 / PR #1175).

``linesearch-int32-counter`` is the same optimizer whose ``init`` is wrapped so that the state
leaf ``...info.num_linesearch_steps`` starts as ``jnp.asarray(0, dtype=jnp.int32)`` (a strongly
typed int32, what ``update`` returns) instead of optax's weakly typed Python-int-derived zero:
a one-line-fix demonstration.
"""

from __future__ import annotations

from .common import explain_cache_misses, require, signatures
from .protocol import SubjectUnavailable, take_args


def check_available(subject):
    (optax,) = require("optax")
    require("jax")
    if not hasattr(optax, "scale_by_backtracking_linesearch"):
        raise SubjectUnavailable(
            f"optax {optax.__version__} has no scale_by_backtracking_linesearch")


DEFAULTS = {"steps": 5, "dim": 3, "seed": 0}
CAPS = {"steps": (1, 100), "dim": (1, 4096)}


def parse(args):
    return take_args(args, DEFAULTS, CAPS)


def make_optimizer(subject, replaced=None):
    import jax
    import jax.numpy as jnp
    import optax

    opt = optax.chain(optax.sgd(learning_rate=1.0),
                      optax.scale_by_backtracking_linesearch(max_backtracking_steps=15))
    if subject == "linesearch":
        return opt

    def is_counter(path):
        return jax.tree_util.keystr(path).endswith(".num_linesearch_steps")

    def init(params):
        state = opt.init(params)
        if replaced is not None:
            replaced.append(any(is_counter(p) for p, _ in
                                jax.tree_util.tree_flatten_with_path(state)[0]))
        # the one-line fix: a strongly typed int32 counter from the start
        return jax.tree_util.tree_map_with_path(
            lambda p, x: jnp.asarray(0, dtype=jnp.int32) if is_counter(p) else x, state)

    return optax.GradientTransformationExtraArgs(init, opt.update)


def quadratic(dim, seed, dtype):
    """f(x) = 0.5 x^T A x - b^T x, A = M M^T / dim + I (M, b, x0 standard normal)."""
    import jax.numpy as jnp
    import numpy as np
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((dim, dim))
    a = jnp.asarray(m @ m.T / dim + np.eye(dim), dtype=dtype)
    b = jnp.asarray(rng.standard_normal(dim), dtype=dtype)
    x0 = jnp.asarray(rng.standard_normal(dim), dtype=dtype)

    def f(x):
        return 0.5 * x @ (a @ x) - b @ x
    return f, x0


def jit_steps(subject, a, x64):
    """Jitted ``step(x, s)``: value_and_grad, update(value, grad, value_fn), apply_updates.
    ``traces`` counts executions of the step body (one per trace); ``cache_misses`` are the
    explanations jax logged while the jitted step was being called (this includes the inner
    while-loop functions of the line search, which are re-defined on every trace)."""
    import jax
    import jax.numpy as jnp
    import optax

    dtype = jnp.float64 if x64 else jnp.float32
    f, x = quadratic(a["dim"], a["seed"], dtype)
    replaced = []
    opt = make_optimizer(subject, replaced)
    traces = [0]

    def step(x, s):
        traces[0] += 1
        value, grad = jax.value_and_grad(f)(x)
        u, s = opt.update(grad, s, x, value=value, grad=grad, value_fn=f)
        return optax.apply_updates(x, u), s

    jstep = jax.jit(step)
    s = opt.init(x)
    sigs = [signatures(s, "s")]
    values = []
    with explain_cache_misses() as log:
        for _ in range(a["steps"]):
            log.active = True
            x, s = jstep(x, s)
            jax.block_until_ready((x, s))
            log.active = False
            sigs.append(signatures(s, "s"))
            values.append(float(f(x)))
    return {"traces": traces[0], **log.result("step"), "signatures": sigs,
            "values": values,
            # int32-counter variant: whether the state had a num_linesearch_steps leaf to
            # replace (optax 0.2.2/0.2.3 states have no such leaf)
            "counter_leaf_replaced": replaced[0] if replaced else None}


PROBES = {s: {"jit-steps": (jit_steps, parse)}
          for s in ("linesearch", "linesearch-int32-counter")}
