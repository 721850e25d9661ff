#!/bin/sh
# prova against turbo on the committed real-repo fixture (issue 31): examples/tscomposite,
# seven npm-workspace packages built by composite `tsc -b`, installed by `npm ci` (a real
# node_modules: typescript, the packages' externals, a per-package tree, workspace links).
# Each scenario is one interleaved run (../shared/bench/compare.py) printing the ratio
# prova/turbo, with the load average before it:
#   - warm no-op `run build` and `run build test` (every task a hit); `run build` also
#     started without a shell (cpu_ratio.py --exec: wall and CPU ratios)
#   - one leaf source edited (packages/app: one tsc -b re-runs)
#   - what `--verify=all` costs: `run build --all --force --verify=all` / the same plain
#     (prova alone: turbo has no proof)
#
#   bench/real_repo.sh [RUNS]
#   PROVA=target/release/prova TURBO=/path/to/turbo bench/real_repo.sh 15
#   BASELINE=/tmp/prova-old bench/real_repo.sh 15     # also: this prova vs an older build
#   ONLY=noop bench/real_repo.sh 15                    # only the warm no-op scenarios
#
# Each tool works in its own copy of the fixture (a git repository, `npm ci` in each): on a
# hit turbo rewrites the outputs and prova restores its own, so in one directory each would
# measure undoing the other. turbo gets the same task graph, inputs and outputs as
# prova.toml declares (turbo.json written here). SCRATCH (default /tmp/prova-real-repo) is
# reused between calls; remove it for fresh copies.
set -eu
N=${1:-15}
HERE=$(dirname "$(realpath "$0")")
P=$(realpath "${PROVA:-$HERE/../target/release/prova}")
T=${TURBO:-$HOME/.cache/prova-peers/node_modules/@turbo/linux-64/bin/turbo}
# ../shared/bench beside the repository (a worktree under wt/ has it one level further up).
C=${COMPARE:-$HERE/../../shared/bench/compare.py}
[ -f "$C" ] || C=$HERE/../../../shared/bench/compare.py
S=${SCRATCH:-/tmp/prova-real-repo}
export TURBO_TELEMETRY_DISABLED=1 TURBO_NO_UPDATE_NOTIFIER=1
load() { echo "   load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"; }

# One copy of the fixture at $1: a git repository (both tools list files through git), with
# turbo.json and an installed node_modules.
copy() {
    [ -d "$1/.git" ] && return 0
    rm -rf "$1"
    mkdir -p "$1"
    (cd "$HERE/../examples/tscomposite" && git ls-files -z | xargs -0 cp --parents -t "$1")
    cat >"$1/turbo.json" <<'JSON'
{
  "$schema": "https://turbo.build/schema.json",
  "tasks": {
    "build": {
      "dependsOn": ["^build"],
      "inputs": ["package.json", "src/**", "tsconfig.json", "$TURBO_ROOT$/tsconfig.base.json", "$TURBO_ROOT$/types/**"],
      "outputs": ["dist/**", "tsconfig.tsbuildinfo"]
    },
    "test": { "dependsOn": ["build"] }
  }
}
JSON
    # turbo needs the package manager named.
    python3 - "$1/package.json" <<'PY'
import json, sys
p = sys.argv[1]
d = json.load(open(p))
d.setdefault("packageManager", "npm@10.8.2")
open(p, "w").write(json.dumps(d, indent=2) + "\n")
PY
    printf '.turbo/\n' >>"$1/.gitignore"
    (cd "$1" && npm ci --no-audit --no-fund >/dev/null 2>&1 && git init -q &&
        git add -A && git -c user.name=b -c user.email=b@b commit -qm fixture)
}
PW="$S/prova"
TW="$S/turbo"
copy "$PW"
copy "$TW"
# Fill both caches (and leave the outputs in place).
"$P" -C "$PW" run build test --all >/dev/null 2>&1
(cd "$TW" && "$T" run build test >/dev/null 2>&1)
A="$P -C $PW"
cd "$TW"

echo "== warm no-op run build ($S)"
load
python3 "$C" -n "$N" --a "$A run build --all" --b "$T run build"
load
# The same without a shell in front of either command (compare.py starts each through
# `sh -c`, about 1 ms added to both sides of a 10-20 ms ratio): wall and CPU, interleaved.
echo "== warm no-op run build, started without a shell (wall and CPU)"
load
python3 "$HERE/cpu_ratio.py" --exec -n "$N" "$A run build --all" "$T run build"
load
echo "== warm no-op run build test"
load
python3 "$C" -n "$N" --a "$A run build test --all" --b "$T run build test"
load
if [ -n "${BASELINE:-}" ]; then
    echo "== warm no-op run build: this prova / BASELINE ($BASELINE), same copy"
    load
    python3 "$C" -n "$N" --a "$A run build --all" --b "$(realpath "$BASELINE") -C $PW run build --all"
    load
fi
[ "${ONLY:-}" = noop ] && exit 0

# An edit that changes the emitted JavaScript: a new exported constant each time.
edit() { echo "tee -a $1 $PW/$1 >/dev/null <<EOF
export const stamp\$(date +%s%N) = 1;
EOF"; }
restore() { git checkout -q -- "$1"; git -C "$PW" checkout -q -- "$1"; }
LEAF=packages/app/src/index.ts
echo "== one leaf source edited ($LEAF)"
load
python3 "$C" -n "$N" --prep "$(edit $LEAF)" --a "$A run build --all" --b "$T run build"
load
restore "$LEAF"
"$P" -C "$PW" run build --all >/dev/null 2>&1
(cd "$TW" && "$T" run build >/dev/null 2>&1)

echo "== --verify=all vs a plain forced build (prova alone)"
load
python3 "$C" --cwd "$PW" -n "${VERIFY_RUNS:-5}" \
    --a "$P run build --all --force --verify=all" --b "$P run build --all --force"
load
