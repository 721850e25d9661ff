#!/bin/sh
# prova against turbo on a generated workspace, interleaved (../shared/bench/compare.py):
# warm no-op `run build`, warm `run test` (all hits), and one edited file in a package
# (the leaf of bench-meta.json by default; HUB=1 edits the hub, which re-runs its hundreds of
# dependents under both tools — under prova only its direct dependents with CONFINED=1, which
# makes prova's builds `sandbox = true` and `upstream_outputs = "direct"`). Also the dry run of the graph, and with COLD=1 one cold
# build of each (caches and outputs removed first; every task is `npm run build`, so this
# takes minutes and measures npm as much as either tool).
#
#   bench/vs_turbo.sh WORKSPACE [RUNS]
#   HUB=1 CONFINED=1 ONLY=edit bench/vs_turbo.sh /tmp/ws-1000 2
#   PROVA=target/release/prova TURBO=/path/to/turbo bench/vs_turbo.sh /tmp/ws-1000 9
#
# The workspace comes from `../shared/bench/gen_workspace.py WS --packages N`; turbo from
# `../shared/bench/peers.sh`. Each tool runs in its own copy (prova in WS-prova, made once
# with cp -a): on a hit turbo rewrites every output file and prova would then restore its
# own, so in one directory each would measure undoing the other. Both caches are filled
# first (a cold run of each, which takes minutes: every task is `npm run …`; FAST_FILL=1
# fills turbo's through bench/fill/npm, which runs each script with `sh` instead of starting
# node — the same hashes and outputs for turbo, in a fraction of the time; no timed run
# uses it. prova's key folds the `npm` program it resolves, so prova always fills with npm;
# with CONFINED=1 that is 1,000 sandboxed, traced builds: about 25 minutes on 2 cores).
# Each scenario prints the load average before it (the machines are shared: a ratio taken
# while the load is far above the core count is noisier), and the edit scenario the tasks
# each tool executed.
# SCRIPTS=1 runs prova from its own copy (WS-prova-scripts) whose prova.toml sets no
# `command`: each task runs the package.json script of its name, as `prova init` writes it.
# prova then runs a script's text itself under `sh -c` (with node_modules/.bin on PATH)
# instead of starting npm, unless the script needs npm (a pre/post script, or `npm_*`
# variables, as the generated `test` does); turbo runs `npm run build` either way.
set -eu
WS=$(realpath "$1")
N=${2:-9}
HERE=$(dirname "$(realpath "$0")")
P=$(realpath "${PROVA:-$HERE/../target/release/prova}")
T=${TURBO:-turbo}
C=${COMPARE:-$HERE/../../shared/bench/compare.py}
export TURBO_TELEMETRY_DISABLED=1 TURBO_NO_UPDATE_NOTIFIER=1
# Each mode's prova.toml in its own copy: WS-prova, WS-prova-scripts, WS-prova-scripts-confined.
PW="$WS-prova"
[ "${SCRIPTS:-0}" = 1 ] && PW="$PW-scripts"
[ "${SCRIPTS:-0}${CONFINED:-0}" = 11 ] && PW="$PW-confined"
[ -d "$PW" ] || cp -a "$WS" "$PW"
if [ "${SCRIPTS:-0}" = 1 ]; then
    # The tasks' commands left out: each runs its package.json script (see above).
    sed -i '/^command = /d' "$PW/prova.toml"
fi
if [ "${CONFINED:-0}" = 1 ]; then
    # prova's builds confined (`sandbox = true`) and seeing only their direct dependencies'
    # outputs (`upstream_outputs = "direct"`: each build reads only its own src/*.js). When
    # npm runs the build, the files npm itself reads in a sandbox are declared too (its
    # workspace discovery reads every package.json); the script run directly (SCRIPTS=1)
    # reads only the package's sources. A hub edit then re-runs the hub and its direct
    # dependents; the builds further down cut off. turbo runs as always (it has no sandbox).
    python3 - "$PW/prova.toml" "${SCRIPTS:-0}" <<'PY'
import sys
p, scripts = sys.argv[1], sys.argv[2] == "1"
s = open(p).read()
npm = ('' if scripts else ', "package.json", ".npmrc", "//package.json", "//.npmrc", '
       '"//packages/package.json", "//packages/*/package.json"')
