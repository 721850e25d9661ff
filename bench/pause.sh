#!/bin/sh
# A run across a coordinator pause (issue 29), on a loopback farm of separate processes:
# N tasks (each sleeps a little, appends its name to a ledger outside the workspace, writes
# its output); once K have finished the coordinator is SIGSTOPped for PAUSE seconds, then
# SIGCONTed. Prints the run's exit code, tasks succeeded / failed, executions counted in the
# ledger (a task run twice shows twice), what the client said, and the run's wall time next
# to the same run without a pause (fresh farm cache each time).
#
#   bench/pause.sh [N] [PAUSE] [WORKERS] [SLOTS] [K]
#   PROVA=target/release/prova bench/pause.sh 1000 10 4 4 200
#
# Workers use --sandbox=none (the ledger is outside the exec roots). Every wait is bounded;
# everything lives in a temp dir and is stopped at exit.
set -eu
N=${1:-1000}
PAUSE=${2:-10}
W=${3:-4}
S=${4:-4}
K=${5:-200}
HERE=$(cd "$(dirname "$0")" && pwd)
P=$(realpath "${PROVA:-$HERE/../target/release/prova}")
. "$HERE/farm.sh"
farm_scratch prova-pause
now() { date +%s.%N; }

workspace() { # DIR LEDGER: N projects, one `build` each
    mkdir -p "$1/p"
    printf '[workspace]\nprojects = ["p/*"]\n[tasks.build]\ncommand = %s\ninputs = ["src.txt"]\noutputs = ["dist/out.txt"]\n' \
        "'sleep 0.05; echo \"\$PROVA_TASK\" >> $2; mkdir -p dist; cat src.txt > dist/out.txt'" > "$1/prova.toml"
    farm_projects "$1" "$N"
}

start_farm "$W" "$S" none
COORD=$(echo $PIDS | awk '{print $1}')
echo "farm: $W workers x $S slots on $(nproc) cores at $ADDR; $N tasks; pause ${PAUSE}s after $K finished"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

# Baseline: the same run, no pause.
workspace "$T/base" "$T/base.ledger"
t0=$(now)
"$P" -C "$T/base" run build --all --json --download none --remote "$ADDR" --certs "$CI" \
    > "$T/base.json" 2> "$T/base.err" || true
base=$(echo "$(now) - $t0" | bc)

# The paused run (its own workspace: new keys, nothing hits).
workspace "$T/ws" "$T/ws.ledger"
t0=$(now)
"$P" -C "$T/ws" run build --all --json --download none --remote "$ADDR" --certs "$CI" \
    > "$T/run.json" 2> "$T/run.err" &
client=$!
n=0
until [ "$(grep -c '"task_finished"' "$T/run.json" 2>/dev/null || true)" -ge "$K" ]; do
    n=$((n + 1)) && [ "$n" -le 6000 ] || { echo "not $K tasks finished in 600 s" >&2; exit 1; }
    sleep 0.1
done
kill -STOP "$COORD"
sleep "$PAUSE" # the fault itself
kill -CONT "$COORD"
code=0; wait "$client" || code=$?
run=$(echo "$(now) - $t0" | bc)

summary=$(python3 - "$T/run.json" <<'PY'
import collections, json, sys
last = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]
tasks = last.get("summary", {}).get("tasks", [])
print(dict(collections.Counter(t["status"] for t in tasks)))
PY
)
execs=$(wc -l < "$T/ws.ledger")
distinct=$(sort -u "$T/ws.ledger" | wc -l)
echo "exit $code; tasks by status: $summary"
echo "executions: $execs ($distinct distinct tasks; $((execs - distinct)) ran more than once)"
echo "run wall: ${run}s with the ${PAUSE}s pause; ${base}s without (baseline)"
echo "client said:"; grep -E 'not answering|answering again|went away' "$T/run.err" || echo "  (nothing)"
echo "coordinator: $(grep -c 'lease expired' "$T/coordinator.err" || true) lease-expiry lines"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
