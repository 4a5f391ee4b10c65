#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/filebench-compare.sh: xfilebench against Filebench 1.5-alpha3 on
# every stock personality (make bench-filebench-compare).
#
# 1. Builds Filebench from its public source (github filebench/filebench,
#    commit 22620e6, the tree that calls itself 1.5-alpha3) into a cache,
#    build/filebench/<rev>/ (its own --prefix there: installed nowhere
#    else), with autoconf, automake, libtool, flex and bison from Debian
#    (installed with apt-get when missing). Neither Debian nor PyPI carries
#    Filebench, so the source comes from, in this order: FILEBENCH_SRC (a
#    checkout, a bare git directory or a tar archive of that commit), the
#    cached archive build/filebench/filebench-<rev>.tar, or the bare git
#    mirror FILEBENCH_GIT (default /work/.mirror/filebench+filebench/repo);
#    it is checked against the tree hash of that commit and cached, so a
#    later run needs none of them. Nothing is downloaded.
# 2. Runs every personality of that commit's workloads/ (and oltp.f again
#    at its stock sizes) with both tools, one after the other, REPS times,
#    each time in a new empty directory, from the same copy of the file:
#    the overrides below as `set` lines before its first `define`, `run
#    SECS` in place of its `run` (or added). Filebench runs under
#    `setarch -R` (see the README: its own ASLR switch does nothing).
# 3. bench/filebench_compare_report.py writes report.md, report.json and
#    plot.png into the result directory.
#
# usage: bench/filebench-compare.sh [--reps N] [--secs S] [--only a.f,b.f] [--out DIR]
# Environment: FILEBENCH_SRC, FILEBENCH_GIT, XFILEBENCH (default
# host/target/release/xfilebench), SCRATCH (default /var/tmp).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
REV=22620e602cbbebad90c0bd041896ebccf70dbf5f
TREE=48df1620373204ca6db533d34a9fc8a459a28650
reps=3
secs=3
only=""
out=""
# The sizes of issue 36's comparison (bench/README-filebench.md), small
# enough for this 2-CPU host; the stock oltp run uses none of them.
OVERRIDES=(nfiles=200 nthreads=2 filesize=64k meanfilesize=16k meandirwidth=20 iosize=8k
    meaniosize=8k ndirs=50 nshadows=20 ndbwriters=2 usermode=2000)

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case $1 in
        --reps) reps=$2; shift 2 ;;
        --secs) secs=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
done