if "upstream_outputs" not in s:
    s = s.replace('inputs = ["src/**"]\noutputs = ["dist/**"]\n',
                  'inputs = ["src/**"' + npm + ']\noutputs = ["dist/**"]\n'
                  'sandbox = true\nupstream_outputs = "direct"\n', 1)
    open(p, "w").write(s)
PY
fi
cd "$WS"
if [ "${HUB:-0}" = 1 ]; then
    PKG=$(python3 -c 'import json; print(json.load(open("bench-meta.json"))["incremental_hub"]["dir"])')
else
    PKG=$(python3 -c 'import json; print(json.load(open("bench-meta.json"))["leaf_package"]["dir"])')
fi
FILLPATH=$PATH
[ "${FAST_FILL:-0}" = 1 ] && FILLPATH="$HERE/fill:$PATH"
# ONLY="edit cutoff" runs just those scenarios (dry, noop, test, edit, cutoff).
want() { [ -z "${ONLY:-}" ] || case " $ONLY " in *" $1 "*) true ;; *) false ;; esac; }
# prova fills with the real npm: its keys fold the program `npm` resolves to
# (`binary:npm` in `prova show`), so entries made through the shim are never hits for a
# timed run. turbo's hash leaves npm out: the shim fills its cache as npm would.
# `test` is filled only when its scenario runs.
FILL=build
if want test; then FILL="build test"; fi
"$P" -C "$PW" run $FILL --all >/dev/null 2>&1 || true
PATH=$FILLPATH "$T" run $FILL >/dev/null 2>&1 || true
P="$P -C $PW"
load() { echo "   load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"; }
# Runs `build` once more with each tool and prints how many tasks each executed after "$1".
executed() {
    ran_p=$($P run build --all --json 2>/dev/null | python3 -c '
import json, sys
s = [json.loads(l) for l in sys.stdin if l.startswith("{")][-1]["summary"]
print(sum(1 for t in s["tasks"] if t["cache"]["cache"] != "hit"))' || echo "?")
    ran_t=$($T run build 2>/dev/null | sed -n 's/.*Cached: *\([0-9]*\) cached, \([0-9]*\) total.*/\2 \1/p' | awk '{print $1 - $2}')
    echo "   tasks executed after $1: prova $ran_p, turbo ${ran_t:-?}"
}
if want dry; then
echo "== dry run of build ($WS)"
load
python3 "$C" -n "$N" --a "$P run build --all --dry-run" --b "$T run build --dry-run"
fi
if [ "${COLD:-0}" = 1 ]; then
    echo "== cold run build (one each)"
    python3 "$C" -n 1 --warmup 0 --prep "rm -rf .turbo packages/*/dist $PW/.prova $PW/packages/*/dist" \
        --a "$P run build --all" --b "$T run build"
    "$P" run test --all >/dev/null 2>&1 || true
    "$T" run test >/dev/null 2>&1 || true
fi
if want noop; then
echo "== warm no-op run build"
load
python3 "$C" -n "$N" --a "$P run build --all" --b "$T run build"
fi
if want test; then
echo "== warm run test (all hits)"
load
python3 "$C" -n "$N" --a "$P run test --all" --b "$T run test"
fi
if want edit; then
echo "== one file edited in $PKG"
load
EDIT="echo \"// \$(date +%s%N)\" | tee -a $PKG/src/mod1.js >> $PW/$PKG/src/mod1.js"
python3 "$C" -n "$N" --prep "$EDIT" --a "$P run build --all" --b "$T run build"
sh -c "$EDIT"
executed "one edit"
git checkout -q -- "$PKG/src/mod1.js"
git -C "$PW" checkout -q -- "$PKG/src/mod1.js"
fi
# Early cutoff: an edit to an input of the package that its build does not copy into dist
# (a note beside the sources): the package re-runs with byte-identical outputs, so prova
# keys its dependents by the same bytes and they hit; turbo folds the package's hash into
# theirs and re-runs them all.
if want cutoff; then
echo "== one non-output input edited in $PKG (early cutoff)"
load
QUIET="echo \"note \$(date +%s%N)\" | tee $PKG/src/notes.txt > $PW/$PKG/src/notes.txt"
python3 "$C" -n "$N" --prep "$QUIET" --a "$P run build --all" --b "$T run build"
sh -c "$QUIET"
executed "the non-output edit"
rm -f "$PKG/src/notes.txt" "$PW/$PKG/src/notes.txt"
fi
