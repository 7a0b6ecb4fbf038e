"""Drive a worker: start it for a profile, send hello and every probe that applies, print
compact results; optionally replay golden files through the ``golden`` op and compare.

    python3 harness/upstream/selftest.py --profile current                 # every probe
    python3 harness/upstream/selftest.py --profile optax-0.2.2 --only radam adam
    python3 harness/upstream/selftest.py --profile current --small          # quick sizes
    python3 harness/upstream/selftest.py --profile current --golden fixtures/golden/adam-*.json
    python3 harness/upstream/selftest.py --profile current --errors         # protocol errors

The worker runs under ``target/upstream/<profile>/bin/python`` (``--python`` to override),
niced. ``--json-out FILE`` writes every reply as JSON lines. Needs only the standard library.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

# (subject, probe, args, small args); None = defaults
PROBES = [
    ("radam", "eager-live-arrays", None, {"steps": 5, "size": 100}),
    ("adam", "eager-live-arrays", None, {"steps": 5, "size": 100}),
    ("radam", "update-gradients", None, None),
    ("adam", "update-gradients", None, None),
    ("linesearch", "jit-steps", None, None),
    ("linesearch-int32-counter", "jit-steps", None, None),
    ("muon", "build-under-jit", None, None),
    ("muon-prefix", "build-under-jit", None, None),
    ("muon", "sharded", None, None),
    ("muon-prefix", "sharded", None, None),
    ("muon", "jit-steps", None, None),
    ("muon-prefix", "jit-steps", None, None),
    ("cnf-int-step", "jit-steps", None, {"steps": 3}),
    ("cnf-docs-example", "jit-steps", None, {"steps": 3}),
    ("cnf-array-step", "jit-steps", None, {"steps": 3}),
    ("init-vmap-f32-then-cast", "peak", None, {"layers": 2, "width": 64, "hidden": 256}),
    ("init-vmap-f32-then-cast-jit", "peak", None, {"layers": 2, "width": 64, "hidden": 256}),
    ("init-layerwise", "peak", None, {"layers": 2, "width": 64, "hidden": 256}),
    ("init-layerwise-stack", "peak", None, {"layers": 2, "width": 64, "hidden": 256}),
]


class Worker:
    def __init__(self, python: str, profile: str, extra_env=None):
        env = dict(os.environ, **(extra_env or {}))
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            ["nice", "-n", "10", python, "-u", str(HERE / "worker.py"), "--profile", profile],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(os.devnull, "w")
            if not os.environ.get("SELFTEST_STDERR") else None, text=True, env=env)
        self.next_id = 1

    def send_raw(self, line: str) -> dict:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        out = self.proc.stdout.readline()
        if not out:
            raise RuntimeError(f"worker exited ({self.proc.wait()})")
        return json.loads(out)

    def request(self, op: str, **fields) -> dict:
        rid = self.next_id
        self.next_id += 1
        reply = self.send_raw(json.dumps({"protocol": 1, "id": rid, "op": op, **fields}))
        assert reply["id"] == rid, (reply["id"], rid)
        return reply

    def close(self) -> int:
        try:
            self.request("shutdown")
        finally:
            self.proc.stdin.close()
        return self.proc.wait(timeout=60)


def summary(subject: str, probe: str, r: dict) -> str:
    if "raised" in r and probe == "build-under-jit":
        raised = r["raised"] and r["raised"]["type"]
        return f"raised={raised} coeffs_in_state={r['coeffs_in_state']} " \
               f"leaves={[(l['path'], l['dtype']) for l in r['state_leaves']]}"
    if probe == "eager-live-arrays":
        la = r["live_arrays"]
        pick = {t: la[t - 1] for t in (1, 10, 30) if t <= len(la)}
        return f"live_arrays at steps {pick} (first..last {la[0]}..{la[-1]}), " \
               f"bytes {r['live_bytes'][0]}..{r['live_bytes'][-1]}, " \
               f"left after release {r['live_arrays_after_release']}"
    if probe == "update-gradients":
        return "; ".join(f"t={s['t']} rho={s['rho_t'] if isinstance(s['rho_t'], str) else round(s['rho_t'], 3)} "
                         f"nan={s['grad_nan']}/{s['grad_total']} lr_grad={s['lr_grad']}"
                         for s in r["steps"])
    if probe == "jit-steps":
        line = f"traces={r['traces']} outer_cache_misses={len(r['cache_misses'])} " \
               f"(+{r['other_cache_misses']} inner)"
        if "signatures" in r:
            weak = [[l["path"] for l in sig if l["weak_type"]] for sig in r["signatures"]]
            line += f" weak leaves per signature={weak}"
        if "step_args" in r:
            line += f" step args={r['step_args']}"
        for m in r["cache_misses"][:3]:
            why = [x.strip() for x in m.splitlines() if x.strip().startswith("* at")]
            if why:
                line += "\n      miss: " + why[0][:160]
        return line
    if probe == "sharded":
        return f"max_abs_diff={r['max_abs_diff']} bitwise_equal={r['bitwise_equal']} " \
               f"sharding={r['update_sharding']}"
    if probe == "peak":
        return f"peak_above_baseline={r['peak_bytes_above_baseline'] / 2**20:.1f} MiB " \
               f"final={r['final_bytes'] / 2**20:.1f} MiB ratio={r['ratio']:.2f} " \
               f"(baseline {r['baseline_bytes'] / 2**20:.0f} MiB, build {r['build_seconds']:.1f} s)"
    return json.dumps(r)[:300]


# ------------------------------------------------------------------------------ golden

OUTPUTS = {"optimizer": "updates", "linesearch": None, "ode": "expected", "cnf": "expected"}


def strip(case: dict) -> dict:
    c = json.loads(json.dumps(case))
    if c["kind"] == "optimizer":
        c["steps"] = [{"grads": s["grads"]} for s in c["steps"]]
    elif c["kind"] == "linesearch":
        c["steps"] = len(c["steps"])
    else:
        c.pop("expected", None)
    if c["kind"] != "cnf":  # cnf keeps source.call: it tells where the weights came from
        c.pop("source", None)
    return c


def numbers(x, path=""):
    """(path, value) for every number/non-finite string in a JSON value."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield from numbers(v, f"{path}.{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from numbers(v, f"{path}[{i}]")
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        yield path, x
    elif x in ("nan", "inf", "-inf"):
        yield path, x


def bits(v):
    if isinstance(v, str):
        return v
    if isinstance(v, int):
        return ("int", v)
    import struct
    return struct.pack("<d", v)


def compare_golden(w: Worker, path: Path) -> bool:
    text = path.read_text()
    want = json.loads(text)
    reply = w.request("golden", case=strip(want))
    if not reply["ok"]:
        print(f"  {path.name}: ERROR {reply['error']['type']}: {reply['error']['message'][:300]}")
        return False
    got = reply["result"]["case"]
    a, b = list(numbers(got)), list(numbers(want))
    paths_same = [p for p, _ in a] == [p for p, _ in b]
    diffs = [(p, x, y) for (p, x), (_, y) in zip(a, b) if bits(x) != bits(y)] if paths_same else []
    src = [p for p, _, _ in diffs if p.startswith(".source")]
    num_diffs = [d for d in diffs if not d[0].startswith(".source")]
    same_bytes = json.dumps(got, indent=1, allow_nan=False) + "\n" == text
    same_doc_but_source = {k: v for k, v in got.items() if k != "source"} == \
        {k: v for k, v in want.items() if k != "source"}
    status = "OK" if paths_same and not num_diffs else "DIFFERENT"
    print(f"  {path.name}: {status}: {len(b)} numbers, {len(num_diffs)} differ bitwise"
          f"{'' if paths_same else ' (structure differs)'}; whole file byte-identical: "
          f"{same_bytes}; identical except source: {same_doc_but_source}"
          f"{'' if got.get('source') == want.get('source') else '; source differs: ' + json.dumps(got.get('source'))[:200]}"
          f" ({reply['seconds']:.2f} s)")
    if num_diffs and isinstance(want.get("tolerance"), dict):
        tol = want["tolerance"]
        fr = [abs(x - y) / (tol["atol"] + tol["rtol"] * abs(y)) for _, x, y in num_diffs
              if not isinstance(x, str) and not isinstance(y, str)]
        print(f"      largest difference = {max(fr) if fr else 'n/a'} of the case tolerance")
    for p, x, y in num_diffs[:3]:
        print(f"      {p}: got {x!r} want {y!r}")
    return status == "OK"


# ------------------------------------------------------------------------------ errors


def error_checks(w: Worker) -> None:
    cases = [
        ("not JSON", "this is not json"),
        ("no id", json.dumps({"protocol": 1, "op": "hello"})),
        ("protocol 2", json.dumps({"protocol": 2, "id": 91, "op": "hello"})),
        ("unknown op", json.dumps({"protocol": 1, "id": 92, "op": "frobnicate"})),
        ("unknown subject", json.dumps({"protocol": 1, "id": 93, "op": "observe",
                                        "subject": "sgd", "probe": "x"})),
        ("unknown probe", json.dumps({"protocol": 1, "id": 94, "op": "observe",
                                      "subject": "adam", "probe": "x"})),
        ("huge size", json.dumps({"protocol": 1, "id": 95, "op": "observe", "subject": "radam",
                                  "probe": "eager-live-arrays", "args": {"size": 10**12}})),
        ("unknown arg", json.dumps({"protocol": 1, "id": 96, "op": "observe", "subject": "radam",
                                    "probe": "eager-live-arrays", "args": {"sizes": 3}})),
        ("huge init", json.dumps({"protocol": 1, "id": 97, "op": "observe",
                                  "subject": "init-layerwise", "probe": "peak",
                                  "args": {"layers": 64, "width": 16384, "hidden": 65536}})),
        ("bad golden", json.dumps({"protocol": 1, "id": 98, "op": "golden",
                                   "case": {"format": "golden-v1"}})),
        ("library exception", json.dumps({"protocol": 1, "id": 99, "op": "golden", "case": {
            "format": "golden-v1", "name": "x", "kind": "optimizer", "dtype": "float64",
            "optimizer": {"name": "adam", "hyper": {"no_such_kwarg": 1}},
            "params": {"w": {"shape": [1], "data": [1.0]}},
            "steps": [{"grads": {"w": {"shape": [1], "data": [1.0]}}}]}})),
    ]
    for label, line in cases:
        r = w.send_raw(line)
        e = r.get("error") or {}
        print(f"  {label:18s} id={r['id']} ok={r['ok']} type={e.get('type')} "
              f"message={e.get('message', '')[:90]!r}")
    r = w.request("hello")
    print(f"  still alive after errors: {r['ok']}")


# ------------------------------------------------------------------------------ main


def main(argv) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--python", help="interpreter (default target/upstream/<profile>/bin/python)")
    ap.add_argument("--only", nargs="*", help="subjects (or subject:probe) to run")
    ap.add_argument("--skip", nargs="*", default=[], help="subjects to skip")
    ap.add_argument("--small", action="store_true", help="small sizes (quick)")
    ap.add_argument("--x64", action="store_true", help="send x64: true with every observe")
    ap.add_argument("--golden", nargs="*", type=Path, help="golden files to replay")
    ap.add_argument("--no-probes", action="store_true")
    ap.add_argument("--errors", action="store_true", help="send malformed requests")
    ap.add_argument("--json-out", type=Path)
    a = ap.parse_args(argv)
    python = a.python or str(REPO / "target" / "upstream" / a.profile / "bin" / "python")
    w = Worker(python, a.profile)
    out = open(a.json_out, "a") if a.json_out else None
    hello = w.request("hello")
    startup = time.perf_counter() - w.t0
    print(f"profile {a.profile}: start-up to hello reply {startup:.2f} s "
          f"(hello itself {hello['seconds']:.2f} s)")
    print("  " + json.dumps(hello["result"]))
    if out:
        out.write(json.dumps({"startup_seconds": startup, **hello}) + "\n")
    ok = True
    if a.errors:
        error_checks(w)
    if not a.no_probes and a.golden is None or a.only:
        for subject, probe, args, small in PROBES:
            if a.only and subject not in a.only and f"{subject}:{probe}" not in a.only:
                continue
            if subject in a.skip:
                continue
            req = {"subject": subject, "probe": probe}
            use = small if a.small and small is not None else args
            if use is not None:
                req["args"] = use
            if a.x64:
                req["x64"] = True
            r = w.request("observe", **req)
            if out:
                out.write(json.dumps({"profile": a.profile, "request": req, **r}) + "\n")
                out.flush()
            head = f"{subject} / {probe}{' x64' if a.x64 else ''} ({r.get('seconds', 0):.2f} s):"
            if r["ok"]:
                print(f"{head} {summary(subject, probe, r['result'])}")
            else:
                e = r["error"]
                print(f"{head} ERROR {e['type']}: {e['message'][:200]}")
    if a.golden:
        print("golden:")
        for p in a.golden:
            ok = compare_golden(w, p) and ok
    rc = w.close()
    print(f"worker exit code {rc}")
    return 0 if ok and rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
