#!/bin/sh
# A stand-in dev server: announces itself, then waits to be stopped.
echo "serving on http://127.0.0.1:0 (preview of dist/web.sh)"
while :; do sleep 1; done
