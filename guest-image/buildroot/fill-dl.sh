#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fill Buildroot's download directory (build/buildroot/dl) from Debian source
# packages, so that the image builds without the internet.
#
# For every source the defconfig needs (SOURCES below) it asks apt for the
# Debian source package's .orig tarball (apt-get source --print-uris, then
# apt's own downloader, checked against the Sources index's sha256 and the
# sha256 pinned here) and puts it where Buildroot looks:
#   same   copied under the file name the package expects, whose own .hash
#          file checks it (Buildroot's packages: Debian's orig is
#          byte-identical to upstream's; xvirtiofs-gnu-stat: ours)
#   hash   another version than Buildroot's: copied under the name of that
#          version; patches/<pkg>/<pkg>.hash (BR2_GLOBAL_PATCH_DIR) gets its
#          sha256, and board/xvirtiofs/overrides.local sets the version
#   srcdir unpacked into build/buildroot/src/<dir>, used as
#          <PKG>_OVERRIDE_SRCDIR (board/xvirtiofs/overrides.local)
# Only the .orig is fetched: `apt-get source --download-only` stops at the
# first missing file, and this mirror lacks some .dsc and .debian.tar files
# whose .orig it has.
#
# Not from Debian (see docs/buildroot.md): host-fakeroot and host-patchelf
# are stubs in board/xvirtiofs/ (the host's fakeroot; no source of
# fakeroot 1.36 on the mirror, and Buildroot's patched patchelf 0.13 is not in
# Debian); host-makedevs and host-skeleton are part of Buildroot.
#
# Adds deb-src lines for bookworm and trixie on the machine's mirror when
# apt has none, and installs rsync (Buildroot needs it) through apt.
# Prints one line per source and, at the end, every source it could not supply;
# exits 1 if there is one.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=vmm-config/functions.sh
. "$HERE/../../vmm-config/functions.sh"
# shellcheck source=guest-image/buildroot/common.sh
. "$HERE/common.sh"

# BRPKG MODE DEBSRC=VERSION ORIG SHA256 TARGET
#   TARGET: the file name in dl/BRPKG/ (same, hash) or the directory in src/ (srcdir)
SOURCES=(
    "busybox same busybox=1:1.37.0-6 busybox_1.37.0.orig.tar.bz2 3311dff32e746499f4df0d5df04d7eb396382d7e108bb9250e7b519b837043a4 busybox-1.37.0.tar.bz2"
    "acl same acl=2.3.2-2 acl_2.3.2.orig.tar.xz 97203a72cae99ab89a067fe2210c1cbf052bc492b479eca7d226d9830883b0bd acl-2.3.2.tar.xz"
    "attr same attr=1:2.5.2-3 attr_2.5.2.orig.tar.xz f2e97b0ab7ce293681ab701915766190d607a1dba7fae8a718138150b700a70b attr-2.5.2.tar.xz"
    "fio hash fio=3.33-3 fio_3.33.orig.tar.gz d2410e13e0f379d061d077cc5ae325835bb7c6186aa7bafc1df954cbc9b014fc fio-3.33.tar.gz"
    "xvirtiofs-gnu-stat same coreutils=9.7-3 coreutils_9.7.orig.tar.xz e8bb26ad0293f9b5a1fc43fb42ba970e312c66ce92c1b0b16713d7500db251bf coreutils-9.7.tar.xz"
    "tar srcdir tar=1.35+dfsg-3.1 tar_1.35+dfsg.orig.tar.xz 9ae57e981c1e73c0eebc2b26c9b0c4497fe310ef1d516ea430efb5470b71f7a8 tar-1.35+dfsg"
)
SRC_LIST=/etc/apt/sources.list.d/xvirtiofs-src.list
PATCH_DIR=$HERE/patches
MISSING=()

print_help() {
    cat <<'HELP'
usage: guest-image/buildroot/fill-dl.sh
Fills build/buildroot/dl (and build/buildroot/src) from Debian source packages.
Also installs rsync and patchelf (apt) and adds deb-src lines when missing.
HELP
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# deb-src for bookworm and trixie on the mirror of the machine's deb lines
# (trixie's busybox 1.37.0 is the test that they are there).
ensure_deb_src() {
    local mirror='' f
    if apt-cache showsrc busybox 2>/dev/null | awk '/^Version: 1:1\.37\./ {f = 1} END {exit !f}'; then
        return 0
    fi
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        mirror=$(awk '$1 == "URIs:" && $2 ~ /\/debian\/?$/ {print $2; exit}' "$f")
        [ -z "$mirror" ] || break
    done
    if [ -z "$mirror" ]; then
        mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
            awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^https?:.*\/debian\/?$/) {print $i; exit}}')
    fi
    [ -n "$mirror" ] || die "no Debian mirror found in /etc/apt/sources.list*"
    say "adding deb-src lines for $mirror (bookworm, trixie) in $SRC_LIST"
    printf 'deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s main\n' \
        "$mirror" bookworm "$mirror" trixie | as_root tee "$SRC_LIST" >/dev/null
    apt_update 3 as_root || die "apt-get update failed"
}

