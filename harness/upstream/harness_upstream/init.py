"""Stacked-initialisation peak memory subjects (equinox issue #673).

The model is ``layers`` blocks, each two ``eqx.nn.Linear`` (``width -> hidden`` and
``hidden -> width``, with biases), finally in float16. Strategies (one subject each):

* ``init-vmap-f32-then-cast``: ``eqx.filter_vmap(make_block)(jr.split(key, layers))`` in
  float32 (eager), then every inexact leaf ``.astype(float16)`` (eager): the issue's pattern;
* ``init-vmap-f32-then-cast-jit``: the same two steps inside one ``eqx.filter_jit``;
* ``init-layerwise``: each block built in float32 and cast to float16 one at a time, kept as a
  Python list of blocks (nothing is stacked);
* ``init-layerwise-stack``: as ``init-layerwise``, then stacked leaf by leaf with ``jnp.stack``
  into the same layout as the vmap strategies (the list is dropped afterwards).

Each measurement runs in a fresh interpreter (``python -m harness_upstream.init_child``, the
worker's own ``sys.executable``), see ``init_child.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from .common import require
from .protocol import BadArgs, take_args

STRATEGY = {
    "init-vmap-f32-then-cast": "vmap",
    "init-vmap-f32-then-cast-jit": "vmap-jit",
    "init-layerwise": "layerwise",
    "init-layerwise-stack": "layerwise-stack",
}

DEFAULTS = {"layers": 16, "width": 1024, "hidden": 4096, "seed": 0}
CAPS = {"layers": (1, 64), "width": (1, 16384), "hidden": (1, 65536)}
MAX_F32_BYTES = 1536 * 2**20  # the float32 stack of one model: 1.5 GiB (default: 512 MiB)
TIMEOUT = 900


def check_available(subject):
    require("jax", "equinox")


def final_bytes(a) -> int:
    """Bytes of the float16 model: per block W1 [hidden, width], b1 [hidden], W2 [width, hidden],
    b2 [width]."""
    w, h = a["width"], a["hidden"]
    return a["layers"] * (2 * w * h + h + w) * 2


def parse(args):
    a = take_args(args, DEFAULTS, CAPS)
    if final_bytes(a) * 2 > MAX_F32_BYTES:
        raise BadArgs(f"float32 model would be {final_bytes(a) * 2} bytes, cap {MAX_F32_BYTES}")
    return a


def peak(subject, a, x64):
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = dict(a, strategy=STRATEGY[subject], x64=x64)
    env = dict(os.environ)
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "harness_upstream.init_child", json.dumps(spec)],
                          capture_output=True, text=True, env=env, timeout=TIMEOUT, cwd=here)
    wall = time.perf_counter() - start
    sys.stderr.write(proc.stderr[-4000:])
    if proc.returncode != 0:
        raise RuntimeError(f"init child exited {proc.returncode}: {proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    want = final_bytes(a)
    if out["final_bytes"] != want:
        raise RuntimeError(f"child built {out['final_bytes']} bytes, expected {want}")
    above = out["hwm_after"] - out["rss_before"]
    return {
        "peak_bytes_above_baseline": above,
        "final_bytes": want,
        "baseline_bytes": out["rss_before"],
        "ratio": above / want,
        "rss_after_bytes": out["rss_after"],
        "hwm_before_bytes": out["hwm_before"],
        "hwm_reset": out["hwm_reset"],
        "build_seconds": out["build_seconds"],
        "child_seconds": wall,
        "strategy": STRATEGY[subject],
        "layout": ("list of blocks" if STRATEGY[subject] == "layerwise"
                   else "stacked: leading axis = layers"),
        "leaves": out["leaves"],
    }


PROBES = {s: {"peak": (peak, parse)} for s in STRATEGY}
