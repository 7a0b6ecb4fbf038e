"""CNF step-counter subjects (diffrax issue #574): a small version of the diffrax continuous
normalising flow example, trained by an ``eqx.filter_jit`` step that takes the step counter as
an argument, as the docs example does.

Model: 2-D data, one block, vector field of 2 ConcatSquash layers (2 -> 8 -> 2, ``depth=1``,
``tanh`` between), exact trace (Jacobian rows by ``vmap`` over a ``vjp``), log-likelihood by a
backward ``diffeqsolve(Tsit5(), t1=0.5 -> t0=0, dt0=0.1, ConstantStepSize())`` of
``(y, delta)``; loss ``-mean(log p)`` over a batch of 16; ``optax.adamw(1e-3,
weight_decay=1e-5)``. The step function follows the docs example: it gets ``(model, opt_state,
step)``, loads its batch from a fixed in-memory data set with ``dataloader(step)`` (dynamic
slice), accumulates 2 virtual batches in a ``lax.fori_loop`` whose carry holds ``step`` (so the
returned ``step`` is a jax array whatever came in), and returns ``(value, model, opt_state,
step)``.

Subjects differ only in what the loop passes as ``step``:

* ``cnf-int-step``: ``for i in range(steps): make_step(model, opt_state, i)`` (a Python int,
  static under filter_jit, so each new value is a new cache key);
* ``cnf-docs-example``: ``step = 0`` then ``step = make_step(..., step)[3]`` (Python int 0 on
  the first call, then the returned array: what the docs example's ``while`` loop does);
* ``cnf-array-step``: ``make_step(model, opt_state, jnp.asarray(i))``.
"""

from __future__ import annotations

import math

from .common import explain_cache_misses, require
from .protocol import take_args

DATA_SIZE, WIDTH, DEPTH, BATCH, VIRTUAL_BATCHES, N_DATA = 2, 8, 1, 16, 2, 64
T0, T1, DT0 = 0.0, 0.5, 0.1


def check_available(subject):
    require("jax", "optax", "equinox", "diffrax")


DEFAULTS = {"steps": 10, "seed": 0}
CAPS = {"steps": (1, 100)}


def parse(args):
    return take_args(args, DEFAULTS, CAPS)


def build(seed, width=WIDTH, depth=DEPTH, n_data=N_DATA, dt0=DT0):
    """The model (defaults: the subjects' small one) and `n_data` standard-normal points."""
    import diffrax
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    class ConcatSquash(eqx.Module):
        lin1: eqx.nn.Linear
        lin2: eqx.nn.Linear
        lin3: eqx.nn.Linear

        def __init__(self, n_in, n_out, key):
            k1, k2, k3 = jr.split(key, 3)
            self.lin1 = eqx.nn.Linear(n_in, n_out, key=k1)
            self.lin2 = eqx.nn.Linear(1, n_out, key=k2)
            self.lin3 = eqx.nn.Linear(1, n_out, use_bias=False, key=k3)

        def __call__(self, t, y):
            t = jnp.asarray(t)[None]
            return self.lin1(y) * jax.nn.sigmoid(self.lin2(t)) + self.lin3(t)

    class Func(eqx.Module):
        layers: list

        def __init__(self, key):
            sizes = [(DATA_SIZE, width)] + [(width, width)] * (depth - 1) + [(width, DATA_SIZE)]
            keys = jr.split(key, len(sizes))
            self.layers = [ConcatSquash(i, o, k) for (i, o), k in zip(sizes, keys)]

        def __call__(self, t, y, args):
            for layer in self.layers[:-1]:
                y = jnp.tanh(layer(t, y))
            return self.layers[-1](t, y)

    def exact_logp_field(t, state, func):
        y, _ = state
        f, vjp = jax.vjp(lambda y: func(t, y, None), y)
        (dfdy,) = jax.vmap(vjp)(jnp.eye(y.shape[0], dtype=y.dtype))
        return f, jnp.trace(dfdy)

    class CNF(eqx.Module):
        funcs: list

        def __init__(self, key):
            self.funcs = [Func(key)]

        def log_likelihood(self, x):
            term = diffrax.ODETerm(exact_logp_field)
            y, delta = x, jnp.zeros((), x.dtype)
            for func in reversed(self.funcs):
                sol = diffrax.diffeqsolve(term, diffrax.Tsit5(), T1, T0, -dt0, (y, delta),
                                          args=func,
                                          stepsize_controller=diffrax.ConstantStepSize())
                (y,), (delta,) = sol.ys
            return delta - 0.5 * (y.size * math.log(2 * math.pi) + jnp.sum(y ** 2))

    mkey, dkey = jr.split(jr.PRNGKey(seed))
    model = CNF(mkey)
    data = jr.normal(dkey, (n_data, DATA_SIZE))
    return model, data


def jit_steps(subject, a, x64):
    import equinox as eqx
    import jax
    import jax.lax as lax
    import jax.numpy as jnp
    import optax

    model, data = build(a["seed"])
    optim = optax.adamw(1e-3, weight_decay=1e-5)
    opt_state = optim.init(eqx.filter(model, eqx.is_inexact_array))
    traces = [0]

    def dataloader(step):
        start = (step % (N_DATA // BATCH)) * BATCH
        return lax.dynamic_slice_in_dim(data, start, BATCH)

    @eqx.filter_value_and_grad
    def loss(model, x):
        return -jnp.mean(jax.vmap(model.log_likelihood)(x))

    @eqx.filter_jit
    def make_step(model, opt_state, step):
        traces[0] += 1
        grads = jax.tree_util.tree_map(
            lambda leaf: jnp.zeros_like(leaf) if eqx.is_inexact_array(leaf) else None, model)

        def virtual_step(_, carry):
            value, grads, step = carry
            value_, grads_ = loss(model, dataloader(step))
            grads = jax.tree_util.tree_map(lambda a, b: a + b, grads, grads_)
            return value + value_, grads, step + 1

        value, grads, step = lax.fori_loop(0, VIRTUAL_BATCHES, virtual_step, (0, grads, step))
        value = value / VIRTUAL_BATCHES
        grads = jax.tree_util.tree_map(lambda g: g / VIRTUAL_BATCHES, grads)
        updates, opt_state = optim.update(grads, opt_state,
                                          eqx.filter(model, eqx.is_inexact_array))
        model = eqx.apply_updates(model, updates)
        return value, model, opt_state, step

    values, passed = [], []
    step = 0
    with explain_cache_misses() as log:
        for i in range(a["steps"]):
            if subject == "cnf-int-step":
                arg = i
            elif subject == "cnf-docs-example":
                arg = step
            else:
                arg = jnp.asarray(i)
            passed.append(type(arg).__name__ if isinstance(arg, int) else
                          f"{arg.dtype}{'(weak)' if arg.weak_type else ''}")
            log.active = True
            value, model, opt_state, step = make_step(model, opt_state, arg)
            jax.block_until_ready(value)
            log.active = False
            values.append(float(value))
    return {"traces": traces[0], **log.result("make_step"), "step_args": passed,
            "losses": values}


PROBES = {s: {"jit-steps": (jit_steps, parse)}
          for s in ("cnf-int-step", "cnf-docs-example", "cnf-array-step")}
