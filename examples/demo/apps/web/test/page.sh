page | tail -1 | grep -q 'TOTAL *7' || { echo "page failed"; exit 1; }
