#!/usr/bin/env bash
# Debian's chromium for the status page test (mcpserver), which drives it
# headless through chromedp. Idempotent.
set -euo pipefail
if [ ! -x /usr/bin/chromium ]; then
  for try in 1 2 3; do apt-get update -qq && break || sleep 5; done
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
echo "chromium: $(/usr/bin/chromium --version)"
