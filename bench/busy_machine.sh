#!/bin/sh
# Trivial tasks in local mode on a machine with many processes of the same user running (a
# desktop: a browser, an editor, language servers), against the same machine without them:
# every task's end looks through /proc for what the task left running.
#
#   bench/busy_machine.sh [N_TASKS] [EXTRA_PROCESSES] [ROUNDS]
#   BASELINE=/tmp/prova-old bench/busy_machine.sh 1000 300 9
#
# Each task is `true` in its own project (`--no-cache`: every task executes). With
# BASELINE, each scenario runs this prova against that one, interleaved (`cpu_ratio.py`).
# The extra processes are `sleep`s started here and killed at exit.
set -eu
N=${1:-1000}
EXTRA=${2:-300}
ROUNDS=${3:-9}
P=$(realpath "${PROVA:-target/release/prova}")
HERE=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d /tmp/prova-busy-XXXXXX)
SLEEPS=""
cleanup() {
    for pid in $SLEEPS; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$T"
}
trap cleanup EXIT INT TERM

mkdir -p "$T/ws/p"
printf '[workspace]\nprojects = ["p/*"]\n[tasks.build]\ncommand = "true"\ninputs = ["src.txt"]\n' > "$T/ws/prova.toml"
i=1
while [ "$i" -le "$N" ]; do
    mkdir -p "$T/ws/p/p$i" && echo "$i" > "$T/ws/p/p$i/src.txt"
    i=$((i + 1))
done
git -C "$T/ws" init -q && git -C "$T/ws" add -A && git -C "$T/ws" -c user.email=b@b -c user.name=b commit -qm ws

run() {
    echo "== $1: $(ls /proc | grep -c '^[0-9]') processes, load $(cut -d' ' -f1-3 /proc/loadavg)"
    set -- "$P -C $T/ws run build --all --no-cache -j 16"
    if [ -n "${BASELINE:-}" ]; then
        set -- "$@" "$(realpath "$BASELINE") -C $T/ws run build --all --no-cache -j 16"
    fi
    python3 "$HERE/cpu_ratio.py" --exec -n "$ROUNDS" "$@"
}

run "quiet machine"
i=0
while [ "$i" -lt "$EXTRA" ]; do
    sleep 3600 &
    SLEEPS="$SLEEPS $!"
    i=$((i + 1))
done
run "$EXTRA more processes"
