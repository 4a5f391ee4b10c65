#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build the xvirtiofs guest: a PVH vmlinux and an uncompressed cpio initramfs.
#
# Offline from Debian packages (no install, no chroot):
#   kernel     newest linux-image-6.12.*-amd64-unsigned in bookworm-backports,
#              fetched with apt-get download, unpacked with dpkg-deb -x; the
#              zstd payload of its bzImage is decompressed to the ELF vmlinux
#              (PVH entry; boots ~3 s faster under TCG than the bzImage).
#              Everything virtio-fs needs is built in (=y). Two modules come
#              along, decompressed: button.ko (ACPI power button) and
#              evdev.ko, so that `virsh shutdown` / QMP system_powerdown
#              powers the guest off cleanly (/init watches the button).
#   initramfs  busybox (static) + fio, setfacl, getfacl, GNU stat (as gnu-stat)
#              and every library ldd lists + the files
#              in guest-image/rootfs/ (/init, /bin/xvfs-automount) +
#              guest-image/overlay/ (if present) + the lines "HOST_PATH GUEST_PATH"
#              of build/guest/extra-files.txt (if present). Uncompressed,
#              because a compressed initrd costs ~2.4 s of boot under TCG.
#
# --kernel 6.1|7 (issue 31: the guest-kernel matrix) takes the kernel from the
# private apt of vmm-config/apt-private.sh instead, into build/guest-<V>/:
#   6.1   newest linux-image-6.1.0-*-amd64-unsigned (bookworm); virtiofs and
#         fuse are modules there, so fuse.ko and virtiofs.ko join the two
#         above (/init insmods /lib/modules/*.ko in name order: fuse first)
#   7     newest linux-binary-7.*-amd64 (trixie-backports or sid): the image
#         is in linux-binary-<v>, the config in linux-base-<v>, the modules
#         in linux-modules-<v>
#   6.12  the default above (build/guest/)
#
# Outputs (stable names used by vmm-config/run-vm):
#   build/guest/vmlinux          -> kernel-<version>/vmlinux
#   build/guest/initramfs.cpio   -> initramfs-<key>.cpio
# Both are cached: the kernel by package version, the initramfs by a hash of
# its inputs, so a second run does nothing.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=vmm-config/apt-private.sh
. "$HERE/../vmm-config/apt-private.sh"

SERIES=6.12
OUT=
ROOTFS_SRC=$HERE/rootfs
OVERLAY=$HERE/overlay
EXTRA_LIST=$OUT/extra-files.txt
KERNEL_PATTERN='^linux-image-6\.12\.[0-9]+\+deb12-amd64-unsigned$'
# Modules /init loads (kernel/ paths in the package; none has a dependency).
KERNEL_MODULES=(drivers/acpi/button drivers/input/evdev)
KERNEL_DIR=

print_help() {
    cat <<'HELP'
usage: guest-image/build.sh [--force] [--kernel-only] [--kernel 6.1|6.12|7]
Builds build/guest/vmlinux and build/guest/initramfs.cpio (cached).
  --kernel V     the guest kernel series (default 6.12, or XVFS_GUEST_KERNEL);
                 6.1 and 7 go to build/guest-V/
  --force        rebuild both even if cached
  --kernel-only  only the kernel and its modules (the Buildroot image uses them)
Environment: XVFS_GUEST_DIR (output directory, default build/guest or
build/guest-V), XVFS_GUEST_KERNEL (default of --kernel)
HELP
}

