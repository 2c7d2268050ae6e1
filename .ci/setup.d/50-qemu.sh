#!/usr/bin/env bash
# qemu for the edge tests: qemu-user-static runs the arm/arm64 binaries
# (test/qemu), qemu-system-arm boots the i.MX6 sabrelite board with Debian's
# armmp kernel (test/board), whose DTB the test patches with fdtput
# (device-tree-compiler). Idempotent; fast when everything is in place.
# The kernel, its DTB and the four modules the board test loads are extracted
# into .cache/board/<kernel version>/ (about 6 MB). The version is resolved
# through the linux-image-armmp meta-package, so it stays installable after
# Debian removes a superseded ABI; set KPKG=linux-image-<ver>-armmp to pin one.
set -euo pipefail
cd "$(dirname "$0")/../.."
export DEBIAN_FRONTEND=noninteractive

apt_update() { for try in 1 2 3; do apt-get update -qq && return 0; sleep 5; done; return 1; }

updated=0
if ! dpkg --print-foreign-architectures | grep -qx armhf; then
  dpkg --add-architecture armhf
  apt_update; updated=1
fi
need=()
for tool in qemu-arm-static:qemu-user-static qemu-aarch64-static:qemu-user-static \
            qemu-system-arm:qemu-system-arm cpio:cpio fdtput:device-tree-compiler; do
  command -v "${tool%%:*}" >/dev/null || need+=("${tool#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  [ $updated = 1 ] || apt_update
  apt-get install -y -qq --no-install-recommends $(printf '%s\n' "${need[@]}" | sort -u) >/dev/null
fi

cache=.cache/board
kpkg=${KPKG:-}
if [ -z "$kpkg" ]; then
  kpkg=$(apt-cache depends linux-image-armmp:armhf 2>/dev/null | awk '/Depends: linux-image-/{sub(":armhf","",$2); print $2; exit}')
fi
if [ -z "$kpkg" ]; then
  # The package lists have no armhf entries yet (e.g. the architecture was added elsewhere).
  apt_update
  kpkg=$(apt-cache depends linux-image-armmp:armhf | awk '/Depends: linux-image-/{sub(":armhf","",$2); print $2; exit}')
fi
kver=${kpkg#linux-image-}
dest=$cache/$kver
if [ -f "$dest/vmlinuz" ] && [ -f "$dest/imx6q-sabrelite.dtb" ] && [ -f "$dest/modules/gpio-mxc.ko" ]; then
  echo "board kernel $kver: cached in $dest"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"  # apt-get download runs as _apt
(cd "$tmp" && apt-get download -qq "$kpkg:armhf")
mkdir -p "$tmp/x"
dpkg-deb --fsys-tarfile "$tmp"/"${kpkg}"_*_armhf.deb | tar -x -C "$tmp/x" --wildcards \
  "./boot/vmlinuz-$kver" "./usr/lib/linux-image-$kver/imx6q-sabrelite.dtb" \
  '*/i2c-imx.ko*' '*/i2c-dev.ko*' '*/gpio-mxc.ko*' '*/imx2_wdt.ko*'
rm -rf "$dest.new"; mkdir -p "$dest.new/modules"
cp "$tmp/x/boot/vmlinuz-$kver" "$dest.new/vmlinuz"
cp "$tmp/x/usr/lib/linux-image-$kver/imx6q-sabrelite.dtb" "$dest.new/"
for m in i2c-imx i2c-dev gpio-mxc imx2_wdt; do
  f=$(find "$tmp/x/lib/modules" -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" | head -1)
  [ -n "$f" ] || { echo "module $m not in $kpkg" >&2; exit 1; }
  case $f in
    *.xz) xz -dc "$f" > "$dest.new/modules/$m.ko" ;;
    *.zst) zstd -qdc "$f" > "$dest.new/modules/$m.ko" ;;
    *) cp "$f" "$dest.new/modules/$m.ko" ;;
  esac
done
rm -rf "$dest"; mv "$dest.new" "$dest"
echo "board kernel $kver: extracted into $dest"
