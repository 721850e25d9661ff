#!/bin/sh
# Two prova binaries' farms side by side: a loopback farm per binary (coordinator + W
# workers × S slots, separate processes, `--sandbox=none`), the same workspace of N trivial
# tasks, runs interleaved (../shared/bench/compare.py): NEW / OLD, then NEW's farm / NEW's
# local mode. Each farm runs twice first, so its workers' blob caches hold most inputs.
#
#   bench/farm_ab.sh OLD_PROVA NEW_PROVA [N_TASKS] [ROUNDS] [WORKERS] [SLOTS]
#   bench/farm_ab.sh /tmp/prova-before target/release/prova 1000 11
set -eu
OLD=$(realpath "$1")
NEW=$(realpath "$2")
N=${3:-1000}
ROUNDS=${4:-11}
W=${5:-4}
S=${6:-4}
C=${COMPARE:-$(dirname "$0")/../../shared/bench/compare.py}
. "$(dirname "$0")/farm.sh"
farm_scratch prova-farm-ab
mkdir -p "$T/ws/p"
printf '[workspace]\nprojects = ["p/*"]\n[tasks.build]\ncommand = "true"\ninputs = ["src.txt"]\n' > "$T/ws/prova.toml"
farm_projects "$T/ws" "$N"
TOP=$T
P=$OLD T=$TOP/old; mkdir -p "$T"; start_farm "$W" "$S" none; A=$ADDR
P=$NEW T=$TOP/new; mkdir -p "$T"; start_farm "$W" "$S" none; B=$ADDR
T=$TOP
RO="$OLD -C $T/ws run build --all --no-cache --download none --remote $A --certs $T/old/certs/ci"
RN="$NEW -C $T/ws run build --all --no-cache --download none --remote $B --certs $T/new/certs/ci"
LN="$NEW -C $T/ws run build --all --no-cache -j $((W * S))"
for r in "$RO" "$RN" "$RO" "$RN"; do $r >/dev/null 2>&1; done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
echo "== farm: NEW / OLD"
python3 "$C" --cwd "$T/ws" -n "$ROUNDS" --a "$RN" --b "$RO" 2>&1 | tail -4
echo "== NEW: farm / local"
python3 "$C" --cwd "$T/ws" -n "$ROUNDS" --a "$RN" --b "$LN" 2>&1 | tail -4
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
