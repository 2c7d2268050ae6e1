#!/usr/bin/env bash
# Footprint of physmcpd's two builds (build.sh): the release binary per target,
# and on this machine (amd64) the Full build serving the full profile and the
# Lite build (-tags lite) the lite profile, a 50-capability device over stdio:
# exec -> READY=1 over 20 starts, resident memory under a steady read load,
# and reads per second from 4 callers that never wait.
# Sizes are printed in MB (10^6 bytes) and MiB (2^20 bytes). Budgets:
#   armv6/armv7 binary: Full <= 17.0 MB,  Lite <= 7.0 MB (docs/deploy.md: why Full is no longer 12)
#   peak RSS (VmHWM):   Full <= 25 MiB,   Lite <= 10 MiB (the kernel counts in KiB)
#   exec -> READY=1:    95th percentile <= 150 ms (both)
#   throughput:         Lite >= 0.8 x Full
# Exits 1 when a budget is missed.
#
#   bench/footprint.sh                    # 10 s of load at 200 reads/s per build
#   DURATION=30s RATE=500 bench/footprint.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
DURATION=${DURATION:-10s}
RATE=${RATE:-200}
miss=0
budget() { # name value limit unit
  if awk -v v="$2" -v l="$3" 'BEGIN { exit !(v > l) }'; then echo "  OVER BUDGET: $1 = $2 $4 (budget $3 $4)"; miss=1; fi
}
mb() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1e6 }'; }
mib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1048576 }'; }

echo "== binary size (build.sh: CGO_ENABLED=0 -trimpath -ldflags='-s -w')"
OUT=$OUT ./build.sh >/dev/null
for t in amd64 armv6 armv7 arm64; do
  for b in full lite; do
    f=$OUT/physmcpd-$t; [ $b = lite ] && f=$OUT/physmcpd-lite-$t
    size=$(stat -c %s "$f")
    printf '  %-6s %-4s %6s MB  %6s MiB  (%d bytes)\n' $t $b "$(mb "$size")" "$(mib "$size")" "$size"
    limit=17.0; [ $b = lite ] && limit=7
    case $t in armv*) budget "$t $b binary" "$(mb "$size")" $limit MB ;; esac
  done
done

echo "== serving 50 capabilities over stdio, $RATE reads/s for $DURATION, then as fast as answered (amd64)"
go build -o "$OUT/footprint" ./bench/footprint
declare -A rps
for b in full lite; do
  bin=$OUT/physmcpd-amd64; [ $b = lite ] && bin=$OUT/physmcpd-lite-amd64
  line=$("$OUT/footprint" -bin "$bin" -profile $b -caps 50 -duration "$DURATION" -rate "$RATE")
  echo "  $line"
  field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$line"; }
  peak=$(( $(field rss_peak_kb) * 1024 ))
  printf '  %s: peak RSS %s MB (%s MiB), ready p50 %s ms p95 %s ms, %s reads/s\n' \
    $b "$(mb $peak)" "$(mib $peak)" "$(field ready_ms)" "$(field ready_p95_ms)" "$(field reads_per_s)"
  limit=25; [ $b = lite ] && limit=10
  budget "$b peak RSS" "$(mib $peak)" $limit MiB
  budget "$b ready p95" "$(field ready_p95_ms)" 150 ms
  [ "$(field failed)" = 0 ] || { echo "  $(field failed) reads failed"; miss=1; }
  rps[$b]=$(field reads_per_s)
done
ratio=$(awk -v l="${rps[lite]}" -v f="${rps[full]}" 'BEGIN { printf "%.2f", l / f }')
echo "  lite/full throughput: $ratio"
budget "full/lite throughput ratio (1/0.8 = 1.25)" "$(awk -v r="$ratio" 'BEGIN { printf "%.2f", 1 / r }')" 1.25 x
[ -n "${KEEP:-}" ] || rm -rf "$OUT"
exit $miss
