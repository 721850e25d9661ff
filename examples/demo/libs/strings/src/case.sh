# upper TEXT: TEXT in upper case.
upper() { printf '%s\n' "$1" | tr '[:lower:]' '[:upper:]'; }
# lower TEXT: TEXT in lower case.
lower() { printf '%s\n' "$1" | tr '[:upper:]' '[:lower:]'; }
