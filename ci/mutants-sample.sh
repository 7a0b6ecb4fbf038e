#!/usr/bin/env bash
# Estimate the mutation score of the whole reference tree from a systematic sample, when a full
# run (thousands of mutants, a rebuild each) does not fit in the time available.
#
# Runs ci/mutants.sh once per round-robin shard k/N (mutant i belongs to shard i % N, so every
# shard is a spread across every file), each reported in fixtures/mutants/sample-round-robin-k-of-N/,
# then aggregates every such directory into fixtures/mutants/sample-summary.md:
#   - totals (caught, missed, unviable, timeout) and the score caught / (caught + missed) with its
#     95% Wilson interval (timeouts are listed apart; cargo-mutants counts them as detected);
#   - every missed mutant and what became of it: equivalent (a bullet of
#     fixtures/mutants/equivalent.md opens with its full name or its bare description), killed since (its full name, as recorded, is in
#     fixtures/mutants/killed.md with the test that kills it and the re-test), or unexplained;
#   - the score after that follow-up: (caught + killed since) / (caught + missed - equivalent).
# Exit status: 0 when every missed mutant of the sample is explained, 1 otherwise, 2 when a shard
# could not run (ci/mutants.sh's 2).
#
# Environment (besides every setting of ci/mutants.sh, e.g. MUTANTS_OPT_LEVEL, MUTANTS_TIMEOUT):
#   SAMPLE_SHARDS  shards to run, e.g. "1 2 3" (default: none, only aggregate what is there);
#                  a shard whose directory already holds a summary.md is skipped unless
#                  SAMPLE_RERUN=1
#   SAMPLE_OF      N, the number of round-robin shards (default 150: about 24 of the 3,662
#                  mutants of 2026-11-23 per shard)
#   SAMPLE_DIR     where the shard directories and sample-summary.md live (default fixtures/mutants)
set -euo pipefail
cd "$(dirname "$0")/.."

N="${SAMPLE_OF:-150}"
DIR="${SAMPLE_DIR:-fixtures/mutants}"
mkdir -p "$DIR"

for k in ${SAMPLE_SHARDS:-}; do
  out="$DIR/sample-round-robin-$k-of-$N"
  if [[ -f "$out/summary.md" && "${SAMPLE_RERUN:-0}" != 1 ]]; then
    echo "shard $k/$N: already in $out, skipped"
    continue
  fi
  echo "shard $k/$N: running (report in $out)"
  status=0
  MUTANTS_SHARDING=round-robin MUTANTS_SHARD="$k/$N" MUTANTS_OUT="$out" \
    bash ci/mutants.sh || status=$?
  if [[ "$status" == 2 ]]; then
    echo "shard $k/$N could not run" >&2
    exit 2
  fi
done

python3 - "$DIR" "$N" <<'EOF'
import math, pathlib, re, sys

root, n_shards = pathlib.Path(sys.argv[1]), int(sys.argv[2])
shards = []
for d in sorted(root.glob(f"sample-round-robin-*-of-{n_shards}"),
                key=lambda p: int(p.name.split("-")[3])):
    s = d / "summary.md"
    if not s.exists():
        continue
    row = None
    for line in s.read_text().splitlines():
        m = re.match(r"\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|", line)
        if m:
            row = [int(x) for x in m.groups()]
            break
    if row is None:
        print(f"{s}: no counts row", file=sys.stderr); sys.exit(2)
    missed_file = d / "missed.txt"
    missed = [l for l in missed_file.read_text().splitlines() if l.strip()] if missed_file.exists() else []
    timeouts = re.findall(r"^- `(.*)`$", s.read_text().split("## Timeouts", 1)[1], re.M) \
        if "## Timeouts" in s.read_text() else []
    if len(missed) != row[2]:
        print(f"{d}: missed.txt lists {len(missed)} mutants, summary.md counts {row[2]}",
              file=sys.stderr)
        sys.exit(2)
    shards.append((int(d.name.split("-")[3]), d.name, row, missed, timeouts))

