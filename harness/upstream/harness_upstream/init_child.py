"""One stacked-init memory measurement in a fresh process (spawned by init.py).

argv[1]: JSON ``{"strategy", "layers", "width", "hidden", "seed", "x64"}``. Prints one JSON
line: RSS before the build (after importing jax/equinox, initialising the CPU backend and
running the same strategy once at a tiny size, so that code and compile-time allocations are in
the baseline), the high-water mark after the build, and the bytes of the built model.

The high-water mark VmHWM is reset just before the build by writing "5" to
/proc/self/clear_refs (Linux >= 4.0); ``hwm_reset`` says whether that worked. If it did not,
``hwm_after`` is max(earlier peak, build peak), which can only overstate the build's peak.
"""

from __future__ import annotations

import gc
import json
import sys
import time


def status() -> dict:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) * 1024
    return out


def reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def main() -> None:
    spec = json.loads(sys.argv[1])
    import jax
    jax.config.update("jax_enable_x64", bool(spec["x64"]))
    import equinox as eqx
    import jax.numpy as jnp
    import jax.random as jr

    f16 = jnp.float16

    def make_block(key):
        k1, k2 = jr.split(key)
        return (eqx.nn.Linear(spec_w, spec_h, key=k1, dtype=jnp.float32),
                eqx.nn.Linear(spec_h, spec_w, key=k2, dtype=jnp.float32))

    def cast(tree):
        return jax.tree_util.tree_map(lambda x: x.astype(f16) if eqx.is_inexact_array(x) else x,
                                      tree)

    def build(strategy, layers, seed):
        keys = jr.split(jr.PRNGKey(seed), layers)
        if strategy == "vmap":
            model = eqx.filter_vmap(make_block)(keys)
            return cast(model)
        if strategy == "vmap-jit":
            return eqx.filter_jit(lambda k: cast(eqx.filter_vmap(make_block)(k)))(keys)
        blocks = []
        for k in keys:
            blocks.append(cast(make_block(k)))
        if strategy == "layerwise":
            return blocks
        assert strategy == "layerwise-stack", strategy
        stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *blocks,
                                         is_leaf=eqx.is_array)
        del blocks
        return stacked

    # warm-up at a tiny size (same code path), then the baseline
    spec_w, spec_h = 4, 8
    jax.block_until_ready(build(spec["strategy"], 2, 1))
    spec_w, spec_h = spec["width"], spec["hidden"]
    gc.collect()
    before = status()
    reset = reset_hwm()
    hwm_before = status()["VmHWM"]
    t = time.perf_counter()
    model = build(spec["strategy"], spec["layers"], spec["seed"])
    jax.block_until_ready(model)
    seconds = time.perf_counter() - t
    after = status()
    leaves = [x for x in jax.tree_util.tree_leaves(model) if eqx.is_array(x)]
    assert all(x.dtype == f16 for x in leaves), [x.dtype for x in leaves]
    print(json.dumps({
        "rss_before": before["VmRSS"], "hwm_before": hwm_before, "hwm_reset": reset,
        "hwm_after": after["VmHWM"], "rss_after": after["VmRSS"],
        "final_bytes": sum(int(x.nbytes) for x in leaves), "build_seconds": seconds,
        "leaves": len(leaves),
    }))


if __name__ == "__main__":
    main()
