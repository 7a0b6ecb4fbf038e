"""Protocol v1: JSON lines on stdin/stdout (see ../PROTOCOL.md).

One request line in, exactly one reply line out, in order. Nothing but replies is ever written
to the real stdout: `serve` moves file descriptor 1 to a private copy and points fd 1 (and
`sys.stdout`) at stderr before anything else is imported, so library prints, warnings and
C-level writes end up on stderr.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
import time
import traceback

PROTOCOL = 1

# Subject name -> module (relative to this package) that observes it. Modules are imported on
# first use, so a profile without diffrax/equinox still serves the optax subjects.
SUBJECTS = {
    "adam": "optim",
    "radam": "optim",
    "linesearch": "linesearch",
    "linesearch-int32-counter": "linesearch",
    "muon": "muon",
    "muon-prefix": "muon",
    "cnf-int-step": "cnf",
    "cnf-docs-example": "cnf",
    "cnf-array-step": "cnf",
    "init-vmap-f32-then-cast": "init",
    "init-vmap-f32-then-cast-jit": "init",
    "init-layerwise": "init",
    "init-layerwise-stack": "init",
}


# ------------------------------------------------------------------------------ errors


class ProtocolError(Exception):
    """Base of the typed protocol errors; the reply's error.type is the class name."""


class BadRequest(ProtocolError):
    pass


class UnknownOp(ProtocolError):
    pass


class UnknownSubject(ProtocolError):
    pass


class UnknownProbe(ProtocolError):
    pass


class SubjectUnavailable(ProtocolError):
    pass


class BadArgs(ProtocolError):
    pass


# ------------------------------------------------------------------------------ args


def take_args(args, defaults: dict, caps: dict | None = None) -> dict:
    """Validates ``args`` against ``defaults`` (same keys, same kinds) and ``caps``
    (key -> (min, max) inclusive). Unknown keys are refused."""
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise BadArgs(f"args must be an object, got {type(args).__name__}")
    unknown = sorted(set(args) - set(defaults))
    if unknown:
        raise BadArgs(f"unknown args {unknown}; known: {sorted(defaults)}")
    out = {}
    for k, d in defaults.items():
        v = args.get(k, d)
        if isinstance(d, bool):
            if not isinstance(v, bool):
                raise BadArgs(f"{k} must be a boolean")
        elif isinstance(d, int):
            if isinstance(v, bool) or not isinstance(v, int):
                raise BadArgs(f"{k} must be an integer, got {v!r}")
        elif isinstance(d, float):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise BadArgs(f"{k} must be a number, got {v!r}")
            v = float(v)
            if not math.isfinite(v):
                raise BadArgs(f"{k} must be finite")
        elif isinstance(d, list):
            if (not isinstance(v, list) or len(v) != len(d)
                    or any(isinstance(e, bool) or not isinstance(e, int) for e in v)):
                raise BadArgs(f"{k} must be a list of {len(d)} integers, got {v!r}")
        if caps and k in caps:
            lo, hi = caps[k]
            vals = v if isinstance(v, list) else [v]
            for e in vals:
                if not lo <= e <= hi:
                    raise BadArgs(f"{k}={v!r} outside [{lo}, {hi}]")
        out[k] = v
    return out


# ------------------------------------------------------------------------------ encoding


def clean(x):
    """JSON-safe copy: non-finite floats become "nan"/"inf"/"-inf", numpy scalars become
    Python numbers, tuples become lists."""
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if isinstance(x, int):
        return x
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    if isinstance(x, dict):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    # numpy scalars and 0-d arrays
    try:
        import numpy as np
        if isinstance(x, np.generic):
            return clean(x.item())
        if isinstance(x, np.ndarray):
            return clean(x.tolist())
    except ImportError:  # pragma: no cover
        pass
    return str(x)


# ------------------------------------------------------------------------------ worker


