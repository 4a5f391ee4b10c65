#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Assemble the external toolchain of the Buildroot image in build/buildroot/toolchain:
# Debian's gcc-12 (the installed package, copied so that it is relocated) with a
# clean sysroot made of bookworm .debs, so that nothing of the build host leaks
# into target links. Buildroot uses it as a "custom, pre-installed" external
# toolchain (configs/xvirtiofs_defconfig).
#
# Why not /usr directly: Debian's native gcc has no --with-sysroot, so Buildroot
# would take / as the sysroot (copying all of /usr into staging), and gcc
# searches its prefix-relative ../../../x86_64-linux-gnu/ before any --sysroot,
# so host libraries would be linked in. A copy of gcc in another prefix only
# sees its own lib/gcc/ and the sysroot. See docs/buildroot.md.
#
#   bin/x86_64-linux-gnu-{gcc,cpp}  wrappers: gcc-12 --sysroot=<sysroot> "$@"
#                                 (Buildroot's own wrapper adds its --sysroot
#                                 later; the last one wins)
#   bin/x86_64-linux-gnu-{gcc,cpp}-12  copies of /usr/bin/x86_64-linux-gnu-{gcc,cpp}-12
#   bin/x86_64-linux-gnu-gcc-{ar,nm,ranlib}  copies of gcc-12's
#   bin/x86_64-linux-gnu-{ar,as,ld,...}  links to the host's binutils
#   lib/gcc/x86_64-linux-gnu/12/  copy of the installed one (C only)
#   sysroot/                      dpkg-deb -x of SYSROOT_DEBS
# Cached: rebuilt only when the gcc-12 or a sysroot package version changes.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=vmm-config/functions.sh
. "$HERE/../../vmm-config/functions.sh"
# shellcheck source=guest-image/buildroot/common.sh
. "$HERE/common.sh"

TRIPLET=x86_64-linux-gnu
GCC_MAJOR=12
# What the target links against: the C library (the same 2.36 as the host, so
# host-built binaries such as xfilebench run in the guest), the kernel headers,
# libcrypt, and gcc's runtime libraries.
SYSROOT_DEBS=(libc6 libc6-dev linux-libc-dev libcrypt1 libcrypt-dev libgcc-s1 libgomp1 libatomic1)
BINUTILS=(addr2line ar as c++filt elfedit gprof ld ld.bfd nm objcopy objdump ranlib readelf size strings strip)

print_help() {
    cat <<'HELP'
usage: guest-image/buildroot/toolchain.sh [--force]
Builds build/buildroot/toolchain (gcc-12 + bookworm sysroot) for Buildroot (cached).
HELP
}

# The version of a package to put in the sysroot: the installed one (so the
# target's libc equals the host's), else apt's candidate.
deb_version() {
    local v
    v=$(installed_version "$1")
    [ -n "$v" ] || v=$(apt-cache policy "$1" | awk '$1 == "Candidate:" {print $2}')
    if [ -z "$v" ] || [ "$v" = "(none)" ]; then
        die "apt knows no version of $1"
    fi
    printf '%s\n' "$v"
}

toolchain_key() {
    local p
    {
        echo "gcc-$GCC_MAJOR $(installed_version "gcc-$GCC_MAJOR")"
        echo "cpp-$GCC_MAJOR $(installed_version "cpp-$GCC_MAJOR")"
        echo "libgcc-$GCC_MAJOR-dev $(installed_version "libgcc-$GCC_MAJOR-dev")"
        for p in "${SYSROOT_DEBS[@]}"; do
            echo "$p $(deb_version "$p")"
        done
        sha256sum "$0"
    } | sha256sum | cut -c1-16
}

