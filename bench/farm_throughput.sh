#!/bin/sh
# Trivial tasks per second through a loopback farm (1 coordinator + W workers, separate
# processes) against local mode on the same workspace, interleaved, as a ratio.
#
#   bench/farm_throughput.sh [N_TASKS] [WORKERS] [SLOTS_PER_WORKER] [ROUNDS]
#   PROVA=target/release/prova bench/farm_throughput.sh 2000 4 4 3
#
# Each task is `true` in its own project (one input file, no outputs). Runs use --no-cache
# (nothing read or written: every task executes) and --download none. Workers use
# --sandbox=none: this measures the farm (placement, leases, QUIC, input staging, exec
# roots), not bubblewrap's start-up. Everything lives in a temp dir and is stopped at exit.
set -eu
N=${1:-2000}
W=${2:-4}
S=${3:-4}
ROUNDS=${4:-3}
P=$(realpath "${PROVA:-target/release/prova}")
. "$(dirname "$0")/farm.sh"
farm_scratch prova-farm-bench

# The workspace: N projects, one trivial task each.
mkdir -p "$T/ws/p"
printf '[workspace]\nprojects = ["p/*"]\n[tasks.build]\ncommand = "true"\ninputs = ["src.txt"]\n' > "$T/ws/prova.toml"
farm_projects "$T/ws" "$N"

# The farm.
start_farm "$W" "$S" none

LOCAL="$P -C $T/ws run build --all --no-cache -j $((W * S))"
REMOTE="$P -C $T/ws run build --all --no-cache --download none --remote $ADDR --certs $CI"
echo "workspace: $N trivial tasks; farm: $W workers x $S slots on $(nproc) cores at $ADDR"
# Steady state: a task lands on any worker, which fetches its input once; a few runs first
# fill every worker's blob cache (a farm's caches are warm for inputs that did not change).
for _ in 1 2 3; do $REMOTE >/dev/null 2>&1; done
python3 "${COMPARE:-$(dirname "$0")/../../shared/bench/compare.py}" --cwd "$T/ws" -n "$ROUNDS" \
    --a "$REMOTE" --b "$LOCAL" 2>&1 | tee "$T/compare.txt"
python3 - "$N" "$T/compare.txt" <<'PY'
import re, sys
n = int(sys.argv[1]); text = open(sys.argv[2]).read()
meds = [float(m) for m in re.findall(r"median\s*=?\s*([0-9.]+)", text)]
if len(meds) >= 2:
    remote, local = meds[0], meds[1]
    print(f"farm: {n / remote:.0f} tasks/s   local: {n / local:.0f} tasks/s   "
          f"per-task overhead remote - local: {(remote - local) / n * 1e3:.2f} ms")
PY
