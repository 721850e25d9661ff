[ "$(total 1 2)" = "TOTAL          3" ] || { echo "total failed: $(total 1 2)"; exit 1; }
