# calc A B: prints A+B and A*B, labelled.
calc() { echo "$(upper sum) $(add "$1" "$2")"; echo "$(upper product) $(mul "$1" "$2")"; }
