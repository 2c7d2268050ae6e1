#!/bin/sh
# Load test: 1000 concurrent streamable-HTTP MCP clients (loopback only)
# against the simulated example device, mixing read_*, can_do and do_*.
# Prints throughput, latency percentiles and peak memory; exits non-zero when
# anything failed beyond policy refusals, the device was written more often
# than its limits allow, or memory or goroutines were not released.
# Usage: bench/load.sh [-clients N] [-calls N] [-timeout D] [-seed N]
set -eu
cd "$(dirname "$0")/.."
exec go run ./bench/load -clients 1000 -calls 20 -timeout 3m "$@"