class Worker:
    def __init__(self, profile: str, out):
        self.profile = profile
        self.out = out
        self.jax = None

    # -- environment ------------------------------------------------------------------

    def ensure_jax(self):
        if self.jax is None:
            import jax  # noqa: F401  (env set in worker.py before this)
            self.jax = jax
        return self.jax

    def set_x64(self, req) -> bool:
        x64 = req.get("x64", False)
        if not isinstance(x64, bool):
            raise BadRequest("x64 must be a boolean")
        jax = self.ensure_jax()
        jax.config.update("jax_enable_x64", x64)
        return x64

    # -- ops -----------------------------------------------------------------------------

    def op_hello(self, req):
        import importlib.metadata as md
        jax = self.ensure_jax()
        pkgs = {}
        for name in ("jax", "jaxlib", "optax", "diffrax", "equinox", "numpy", "chex"):
            try:
                pkgs[name] = md.version(name)
            except md.PackageNotFoundError:
                pkgs[name] = None
        return {
            "profile": self.profile,
            "python": sys.version.split()[0],
            "packages": pkgs,
            "devices": len(jax.devices("cpu")),
            "protocol": PROTOCOL,
        }

    def op_observe(self, req):
        subject = req.get("subject")
        probe = req.get("probe")
        if not isinstance(subject, str) or not isinstance(probe, str):
            raise BadRequest("observe needs string fields subject and probe")
        if subject not in SUBJECTS:
            raise UnknownSubject(f"unknown subject {subject!r}; known: {sorted(SUBJECTS)}")
        module = load_module(SUBJECTS[subject], subject)
        probes = module.PROBES.get(subject, {})
        if probe not in probes:
            raise UnknownProbe(f"subject {subject!r} has no probe {probe!r}; "
                               f"known: {sorted(probes)}")
        fn, parse = probes[probe]
        module.check_available(subject)  # SubjectUnavailable
        args = parse(req.get("args", {}))  # BadArgs, before any allocation
        x64 = self.set_x64(req)
        jax = self.ensure_jax()
        import gc
        jax.clear_caches()
        gc.collect()
        result = fn(subject, args, x64=x64)
        result = {"x64": x64, **result}
        return result

    def op_golden(self, req):
        case = req.get("case")
        if not isinstance(case, dict):
            raise BadRequest("golden needs an object field case")
        eager = req.get("eager", False)
        if not isinstance(eager, bool):
            raise BadRequest("eager must be a boolean")
        module = load_module("golden", "golden")
        module.check_case(case)  # BadArgs before running anything
        jax = self.ensure_jax()
        jax.config.update("jax_enable_x64", True)  # as the generators
        import gc
        jax.clear_caches()
        gc.collect()
        return {"x64": True, "case": module.run_case(case, eager=eager)}

    def op_bench(self, req):
        module = load_module("bench", "bench")
        self.ensure_jax()
        return module.run(req.get("args", {}))

    # -- loop ------------------------------------------------------------------------------

    def reply(self, obj):
        line = json.dumps(obj, allow_nan=False, separators=(",", ":"))
        self.out.write(line + "\n")
        self.out.flush()

    def handle(self, line: str) -> bool:
        """Handles one request line; returns False when the worker must exit."""
        start = time.perf_counter()
        rid = None
        keep_going = True
        try:
            try:
                req = json.loads(line)
            except ValueError as e:
                raise BadRequest(f"not JSON: {e}") from None
            if not isinstance(req, dict):
                raise BadRequest("request must be a JSON object")
            rid = req.get("id")
            if isinstance(rid, bool) or not isinstance(rid, int):
                rid = None
                raise BadRequest("missing or non-integer id")
            if req.get("protocol") != PROTOCOL:
                raise BadRequest(f"protocol must be {PROTOCOL}, got {req.get('protocol')!r}")
            op = req.get("op")
            if op == "shutdown":
                result, keep_going = {}, False
            elif op == "hello":
                result = self.op_hello(req)
            elif op == "observe":
                result = self.op_observe(req)
            elif op == "golden":
                result = self.op_golden(req)
            elif op == "bench":
                result = self.op_bench(req)
            elif isinstance(op, str):
                raise UnknownOp(f"unknown op {op!r}; known: hello, observe, golden, bench, "
                                "shutdown")
            else:
                raise BadRequest("missing op")
            reply = {"protocol": PROTOCOL, "id": rid, "ok": True, "result": clean(result),
                     "seconds": time.perf_counter() - start}
        except BaseException as e:  # noqa: BLE001  (a library exception is never fatal)
            if isinstance(e, KeyboardInterrupt):
                raise
            print(f"[worker] request {rid}: {type(e).__name__}: {e}", file=sys.stderr)
            reply = {"protocol": PROTOCOL, "id": rid, "ok": False,
                     "error": {"type": type(e).__name__, "message": str(e),
                               "traceback": traceback.format_exc()},
                     "seconds": time.perf_counter() - start}
        try:
            self.reply(reply)
        except (TypeError, ValueError) as e:  # result not serialisable: still one reply
            self.reply({"protocol": PROTOCOL, "id": rid, "ok": False,
                        "error": {"type": type(e).__name__,
                                  "message": f"result not serialisable: {e}",
                                  "traceback": traceback.format_exc()},
                        "seconds": time.perf_counter() - start})
        return keep_going


def load_module(name: str, subject: str):
    try:
        return importlib.import_module(f"harness_upstream.{name}")
    except ImportError as e:
        raise SubjectUnavailable(f"{subject}: {e}") from None


def serve(profile: str) -> int:
    # Private copy of the real stdout; fd 1 and sys.stdout now lead to stderr.
    real = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    worker = Worker(profile, real)
    for line in sys.stdin:
        if not line.strip():
            continue
        if not worker.handle(line):
            break
    real.flush()
    return 0