say() { printf 'filebench-compare: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

cache=$root/build/filebench
fbdir=$cache/${REV:0:7}
fb=$fbdir/inst/bin/filebench
xfb=${XFILEBENCH:-$root/host/target/release/xfilebench}

# The build tools, from Debian (the only registry that has them).
need_tools() {
    local missing=() p
    for p in autoconf automake libtool flex bison gcc make; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    command -v setarch >/dev/null || missing+=(util-linux)
    [ ${#missing[@]} -eq 0 ] && return 0
    [ "$(id -u)" -eq 0 ] || die "missing packages ${missing[*]}: apt-get install them (as root)"
    say "installing ${missing[*]} with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 ||
        { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; } ||
        die "apt-get install ${missing[*]} failed"
}

# The source tree of REV as a tar archive in the cache, checked by tree hash.
source_tar() {
    local tar=$cache/filebench-${REV:0:7}.tar src=${FILEBENCH_SRC:-} git=${FILEBENCH_GIT:-/work/.mirror/filebench+filebench/repo}
    local tmp=$cache/src-check
    mkdir -p "$cache"
    if [ ! -s "$tar" ]; then
        if [ -n "$src" ] && [ -f "$src" ]; then
            cp "$src" "$tar.part"
        elif [ -n "$src" ] && git --git-dir="$src" rev-parse -q --verify "$REV^{commit}" >/dev/null 2>&1; then
            git --git-dir="$src" archive --format=tar "$REV" >"$tar.part"
        elif [ -n "$src" ] && [ -d "$src" ]; then
            tar -C "$src" --exclude=.git -cf "$tar.part" .
        elif git --git-dir="$git" rev-parse -q --verify "$REV^{commit}" >/dev/null 2>&1; then
            git --git-dir="$git" archive --format=tar "$REV" >"$tar.part"
        else
            die "no Filebench source: set FILEBENCH_SRC to a checkout, bare git directory or tar of github filebench/filebench commit $REV (or put its tar at $tar)"
        fi
        mv "$tar.part" "$tar"
    fi
    # Check: the tree hash of what the archive holds.
    rm -rf "$tmp" && mkdir -p "$tmp" && tar -C "$tmp" -xf "$tar"
    local got
    got=$(cd "$tmp" && git init -q . && git add -A -f . && git write-tree)
    rm -rf "$tmp"
    [ "$got" = "$TREE" ] || { rm -f "$tar"; die "Filebench source tree $got is not $TREE (commit $REV)"; }
    printf '%s\n' "$tar"
}

build_filebench() {
    if [ -x "$fb" ] && [ -d "$fbdir/inst/lib/filebench" ]; then
        return 0
    fi
    need_tools
    local tar
    tar=$(source_tar)
    say "building Filebench ${REV:0:7} in $fbdir (about 3 minutes)"
    rm -rf "$fbdir" && mkdir -p "$fbdir/src"
    tar -C "$fbdir/src" -xf "$tar"
    (cd "$fbdir/src" && libtoolize -q && aclocal && autoheader && automake --add-missing 2>/dev/null &&
        autoconf && ./configure -q --prefix="$fbdir/inst" && make -s -j2 && make -s install) \
        >"$fbdir/build.log" 2>&1 || die "Filebench build failed: $fbdir/build.log"
    [ -x "$fb" ] || die "no $fb after the build"
}

# The personality file for a run: overrides before the first define,
# `run SECS` for its run.
prepare() {
    local src=$1 dst=$2 dir=$3 stock=$4
    awk -v dir="$dir" -v secs="$secs" -v stock="$stock" -v ov="${OVERRIDES[*]}" '
        function sets(  n, a, i, kv) {
            print "set $dir=" dir
            print "set $path=" dir
            if (stock == "1") return
            n = split(ov, a, " ")
            for (i = 1; i <= n; i++) { split(a[i], kv, "="); print "set $" kv[1] "=" kv[2] }
        }
        !done && /^[[:space:]]*(define|eventgen|create|run|psrun)([[:space:]]|$)/ { sets(); done = 1 }
        /^[[:space:]]*(run|psrun)([[:space:]]|$)/ { print "run " secs; ran = 1; next }
        { print }
        END { if (!done) sets(); if (!ran) print "run " secs }' "$src" >"$dst"
}

# Waits until no process of session SID is left (Filebench's workers end
# after its main process); kills what is left after 60 s.
reap_session() {
    local sid=$1 _
    for _ in $(seq 1 600); do
        pgrep -s "$sid" >/dev/null 2>&1 || return 0
        sleep 0.1
    done
    say "session $sid still has processes after 60 s: killing them"
    local p
    for p in $(pgrep -s "$sid"); do kill -9 "$p" 2>/dev/null || true; done
}

# run_one TOOL FILE OUT STOCK: one run in a new empty directory; OUT.f
# (the file run), OUT.out, OUT.rc and for xfilebench OUT.json.
run_one() {
    local tool=$1 f=$2 out=$3 stock=$4 rc=0 shm_before
    local work
    work=$(mktemp -d "${SCRATCH:-/var/tmp}/xvfs-fbcmp.XXXXXX")
    prepare "$f" "$work/w.f" "$work/data" "$stock"
    mkdir -p "$work/data"
    # tpcso.f preallocates about 170 GiB (literal sizes no override
    # changes): it runs on a 1 GiB tmpfs, where both tools meet ENOSPC at
    # once and say so, instead of filling this host's shared disk.
    local small=0
    if [ "$(basename "$f")" = tpcso.f ]; then
        if ! mount -t tmpfs -o size=1g xvfs-fbcmp "$work/data"; then
            echo "not run: tpcso.f needs about 170 GiB and no 1 GiB tmpfs could be mounted" >"$out.out"
            echo 125 >"$out.rc"
            rm -rf "$work"
            return 0
        fi
        small=1
    fi
    cp "$work/w.f" "$out.f"
    shm_before=$(ls /tmp/filebench-shm-* 2>/dev/null || true)
    local tmo=$((secs * 6 + 180))
    if [ "$tool" = filebench ]; then
        (cd "$work" && exec setsid timeout -s KILL "$tmo" setarch "$(uname -m)" -R "$fb" -f w.f) \
            >"$out.out" 2>&1 </dev/null &
    else
        (cd "$work" && exec setsid timeout -s KILL "$tmo" "$xfb" -f w.f --json "$out.json") \
            >"$out.out" 2>&1 </dev/null &
    fi
    # setsid (not a group leader here, so it does not fork) makes this
    # process the leader of a session of its own: Filebench's workers stay
    # in it, and the run is over when the session is empty.
    local pid=$!
    wait "$pid" || rc=$?
    reap_session "$pid"
    echo "$rc" >"$out.rc"
    [ "$small" -eq 0 ] || umount "$work/data"
    # Filebench leaves its shared memory file behind when it fails.
    local s
    for s in /tmp/filebench-shm-*; do
        [ -e "$s" ] || continue
        grep -qxF "$s" <<<"$shm_before" || rm -f "$s"
    done
    rm -rf "$work"
}

main() {
    [ -x "$xfb" ] || die "$xfb missing: run 'make build'"
    build_filebench
    local wl=$fbdir/src/workloads
    [ -n "$out" ] || out=$root/bench/results/filebench-compare-$(date -u +%Y%m%d-%H%M%S)-$(git -C "$root" rev-parse --short HEAD)
    mkdir -p "$out/raw"
    local -a files=()
    local f name
    local -a all=()
    for f in "$wl"/*.f; do
        name=$(basename "$f")
        all+=("$name")
        if [ "$name" = oltp.f ]; then all+=(oltp-stock.f); fi
    done
    for name in "${all[@]}"; do
        if [ -z "$only" ] || [[ ",$only," == *",$name,"* ]]; then files+=("$name"); fi
    done
    [ ${#files[@]} -gt 0 ] || die "no personality selected"
    {
        echo "date: $(date -u +%FT%TZ)"
        echo "xfilebench: $(git -C "$root" rev-parse HEAD) $(git -C "$root" status --porcelain -- host/filebench | grep -q . && echo dirty || echo clean)"
        echo "filebench: $REV (1.5-alpha3), $fb"
        echo "host: $(uname -srm), $(nproc) CPUs, $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
        echo "scratch: ${SCRATCH:-/var/tmp} ($(findmnt -n -o FSTYPE -T "${SCRATCH:-/var/tmp}"))"
        echo "reps: $reps, secs: $secs"
        echo "overrides: ${OVERRIDES[*]} (none for oltp-stock.f)"
        echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    } >"$out/env.txt"
    local n=${#files[@]} k=0 rep tool stock src
    say "${n} personalities x 2 tools x ${reps} reps of ${secs} s into $out"
    for name in "${files[@]}"; do
        k=$((k + 1))
        stock=0
        src=$wl/$name
        if [ "$name" = oltp-stock.f ]; then
            stock=1
            src=$wl/oltp.f
        fi
        mkdir -p "$out/raw/${name%.f}"
        for rep in $(seq 1 "$reps"); do
            # Alternate which tool goes first, so neither always gets the
            # page cache and the load the other left.
            for tool in $( ((rep % 2)) && echo "filebench xfilebench" || echo "xfilebench filebench"); do
                run_one "$tool" "$src" "$out/raw/${name%.f}/$tool.rep$rep" "$stock"
            done
        done
        say "[$k/$n] $name done"
    done
    echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/env.txt"
    /usr/bin/python3 "$here/filebench_compare_report.py" "$out"
}

main
