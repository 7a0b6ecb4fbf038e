"""Op ``golden``: complete a golden-v1 case (docs/GOLDEN-FORMAT.md, formerly
shared/golden/FORMAT.md) by running the real library exactly as the generators in
fixtures/gen do (x64 on, same jitting, same encoding).

The compute paths below are re-implementations of ``fixtures/gen/gen_optim.py::run``,
``gen_muon.py::run``, ``gen_linesearch.py::run``, ``gen_ode.py::solve`` (``traced=False``) and
``gen_cnf.py::evaluate`` (``traced=False``); they are kept separate from the generator scripts
(which this package must not edit) and verified against files in fixtures/golden (see
PROTOCOL.md). Any change here must keep that verification passing.

Input: a case WITHOUT its outputs:

* optimizer: ``steps`` is a list of ``{"grads": tree}`` (an ``updates`` field is ignored);
* linesearch: ``steps`` is a count N or a list of N objects (their content is ignored);
* ode / cnf: no ``expected`` (ignored if present).

Output: the complete case, fields in the generators' order; ``source`` is rewritten with this
profile's jax/optax/diffrax versions and the call that was made (for cnf the input's
``source.call`` is kept when present, since it describes where the weights came from).
"""

from __future__ import annotations

import importlib.metadata as md
import math

from .protocol import BadArgs, SubjectUnavailable

TOLERANCE = {  # the generators' defaults, used when the case has no "tolerance"
    "optimizer": {"float32": {"rtol": 2e-4, "atol": 1e-6},
                  "float64": {"rtol": 1e-9, "atol": 1e-12}},
    "linesearch": {"float32": {"rtol": 2e-4, "atol": 1e-6},
                   "float64": {"rtol": 1e-9, "atol": 1e-12}},
    "ode": {("float64", "constant"): {"rtol": 1e-10, "atol": 1e-12},
            ("float64", "pid"): {"rtol": 1e-8, "atol": 1e-10},
            ("float32", "constant"): {"rtol": 1e-4, "atol": 1e-6},
            ("float32", "pid"): {"rtol": 1e-4, "atol": 1e-6}},
    "cnf": {"float64": {"rtol": 1e-8, "atol": 1e-10}, "float32": {"rtol": 1e-5, "atol": 1e-6}},
}

MAX_NUMBERS = 2_000_000   # total tensor elements in a case
MAX_STEPS = 1000          # optimizer / linesearch steps
MAX_CNF_POINTS = 4096
MAX_CNF_WIDTH = 1024
SOLVERS = ["euler", "heun", "midpoint", "ralston", "bosh3", "tsit5", "dopri5"]
PID_KEYS = ["type", "rtol", "atol", "dt0", "pcoeff", "icoeff", "dcoeff", "factormin",
            "factormax", "safety", "dtmin", "dtmax"]
PROBLEM_ARGS = {"linear": ["A"], "lotka_volterra": ["alpha", "beta", "gamma", "delta"],
                "van_der_pol": ["mu"], "forced_decay": ["k", "w"]}


# ------------------------------------------------------------------------------ validation


def _tensor_size(t, where) -> int:
    if not isinstance(t, dict) or "shape" not in t or "data" not in t:
        raise BadArgs(f"{where}: not a tensor")
    shape, data = t["shape"], t["data"]
    if not isinstance(shape, list) or any(isinstance(d, bool) or not isinstance(d, int)
                                          or d < 0 for d in shape):
        raise BadArgs(f"{where}: bad shape {shape!r}")
    n = math.prod(shape)
    if not isinstance(data, list) or len(data) != n:
        raise BadArgs(f"{where}: data length {len(data) if isinstance(data, list) else '?'} "
                      f"!= prod(shape) {n}")
    return n


def _tree_size(tree, where) -> int:
    if not isinstance(tree, dict) or not tree:
        raise BadArgs(f"{where}: not a tree")
    return sum(_tensor_size(v, f"{where}.{k}") for k, v in tree.items())


def _number(v, where):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise BadArgs(f"{where} must be a number, got {v!r}")


def _need(case, *keys):
    for k in keys:
        if k not in case:
            raise BadArgs(f"case has no {k!r}")


