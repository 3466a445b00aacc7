#!/usr/bin/env bash
# The device check: on a machine with a GPU, in under five minutes and without prompts,
#   1. tests/gpu against real cupy (moves, training steps, the double's blind spots),
#   2. the NVRTC compile test (tests/test_gpu_compile.py),
#   3. every row of the op table traced and replayed fused on the GPU against numpy,
#   4. benchmarks/bench_gpu.py, with the targets it measures,
# each under a timeout, into one report (gpu_check.md and gpu_check.json) in the folder
# given as the argument, else $OUT, else ./gpu_check; it exits 1 if a part failed or ran
# out of time. Without a GPU it says so, writes that as the report and exits 0.
#
#   benchmarks/gpu_check.sh [REPORT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
report="${1:-${OUT:-gpu_check}}"
mkdir -p "$report"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
started=$(date +%s)

# name|seconds|command: the parts, in order; the timeouts add up to under five minutes.
# tests/gpu leaves out its slow tests (two ranks under mpiexec need two GPUs).
parts=(
    "tests/gpu on cupy|100|python -m pytest -q -p no:cacheprovider -m 'not slow' tests/gpu --ignore=tests/gpu/test_ops_fused.py"
    "NVRTC compile test|30|python -m pytest -q -p no:cacheprovider tests/test_gpu_compile.py"
    "op table fused on the GPU|100|python -m pytest -q -p no:cacheprovider tests/gpu/test_ops_fused.py"
    "bench_gpu.py|60|python benchmarks/bench_gpu.py --repeat 20 --json $report/targets.json"
)

gpu=$(timeout 60 python -c "import dezero; print(dezero.cuda.gpu_enable)" 2>&1 | tail -1)
if [ "$gpu" != "True" ]; then
    why=$(timeout 60 python -c "import dezero; print(dezero.cuda.no_gpu_reason)" 2>&1 | tail -1)
    echo "gpu_check: no GPU here ($why): nothing to check; report in $report"
    printf '# GPU check\n\nNo GPU: %s\n\nNothing was run.\n' "$why" > "$report/gpu_check.md"
    python -c 'import json, sys; json.dump({"gpu": False, "reason": sys.argv[1], "parts": []},
               open(sys.argv[2], "w"), indent=1)' "$why" "$report/gpu_check.json"
    exit 0
fi

device=$(timeout 60 python -c "import dezero; cp = dezero.cuda.cupy; print(
    cp.cuda.runtime.getDeviceProperties(0)['name'].decode() + ',', 'cupy', cp.__version__, 'from',
    cp.__file__)" 2>&1 | tail -1)
echo "gpu_check: $device"
statuses=()
for i in "${!parts[@]}"; do
    IFS='|' read -r name seconds command <<< "${parts[$i]}"
    echo "gpu_check: $name (at most ${seconds}s)"
    part_start=$(date +%s)
    timeout --kill-after=5 "$seconds" bash -c "$command" > "$report/part$i.log" 2>&1
    status=$?
    statuses+=("$name|$status|$(( $(date +%s) - part_start ))|$seconds|$report/part$i.log")
    tail -n 3 "$report/part$i.log"
done

python - "$report" "$(( $(date +%s) - started ))" "$device" "${statuses[@]}" <<'PY'
"""Writes gpu_check.md and gpu_check.json from the parts' statuses and logs."""
import json
import os
import sys

report, total, device, rows = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
parts = []
for row in rows:
    name, status, seconds, limit, log = row.split("|")
    lines = open(log, errors="replace").read().splitlines()
    outcome = "passed" if status == "0" else "TIMED OUT" if status in ("124", "137") \
        else f"FAILED (exit {status})"
    parts.append({"name": name, "outcome": outcome, "seconds": int(seconds),
                  "limit": int(limit), "log": os.path.basename(log), "tail": lines[-15:]})
path = os.path.join(report, "targets.json")
targets = json.load(open(path)) if os.path.exists(path) else []
md = ["# GPU check", "", f"{device}; {total} s in all.", "", "| part | outcome | seconds | limit |",
      "|---|---|---|---|"]
md += [f"| {p['name']} | {p['outcome']} | {p['seconds']} | {p['limit']} |" for p in parts]
summary = len(md)
md += ["", "## Targets", "", "| target | measured | asked | met | |", "|---|---|---|---|---|"]
for t in targets:
    met = {True: "yes", False: "NO", None: "-"}[t["met"]]
    md.append(f"| {t['name']} | {t['measured']:.3g} | {t['target']} | {met} | {t['detail']} |")
if not targets:
    md.append("| (bench_gpu.py wrote no targets: see its log) | | | | |")
for p in parts:
    md += ["", f"## {p['name']}: {p['outcome']}", "", "```", *p["tail"], "```"]
open(os.path.join(report, "gpu_check.md"), "w").write("\n".join(md) + "\n")
json.dump({"gpu": True, "device": device, "seconds": total, "parts": parts, "targets": targets},
          open(os.path.join(report, "gpu_check.json"), "w"), indent=1)
print("\n".join(md[:summary + 5 + max(len(targets), 1)]))
sys.exit(0 if all(p["outcome"] == "passed" for p in parts) else 1)
PY
status=$?
echo "gpu_check: report in $report/gpu_check.md and gpu_check.json"
exit $status
