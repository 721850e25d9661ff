handle '1|bob|bob@example.org' | grep -q '^bob <bob@example.org>' || { echo "handle failed"; exit 1; }
