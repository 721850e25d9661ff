#!/bin/sh
# Bundle a project: its own sources (sorted, so the output is deterministic) after the
# bundles of the libraries it depends on (listed in deps.txt), into dist/<name>.sh.
set -eu
name=$(basename "$PWD")
mkdir -p dist
out="dist/$name.sh"
{
  echo "#!/bin/sh"
  echo "# bundle of $name"
  if [ -f deps.txt ]; then
    while read -r dep; do
      [ -n "$dep" ] || continue
      cat "../../libs/$dep/dist/$dep.sh"
    done < deps.txt
  fi
  for f in $(ls src/*.sh gen/*.sh 2>/dev/null | sort); do
    echo "# --- $f"
    cat "$f"
  done
} > "$out"
chmod +x "$out"
sum=$(cksum < "$out" | cut -d' ' -f1)
echo "$sum" > dist/checksum.txt
echo "bundled $out ($(wc -c < "$out") bytes, cksum $sum)"
