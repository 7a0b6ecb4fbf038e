"""Helpers shared by the subjects: trace counting, cache-miss capture, leaf signatures."""

from __future__ import annotations

import contextlib
import logging
import math

from .protocol import SubjectUnavailable


def require(*modules: str):
    """Imports the given top-level modules or raises SubjectUnavailable."""
    import importlib
    out = []
    for m in modules:
        try:
            out.append(importlib.import_module(m))
        except ImportError as e:
            raise SubjectUnavailable(f"{m} is not installed in this profile ({e})") from None
    return out


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.messages: list[str] = []
        self.active = False

    def about(self, name: str) -> list[str]:
        """The captured explanations that concern the function called ``name`` (jax names it
        "never seen function: NAME id=..." or "for NAME defined at ...")."""
        import re
        pat = re.compile(rf"(\n    ([\w<>]+\.)*{re.escape(name)} id=|for ([\w<>]+\.)*{re.escape(name)} "
                         "defined at)")
        return [m for m in self.messages if pat.search(m)]

    def result(self, name: str) -> dict:
        mine = self.about(name)
        return {"cache_misses": mine, "other_cache_misses": len(self.messages) - len(mine)}

    def emit(self, record):
        if self.active:
            msg = record.getMessage()
            if "CACHE MISS" in msg:
                self.messages.append(msg)


@contextlib.contextmanager
def explain_cache_misses():
    """Turns on ``jax_explain_cache_misses`` and captures the explanations logged by jax.
    Yields the handler; set ``handler.active = True`` around the calls to record (so that the
    eager ops of the setup are not recorded). While the handler is attached, jax's own
    messages no longer reach stderr through logging's last-resort handler."""
    import jax
    handler = _Capture()
    logger = logging.getLogger("jax")
    logger.addHandler(handler)
    old = jax.config.jax_explain_cache_misses
    jax.config.update("jax_explain_cache_misses", True)
    try:
        yield handler
    finally:
        jax.config.update("jax_explain_cache_misses", old)
        logger.removeHandler(handler)


def leaf_signature(path: str, leaf) -> dict:
    import numpy as np
    shape = getattr(leaf, "shape", None)
    dtype = getattr(leaf, "dtype", None)
    if shape is not None and dtype is not None and hasattr(leaf, "weak_type"):
        return {"path": path, "shape": list(shape), "dtype": str(dtype),
                "weak_type": bool(leaf.weak_type)}
    if shape is not None and dtype is not None:  # numpy array: never weak
        return {"path": path, "shape": list(shape), "dtype": str(dtype), "weak_type": False,
                "python": type(leaf).__name__}
    # Python scalar leaf: jit treats it as a weakly typed scalar
    return {"path": path, "shape": [], "dtype": str(np.asarray(leaf).dtype), "weak_type": True,
            "python": type(leaf).__name__}


def signatures(tree, prefix: str) -> list[dict]:
    import jax
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [leaf_signature(prefix + jax.tree_util.keystr(p), x) for p, x in leaves]


def num(x) -> float | str:
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x
