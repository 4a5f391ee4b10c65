#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds build/deb/xvirtiofsd_<version>_amd64.deb from the release binary
# (make deb runs `make build` first): the daemon in /usr/libexec, the
# vhost-user descriptor in /usr/share/qemu/vhost-user/ (libvirt finds it
# without <binary path>), man pages generated from the clap definition, the
# systemd template unit xvirtiofsd@.service, and an example share file.
#
# Prints the path of the package on its last line.
set -euo pipefail

# shellcheck source=vmm-config/functions.sh
. "$(dirname "$0")/../../vmm-config/functions.sh"
export PATH="$HOME/.cargo/bin:$PATH"

HERE=$XVFS_ROOT/packaging/deb
BIN=$XVFS_ROOT/host/target/release/xvirtiofsd
OUT_DIR=$XVFS_ROOT/build/deb
STAGE=$OUT_DIR/stage
# Named 40- so that it comes before a distribution's 50-*virtiofsd.json:
# libvirt takes the first "type": "fs" descriptor by file name.
DESCRIPTOR=40-xvirtiofsd.json

[ -x "$BIN" ] || die "$BIN is missing: run make build first"
for tool in dpkg-deb dpkg-shlibdeps strip gzip; do
    command -v "$tool" >/dev/null || die "$tool is missing (apt-get install dpkg-dev binutils)"
done

# First line "xvirtiofsd 0.2.0 (commit C)" or "xvirtiofsd 0.2.0+tag (commit C)";
# Debian takes both versions.
version=$("$BIN" --version | head -n 1 | awk '{print $2}')
[[ $version =~ ^[0-9][0-9A-Za-z.+~-]*$ ]] || die "unexpected --version output: $version"

rm -rf "$STAGE"
mkdir -p "$STAGE/DEBIAN" "$STAGE/usr/libexec" "$STAGE/usr/share/qemu/vhost-user" \
    "$STAGE/usr/share/man/man1" "$STAGE/lib/systemd/system" \
    "$STAGE/usr/share/doc/xvirtiofsd/examples"

install -m 0755 "$BIN" "$STAGE/usr/libexec/xvirtiofsd"
strip --strip-unneeded "$STAGE/usr/libexec/xvirtiofsd"

sed 's|"binary": ".*"|"binary": "/usr/libexec/xvirtiofsd"|' "$XVFS_ROOT/vmm-config/50-xvirtiofsd.json" \
    >"$STAGE/usr/share/qemu/vhost-user/$DESCRIPTOR"

say "generating the manual pages (cargo run --example xvirtiofsd-man)"
(cd "$XVFS_ROOT/host" && cargo run -q -p xvirtiofsd --example xvirtiofsd-man -- "$STAGE/usr/share/man/man1")
gzip -9n "$STAGE"/usr/share/man/man1/*.1

install -m 0644 "$HERE/xvirtiofsd@.service" "$STAGE/lib/systemd/system/"
install -m 0644 "$HERE/share.conf" "$STAGE/usr/share/doc/xvirtiofsd/examples/"
install -m 0644 "$XVFS_ROOT/README.md" "$STAGE/usr/share/doc/xvirtiofsd/"
gzip -9n "$STAGE/usr/share/doc/xvirtiofsd/README.md"
cat >"$STAGE/usr/share/doc/xvirtiofsd/copyright" <<'COPYRIGHT'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: xvirtiofs

Files: *
Copyright: the xvirtiofs developers
License: Apache-2.0
 On Debian systems the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
COPYRIGHT
printf 'xvirtiofsd (%s) unstable; urgency=medium\n\n  * Built from %s.\n\n -- xvirtiofs developers <xvirtiofs@localhost>  %s\n' \
    "$version" "$(git -C "$XVFS_ROOT" rev-parse --short HEAD 2>/dev/null || echo 'a source tree')" \
    "$(date -R)" | gzip -9n >"$STAGE/usr/share/doc/xvirtiofsd/changelog.Debian.gz"

# Shared-library dependencies as Debian computes them (dpkg-shlibdeps wants
# a debian/control beside it).
shlib_dir=$OUT_DIR/shlibdeps
rm -rf "$shlib_dir"
mkdir -p "$shlib_dir/debian"
printf 'Source: xvirtiofsd\n\nPackage: xvirtiofsd\nArchitecture: amd64\n' >"$shlib_dir/debian/control"
depends=$(cd "$shlib_dir" && dpkg-shlibdeps -O "$STAGE/usr/libexec/xvirtiofsd" | sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || die "dpkg-shlibdeps found no dependencies"

size=$(du -sk --exclude=DEBIAN "$STAGE" | cut -f1)
sed -e "s|@VERSION@|$version|" -e "s|@SIZE@|$size|" -e "s|@DEPENDS@|$depends|" \
    "$HERE/control.in" >"$STAGE/DEBIAN/control"
install -m 0755 "$HERE/postinst" "$HERE/postrm" "$STAGE/DEBIAN/"
(cd "$STAGE" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) \
    >"$STAGE/DEBIAN/md5sums"

deb=$OUT_DIR/xvirtiofsd_${version}_amd64.deb
dpkg-deb --root-owner-group -Zxz --build "$STAGE" "$deb" >/dev/null
say "package: $(du -h "$deb" | cut -f1), depends: $depends"
echo "$deb"