def check_case(case) -> None:
    """Structure and size checks, before anything is computed (BadArgs)."""
    _need(case, "format", "name", "kind", "dtype")
    if case["format"] != "golden-v1":
        raise BadArgs(f"format must be golden-v1, got {case['format']!r}")
    if case["dtype"] not in ("float32", "float64"):
        raise BadArgs(f"dtype must be float32 or float64, got {case['dtype']!r}")
    kind = case["kind"]
    n = 0
    if kind == "optimizer":
        _need(case, "optimizer", "params", "steps")
        opt = case["optimizer"]
        if not isinstance(opt, dict) or opt.get("name") not in ("adam", "radam", "muon"):
            raise BadArgs("optimizer.name must be adam, radam or muon")
        if not isinstance(opt.get("hyper", {}), dict):
            raise BadArgs("optimizer.hyper must be an object")
        n += _tree_size(case["params"], "params")
        steps = case["steps"]
        if not isinstance(steps, list) or not 1 <= len(steps) <= MAX_STEPS:
            raise BadArgs(f"steps must be a list of 1..{MAX_STEPS} objects")
        for i, s in enumerate(steps):
            if not isinstance(s, dict) or "grads" not in s:
                raise BadArgs(f"steps[{i}] has no grads")
            n += _tree_size(s["grads"], f"steps[{i}].grads")
    elif kind == "linesearch":
        _need(case, "objective", "params", "steps")
        obj = case["objective"]
        if not isinstance(obj, dict) or obj.get("name") not in ("rosenbrock", "quadratic"):
            raise BadArgs("objective.name must be rosenbrock or quadratic")
        if obj["name"] == "quadratic":
            data = obj.get("data", {})
            if not isinstance(data, dict) or "A" not in data or "b" not in data:
                raise BadArgs("quadratic objective needs data.A and data.b")
            n += _tensor_size(data["A"], "A") + _tensor_size(data["b"], "b")
        n += _tensor_size(case["params"], "params")
        if not isinstance(case.get("hyper", {}), dict):
            raise BadArgs("hyper must be an object")
        steps = case["steps"]
        count = steps if isinstance(steps, int) and not isinstance(steps, bool) else (
            len(steps) if isinstance(steps, list) else -1)
        if not 1 <= count <= MAX_STEPS:
            raise BadArgs(f"steps must be a count or a list, 1..{MAX_STEPS}")
        n += count * _tensor_size(case["params"], "params")
    elif kind == "ode":
        _need(case, "problem", "solver", "controller", "t0", "t1", "y0")
        prob = case["problem"]
        if not isinstance(prob, dict) or prob.get("name") not in PROBLEM_ARGS:
            raise BadArgs(f"problem.name must be one of {sorted(PROBLEM_ARGS)}")
        args = prob.get("args", {})
        if not isinstance(args, dict) or sorted(args) != sorted(PROBLEM_ARGS[prob["name"]]):
            raise BadArgs(f"problem.args of {prob['name']} must be "
                          f"{PROBLEM_ARGS[prob['name']]}")
        if "A" in args:
            n += _tensor_size(args["A"], "A")
        if case["solver"] not in SOLVERS:
            raise BadArgs(f"solver must be one of {SOLVERS}")
        c = case["controller"]
        if not isinstance(c, dict) or c.get("type") not in ("constant", "pid"):
            raise BadArgs("controller.type must be constant or pid")
        unknown = set(c) - set(PID_KEYS if c["type"] == "pid" else ["type", "dt0"])
        if unknown:
            raise BadArgs(f"unknown controller fields {sorted(unknown)}")
        if c["type"] == "constant" and not isinstance(c.get("dt0"), (int, float)):
            raise BadArgs("constant controller needs a number dt0")
        if c["type"] == "pid" and ("rtol" not in c or "atol" not in c):
            raise BadArgs("pid controller needs rtol and atol")
        n += _tensor_size(case["y0"], "y0")
        _number(case["t0"], "t0")
        _number(case["t1"], "t1")
        for k, v in c.items():
            if k != "type" and not (k == "dt0" and v is None):
                _number(v, f"controller.{k}")
        for k, v in args.items():
            if k != "A":
                _number(v, f"problem.args.{k}")
    elif kind == "cnf":
        _need(case, "model", "x")
        m = case["model"]
        if not isinstance(m, dict):
            raise BadArgs("model must be an object")
        for k in ("data_size", "width", "depth", "blocks", "t0", "t1", "dt0", "weights"):
            if k not in m:
                raise BadArgs(f"model has no {k!r}")
        if m.get("solver", "tsit5") not in SOLVERS:
            raise BadArgs(f"model.solver must be one of {SOLVERS}")
        if m.get("trace", "exact") != "exact":
            raise BadArgs("only trace exact is supported")
        if m["width"] > MAX_CNF_WIDTH:
            raise BadArgs(f"width > {MAX_CNF_WIDTH}")
        n += _tensor_size(case["x"], "x")
        if len(case["x"]["shape"]) != 2 or case["x"]["shape"][1] != m["data_size"]:
            raise BadArgs("x must have shape [n, data_size]")
        if not isinstance(m["weights"], list) or len(m["weights"]) != m["blocks"]:
            raise BadArgs("model.weights must be a list of `blocks` blocks")
        for k in ("t0", "t1", "dt0"):
            _number(m[k], f"model.{k}")
        if case["x"]["shape"][0] > MAX_CNF_POINTS:
            raise BadArgs(f"more than {MAX_CNF_POINTS} points")
        for b, block in enumerate(m["weights"]):
            for i, layer in enumerate(block):
                for lin, fields in (("lin1", ("weight", "bias")), ("lin2", ("weight", "bias")),
                                    ("lin3", ("weight",))):
                    for f in fields:
                        try:
                            n += _tensor_size(layer[lin][f], f"weights[{b}][{i}].{lin}.{f}")
                        except (KeyError, TypeError):
                            raise BadArgs(f"weights[{b}][{i}].{lin}.{f} missing") from None
    else:
        raise BadArgs(f"kind must be optimizer, linesearch, ode or cnf, got {kind!r}")
    if n > MAX_NUMBERS:
        raise BadArgs(f"case has {n} numbers, cap {MAX_NUMBERS}")


