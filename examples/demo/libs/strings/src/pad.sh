# pad WIDTH TEXT: TEXT right-aligned in WIDTH columns.
pad() { printf '%*s\n' "$1" "$2"; }
