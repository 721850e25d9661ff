#!/bin/sh
# How a farm's throughput scales with its workers on sleep-bound tasks: the same workspace
# run on a farm of 1 worker and on a farm of N workers (separate processes on loopback, one
# slot each), interleaved; prints the speedup and the efficiency (speedup / N, 1.0 = ideal).
#
#   bench/farm_scaling.sh [WORKERS] [TASKS] [SECONDS_PER_TASK] [ROUNDS]
#   PROVA=target/release/prova bench/farm_scaling.sh 8 48 0.2 3
#
# Each task is `sleep SECONDS` in its own project (one input file, no outputs): it uses no
# CPU, so on a small machine the farm's own costs (the client's start-up, placement, QUIC,
# exec roots, the end-of-task sweep) are what keeps the speedup under N. Runs use --no-cache
# and --download none; workers use --sandbox=none. Everything lives in a temp dir and is
# stopped at exit.
set -eu
N=${1:-8}
K=${2:-48}
D=${3:-0.2}
ROUNDS=${4:-3}
P=$(realpath "${PROVA:-target/release/prova}")
. "$(dirname "$0")/farm.sh"
farm_scratch prova-farm-scaling
TOP=$T

# The workspace: K projects, one sleep-bound task each.
mkdir -p "$TOP/ws/p"
printf '[workspace]\nprojects = ["p/*"]\n[tasks.build]\ncommand = "sleep %s"\ninputs = ["src.txt"]\n' \
    "$D" > "$TOP/ws/prova.toml"
farm_projects "$TOP/ws" "$K"

# Two farms: one worker, and N workers (start_farm works under $T).
T=$TOP/one && mkdir -p "$T" && start_farm 1 1 none && ONE="--remote $ADDR --certs $CI"
T=$TOP/many && mkdir -p "$T" && start_farm "$N" 1 none && MANY="--remote $ADDR --certs $CI"
T=$TOP

RUN="$P -C $T/ws run build --all --no-cache --download none"
echo "workspace: $K tasks of sleep $D; farms of 1 and $N workers x 1 slot on $(nproc) cores"
python3 "${COMPARE:-$(dirname "$0")/../../shared/bench/compare.py}" --cwd "$T/ws" -n "$ROUNDS" \
    --a "$RUN $ONE" --b "$RUN $MANY" 2>&1 | tee "$T/compare.txt"
python3 - "$N" "$K" "$D" "$T/compare.txt" <<'PY'
import re, sys
n, k, d = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
text = open(sys.argv[4]).read()
meds = [float(m) for m in re.findall(r"median\s*=?\s*([0-9.]+)", text)]
if len(meds) >= 2:
    one, many = meds[0], meds[1]
    ideal = k * d / n
    print(f"1 worker: {one:.2f} s   {n} workers: {many:.2f} s (sleeping alone: {ideal:.2f} s)")
    print(f"speedup {one / many:.2f} = {one / many / n:.2f} x N   "
          f"overhead over the sleeps at N: {(many - ideal) * 1e3:.0f} ms")
PY
