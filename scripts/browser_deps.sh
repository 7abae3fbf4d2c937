#!/usr/bin/env bash
# What the console's browser tests need, installed by the test script (never by hand): Debian's chromium
# and CJK fonts (Playwright's own browser download is not used), and axe-core from tests/console's lockfile.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1 || ! fc-list 2>/dev/null | grep -qi "Noto Sans CJK"; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq chromium fonts-noto-cjk >/dev/null
  else
    echo "browser tests need chromium and fonts-noto-cjk: sudo apt-get install chromium fonts-noto-cjk" >&2
  fi
fi
if [ ! -f tests/console/node_modules/axe-core/axe.min.js ]; then
  npm ci --prefix tests/console --no-audit --no-fund --silent
fi
