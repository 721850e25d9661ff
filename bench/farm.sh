# Sourced by the farm benchmarks.
#
# farm_scratch NAME: a temp dir $T (/tmp/NAME.XXXXXX) and an exit trap that kills every
# process in $PIDS and removes $T.
farm_scratch() {
    T=$(mktemp -d "/tmp/$1.XXXXXX")
    PIDS=""
    trap farm_cleanup EXIT INT TERM
}

farm_cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$T"
}

# farm_projects DIR N: N projects p/0 … p/N-1 under DIR, each with one input `src.txt`
# holding its number (the caller writes DIR/prova.toml with `projects = ["p/*"]`).
farm_projects() {
    fp_i=0
    while [ "$fp_i" -lt "$2" ]; do
        mkdir -p "$1/p/$fp_i" && echo "$fp_i" > "$1/p/$fp_i/src.txt"
        fp_i=$((fp_i + 1))
    done
}

# start_farm WORKERS SLOTS SANDBOX starts a coordinator and WORKERS workers on loopback
# (separate processes) under $T, sets ADDR and CI (the ci bundle), and returns once
# `farm status` lists every worker.
start_farm() {
    "$P" certs init "$T/certs" --san 127.0.0.1 >/dev/null
    "$P" certs issue "$T/certs" --role ci --name ci >/dev/null
    "$P" coordinator --listen 127.0.0.1:0 --certs "$T/certs/coordinator" \
        --cache-dir "$T/farm-cache" > "$T/coordinator.out" 2> "$T/coordinator.err" &
    PIDS="$PIDS $!"
    n=0
    until grep -q "listening on" "$T/coordinator.out" 2>/dev/null; do
        n=$((n + 1)) && [ "$n" -le 600 ] || { echo "no coordinator after 30 s" >&2; exit 1; }
        sleep 0.05
    done
    ADDR=$(sed -n 's/^prova coordinator listening on \([^ ]*\).*/\1/p' "$T/coordinator.out")
    CI="$T/certs/ci"
    w=1
    while [ "$w" -le "$1" ]; do
        "$P" certs issue "$T/certs" --role worker --name "w$w" >/dev/null
        "$P" worker --join "$ADDR" --certs "$T/certs/w$w" --work-dir "$T/work/w$w" \
            --slots "$2" --sandbox="$3" > "$T/w$w.out" 2> "$T/w$w.err" &
        PIDS="$PIDS $!"
        w=$((w + 1))
    done
    n=0
    until [ "$("$P" farm status --remote "$ADDR" --certs "$CI" --json 2>/dev/null \
            | grep -o '"id"' | wc -l)" -ge "$1" ]; do
        n=$((n + 1)) && [ "$n" -le 300 ] || { echo "not every worker joined in 30 s" >&2; exit 1; }
        sleep 0.1
    done
}