make_sysroot() {
    local sysroot=$1 tmp p deb
    tmp=$(mktemp -d "$BR_WORK/debs.XXXXXX")
    for p in "${SYSROOT_DEBS[@]}"; do
        # The installed version may be gone from the mirror (a point release
        # replaced it): then the newest one.
        (cd "$tmp" && { apt-get download -q "$p=$(deb_version "$p")" || apt-get download -q "$p"; } 2>&1 |
            grep -v unsandboxed >&2) || die "apt-get download $p failed"
        ls "$tmp"/"$p"_*.deb >/dev/null 2>&1 || die "apt-get download $p failed"
    done
    mkdir -p "$sysroot"
    for deb in "$tmp"/*.deb; do
        dpkg-deb -x "$deb" "$sysroot"
    done
    rm -rf "$tmp"
    # Not for a sysroot: documentation (with links to other packages' docs),
    # gdb scripts, and etc/ld.so.conf.d, a directory Buildroot's "ld*.so.*"
    # library pattern matches (copy_toolchain_lib_root then fails).
    rm -rf "$sysroot/usr/share/doc" "$sysroot/usr/share/lintian" "$sysroot/usr/share/gdb" \
        "$sysroot/etc/ld.so.conf.d"
    # Absolute links in the debs (e.g. usr/lib/x86_64-linux-gnu/libcrypt.so ->
    # /lib/...) would point at the host: make them relative to the sysroot.
    local link target
    while IFS= read -r -d '' link; do
        target=$(readlink "$link")
        case "$target" in
            /*) ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$sysroot$target")" "$link" ;;
        esac
    done < <(find "$sysroot" -type l -print0)
}

make_gcc() {
    local tc=$1 gccdir f t name
    gccdir=$tc/lib/gcc/$TRIPLET/$GCC_MAJOR
    if [ ! -x "/usr/bin/$TRIPLET-gcc-$GCC_MAJOR" ] || [ ! -x "/usr/lib/gcc/$TRIPLET/$GCC_MAJOR/cc1" ]; then
        die "gcc-$GCC_MAJOR is not installed (apt-get install gcc-$GCC_MAJOR)"
    fi
    mkdir -p "$tc/bin" "$tc/lib/gcc/$TRIPLET" "$tc/$TRIPLET/bin"
    cp "/usr/bin/$TRIPLET-gcc-$GCC_MAJOR" "/usr/bin/$TRIPLET-cpp-$GCC_MAJOR" "$tc/bin/"
    # gcc-ar, gcc-nm, gcc-ranlib (with the LTO plugin): Buildroot's AR, NM
    # and RANLIB for gcc >= 4.7.
    for t in ar nm ranlib; do
        cp "/usr/bin/$TRIPLET-gcc-$t-$GCC_MAJOR" "$tc/bin/$TRIPLET-gcc-$t"
    done
    cp -a "/usr/lib/gcc/$TRIPLET/$GCC_MAJOR" "$gccdir"
    # C only: without cc1plus and libstdc++ Buildroot sees no C++ (check_cplusplus).
    rm -f "$gccdir"/cc1plus "$gccdir"/libstdc++* "$gccdir"/libsupc++*
    # The .so links point at ../../../x86_64-linux-gnu/, the host's library
    # directory: point them into the sysroot, or drop them.
    while IFS= read -r -d '' f; do
        t=$(readlink "$f")
        name=$(basename "$t")
        rm -f "$f"
        if [ -e "$tc/sysroot/usr/lib/$TRIPLET/$name" ]; then
            ln -s "../../../../sysroot/usr/lib/$TRIPLET/$name" "$f"
        elif [ -e "$tc/sysroot/lib/$TRIPLET/$name" ]; then
            ln -s "../../../../sysroot/lib/$TRIPLET/$name" "$f"
        fi
    done < <(find "$gccdir" -maxdepth 1 -type l -lname '../../../*' -print0)
    for t in "${BINUTILS[@]}"; do
        [ -x "/usr/bin/$TRIPLET-$t" ] || die "/usr/bin/$TRIPLET-$t missing (apt-get install binutils)"
        ln -sfn "/usr/bin/$TRIPLET-$t" "$tc/bin/$TRIPLET-$t"
    done
    # gcc and gcc-ar look for as, ld, ar... in <prefix>/<triplet>/bin first.
    for t in as ld ar nm ranlib; do
        ln -sfn "/usr/bin/$TRIPLET-$t" "$tc/$TRIPLET/bin/$t"
    done
    for t in gcc cpp; do
        cat >"$tc/bin/$TRIPLET-$t" <<WRAPPER
#!/bin/sh
# $t-$GCC_MAJOR with the bookworm sysroot (guest-image/buildroot/toolchain.sh).
here=\$(dirname "\$0")
exec "\$here/$TRIPLET-$t-$GCC_MAJOR" --sysroot="\$here/../sysroot" "\$@"
WRAPPER
        chmod 0755 "$tc/bin/$TRIPLET-$t"
    done
}

# Compile and link a test program; the link must use only sysroot files.
check_toolchain() {
    local tc=$1 tmp trace
    tmp=$(mktemp -d)
    printf '#include <stdio.h>\nint main(void) { puts("ok"); return 0; }\n' >"$tmp/t.c"
    "$tc/bin/$TRIPLET-gcc" -o "$tmp/t" "$tmp/t.c" -Wl,--trace >"$tmp/trace" 2>&1 ||
        { cat "$tmp/trace" >&2; die "the toolchain cannot link a test program"; }
    trace=$(grep -E '\.(so|a|o)' "$tmp/trace" | grep -vE "^$tc/|^/tmp/|^$tmp" || true)
    [ "$("$tmp/t")" = ok ] || die "the test program does not run"
    rm -rf "$tmp"
    [ -z "$trace" ] || die "the toolchain links host files: $trace"
}

main() {
    local force='' key tc=$BR_TOOLCHAIN
    case "${1:-}" in
        -h | --help) print_help; return 0 ;;
        --force) force=1 ;;
        "") ;;
        *) print_help >&2; die "unexpected argument: $1" ;;
    esac
    need apt-get apt-cache dpkg-deb realpath
    mkdir -p "$BR_WORK"
    key=$(toolchain_key)
    if [ -z "$force" ] && [ -f "$tc/.key" ] && [ "$(cat "$tc/.key")" = "$key" ]; then
        say "toolchain: cached $tc"
        return 0
    fi
    say "toolchain: gcc-$GCC_MAJOR $(installed_version "gcc-$GCC_MAJOR") + sysroot of ${SYSROOT_DEBS[*]}"
    rm -rf "$tc" "$tc.part"
    make_sysroot "$tc.part/sysroot"
    make_gcc "$tc.part"
    mv "$tc.part" "$tc"
    check_toolchain "$tc"
    echo "$key" >"$tc/.key"
    say "toolchain: $tc ($(du -sm "$tc" | cut -f1) MiB)"
}

main "$@"
