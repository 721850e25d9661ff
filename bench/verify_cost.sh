#!/bin/sh
# What --verify costs on a cold build: `run build --all --force` with and without --verify
# (and, locally, with --verify-sample=0.1),
# locally and on a loopback farm of WORKERS workers, each pair interleaved
# (../shared/bench/compare.py), reported as ratios.
#
#   bench/verify_cost.sh WORKSPACE [WORKERS] [SLOTS] [RUNS] [SANDBOX]
#   PROVA=target/release/prova bench/verify_cost.sh /tmp/ws-500-sh 3 2 3 bwrap
#
# WORKSPACE: `../shared/bench/gen_workspace.py WS --packages 500 --prova-command sh` (shell
# commands, so the figures are prova's, not npm's). --force executes every task (no hits) and
# overwrites entries; --verify re-runs each executed task once more (on another worker in the
# farm) and compares the outputs.
set -eu
WS=$(realpath "$1")
W=${2:-3}
S=${3:-2}
N=${4:-3}
SB=${5:-bwrap}
HERE=$(dirname "$(realpath "$0")")
P=$(realpath "${PROVA:-$HERE/../target/release/prova}")
C=${COMPARE:-$HERE/../../shared/bench/compare.py}
. "$HERE/farm.sh"
farm_scratch prova-verify-bench
start_farm "$W" "$S" "$SB"
echo "== local: --verify vs plain ($WS)"
python3 "$C" --cwd "$WS" -n "$N" --a "$P run build --all --force --verify" --b "$P run build --all --force"
echo "== local: --verify --verify-sample=0.1 vs plain ($WS)"
python3 "$C" --cwd "$WS" -n "$N" --a "$P run build --all --force --verify --verify-sample=0.1" --b "$P run build --all --force"
echo "== farm, $W workers x $S slots, sandbox $SB: --verify vs plain"
R="--remote $ADDR --certs $CI --download none"
python3 "$C" --cwd "$WS" -n "$N" --a "$P run build --all --force --verify $R" --b "$P run build --all --force $R"
