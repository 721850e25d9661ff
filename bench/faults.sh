#!/bin/sh
# The farm under faults (issue 13), on a loopback farm of separate processes:
#   detection: a worker SIGKILLed / SIGSTOPped while it runs a task → seconds until
#              `farm status` shows the task running on the other worker (requeued);
#   rejoin:    the coordinator SIGKILLed and restarted on its port → seconds until
#              `farm status` lists every worker again;
#   rss:       the coordinator's VmRSS after 1, R1 and R2 trivial runs.
# Usage: bench/faults.sh [TRIALS] [R1] [R2]   (every wait bounded; 127.0.0.1:0 only)
set -eu
TRIALS=${1:-3}
R1=${2:-50}
R2=${3:-200}
HERE=$(cd "$(dirname "$0")" && pwd)
P=${PROVA:-$HERE/../target/release/prova}
. "$HERE/farm.sh"
farm_scratch prova-faults
now() { date +%s.%N; }
status() { "$P" farm status --remote "$ADDR" --certs "$CI" --json 2>/dev/null || true; }
# until_or_fail SECONDS CMD…: polls CMD every 0.1 s, fails past SECONDS.
until_or_fail() {
    lim=$1; shift; start=$(now)
    until "$@"; do
        if [ "$(echo "$(now) - $start > $lim" | bc)" = 1 ]; then echo "timed out: $*" >&2; exit 1; fi
        sleep 0.1
    done
}
worker_pid() { ps -eo pid=,args= | awk -v d="$T/work/$1" '$0 ~ "--work-dir "d"( |$)" {print $1}' | head -1; }
runs_on() { status | python3 -c "import json,sys; s=json.load(sys.stdin); print(' '.join(w['id'] for w in s['workers'] if w['running']))" 2>/dev/null; }
workers_up() { [ "$(status | grep -o '"id"' | wc -l)" -ge 2 ]; }

start_farm 2 1 none
COORD=$(echo $PIDS | awk '{print $1}')
WS="$T/ws"; mkdir -p "$WS/p"
printf '[workspace]\nprojects = ["p"]\n[tasks.build]\ncommand = "sleep 60"\n' > "$WS/prova.toml"
printf '[workspace]\nprojects = ["q"]\n[tasks.build]\ncommand = "true"\n' > "$T/trivial.toml"
mkdir -p "$T/tws/q"; cp "$T/trivial.toml" "$T/tws/prova.toml"

detect() { # SIG → seconds from the signal to the task running on the other worker
    "$P" -C "$WS" run build --all --no-cache --remote "$ADDR" --certs "$CI" >/dev/null 2>&1 &
    client=$!
    until_or_fail 30 sh -c "[ -n \"\$(\"$P\" farm status --remote $ADDR --certs $CI --json 2>/dev/null | grep -o '\"running\":\[\"')\" ]"
    victim=$(runs_on); vp=$(worker_pid "$victim")
    t0=$(now); kill -"$1" "$vp"
    until_or_fail 60 sh -c "r=\$(\"$P\" farm status --remote $ADDR --certs $CI --json 2>/dev/null | python3 -c 'import json,sys; s=json.load(sys.stdin); print(\" \".join(w[\"id\"] for w in s[\"workers\"] if w[\"running\"]))' 2>/dev/null); [ -n \"\$r\" ] && [ \"\$r\" != $victim ]"
    t1=$(now)
    echo "$1 $victim $(echo "$t1 - $t0" | bc)"
    kill "$client" 2>/dev/null || true; wait "$client" 2>/dev/null || true
    [ "$1" = STOP ] && kill -CONT "$vp"
    [ "$1" = KILL ] && { "$P" worker --join "$ADDR" --certs "$T/certs/$victim" --work-dir "$T/work/$victim" \
        --slots 1 --sandbox=none > "$T/$victim.out" 2> "$T/$victim.err" & PIDS="$PIDS $!"; }
    until_or_fail 60 sh -c "[ -z \"\$(\"$P\" farm status --remote $ADDR --certs $CI --json 2>/dev/null | grep -o '\"running\":\[\"')\" ] && [ \"\$(\"$P\" farm status --remote $ADDR --certs $CI --json 2>/dev/null | grep -o '\"id\"' | wc -l)\" -ge 2 ]"
}
rss() { awk '/VmRSS/ {print $2}' "/proc/$COORD/status"; }
trivial() { i=0; while [ "$i" -lt "$1" ]; do "$P" -C "$T/tws" run build --all --no-cache --remote "$ADDR" --certs "$CI" >/dev/null 2>&1; i=$((i+1)); done; }

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "rss_kb before_any_run $(rss)"
trivial 1; echo "rss_kb after 1 $(rss)"
trivial $((R1 - 1)); echo "rss_kb after $R1 $(rss)"
trivial $((R2 - R1)); echo "rss_kb after $R2 $(rss)"
n=0; while [ "$n" -lt "$TRIALS" ]; do echo "detect $(detect KILL)"; echo "detect $(detect STOP)"; n=$((n+1)); done
n=0; while [ "$n" -lt "$TRIALS" ]; do
    kill -9 "$COORD"; wait "$COORD" 2>/dev/null || true
    t0=$(now)
    "$P" coordinator --listen "$ADDR" --certs "$T/certs/coordinator" --cache-dir "$T/farm-cache" \
        > "$T/coordinator.out" 2> "$T/coordinator.err" &
    COORD=$!; PIDS="$PIDS $COORD"
    until_or_fail 90 workers_up
    echo "rejoin $(echo "$(now) - $t0" | bc)"
    n=$((n+1))
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
