#!/usr/bin/env bash
# Installs the Debian packages some tests drive when they are missing: chromium and
# chromium-driver (the browser test) and tmux (the monitor's screen test). Runs before the
# tests (the justfile's test recipe); never fails the run: when the install is impossible (not
# root, no apt-get, no network) it says why, the browser test skips and the screen test fails
# naming what to install.
set -uo pipefail
missing=()
{ [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; } || missing+=(chromium chromium-driver)
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
reason=""
if [ "$(id -u)" != "0" ]; then
    reason="not root, cannot apt-get install ${missing[*]}"
elif ! command -v apt-get >/dev/null 2>&1; then
    reason="no apt-get on this machine"
else
    echo "test: installing ${missing[*]} for the browser and screen tests" >&2
    export DEBIAN_FRONTEND=noninteractive
    log=$(mktemp)
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends \
            "${missing[@]}"; } >"$log" 2>&1; then
        reason="apt-get install ${missing[*]} failed: $(tail -n 1 "$log")"
    fi
    rm -f "$log"
fi
if [ -n "$reason" ]; then
    echo "test: $reason; the browser test will be skipped" >&2
fi
exit 0