# Newest package name and version of the 6.12 backports kernel. apt-cache
# takes about a second per call, so the answer is cached until apt's package
# lists change.
find_kernel_package() {
    local key pkg ver lists_key cache=$OUT/kernel-package.txt
    lists_key=$(stat -c '%n %Y' /var/lib/apt/lists/*_Packages* 2>/dev/null | sha256sum | cut -c1-16)
    if [ -z "$FORCE" ] && [ -f "$cache" ] && read -r key pkg ver <"$cache" && [ "$key" = "$lists_key" ]; then
        printf '%s %s\n' "$pkg" "$ver"
        return 0
    fi
    if [ "$SERIES" != 6.12 ]; then
        # The other series: the private apt lists (all suites).
        lists_key=$(stat -c '%n %Y' "$XVFS_APT_DIR"/lists/*_Packages* 2>/dev/null | sha256sum | cut -c1-16)
        if [ -z "$FORCE" ] && [ -f "$cache" ] && read -r key pkg ver <"$cache" && [ "$key" = "$lists_key" ]; then
            printf '%s %s\n' "$pkg" "$ver"
            return 0
        fi
        read -r pkg ver < <(xvfs_apt_newest "$KERNEL_PATTERN") || true
        if [ -z "$pkg" ] || [ -z "$ver" ]; then
            die "no package matching $KERNEL_PATTERN in the private apt lists"
        fi
        lists_key=$(stat -c '%n %Y' "$XVFS_APT_DIR"/lists/*_Packages* 2>/dev/null | sha256sum | cut -c1-16)
        echo "$lists_key $pkg $ver" >"$cache"
        printf '%s %s\n' "$pkg" "$ver"
        return 0
    fi
    pkg=$(apt-cache search --names-only "$KERNEL_PATTERN" | awk '{print $1}' | sort -V | tail -1)
    [ -n "$pkg" ] || die "no linux-image-6.12.*-amd64-unsigned in the apt lists; run 'make deps' (adds bookworm-backports) first"
    ver=$(apt-cache madison "$pkg" | awk -F'|' '{gsub(/ /, "", $2); print $2}' | sort -V | tail -1)
    [ -n "$ver" ] || die "apt-cache knows no version of $pkg"
    echo "$lists_key $pkg $ver" >"$cache"
    printf '%s %s\n' "$pkg" "$ver"
}

is_elf() {
    [ "$(head -c 4 "$1" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]
}

# Decompress the zstd payload of a bzImage (the method of the kernel's
# scripts/extract-vmlinux): try every zstd magic until one yields an ELF.
extract_vmlinux() {
    local bzimage=$1 out=$2 off
    # (cut keeps the binary match away from read, which chokes on it in UTF-8 locales)
    while read -r off; do
        # zstd complains about the bytes after the frame; the ELF check decides.
        tail -c "+$((off + 1))" "$bzimage" | zstd -dcq >"$out" 2>/dev/null || true
        if [ -s "$out" ] && is_elf "$out"; then
            return 0
        fi
    done < <(LC_ALL=C grep -obUaP '\x28\xb5\x2f\xfd' "$bzimage" | cut -d: -f1)
    # Older kernels (and other configs) compress with xz.
    while read -r off; do
        tail -c "+$((off + 1))" "$bzimage" | xz -dcq >"$out" 2>/dev/null || true
        if [ -s "$out" ] && is_elf "$out"; then
            return 0
        fi
    done < <(LC_ALL=C grep -obUaP '\xfd\x37\x7a\x58\x5a\x00' "$bzimage" | cut -d: -f1)
    rm -f "$out"
    die "no zstd- or xz-compressed ELF found in $bzimage"
}

# Copy KERNEL_MODULES out of an unpacked package into DIR/modules, decompressed.
extract_modules() {
    local x=$1 dir=$2 m src name
    mkdir -p "$dir/modules"
    for m in "${KERNEL_MODULES[@]}"; do
        src=$(find "$x" -path "*/lib/modules/*/kernel/$m.ko*" | head -1)
        [ -n "$src" ] || die "the kernel package has no $m.ko"
        name=$(basename "$m").ko
        decompress_module "$src" "$dir/modules/$name"
    done
}

# decompress_module SRC OUT: a .ko, .ko.xz, .ko.zst or .ko.gz to a plain .ko.
decompress_module() {
    case "$1" in
        *.ko.xz) xz -dc "$1" >"$2" ;;
        *.ko.zst) zstd -dcq "$1" >"$2" ;;
        *.ko.gz) gzip -dc "$1" >"$2" ;;
        *.ko) cp "$1" "$2" ;;
        *) die "unexpected module file $1" ;;
    esac
    is_elf "$2" || die "$1 did not decompress to an ELF module"
}

# extract_module_closure X DIR NAME...: the modules NAME (by module name,
# e.g. virtio_pci) and everything they depend on (the depends= of their
# .modinfo; the packages ship no modules.dep), dependencies first, into
# DIR/modules as vNN-NAME.ko: /init insmods /lib/modules/*.ko in name order,
# so they load after button.ko and evdev.ko, in this order.
extract_module_closure() {
    local x=$1 dir=$2 f n
    shift 2
    local -A path=() seen=()
    local -a order=()
    while IFS= read -r f; do
        n=$(basename "$f")
        n=${n%%.ko*}
        path[${n//-/_}]=$f
    done < <(find "$x" -path '*/lib/modules/*/kernel/*' -name '*.ko*')
    visit() {
        local m=$1 dep deps
        [ -z "${seen[$m]:-}" ] || return 0
        seen[$m]=1
        [ -n "${path[$m]:-}" ] || die "the kernel packages have no module $m"
        decompress_module "${path[$m]}" "$dir/modules/tmp-$m.ko"
        deps=$(tr '\0' '\n' <"$dir/modules/tmp-$m.ko" | sed -n 's/^depends=//p' | head -n 1)
        for dep in ${deps//,/ }; do
            visit "${dep//-/_}"
        done
        order+=("$m")
    }
    for n in "$@"; do
        visit "$n"
    done
    local i=1
    for n in "${order[@]}"; do
        mv "$dir/modules/tmp-$n.ko" "$dir/modules/v$(printf %02d "$i")-$n.ko"
        i=$((i + 1))
    done
    say "kernel: modules for virtio-fs, in load order: ${order[*]}"
}

kernel_cached() {
    local dir=$1 m
    [ -s "$dir/vmlinux" ] && is_elf "$dir/vmlinux" || return 1
    for m in "${KERNEL_MODULES[@]}"; do
        [ -s "$dir/modules/$(basename "$m").ko" ] || return 1
    done
}

# download_kernel PKG VER DIR: the packages holding the kernel, its config
# and the modules we need, into DIR.
download_kernel() {
    local pkg=$1 ver=$2 tmp=$3 x
    if [ "$SERIES" = 6.12 ]; then
        (cd "$tmp" && apt-get download -q "$pkg=$ver" 2>&1 | grep -v 'unsandboxed' >&2) \
            || die "apt-get download $pkg=$ver failed"
        return 0
    fi
    local -a pkgs=("$pkg=$ver")
    case "$pkg" in
        linux-binary-*)
            x=${pkg#linux-binary-}
            pkgs+=("linux-base-$x=$ver" "linux-modules-$x=$ver")
            ;;
    esac
    (cd "$tmp" && xvfs_apt apt-get download "${pkgs[@]}" 2>&1 | grep -v 'unsandboxed' >&2) \
        || die "apt-get download ${pkgs[*]} failed"
}

build_kernel() {
    local pkg ver dir tmp vmlinuz config
    read -r pkg ver < <(find_kernel_package)
    dir=$OUT/kernel-${ver//[^A-Za-z0-9.+~-]/_}
    KERNEL_DIR=$dir
    if [ -z "$FORCE" ] && kernel_cached "$dir"; then
        say "kernel: cached $pkg $ver"
    else
        say "kernel: downloading $pkg $ver"
        need apt-get dpkg-deb zstd xz
        tmp=$(mktemp -d "$OUT/kernel-tmp.XXXXXX")
        TMP_DIRS+=("$tmp")
        download_kernel "$pkg" "$ver" "$tmp"
        local deb
        for deb in "$tmp"/*.deb; do
            dpkg-deb -x "$deb" "$tmp/x"
        done
        vmlinuz=$(find "$tmp/x" \( -path '*/boot/vmlinuz-*' -o -path '*/lib/modules/*/vmlinuz' \) | head -1)
        [ -n "$vmlinuz" ] || die "$pkg contains no /boot/vmlinuz-* (nor lib/modules/*/vmlinuz)"
        rm -rf "$dir"
        mkdir -p "$dir"
        extract_vmlinux "$vmlinuz" "$dir/vmlinux.part"
        config=$(find "$tmp/x" \( -path '*/boot/config-*' -o -path '*/lib/modules/*/config' \) | head -1)
        [ -n "$config" ] || die "no kernel config in the packages of $pkg"
        cp "$config" "$dir/config"
        extract_modules "$tmp/x" "$dir"
        # virtio-fs as modules (6.1: virtio, the PCI transport, fuse and
        # virtiofs are all =m): take them along with their dependencies.
        local -a vmods=()
        grep -q '^CONFIG_VIRTIO_PCI=m' "$dir/config" && vmods+=(virtio_pci)
        grep -q '^CONFIG_FUSE_FS=m' "$dir/config" && vmods+=(fuse)
        grep -q '^CONFIG_VIRTIO_FS=m' "$dir/config" && vmods+=(virtiofs)
        [ "${#vmods[@]}" -eq 0 ] || extract_module_closure "$tmp/x" "$dir" "${vmods[@]}"
        echo "$pkg $ver" >"$dir/package"
        mv "$dir/vmlinux.part" "$dir/vmlinux"
        rm -rf "$tmp"
        say "kernel: $dir/vmlinux ($(du -m "$dir/vmlinux" | cut -f1) MiB ELF)"
    fi
    ln -sfn "$(basename "$dir")/vmlinux" "$OUT/vmlinux"
}

