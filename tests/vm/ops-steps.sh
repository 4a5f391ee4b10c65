#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# File-system operations exercised by tests/vm/test_ops.sh. They run twice with
# the same busybox tools: in the guest on the virtio-fs share and on the host
# in a scratch directory. Usage: ops-steps.sh WORKDIR METADIR
#
# Prints a transcript: "OK name" or "FAIL name rc=N" per step, followed by the
# step's output as "  | line". Every output is deterministic (no times, inode
# numbers or free space), so the guest and host transcripts must be equal.
set -u
WORK=$1
META=$2
export TZ=UTC
umask 022
cd "$WORK" || exit 1

s_mkdir() { mkdir -p d1/d2/d3 && mkdir empty && ls -d d1/d2/d3 empty; }
s_write() { echo hello >f1 && printf 'line2\n' >>f1 && cat f1; }
s_overwrite() { echo first >ow && echo second >ow && cat ow; }
s_dd_zero() { dd if=/dev/zero of=zero.bin bs=4096 count=64 2>/dev/null && wc -c <zero.bin; }
s_dd_copy() {
    i=0
    while [ $i -lt 500 ]; do
        echo "row $i"
        i=$((i + 1))
    done >rows.txt
    dd if=rows.txt of=rows.copy bs=7 2>/dev/null && cmp rows.txt rows.copy && wc -c <rows.copy
}
s_dd_notrunc() {
    printf XXXX | dd of=rows.copy bs=1 seek=10 conv=notrunc 2>/dev/null &&
        head -c 20 rows.copy && echo && wc -c <rows.copy
}
s_dd_skip() { dd if=rows.txt bs=1 skip=100 count=12 2>/dev/null && echo; }
s_sparse() {
    dd if=/dev/zero of=sparse.bin bs=1 count=1 seek=3145727 2>/dev/null && stat -c %s sparse.bin &&
        dd if=sparse.bin bs=4096 skip=10 count=1 2>/dev/null | od -An -c | head -n 1
}
s_mv_rename() { echo a >mv1 && mv mv1 mv2 && [ ! -e mv1 ] && cat mv2; }
s_mv_into_dir() { mv mv2 d1/d2/ && ls d1/d2; }
s_mv_overwrite() { echo new >src && echo old >dst && mv -f src dst && [ ! -e src ] && cat dst; }
s_mv_dir() { mkdir dA && echo in >dA/x && mv dA dB && [ ! -e dA ] && cat dB/x; }
s_ln_hard() { echo linked >h1 && ln h1 h2 && stat -c %h h1 && echo more >>h2 && cat h1; }
s_ln_hard_unlink() { rm h1 && stat -c %h h2 && cat h2; }
s_ln_symlink() {
    ln -s f1 s1 && ln -s d1/d2 sdir && ln -s /nonexistent/target dangling &&
        readlink s1 && readlink dangling && cat s1 && ls sdir && [ ! -e dangling ] && [ -L dangling ]
}
s_ln_symlink_replace() { ln -sf rows.txt s2 && ln -sfn f1 s2 && readlink s2; }
s_touch() { touch t1 && [ -f t1 ] && touch -d '2020-01-02 03:04:05' t2 && stat -c %Y t2; }
s_touch_existing() { touch -d '2021-06-07 08:09:10' f1 && stat -c %Y f1 && cat f1; }
s_truncate() {
    printf 0123456789 >trunc && truncate -s 4 trunc && cat trunc && echo &&
        truncate -s 1M trunc && stat -c %s trunc && truncate -s 0 trunc0 && stat -c %s trunc0
}
s_rmdir() { mkdir -p rd/sub && rmdir rd/sub && rmdir rd && [ ! -e rd ] && ! rmdir d1 2>/dev/null; }
s_rm() {
    echo x >r1 && rm r1 && [ ! -e r1 ] &&
        mkdir -p rr/a/b && touch rr/a/b/c && rm -r rr && [ ! -e rr ]
}
s_unlink_open() { echo still-readable >ul && exec 3<ul && rm ul && [ ! -e ul ] && cat <&3; }
s_mknod_fifo() {
    mknod fifo1 p && mkfifo fifo2 && [ -p fifo1 ] && [ -p fifo2 ] || return 1
    echo through-fifo >fifo1 &
    cat fifo1 && wait
}
s_mknod_char() { mknod cdev c 1 3 && [ -c cdev ] && stat -c '%t:%T' cdev; }
s_chmod() {
    echo m >m1 && chmod 640 m1 && stat -c %a m1 && chmod u+x,g-r m1 && stat -c %a m1 &&
        mkdir sticky && chmod 1777 sticky && stat -c %a sticky &&
        echo s >suid && chmod 4755 suid && stat -c %a suid &&
        echo z >m0 && chmod 0 m0 && stat -c %a m0
}
s_chown() {
    echo o >o1 && chown 1234:5678 o1 && stat -c %u:%g o1 &&
        ln -s o1 os && chown -h 4321:8765 os && stat -c %u:%g os && stat -L -c %u:%g os
}
s_stat() { stat -c '%n %s %a %h %F' f1 s1 fifo1 zero.bin && stat -c '%n %a %h %F' d1; }
# ls is the tool under test here, not a way to list names.
# shellcheck disable=SC2012
s_ls() { ls -lA | awk 'NR > 1 {print $1, $NF}' && ls -l d1/d2 | wc -l; }
s_statfs() { df -k . | awk 'NR == 2 {print ($2 > 0 && $4 > 0) ? "statfs ok" : "statfs zero"}'; }
s_sync() { sync && sync -f . && sync -d f1 && echo synced; }
s_fallocate() {
    fallocate -l 1048576 fa.bin && stat -c %s fa.bin &&
        fallocate -o 2097152 -l 4096 fa.bin && stat -c %s fa.bin
}
s_cat() { cat f1 rows.txt >cat.out && wc -c <cat.out && tail -n 1 cat.out; }
s_many_files() {
    mkdir many || return 1
    i=0
    while [ $i -lt 200 ]; do
        echo $i >many/f$i
        i=$((i + 1))
    done
    # shellcheck disable=SC2012 # exercising ls on a big directory
    ls many | wc -l && cat many/f199
}
s_rename_in_dir() {
    for f in many/f1*; do mv "$f" "$f.renamed" || return 1; done
    find many -name '*.renamed' | wc -l
}
s_find() { find d1 | sort; }
s_large_write() {
    # 4.4 KiB doubled 11 times: 9 MiB, written through cat and replaced with mv.
    cp rows.txt big1.bin || return 1
    i=0
    while [ $i -lt 11 ]; do
        cat big1.bin big1.bin >big1.tmp && mv big1.tmp big1.bin || return 1
        i=$((i + 1))
    done
    wc -c <big1.bin && sha256sum <big1.bin | cut -d' ' -f1
}
s_fio_verify() {
    fio --name=verify --directory="$META" --filename=fio-verify.dat --size=16M --bs=4k --rw=randwrite \
        --verify=crc32c --do_verify=1 --ioengine=psync --eta=never --output-format=terse >/dev/null &&
        fio --name=verify-direct --directory="$META" --filename=fio-verify.dat --size=16M --bs=64k --rw=write \
            --direct=1 --verify=md5 --do_verify=1 --ioengine=psync --eta=never --output-format=terse >/dev/null &&
        rm "$META/fio-verify.dat" && echo fio ok
}

STEPS="mkdir write overwrite dd_zero dd_copy dd_notrunc dd_skip sparse mv_rename mv_into_dir
mv_overwrite mv_dir ln_hard ln_hard_unlink ln_symlink ln_symlink_replace touch touch_existing truncate
rmdir rm unlink_open mknod_fifo mknod_char chmod chown stat ls statfs sync fallocate cat many_files
rename_in_dir find large_write fio_verify"

for name in $STEPS; do
    if out=$("s_$name" 2>&1); then
        echo "OK $name"
    else
        echo "FAIL $name rc=$?"
    fi
    [ -z "$out" ] || printf '%s\n' "$out" | sed 's/^/  | /'
done
