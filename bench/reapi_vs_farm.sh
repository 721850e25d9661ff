#!/bin/sh
# A warm run served by a REAPI cache (a real BuildGrid on loopback) against the same run
# served by prova's own farm layer (a loopback coordinator, one worker), interleaved, as a
# ratio (issue 18). Before every timed run the workspace's local cache and outputs are
# removed, so every task is a hit from the remote layer and is downloaded and restored.
#
#   bench/reapi_vs_farm.sh [N_TASKS] [ROUNDS]
#   PROVA=target/release/prova BGD=/opt/buildgrid-venv/bin/bgd bench/reapi_vs_farm.sh 200 5
#
# Each task copies its one source file into dist/ (a real output to pack, fetch and
# restore). Both layers are filled once, untimed, by a CI run.
set -eu
N=${1:-200}
ROUNDS=${2:-5}
P=$(realpath "${PROVA:-target/release/prova}")
BGD=${BGD:-/opt/buildgrid-venv/bin/bgd}
. "$(dirname "$0")/farm.sh"
farm_scratch prova-reapi-bench

# BuildGrid: disk CAS, LRU action cache, plain text on a free loopback port.
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$T/cas"
cat > "$T/bgd.yml" <<YML
server:
  - !channel
    address: "127.0.0.1:$PORT"
    insecure-mode: true
authorization:
  method: none
storages:
  - !disk-storage &cas
    path: $T/cas
caches:
  - !lru-action-cache &ac
    storage: *cas
    max-cached-refs: 100000
    allow-updates: true
    cache-failed-actions: false
instances:
  - name: ''
    services:
      - !action-cache
        cache: *ac
      - !cas
        storage: *cas
      - !bytestream
        storage: *cas
YML
"$BGD" server start "$T/bgd.yml" > "$T/bgd.log" 2>&1 &
PIDS="$PIDS $!"
until python3 -c "import socket; socket.create_connection(('127.0.0.1',$PORT),1)" 2>/dev/null; do sleep 0.2; done

# The workspace: N projects, one small build each.
mkdir -p "$T/ws/p"
cat > "$T/ws/prova.toml" <<TOML
[workspace]
projects = ["p/*"]

[cache.reapi]
endpoint = "grpc://127.0.0.1:$PORT"

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

start_farm 1 4 none

REAPI="$P -C $T/ws run build --all --cache local:rw,reapi:rw"
FARM="$P -C $T/ws run build --all --remote $ADDR --certs $CI"
CLEAN="rm -rf $T/ws/.prova $T/ws/p/*/dist"
# Fill both layers (untimed), then check a warm run of each hits every task.
sh -c "$CLEAN"; CI=true $REAPI > /dev/null 2>&1
sh -c "$CLEAN"; $FARM > /dev/null 2>&1
for cmd in "$REAPI" "$FARM"; do
    sh -c "$CLEAN"
    $cmd > "$T/check.out" 2>&1 || { cat "$T/check.out"; exit 1; }
    grep -q "$N hit, 0 miss" "$T/check.out" || { echo "not all hits: $cmd"; cat "$T/check.out"; exit 1; }
done

echo "workspace: $N tasks (one output file each); BuildGrid on 127.0.0.1:$PORT; farm: 1 worker at $ADDR; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 "${COMPARE:-$(dirname "$0")/../../shared/bench/compare.py}" --cwd "$T/ws" -n "$ROUNDS" \
    --prep "$CLEAN" --a "$REAPI" --b "$FARM"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
