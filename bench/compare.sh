#!/bin/sh
# physmcpd against its baselines (issue 12): builds physmcpd and a bare
# mcp-go server (bench/compare/baremcp) from this tree, runs them with a bare
# goburrow client (in this process and in its own, bench/compare/baremodbus)
# on a loopback Modbus TCP device, in interleaved rounds, and
# prints the table docs/performance.md keeps (medians of per-round ratios).
# It counts fdatasync with perf when perf is installed. Takes a few minutes.
# Usage: bench/compare.sh [-rounds N] [-do-calls N] [-only MEASURES] [-base OTHER_PHYSMCPD]
set -eu
cd "$(dirname "$0")/.."
exec go run ./bench/compare "$@"