# "HOST GUEST" pairs from extra-files.txt (comments and blank lines skipped).
extra_files() {
    [ -f "$EXTRA_LIST" ] || return 0
    grep -vE '^[[:space:]]*(#|$)' "$EXTRA_LIST" || true
}

pkg_version() {
    dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo none
}

# A hash of everything that goes into the initramfs.
initramfs_key() {
    local host guest
    {
        echo "busybox-static $(pkg_version busybox-static)"
        echo "fio $(pkg_version fio)"
        echo "acl $(pkg_version acl)"
        echo "coreutils $(pkg_version coreutils)"
        echo "libc6 $(pkg_version libc6)"
        sha256sum <"$0"   # (its content, not the path it was called by)
        (cd "$KERNEL_DIR/modules" && sha256sum ./*.ko)
        (cd "$ROOTFS_SRC" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
        if [ -d "$OVERLAY" ]; then
            (cd "$OVERLAY" && find . \( -type f -o -type l \) -print0 | sort -z | xargs -0 -r sha256sum)
        fi
        while read -r host guest; do
            echo "$guest $(sha256sum <"$host" | cut -d' ' -f1)"
        done < <(extra_files)
    } | sha256sum | cut -c1-16
}

# Copy a host file to the same path under the staging root, following links.
copy_host_file() {
    local src=$1 root=$2
    [ -e "$root$src" ] && return 0
    mkdir -p "$root$(dirname "$src")"
    cp -L "$src" "$root$src"
}

# Copy the shared libraries of a dynamic ELF (nothing for static or scripts).
copy_libs() {
    local bin=$1 root=$2 lib
    ldd "$bin" >/dev/null 2>&1 || return 0
    for lib in $(ldd "$bin" | grep -oE '/[^ ]+' | sort -u); do
        copy_host_file "$lib" "$root"
    done
}

stage_rootfs() {
    local root=$1 applet host guest busybox fio
    busybox=$(command -v busybox) || die "busybox not found; run 'make deps'"
    fio=$(command -v fio) || die "fio not found; run 'make deps'"
    if ldd "$busybox" >/dev/null 2>&1; then
        die "$busybox is dynamically linked; install busybox-static"
    fi
    mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,mnt/shared,root,etc}
    cp "$busybox" "$root/bin/busybox"
    for applet in $("$busybox" --list-full); do
        [ -e "$root/$applet" ] || ln -s /bin/busybox "$root/$applet"
    done
    cp "$fio" "$root/usr/bin/fio"
    copy_libs "$fio" "$root"
    # POSIX ACL tools (package acl), and GNU stat as gnu-stat (busybox's
    # has no birth time, %W): for the tests of --posix-acl and STATX.
    local tool
    for tool in setfacl getfacl stat; do
        command -v "$tool" >/dev/null || die "$tool not found; run 'make deps'"
    done
    cp "$(command -v setfacl)" "$root/usr/bin/setfacl"
    cp "$(command -v getfacl)" "$root/usr/bin/getfacl"
    cp "$(command -v stat)" "$root/usr/bin/gnu-stat"
    for tool in setfacl getfacl gnu-stat; do
        copy_libs "$root/usr/bin/$tool" "$root"
    done
    # Kernel opens /dev/console before /init mounts devtmpfs.
    if [ "$(id -u)" -eq 0 ]; then
        mknod -m 600 "$root/dev/console" c 5 1
    fi
    mkdir -p "$root/lib/modules"
    cp "$KERNEL_DIR"/modules/*.ko "$root/lib/modules/"
    cp -a "$ROOTFS_SRC/." "$root/"
    if [ -d "$OVERLAY" ]; then
        say "initramfs: adding $OVERLAY"
        cp -a "$OVERLAY/." "$root/"
    fi
    while read -r host guest; do
        [ -n "$guest" ] || die "$EXTRA_LIST: line '$host' needs 'HOST_PATH GUEST_PATH'"
        [ -e "$host" ] || die "$EXTRA_LIST: $host does not exist"
        say "initramfs: adding $host -> $guest"
        mkdir -p "$root$(dirname "$guest")"
        cp -L "$host" "$root$guest"
        copy_libs "$host" "$root"
    done < <(extra_files)
}

build_initramfs() {
    local key cpio root
    key=$(initramfs_key)
    cpio=$OUT/initramfs-$key.cpio
    if [ -z "$FORCE" ] && [ -s "$cpio" ]; then
        say "initramfs: cached $cpio"
    else
        need cpio ldd
        root=$(mktemp -d "$OUT/rootfs-tmp.XXXXXX")
        TMP_DIRS+=("$root")
        stage_rootfs "$root"
        (cd "$root" && find . -print0 | LC_ALL=C sort -z \
            | cpio --null -o -H newc --owner 0:0 --quiet) >"$cpio.part"
        mv "$cpio.part" "$cpio"
        rm -rf "$root"
        # Drop initramfs images of older inputs.
        find "$OUT" -maxdepth 1 -name 'initramfs-*.cpio' ! -name "$(basename "$cpio")" -delete
        say "initramfs: $cpio ($(du -m "$cpio" | cut -f1) MiB, uncompressed cpio)"
    fi
    ln -sfn "$(basename "$cpio")" "$OUT/initramfs.cpio"
}

# SERIES -> OUT and KERNEL_PATTERN.
select_series() {
    case "$SERIES" in
        6.12) OUT=${XVFS_GUEST_DIR:-$XVFS_ROOT/build/guest} ;;
        6.1)
            OUT=${XVFS_GUEST_DIR:-$XVFS_ROOT/build/guest-6.1}
            KERNEL_PATTERN='^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$'
            ;;
        7)
            OUT=${XVFS_GUEST_DIR:-$XVFS_ROOT/build/guest-7}
            KERNEL_PATTERN='^linux-binary-7\.[0-9.]+\+deb[0-9]+-amd64$'
            ;;
        *) die "--kernel must be 6.1, 6.12 or 7, not '$SERIES'" ;;
    esac
    EXTRA_LIST=$OUT/extra-files.txt
}

TMP_DIRS=()
cleanup() {
    local d
    for d in "${TMP_DIRS[@]}"; do
        rm -rf "$d"
    done
    return 0
}

main() {
    local kernel_only=''
    FORCE=
    SERIES=${XVFS_GUEST_KERNEL:-6.12}
    while [ $# -gt 0 ]; do
        case "$1" in
            -h | --help) print_help; return 0 ;;
            --force) FORCE=1 ;;
            --kernel-only) kernel_only=1 ;;
            --kernel) [ $# -ge 2 ] || die "--kernel needs 6.1, 6.12 or 7"; SERIES=$2; shift ;;
            *) print_help >&2; die "unexpected argument: $1" ;;
        esac
        shift
    done
    select_series
    mkdir -p "$OUT"
    trap cleanup EXIT
    [ "$SERIES" = 6.12 ] || xvfs_apt_update || die "private apt-get update failed"
    build_kernel
    if [ -n "$kernel_only" ]; then
        say "guest kernel ready: $OUT/vmlinux"
        return 0
    fi
    build_initramfs
    say "guest image ready: $OUT/vmlinux $OUT/initramfs.cpio"
}

main "$@"
