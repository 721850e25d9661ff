#!/bin/sh
# prova against turbo on any installed JavaScript monorepo (issue 31: "the repo a user
# actually has"): the warm no-op `run build`, both tools started without a shell
# (cpu_ratio.py --exec: wall and CPU), with the load average before and after.
#
#   bench/any_repo.sh CHECKOUT [RUNS]
#   PROVA=target/release/prova TURBO=/path/to/turbo bench/any_repo.sh /tmp/lerna 31
#   BASELINE=/tmp/prova-old bench/any_repo.sh /tmp/lerna 31   # also an older prova
#
# CHECKOUT is a git checkout whose dependencies are installed (its package manager on PATH:
# turbo asks it for its version). Each tool gets its own copy (CHECKOUT-prova and
# CHECKOUT-turbo, made once with `cp -a`, reused after; remove them for fresh ones): on a hit
# turbo rewrites the outputs and prova restores its own. The prova copy is configured by
# `prova init` (what a new user runs: tasks from the package.json scripts, inputs and outputs
# read from the build scripts and tsconfigs) unless it has a prova.toml; the turbo copy gets
# a turbo.json for `build` (`^build` first, the outputs in OUTPUTS, default `dist/**` and
# `tsconfig.tsbuildinfo`, inputs turbo's default: the package's files) unless it has one,
# and `.turbo` gitignored (turbo writes its logs there, inside every package, where its
# own hashing would see them). Outputs the copy already held are removed before turbo's
# first build: a stale `tsconfig.tsbuildinfo` makes `tsc` skip an emptied `dist`.
#
# How lerna-lite was set up for bench/README.md (Node 22 and pnpm 11 from the npm registry,
# as its engines ask; two lockfile entries this machine's registry does not serve
# replaced): see "A real pnpm monorepo" there.
set -eu
REPO=$(realpath "$1")
N=${2:-21}
HERE=$(dirname "$(realpath "$0")")
P=$(realpath "${PROVA:-$HERE/../target/release/prova}")
T=${TURBO:-$HOME/.cache/prova-peers/node_modules/@turbo/linux-64/bin/turbo}
OUTPUTS=${OUTPUTS:-'"dist/**", "tsconfig.tsbuildinfo"'}
export TURBO_TELEMETRY_DISABLED=1 TURBO_NO_UPDATE_NOTIFIER=1
load() { echo "   load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"; }

PW=$REPO-prova
TW=$REPO-turbo
if [ ! -d "$PW" ]; then
    cp -a "$REPO" "$PW"
    [ -f "$PW/prova.toml" ] || "$P" -C "$PW" init >/dev/null
fi
if [ ! -d "$TW" ]; then
    cp -a "$REPO" "$TW"
    rm -rf "$TW/.prova" "$TW/prova.toml"
    if [ ! -f "$TW/turbo.json" ]; then
        cat > "$TW/turbo.json" <<EOF
{ "\$schema": "https://turbo.build/schema.json",
  "tasks": { "build": { "dependsOn": ["^build"], "outputs": [$OUTPUTS] } } }
EOF
    fi
    grep -qx '.turbo' "$TW/.gitignore" 2>/dev/null || echo '.turbo' >> "$TW/.gitignore"
    if [ -f "$TW/pnpm-lock.yaml" ]; then
        # turbo runs each build through `pnpm run`: it wants the `packageManager` field,
        # and pnpm 10+ checks the installed dependencies before every `pnpm run` (on
        # lerna-lite, a registry round trip per lockfile entry: six minutes a task on a
        # machine that cannot reach the registry). Both for the turbo copy only; prova runs
        # the scripts without pnpm.
        python3 - "$TW/package.json" "$(pnpm --version)" <<'PY'
import json, sys
path, version = sys.argv[1], sys.argv[2]
with open(path) as f:
    pkg = json.load(f)
if "packageManager" not in pkg:
    pkg["packageManager"] = "pnpm@" + version
    with open(path, "w") as f:
        json.dump(pkg, f, indent=2)
        f.write("\n")
PY
        grep -q '^verifyDepsBeforeRun:' "$TW/pnpm-workspace.yaml" 2>/dev/null ||
            printf '\nverifyDepsBeforeRun: false\n' >> "$TW/pnpm-workspace.yaml"
        (cd "$TW" && git add package.json pnpm-workspace.yaml)
    fi
    (cd "$TW" && git add turbo.json .gitignore &&
        git -c user.email=bench@prova -c user.name=bench commit -qm "bench: turbo.json" || true)
    (cd "$TW" && git ls-files -z --others --ignored --exclude-standard --directory |
        tr '\0' '\n' | grep -E '(^|/)(dist/?|tsconfig\.tsbuildinfo)$' | xargs -r rm -rf)
fi

echo "== filling both caches (a cold build of each)"
"$P" -C "$PW" run build --all >/dev/null
(cd "$TW" && "$T" run build >/dev/null && "$T" run build >/dev/null)
"$P" -C "$PW" run build --all | tail -3

echo "== warm no-op \`run build\`: prova / turbo, started without a shell"
load
cmds="$P -C $PW run build --all"
[ -n "${BASELINE:-}" ] && cmds="$cmds|$(realpath "$BASELINE") -C $PW run build --all"
cd "$TW"
IFS='|'
# shellcheck disable=SC2086
python3 "$HERE/cpu_ratio.py" --exec -n "$N" $cmds "$T run build"
load
