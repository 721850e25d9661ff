[ "$(calc 3 4 | tail -1)" = "PRODUCT 12" ] || { echo "calc failed"; exit 1; }
