#!/bin/sh
# The Modbus read path against a bare goburrow client (issue 12), in process
# on a loopback server (internal/modbusfault): the bus ÷ goburrow, and what an
# uncached engine read adds ÷ goburrow. Each runs in interleaved rounds and
# reports the median of its per-round ratios; the machine's load drifts, so
# give it rounds. Then the engine's own cost per read without I/O.
# Usage: bench/bus.sh [ROUNDS]   (default 60)
set -eu
cd "$(dirname "$0")/.."
rounds=${1:-60}
go test -run - -bench BusVsGoburrow -benchtime "${rounds}x" ./drivers/modbus/
go test -run - -bench EngineUncachedRead -benchtime "${rounds}x" ./engine/
go test -run - -bench EngineReadOverhead ./engine/