# ------------------------------------------------------------------------------ encoding


def encode_number(x: float):
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def encode_tensor(a) -> dict:
    import numpy as np
    a = np.asarray(a)
    # float() of a float32 element is its exact value as a Python (f64) float.
    return {"shape": list(a.shape), "data": [encode_number(float(v)) for v in a.ravel()]}


def encode_tree(tree: dict) -> dict:
    return {n: encode_tensor(tree[n]) for n in sorted(tree)}


def decode_tensor(t: dict, dtype):
    import numpy as np
    values = [float(v) if isinstance(v, str) else v for v in t["data"]]
    return np.asarray(values, dtype=dtype).reshape(t["shape"])


def decode_tree(tree: dict, dtype) -> dict:
    return {n: decode_tensor(tree[n], dtype) for n in sorted(tree)}


def diffrax_solver(name: str):
    """The diffrax solver called ``name`` (one of SOLVERS), constructed."""
    import diffrax

    return {"euler": diffrax.Euler, "heun": diffrax.Heun, "midpoint": diffrax.Midpoint,
            "ralston": diffrax.Ralston, "bosh3": diffrax.Bosh3, "tsit5": diffrax.Tsit5,
            "dopri5": diffrax.Dopri5}[name]()


def versions() -> dict:
    out = {}
    for pkg in ("jax", "optax", "diffrax"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


def ordered(case: dict, order: list[str], filled: dict) -> dict:
    """The case's fields in ``order`` (values from ``filled`` first), then any extra fields of
    the input in their order."""
    out = {}
    for k in order:
        if k in filled:
            out[k] = filled[k]
        elif k in case:
            out[k] = case[k]
    for k, v in case.items():
        if k not in out and k not in filled:
            out[k] = v
    return out


def tolerance(case, key):
    return case.get("tolerance", TOLERANCE[case["kind"]][key])


# ------------------------------------------------------------------------------ optimizer


def _tuplify(x):
    return tuple(_tuplify(v) for v in x) if isinstance(x, list) else x


def run_optimizer(case):
    """gen_optim.py::run / gen_muon.py::run."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    dtype = np.dtype(case["dtype"])
    name = case["optimizer"]["name"]
    hyper = {k: _tuplify(v) for k, v in case["optimizer"].get("hyper", {}).items()}
    if name == "muon":
        contrib = getattr(optax, "contrib", None)
        if contrib is None or not hasattr(contrib, "muon"):
            raise SubjectUnavailable(f"optax {optax.__version__} has no optax.contrib.muon")
        opt = optax.contrib.muon(**hyper)
        call = "optax.contrib.muon"
    else:
        opt = getattr(optax, name)(**hyper)
        call = f"optax.{name}"
    call += "(" + ", ".join(f"{k}={v!r}" for k, v in case["optimizer"].get("hyper", {}).items()) + ")"
    params = decode_tree(case["params"], dtype)
    update = jax.jit(opt.update)
    p = {n: jnp.asarray(v) for n, v in params.items()}
    state = opt.init(p)
    steps = []
    for s in case["steps"]:
        g = decode_tree(s["grads"], dtype)
        updates, state = update({n: jnp.asarray(v) for n, v in g.items()}, state, p)
        u = {n: np.asarray(updates[n]) for n in sorted(updates)}
        for n, v in u.items():
            if v.dtype != dtype:
                raise RuntimeError(f"update {n} came out {v.dtype}, case dtype {dtype}")
        steps.append({"grads": encode_tree(g), "updates": encode_tree(u)})
        p = optax.apply_updates(p, updates)
    filled = {"source": {**versions(), "call": call},
              "tolerance": tolerance(case, case["dtype"]),
              "params": encode_tree(params), "steps": steps}
    return ordered(case, ["format", "name", "source", "kind", "dtype", "tolerance", "optimizer",
                          "params", "steps"], filled)


# ------------------------------------------------------------------------------ linesearch


def run_linesearch(case):
    """gen_linesearch.py::run."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    if not hasattr(optax, "scale_by_backtracking_linesearch"):
        raise SubjectUnavailable(f"optax {optax.__version__} has no "
                                 "scale_by_backtracking_linesearch")
    dtype = np.dtype(case["dtype"])
    obj = case["objective"]
    hyper = dict(case.get("hyper", {}))
    if obj["name"] == "rosenbrock":
        def f(x):
            return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)
    else:
        a = jnp.asarray(decode_tensor(obj["data"]["A"], dtype))
        b = jnp.asarray(decode_tensor(obj["data"]["b"], dtype))

        def f(x):
            return 0.5 * x @ (a @ x) - b @ x

    opt = optax.chain(optax.sgd(learning_rate=1.0),
                      optax.scale_by_backtracking_linesearch(**hyper))

    def upd(g, s, p, v):
        return opt.update(g, s, p, value=v, grad=g, value_fn=f)

    update = jax.jit(upd)
    vg = jax.jit(jax.value_and_grad(f))
    x0 = decode_tensor(case["params"], dtype)
    x = jnp.asarray(x0)
    state = opt.init(x)
    if not hasattr(state[1], "info"):
        raise SubjectUnavailable(
            f"optax {optax.__version__}: the line-search state has no info "
            "(num_linesearch_steps, decrease_error) that golden-v1 records")
    n = case["steps"] if isinstance(case["steps"], int) else len(case["steps"])
    steps = []
    for _ in range(n):
        value, grad = vg(x)
        u, state = update(grad, state, x, value)
        x = optax.apply_updates(x, u)
        ls = state[1]
        if np.asarray(x).dtype != dtype:
            raise RuntimeError(f"params came out {np.asarray(x).dtype}, case dtype {dtype}")
        steps.append({"value": encode_number(float(value)),
                      "learning_rate": encode_number(float(ls.learning_rate)),
                      "num_linesearch_steps": int(ls.info.num_linesearch_steps),
                      "decrease_error": encode_number(float(ls.info.decrease_error)),
                      "params": encode_tensor(np.asarray(x))})
    args = ", ".join(f"{k}={v!r}" for k, v in hyper.items())
    call = ("optax.chain(optax.sgd(learning_rate=1.0), "
            f"optax.scale_by_backtracking_linesearch({args}))")
    filled = {"source": {**versions(), "call": call},
              "tolerance": tolerance(case, case["dtype"]), "steps": steps}
    return ordered(case, ["format", "name", "source", "kind", "dtype", "tolerance", "objective",
                          "hyper", "params", "steps"], filled)


