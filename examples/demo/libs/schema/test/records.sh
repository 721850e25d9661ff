[ "$(user_name '7|ada|ada@example.org')" = "ada" ] || { echo "user_name failed"; exit 1; }
valid_email "ada@example.org" || { echo "valid_email failed"; exit 1; }
