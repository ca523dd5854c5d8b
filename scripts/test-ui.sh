#!/usr/bin/env bash
# make test-ui: the web inspector in headless Chromium (Debian's, driven by playwright-core) over
# a real debug daemon; see tests/ui/ui.test.mjs. Installs Chromium with apt when it is missing
# and we are root; otherwise says SKIP loudly and passes (no browser can be downloaded here).
set -euo pipefail
cd "$(dirname "$0")/.."
export CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$CHROMIUM" ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "test-ui: $CHROMIUM is missing: installing Debian's chromium (apt-get install chromium)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
    apt-get clean # the downloaded packages: disk a CI machine may be short of
  else
    echo "##############################################################################"
    echo "SKIP test-ui: $CHROMIUM is missing and only root can install it"
    echo "     (apt-get install chromium); the web inspector was NOT tested in a browser"
    echo "##############################################################################"
    exit 0
  fi
fi
cd tests/ui
npm ci --no-audit --no-fund --silent
npm test
