#!/usr/bin/env bash
# Debian's mosquitto for the MQTT tests (audit/sink, telemetry, serve; internal/mosquitto), which start
# their own broker on a free port and restart it. Idempotent.
set -euo pipefail
if [ ! -x /usr/sbin/mosquitto ]; then
  for try in 1 2 3; do apt-get update -qq && break || sleep 5; done
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mosquitto >/dev/null
fi
echo "mosquitto: $(/usr/sbin/mosquitto -h | head -1)"
