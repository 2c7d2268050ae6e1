#!/usr/bin/env bash
# Release builds of physmcpd: static (CGO_ENABLED=0), reproducible paths
# (-trimpath), stripped (-s -w), version and git revision stamped into
# `physmcpd version` (also when built from an export without .git: give both).
#
#   ./build.sh                 every target into dist/
#   ./build.sh armv6 arm64     only these targets
#   OUT=dir VERSION=v1.2.3 REVISION=<commit> ./build.sh
#
# Targets: amd64 (linux/amd64), armv6 (linux/arm GOARM=6: Pi Zero/1),
# armv7 (linux/arm GOARM=7: Pi 2/3 32-bit, i.MX6), arm64 (linux/arm64: Pi 3/4/5 64-bit).
set -euo pipefail
cd "$(dirname "$0")"
OUT=${OUT:-dist}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
if [ -z "${REVISION:-}" ] && REVISION=$(git rev-parse HEAD 2>/dev/null); then
  [ -z "$(git status --porcelain 2>/dev/null)" ] || REVISION+=+dirty  # as go build sets vcs.modified
fi
declare -A GOARCH_OF=([amd64]=amd64 [armv6]=arm [armv7]=arm [arm64]=arm64)
declare -A GOARM_OF=([armv6]=6 [armv7]=7)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(amd64 armv6 armv7 arm64)
mkdir -p "$OUT"
for t in "${targets[@]}"; do
  arch=${GOARCH_OF[$t]:-}
  [ -n "$arch" ] || { echo "build.sh: unknown target $t (want amd64, armv6, armv7 or arm64)" >&2; exit 2; }
  CGO_ENABLED=0 GOOS=linux GOARCH=$arch GOARM=${GOARM_OF[$t]:-} \
    go build -trimpath -ldflags="-s -w -X main.buildVersion=$VERSION -X main.buildRevision=${REVISION:-}" -o "$OUT/physmcpd-$t" ./cmd/physmcpd
  printf '%-8s %9d bytes  %s\n' "$t" "$(stat -c %s "$OUT/physmcpd-$t")" "$OUT/physmcpd-$t"
done
