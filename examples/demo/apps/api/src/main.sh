# handle RECORD: a one-line report of a user record.
handle() { printf '%s <%s> in %s\n' "$(user_name "$1")" "$(user_email "$1")" "${API_REGION:-local}"; }
