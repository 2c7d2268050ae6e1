#!/usr/bin/env bash
# iproute2 for the mesh partition test (cmd/physmcpd), which splits five
# physmcpd processes in network namespaces (CI runs as root). Idempotent.
set -euo pipefail
if ! command -v ip >/dev/null; then
  for try in 1 2 3; do apt-get update -qq && break || sleep 5; done
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2 >/dev/null
fi
echo "iproute2: $(ip -V)"