if not shards:
    print(f"no sample-round-robin-*-of-{n_shards}/summary.md under {root}", file=sys.stderr)
    sys.exit(2)

def text(name):
    p = root / name
    return p.read_text() if p.exists() else ""
equivalent, killed = text("equivalent.md"), text("killed.md")

def short(m):
    return m.split(": ", 1)[1] if ": " in m else m
# equivalent.md: the backticked text opening each bullet, a full name or a bare description
eq_entries = set(re.findall(r"^- `([^`]+)`", equivalent, re.M))

def wilson(k, n, z=1.959964):
    if n == 0:
        return (float("nan"), float("nan"))
    p = k / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (100 * (c - h), 100 * (c + h))

tot = [sum(s[2][i] for s in shards) for i in range(5)]
total, caught, missed_n, unviable, timeout = tot
viable = caught + missed_n
lo, hi = wilson(caught, viable)
rows, fate = [], {"equivalent": 0, "killed": 0, "unexplained": 0}
for k, name, (t, c, m, u, to), missed, _ in shards:
    score = f"{100 * c / (c + m):.1f}%" if c + m else "n/a"
    rows.append(f"| [{k}/{n_shards}]({name}/summary.md) | {t} | {c} | {m} | {u} | {to} | {score} |")
listing = []
for k, name, _, missed, _ in shards:
    for m in missed:
        if f"`{m}`" in killed:
            f = "killed"
        elif m in eq_entries or short(m) in eq_entries:
            f = "equivalent"
        else:
            f = "unexplained"
        fate[f] += 1
        listing.append(f"- shard {k}: `{m}` — **{f}**")
after_num = caught + fate["killed"]
after_den = viable - fate["equivalent"]
alo, ahi = wilson(after_num, after_den)
timeouts = [f"- shard {k}: `{t}`" for k, _, _, _, ts in shards for t in ts]

lines = [
    "# Mutation score of the reference tree, estimated from a round-robin sample",
    "",
    f"Written by `ci/mutants-sample.sh` from {len(shards)} round-robin shard(s) of {n_shards} "
    f"(shard k holds mutant i when i % {n_shards} = k, so each shard spreads over every file of "
    "`harness/reference/src/{optim,ode,stack,stage,cnf}`). Each shard's own report is linked.",
    "",
    "| shard | mutants | caught | missed | unviable | timeout | score |",
    "|---|---|---|---|---|---|---|",
    *rows,
    f"| **all** | **{total}** | **{caught}** | **{missed_n}** | **{unviable}** | **{timeout}** | "
    f"**{100 * caught / viable:.1f}%** |" if viable else "| all | 0 | | | | | n/a |",
    "",
    f"Score as measured: caught / (caught + missed) = {caught} / {viable} = "
    f"{100 * caught / viable:.1f}%, 95% Wilson interval {lo:.1f}–{hi:.1f}%. Timeouts "
    f"({timeout}) are detected mutants (the tests ran past the limit, usually an endless loop) "
    "and are left out of both counts; counting them as caught only raises the score.",
    "",
    f"After follow-up (missed mutants killed since by a new test, equivalent ones set aside): "
    f"({caught} + {fate['killed']}) / ({viable} - {fate['equivalent']}) = "
    + (f"{100 * after_num / after_den:.1f}%, 95% Wilson interval {alo:.1f}–{ahi:.1f}%."
       if after_den else "n/a."),
    "",
    f"## Missed ({missed_n}: {fate['killed']} killed since, see `killed.md`; "
    f"{fate['equivalent']} equivalent, see `equivalent.md`; {fate['unexplained']} unexplained)",
    "",
    *(listing or ["None."]),
]
if timeouts:
    lines += ["", "## Timeouts", "", *timeouts]
(root / "sample-summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines[4:4 + len(rows) + 3]))
print(lines[4 + len(rows) + 4])
print(lines[4 + len(rows) + 6])
if fate["unexplained"]:
    print(f"{fate['unexplained']} missed mutants are neither killed (killed.md) nor equivalent "
          "(equivalent.md)")
    sys.exit(1)
EOF