# ------------------------------------------------------------------------------ ode


def run_ode(case, eager=False):
    """gen_ode.py::solve with traced=False: times, problem args and controller options closed
    over (Python floats; numpy.float32 times for float32 cases), only y0 a jit input. With
    ``eager`` the same solve runs op by op under ``jax.disable_jit()`` (each operation rounded
    on its own, no fusion): how far that lands from the jitted run measures how sensitive the
    case is to rounding."""
    import diffrax
    import jax
    import jax.numpy as jnp
    import numpy as np

    dtype = np.dtype(case["dtype"])

    def f_linear(t, y, args):
        return args["A"] @ y

    def f_lotka_volterra(t, y, args):
        x, p = y[0], y[1]
        return jnp.stack([args["alpha"] * x - args["beta"] * x * p,
                          args["delta"] * x * p - args["gamma"] * p])

    def f_van_der_pol(t, y, args):
        return jnp.stack([y[1], args["mu"] * (1 - y[0] ** 2) * y[1] - y[0]])

    def f_forced_decay(t, y, args):
        return -args["k"] * y + jnp.sin(args["w"] * t)

    fields = {"linear": f_linear, "lotka_volterra": f_lotka_volterra,
              "van_der_pol": f_van_der_pol, "forced_decay": f_forced_decay}
    prob = case["problem"]
    args = {k: (jnp.asarray(decode_tensor(v, dtype)) if k == "A" else float(v))
            for k, v in prob["args"].items()}
    c = case["controller"]
    t0, t1, dt0 = float(case["t0"]), float(case["t1"]), c.get("dt0")
    dt0 = None if dt0 is None else float(dt0)
    if case["dtype"] == "float32":
        times = [None if x is None else np.float32(x) for x in (t0, t1, dt0)]
    else:
        times = [t0, t1, dt0]
    if c["type"] == "constant":
        controller = diffrax.ConstantStepSize()
    else:
        controller = diffrax.PIDController(
            **{k: (None if v is None else float(v)) for k, v in c.items()
               if k not in ("type", "dt0")})
    term = diffrax.ODETerm(fields[prob["name"]])
    solver = diffrax_solver(case["solver"])
    y0 = decode_tensor(case["y0"], dtype)

    def diffeqsolve(t0, t1, dt0, y0, args):
        return diffrax.diffeqsolve(term, solver, t0, t1, dt0, y0, args=args,
                                   stepsize_controller=controller,
                                   saveat=diffrax.SaveAt(steps=True))

    if eager:
        with jax.disable_jit():
            sol = diffeqsolve(*times, jnp.asarray(y0), args)
    else:
        sol = jax.jit(lambda y0: diffeqsolve(*times, y0, args))(jnp.asarray(y0))
    if not diffrax.is_successful(sol.result):
        raise RuntimeError(f"diffrax did not succeed: {sol.result}")
    counts = {k: int(sol.stats[k])
              for k in ("num_accepted_steps", "num_rejected_steps", "num_steps")}
    n = counts["num_accepted_steps"]
    ts, ys = np.asarray(sol.ts)[:n], np.asarray(sol.ys)[:n]
    if ts.dtype != dtype or ys.dtype != dtype:
        raise RuntimeError(f"solved in {ts.dtype}/{ys.dtype}, case dtype {dtype}")
    if case["dtype"] == "float32":
        t = lambda x: "None" if x is None else f"float32({x!r})"  # noqa: E731
        y0s = f", y0=float32{list(np.shape(y0))}"
    else:
        t, y0s = repr, ""
    call = (f"diffrax.diffeqsolve(ODETerm({prob['name']}), {case['solver']}, t0={t(case['t0'])}, "
            f"t1={t(case['t1'])}, dt0={t(c.get('dt0'))}{y0s}, controller={c!r}, "
            f"saveat=SaveAt(steps=True))")
    filled = {"source": {**versions(), "call": call},
              "tolerance": tolerance(case, (case["dtype"], c["type"])),
              "expected": {"ts": encode_tensor(ts), "ys": encode_tensor(ys), **counts}}
    return ordered(case, ["format", "name", "source", "kind", "dtype", "tolerance", "problem",
                          "solver", "controller", "t0", "t1", "y0", "expected"], filled)


