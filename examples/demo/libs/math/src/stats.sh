# sum N...: the sum of the arguments.
sum() { s=0; for n in "$@"; do s=$((s + n)); done; echo "$s"; }
