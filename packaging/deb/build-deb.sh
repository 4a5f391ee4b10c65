#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds build/deb/xvirtiofsd_<version>_amd64.deb from the release binary
# (make deb runs `make daemon` first): the daemon in /usr/libexec with
# /usr/bin/xvirtiofsd pointing to it (on PATH), the vhost-user descriptor in
# /usr/share/qemu/vhost-user/ (libvirt finds it without <binary path>), man
# pages generated from the clap definition, the systemd template unit
# xvirtiofsd@.service, shell completions (bash, zsh, fish), and an example
# share file. An unreleased build's version says so (0.4.0~dev+COMMIT,
# from --version), which apt sorts before the release.
#
# Prints the path of the package on its last line. `--stage-only` stops
# after laying the files out in the staging directory (tests/readme_commands.py
# checks what the package installs without dpkg-dev); XVFS_DEB_BIN and
# XVFS_DEB_OUT name another binary and output directory.
set -euo pipefail

# shellcheck source=vmm-config/functions.sh
. "$(dirname "$0")/../../vmm-config/functions.sh"
export PATH="$HOME/.cargo/bin:$PATH"

HERE=$XVFS_ROOT/packaging/deb
BIN=${XVFS_DEB_BIN:-$XVFS_ROOT/host/target/release/xvirtiofsd}
OUT_DIR=${XVFS_DEB_OUT:-$XVFS_ROOT/build/deb}
STAGE_ONLY=0
case "${1:-}" in
    --stage-only) STAGE_ONLY=1 ;;
    "") ;;
    *) die "usage: $0 [--stage-only]" ;;
esac
STAGE=$OUT_DIR/stage
# Named 40- so that it comes before a distribution's 50-*virtiofsd.json:
# libvirt takes the first "type": "fs" descriptor by file name.
DESCRIPTOR=40-xvirtiofsd.json

[ -x "$BIN" ] || die "$BIN is missing: run make daemon first"
tools=(strip gzip)
[ "$STAGE_ONLY" = 1 ] || tools+=(dpkg-deb dpkg-shlibdeps)
for tool in "${tools[@]}"; do
    command -v "$tool" >/dev/null || die "$tool is missing (apt-get install dpkg-dev binutils)"
done

# First line "xvirtiofsd 0.2.0 (commit C)" or "xvirtiofsd 0.2.0+tag (commit C)";
# Debian takes both versions.
version=$("$BIN" --version | head -n 1 | awk '{print $2}')
[[ $version =~ ^[0-9][0-9A-Za-z.+~-]*$ ]] || die "unexpected --version output: $version"

rm -rf "$STAGE"
mkdir -p "$STAGE/DEBIAN" "$STAGE/usr/libexec" "$STAGE/usr/bin" "$STAGE/usr/share/qemu/vhost-user" \
    "$STAGE/usr/share/man/man1" "$STAGE/lib/systemd/system" \
    "$STAGE/usr/share/doc/xvirtiofsd/examples" \
    "$STAGE/usr/share/bash-completion/completions" "$STAGE/usr/share/zsh/vendor-completions" \
    "$STAGE/usr/share/fish/vendor_completions.d"

install -m 0755 "$BIN" "$STAGE/usr/libexec/xvirtiofsd"
strip --strip-unneeded "$STAGE/usr/libexec/xvirtiofsd"
ln -s ../libexec/xvirtiofsd "$STAGE/usr/bin/xvirtiofsd"
"$BIN" completions bash >"$STAGE/usr/share/bash-completion/completions/xvirtiofsd"
"$BIN" completions zsh >"$STAGE/usr/share/zsh/vendor-completions/_xvirtiofsd"
"$BIN" completions fish >"$STAGE/usr/share/fish/vendor_completions.d/xvirtiofsd.fish"

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

if [ "$STAGE_ONLY" = 1 ]; then
    echo "$STAGE"
    exit 0
fi

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
