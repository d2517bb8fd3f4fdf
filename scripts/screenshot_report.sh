#!/bin/sh
# Screenshot a report.html with headless Chromium (Debian: apt-get install -y chromium).
# Usage: scripts/screenshot_report.sh REPORT.html OUT.png [WIDTH] [HEIGHT]
set -eu
html=$(readlink -f "$1")
out=$(readlink -f "$2" 2>/dev/null || echo "$2")
width=${3:-1400}
height=${4:-3000}
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
chromium --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update \
    --disable-sync --no-first-run --hide-scrollbars --user-data-dir="$profile" \
    --screenshot="$out" --window-size="$width,$height" "file://$html" 2>/dev/null
echo "$out"