# ------------------------------------------------------------------------------ cnf

CNF_CALL = ("per block, in reverse: diffrax.diffeqsolve(ODETerm((f(t,y), "
            "trace(vmap(vjp(f))(eye)))), Tsit5(), t1, t0, -dt0, (y, delta), args=block, "
            "stepsize_controller=ConstantStepSize()); log_prob = delta - 0.5*(d*log(2*pi) + "
            "sum(y**2)); jit(vmap) over x; f = diffrax CNF example Func (ConcatSquash "
            "eqx.nn.Linear layers, tanh)")


def run_cnf(case):
    """gen_cnf.py::evaluate with traced=False: jax.jit(jax.vmap(log_likelihood)) over x, the
    weights and times closed over."""
    import diffrax
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import jax.random as jr
    import numpy as np

    dtype = np.dtype(case["dtype"])
    m = case["model"]

    def linear(w, b):
        n_out, n_in = w.shape
        lin = eqx.nn.Linear(n_in, n_out, use_bias=b is not None, key=jr.PRNGKey(0),
                            dtype=w.dtype)
        lin = eqx.tree_at(lambda l: l.weight, lin, w)
        if b is not None:
            lin = eqx.tree_at(lambda l: l.bias, lin, b)
        return lin

    def dec(t):
        return jnp.asarray(decode_tensor(t, dtype))

    blocks = [[(linear(dec(l["lin1"]["weight"]), dec(l["lin1"]["bias"])),
                linear(dec(l["lin2"]["weight"]), dec(l["lin2"]["bias"])),
                linear(dec(l["lin3"]["weight"]), None))
               for l in block] for block in m["weights"]]

    def vector_field(t, y, layers):
        t = jnp.asarray(t)[None]
        for i, (lin1, lin2, lin3) in enumerate(layers):
            y = lin1(y) * jax.nn.sigmoid(lin2(t)) + lin3(t)
            if i < len(layers) - 1:
                y = jnp.tanh(y)
        return y

    def augmented_field(t, state, layers):
        y, _ = state
        f, vjp = jax.vjp(lambda y: vector_field(t, y, layers), y)
        (dfdy,) = jax.vmap(vjp)(jnp.eye(y.shape[0], dtype=y.dtype))
        return f, jnp.trace(dfdy)

    if case["dtype"] == "float32":
        t0, t1, dt0 = np.float32(m["t0"]), np.float32(m["t1"]), np.float32(m["dt0"])
    else:
        t0, t1, dt0 = float(m["t0"]), float(m["t1"]), float(m["dt0"])

    solver_name = m.get("solver", "tsit5")
    solver = diffrax_solver(solver_name)

    def log_likelihood(x):
        term = diffrax.ODETerm(augmented_field)
        y, delta = x, jnp.zeros((), x.dtype)
        for layers in reversed(blocks):
            sol = diffrax.diffeqsolve(term, solver, t1, t0, -dt0, (y, delta),
                                      args=layers, stepsize_controller=diffrax.ConstantStepSize())
            (y,), (delta,) = sol.ys
        return delta - 0.5 * (y.size * math.log(2 * math.pi) + jnp.sum(y ** 2))

    x = decode_tensor(case["x"], dtype)
    out = np.asarray(jax.jit(jax.vmap(log_likelihood))(jnp.asarray(x)))
    if out.dtype != dtype:
        raise RuntimeError(f"evaluated in {out.dtype}, case dtype {dtype}")
    call = (case.get("source") or {}).get("call")
    if not isinstance(call, str):
        tt = (lambda v: f"float32({v!r})") if case["dtype"] == "float32" else repr
        call = (f"{CNF_CALL.replace('Tsit5()', type(solver).__name__ + '()')}; t0={tt(m['t0'])}, "
                f"t1={tt(m['t1'])}, dt0={tt(m['dt0'])}")
    filled = {"source": {**versions(), "call": call},
              "tolerance": tolerance(case, case["dtype"]),
              "expected": {"log_prob": encode_tensor(out)}}
    return ordered(case, ["format", "name", "source", "kind", "dtype", "tolerance", "model",
                          "x", "expected"], filled)


def run_case(case: dict, eager: bool = False) -> dict:
    kind = case["kind"]
    if eager and kind != "ode":
        raise BadArgs("eager is implemented for ode cases only")
    if kind in ("ode", "cnf"):
        for mod in ("diffrax", "equinox"):
            try:
                __import__(mod)
            except ImportError as e:
                raise SubjectUnavailable(f"golden {kind}: {mod} not installed ({e})") from None
    if kind == "ode":
        return run_ode(case, eager=eager)
    return {"optimizer": run_optimizer, "linesearch": run_linesearch, "cnf": run_cnf}[kind](case)
