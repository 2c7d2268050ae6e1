#!/usr/bin/env bash
# Footprint of physmcpd: release binary size per target, and on this machine
# (amd64) the time from exec to ready (READY=1) and the resident memory of the
# Full and Lite profiles serving a 50-capability device under a steady read
# load over stdio. Budgets: arm binaries <= 12 MB, Full RSS <= 25 MB, Lite RSS
# <= 12 MB, ready <= 150 ms on amd64. Exits 1 when a budget is missed.
#
#   bench/footprint.sh                    # 10 s of load at 200 reads/s per profile
#   DURATION=30s RATE=500 bench/footprint.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
DURATION=${DURATION:-10s}
RATE=${RATE:-200}
mib=$((1024 * 1024))
miss=0
budget() { # name value limit unit
  if awk -v v="$2" -v l="$3" 'BEGIN { exit !(v > l) }'; then echo "  OVER BUDGET: $1 = $2 $4 (budget $3 $4)"; miss=1; fi
}

echo "== binary size (build.sh: CGO_ENABLED=0 -trimpath -ldflags='-s -w')"
OUT=$OUT ./build.sh >/dev/null
for t in amd64 armv6 armv7 arm64; do
  size=$(stat -c %s "$OUT/physmcpd-$t")
  printf '  %-6s %6.2f MB (%d bytes)\n' "$t" "$(awk -v s="$size" -v m=$mib 'BEGIN { print s / m }')" "$size"
  case $t in arm*) budget "$t binary" "$(awk -v s="$size" -v m=$mib 'BEGIN { print s / m }')" 12 MB ;; esac
done

echo "== serving 50 capabilities over stdio, $RATE reads/s for $DURATION (amd64)"
go build -o "$OUT/footprint" ./bench/footprint
for profile in full lite; do
  line=$("$OUT/footprint" -bin "$OUT/physmcpd-amd64" -profile $profile -caps 50 -duration "$DURATION" -rate "$RATE")
  echo "  $line"
  field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$line"; }
  rss=$(awk -v k="$(field rss_peak_kb)" 'BEGIN { printf "%.1f", k / 1024 }')
  limit=25; [ $profile = lite ] && limit=12
  budget "$profile peak RSS" "$rss" $limit MB
  budget "$profile ready" "$(field ready_ms)" 150 ms
  [ "$(field failed)" = 0 ] || { echo "  $(field failed) reads failed"; miss=1; }
done
[ -n "${KEEP:-}" ] || rm -rf "$OUT"
exit $miss
