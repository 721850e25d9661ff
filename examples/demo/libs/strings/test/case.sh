[ "$(upper hello)" = "HELLO" ] || { echo "upper failed"; exit 1; }
[ "$(lower WORLD)" = "world" ] || { echo "lower failed"; exit 1; }