ensure_host_tools() {
    local missing=() t
    for t in rsync patchelf; do
        command -v "$t" >/dev/null || missing+=("$t")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing ${missing[*]} (apt)"
    as_root apt-get install -y -q "${missing[@]}" >/dev/null || die "apt-get install ${missing[*]} failed"
}

# Download ORIG of DEBSRC=VERSION into DIR, checked against the index and SHA256.
fetch_orig() {
    local spec=$1 orig=$2 sha=$3 dir=$4 uri line
    if [ -f "$dir/$orig" ] && echo "$sha  $dir/$orig" | sha256sum -c --quiet - 2>/dev/null; then
        return 0
    fi
    line=$(apt-get source --print-uris -qq "$spec" 2>/dev/null | grep -F " $orig " | head -1) || true
    [ -n "$line" ] || { say "$spec: apt knows no $orig"; return 1; }
    uri=$(echo "$line" | awk '{print $1}' | tr -d "'")
    if ! /usr/lib/apt/apt-helper download-file "$uri" "$dir/$orig.part" "SHA256:$sha" >/dev/null 2>&1; then
        rm -f "$dir/$orig.part"
        say "$spec: $uri could not be downloaded (or its sha256 is not $sha)"
        return 1
    fi
    mv "$dir/$orig.part" "$dir/$orig"
}

write_hash() {
    local pkg=$1 sha=$2 file=$3 debsrc=$4 hf=$PATCH_DIR/$1/$1.hash
    mkdir -p "$PATCH_DIR/$pkg"
    {
        echo "# Debian's $debsrc .orig tarball (guest-image/buildroot/fill-dl.sh)"
        printf 'sha256  %s  %s\n' "$sha" "$file"
    } >"$hf.new"
    if cmp -s "$hf.new" "$hf"; then
        rm "$hf.new"
    else
        mv "$hf.new" "$hf"
        say "wrote ${hf#"$XVFS_ROOT"/}"
    fi
}

# Unpack ORIG into src/DIR (its top directory renamed to DIR). Buildroot's
# host build of tar skips autoreconf and touches the Makefile.in files
# (tar.mk, HOST_TAR_NO_AUTORECONF); OVERRIDE_SRCDIR skips its patch step, so
# that is done here.
unpack_srcdir() {
    local pkg=$1 orig=$2 dir=$3 tmp top
    if [ -f "$BR_OVERRIDE/$dir/.xvfs-from" ] && [ "$(cat "$BR_OVERRIDE/$dir/.xvfs-from")" = "$orig" ]; then
        return 0
    fi
    tmp=$(mktemp -d "$BR_OVERRIDE/unpack.XXXXXX")
    tar -xf "$BR_DL/debian/$orig" -C "$tmp"
    top=$(find "$tmp" -mindepth 1 -maxdepth 1 -type d | head -1)
    [ -n "$top" ] || die "$orig has no top directory"
    case "$pkg" in
        tar) touch "$top/src/Makefile.in" "$top/tests/Makefile.in" ;;
    esac
    echo "$orig" >"$top/.xvfs-from"
    rm -rf "${BR_OVERRIDE:?}/$dir"
    mv "$top" "$BR_OVERRIDE/$dir"
    rmdir "$tmp"
}

supply() {
    local pkg=$1 mode=$2 spec=$3 orig=$4 sha=$5 target=$6
    if ! fetch_orig "$spec" "$orig" "$sha" "$BR_DL/debian"; then
        MISSING+=("$pkg ($spec, $orig)")
        return 0
    fi
    case "$mode" in
        same | hash)
            mkdir -p "$BR_DL/$pkg"
            ln -f "$BR_DL/debian/$orig" "$BR_DL/$pkg/$target" 2>/dev/null ||
                cp "$BR_DL/debian/$orig" "$BR_DL/$pkg/$target"
            [ "$mode" = same ] || write_hash "$pkg" "$sha" "$target" "$spec"
            ;;
        srcdir) unpack_srcdir "$pkg" "$orig" "$target" ;;
    esac
    say "dl: $pkg <- Debian $spec ($orig, $mode)"
}

main() {
    local entry
    case "${1:-}" in
        -h | --help) print_help; return 0 ;;
        "") ;;
        *) print_help >&2; die "unexpected argument: $1" ;;
    esac
    need apt-get apt-cache sha256sum
    [ -x /usr/lib/apt/apt-helper ] || die "/usr/lib/apt/apt-helper not found"
    ensure_host_tools
    ensure_deb_src
    mkdir -p "$BR_DL/debian" "$BR_OVERRIDE"
    for entry in "${SOURCES[@]}"; do
        # shellcheck disable=SC2086 # the entry is six words
        supply $entry
    done
    if [ ${#MISSING[@]} -gt 0 ]; then
        say "could not supply from Debian: ${MISSING[*]}"
        return 1
    fi
    say "download directory complete: $BR_DL"
}

main "$@"
