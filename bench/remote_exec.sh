#!/bin/sh
# Throughput of tasks that must execute (issue 32): the same forced build executed on a real
# REAPI farm (BuildGrid with its SQL scheduler on PostgreSQL, bots that are `prova worker
# --reapi-bot` processes) through `--remote-exec`, on prova's own loopback farm (coordinator
# + the same number of workers and slots) through `--remote`, and here (local mode), one
# interleaved run (A B C A B C …), as ratios.
#
#   bench/remote_exec.sh [N_TASKS] [ROUNDS] [BOTS] [SLOTS]
#   PROVA=target/release/prova BGD=/opt/buildgrid-venv/bin/bgd bench/remote_exec.sh 200 5 2 2
#
# Each task copies its one source file into dist/ (a real output to collect, save and
# restore). Every timed run is `run build --all --force -j BOTS*SLOTS` after the
# workspace's `.prova/` and `dist/` were removed, so every task executes and its output comes
# home. Needs PostgreSQL (/usr/lib/postgresql/*/bin) and BuildGrid with psycopg2 (.ci/run
# installs both).
set -eu
N=${1:-200}
ROUNDS=${2:-5}
BOTS=${3:-2}
SLOTS=${4:-2}
J=$((BOTS * SLOTS))
P=$(realpath "${PROVA:-target/release/prova}")
BGD=${BGD:-/opt/buildgrid-venv/bin/bgd}
PG=$(ls -d /usr/lib/postgresql/*/bin | sort | tail -n 1)
. "$(dirname "$0")/farm.sh"
farm_scratch prova-rexec-bench
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_port() {
    n=0
    until python3 -c "import socket; socket.create_connection(('127.0.0.1',$1),1)" 2>/dev/null; do
        n=$((n + 1)) && [ "$n" -le 600 ] || { echo "nothing on port $1 after 60 s" >&2; exit 1; }
        sleep 0.1
    done
}

# PostgreSQL in $T (as the postgres user when run as root: it refuses root).
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
mkdir -p "$T/pg"
if [ "$(id -u)" = 0 ]; then chmod 755 "$T" && chown -R postgres "$T/pg"; fi
as_pg "$PG/initdb" -A trust -U postgres -D "$T/pg/data" > "$T/initdb.log" 2>&1 ||
    { cat "$T/initdb.log"; exit 1; }
PGPORT=$(free_port)
as_pg "$PG/postgres" -D "$T/pg/data" -k "$T/pg" -h 127.0.0.1 -p "$PGPORT" > "$T/pg.log" 2>&1 &
PIDS="$PIDS $!"
wait_port "$PGPORT"
URL="postgresql+psycopg2://postgres@127.0.0.1:$PGPORT/postgres"
"$BGD" migrate apply "$URL" > "$T/migrate.log" 2>&1 || { cat "$T/migrate.log"; exit 1; }

# BuildGrid: execution and bots services on the SQL scheduler, disk CAS, LRU action cache.
# The assigner's jitter is seconds added to each idle interval (default up to 1 s, a mean
# 0.5 s wait per job on an idle farm); a farm tuned for latency sets it small.
PORT=$(free_port)
mkdir -p "$T/cas"
cat > "$T/bgd.yml" <<YML
server:
  - !channel
    address: "127.0.0.1:$PORT"
    insecure-mode: true
authorization:
  method: none
connections:
  - !sql-connection &sql
    connection-string: $URL
    pool-size: 5
    max-overflow: 10
storages:
  - !disk-storage &cas
    path: $T/cas
caches:
  - !lru-action-cache &ac
    storage: *cas
    max-cached-refs: 100000
    allow-updates: true
    cache-failed-actions: false
schedulers:
  - !sql-scheduler &sched
    sql: *sql
    storage: *cas
    action-cache: *ac
    poll-interval: 0.05
    bot-poll-interval: 0.05
    assigners:
      - !priority-age-assigner
        count: 1
        interval: 0.05
        jitter-factor: 0.01
instances:
  - name: ''
    services:
      - !action-cache
        cache: *ac
      - !cas
        storage: *cas
      - !bytestream
        storage: *cas
      - !execution
        scheduler: *sched
      - !bots
        scheduler: *sched
YML
"$BGD" server start "$T/bgd.yml" > "$T/bgd.log" 2>&1 &
PIDS="$PIDS $!"
wait_port "$PORT"
b=1
while [ "$b" -le "$BOTS" ]; do
    "$P" worker --reapi-bot "grpc://127.0.0.1:$PORT" --bot-name "bot$b" --slots "$SLOTS" \
        --sandbox none --work-dir "$T/bot$b" > "$T/bot$b.out" 2> "$T/bot$b.err" &
    PIDS="$PIDS $!"
    b=$((b + 1))
done

# prova's own farm, the same shape.
start_farm "$BOTS" "$SLOTS" none

# The workspace: N projects, one small build each.
mkdir -p "$T/ws/p"
cat > "$T/ws/prova.toml" <<TOML
[workspace]
projects = ["p/*"]

[tasks.build]
command = "mkdir -p dist && cp src/main.txt dist/out.txt"
inputs = ["src/**"]
outputs = ["dist/**"]
TOML
i=0
while [ $i -lt "$N" ]; do
    mkdir -p "$T/ws/p/$i/src" && echo "source $i" > "$T/ws/p/$i/src/main.txt"
    i=$((i + 1))
done

RUN="$P -C $T/ws run build --all --force -j $J"
REAPI="$RUN --remote-exec grpc://127.0.0.1:$PORT"
FARM="$RUN --remote $ADDR --certs $CI"
LOCAL="$RUN --remote-exec local"
CLEAN="rm -rf $T/ws/.prova $T/ws/p/*/dist"
# Each once, untimed: every task executes and every output comes home.
for cmd in "$REAPI" "$FARM" "$LOCAL"; do
    sh -c "$CLEAN"
    $cmd > "$T/check.out" 2>&1 || { cat "$T/check.out"; exit 1; }
    grep -q "($N total, $N ran)" "$T/check.out" || { echo "not all ran: $cmd"; cat "$T/check.out"; exit 1; }
    [ "$(ls "$T"/ws/p/*/dist/out.txt | wc -l)" -eq "$N" ] || { echo "outputs missing: $cmd"; exit 1; }
done

echo "workspace: $N tasks (one output file each), -j $J; BuildGrid + $BOTS bots x $SLOTS slots; farm: $BOTS workers x $SLOTS slots at $ADDR; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$N" "$ROUNDS" "$T/ws" "$CLEAN" "$REAPI" "$FARM" "$LOCAL" <<'PY'
import statistics, subprocess, sys, time
n, rounds, cwd, clean = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
cmds = sys.argv[5:]
names = ["remote-exec (BuildGrid)", "remote (prova farm)", "local"]
walls = [[] for _ in cmds]
for r in range(rounds + 1):  # the first round is a warm-up
    for i, c in enumerate(cmds):
        subprocess.run(["sh", "-c", clean], check=True)
        t = time.monotonic()
        p = subprocess.run(["sh", "-c", c], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        w = time.monotonic() - t
        if p.returncode:
            sys.exit(f"{names[i]} exited {p.returncode}: {p.stderr.decode(errors='replace')[-400:]}")
        if r:
            walls[i].append(w)
for i, name in enumerate(names):
    m = statistics.median(walls[i])
    print(f"{name:<26} min {min(walls[i]):7.3f}  median {m:7.3f}  max {max(walls[i]):7.3f} s"
          f"  ({n / m:6.1f} tasks/s)")
for i in range(len(cmds)):
    ratios_local = [a / b for a, b in zip(walls[i], walls[2])]
    ratios_farm = [a / b for a, b in zip(walls[i], walls[1])]
    print(f"{names[i]:<26} / local {statistics.median(ratios_local):5.2f} (paired median)"
          f"   / farm {statistics.median(ratios_farm):5.2f}")
PY
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
