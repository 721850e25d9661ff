# row LABEL N: a table row with LABEL upper-cased and N right-aligned.
row() { printf '%-10s%s\n' "$(upper "$1")" "$(pad 6 "$2")"; }
# total N...: a TOTAL row with the sum of the arguments.
total() { row total "$(sum "$@")"; }
