[ "$(add 2 3)" = "5" ] || { echo "add failed"; exit 1; }
[ "$(sum 1 2 3 4)" = "10" ] || { echo "sum failed"; exit 1; }
