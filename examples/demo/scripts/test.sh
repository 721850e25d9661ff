#!/bin/sh
# Run every test/*.sh against the project's bundle; each test sources the bundle and exits
# non-zero on failure.
set -eu
name=$(basename "$PWD")
pass=0
for t in test/*.sh; do
  sh -c ". ./dist/$name.sh; . ./$t"
  pass=$((pass + 1))
done
echo "$pass tests passed"
