#!/usr/bin/env bash
# Release builds of physmcpd: static (CGO_ENABLED=0), reproducible paths
# (-trimpath), stripped (-s -w), version and git revision stamped into
# `physmcpd version` (also when built from an export without .git: give both).
#
#   ./build.sh                 every target, Full and Lite, into dist/
#   ./build.sh armv6 arm64     only these targets
#   BUILDS=lite ./build.sh     only the Lite build (BUILDS="full lite" is the default)
#   OUT=dir VERSION=v1.2.3 REVISION=<commit> ./build.sh
#
# Targets: amd64 (linux/amd64), armv6 (linux/arm GOARM=6: Pi Zero/1),
# armv7 (linux/arm GOARM=7: Pi 2/3 32-bit, i.MX6), arm64 (linux/arm64: Pi 3/4/5 64-bit).
# Builds: full (physmcpd-TARGET: every profile and transport) and lite
# (physmcpd-lite-TARGET, -tags lite: the lite profile only, on stdio or a serial
# line, without the HTTP server, authentication, state store or audit trail).
# The Full build for 32-bit arm compiles the code that runs only while loading
# the manifest and policy (YAML) or in other commands than serve (lint's client
# and schema validator, the command line) without inlining: 0.2 MB less; so are
# the DNS codec (mesh join and mDNS discovery) and protobuf (metric descriptors at
# start-up, protobuf scrapes), which run seconds apart, not per call: 0.26 MB less.
# This keeps armv6/armv7 smaller (docs/deploy.md, Footprint), nothing slower while serving.
# (On arm64 and amd64 the same makes the binary larger.)
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
declare -A PREFIX_OF=([full]=physmcpd [lite]=physmcpd-lite)
cold=()
for p in gopkg.in/yaml.v3 github.com/physmcp/physmcpd/internal/strictyaml github.com/physmcp/physmcpd/cmd/physmcpd \
  github.com/physmcp/physmcpd/lint github.com/mark3labs/mcp-go/client/... github.com/santhosh-tekuri/... golang.org/x/text/... \
  github.com/miekg/dns google.golang.org/protobuf/...; do
  cold+=(-gcflags="$p=-l")
done
mkdir -p "$OUT"
for t in "${targets[@]}"; do
  arch=${GOARCH_OF[$t]:-}
  [ -n "$arch" ] || { echo "build.sh: unknown target $t (want amd64, armv6, armv7 or arm64)" >&2; exit 2; }
  for b in ${BUILDS:-full lite}; do
    prefix=${PREFIX_OF[$b]:-}
    [ -n "$prefix" ] || { echo "build.sh: unknown build $b (want full or lite)" >&2; exit 2; }
    tags=lite flags=()
    [ "$b" = full ] && tags=
    [ "$b" = full ] && [ "$arch" = arm ] && flags=("${cold[@]}")
    out="$OUT/$prefix-$t"
    CGO_ENABLED=0 GOOS=linux GOARCH=$arch GOARM=${GOARM_OF[$t]:-} \
      go build -tags "$tags" "${flags[@]}" -trimpath -ldflags="-s -w -X main.buildVersion=$VERSION -X main.buildRevision=${REVISION:-}" -o "$out" ./cmd/physmcpd
    printf '%-8s %-5s %9d bytes  %s\n' "$t" "$b" "$(stat -c %s "$out")" "$out"
  done
done
