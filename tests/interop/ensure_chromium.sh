#!/usr/bin/env bash
# Installs Debian's chromium and chromium-driver for the browser test when they are missing.
# Runs before the tests (the justfile's test recipe); never fails the run: when the install is
# impossible (not root, no apt-get, no network) it says why and the browser test skips.
set -uo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    exit 0
fi
reason=""
if [ "$(id -u)" != "0" ]; then
    reason="not root, cannot apt-get install chromium chromium-driver"
elif ! command -v apt-get >/dev/null 2>&1; then
    reason="no apt-get on this machine"
else
    echo "test: installing chromium and chromium-driver for the browser test" >&2
    export DEBIAN_FRONTEND=noninteractive
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends \
            chromium chromium-driver; } >/tmp/boltmq-chromium-install.log 2>&1; then
        reason="apt-get install chromium chromium-driver failed: $(tail -n 1 /tmp/boltmq-chromium-install.log)"
    fi
fi
if [ -n "$reason" ]; then
    echo "test: $reason; the browser test will be skipped" >&2
fi
exit 0
