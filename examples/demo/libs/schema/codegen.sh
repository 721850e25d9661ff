#!/bin/sh
# For every `record NAME field...` line, emit NAME_FIELD accessors over a `|`-joined value.
set -eu
mkdir -p gen
for def in $(ls schema/*.def | sort); do
  base=$(basename "$def" .def)
  out="gen/$base.sh"
  : > "$out"
  while read -r kw rec fields; do
    [ "$kw" = "record" ] || continue
    i=1
    for f in $fields; do
      echo "# ${rec}_$f VALUE: field $i of a $rec." >> "$out"
      echo "${rec}_$f() { printf '%s\n' \"\$1\" | cut -d'|' -f$i; }" >> "$out"
      i=$((i + 1))
    done
  done < "$def"
  echo "generated $out"
done
