/* SPDX-License-Identifier: Apache-2.0 */
/* DAX helper for tests/vm/test_dax.sh, run in the guest (static).
 *   daxprobe attr FILE              prints "dax 1" when statx says the file is
 *                                   accessed through the DAX window, else "dax 0"
 *   daxprobe cat FILE               writes the file to stdout through a shared
 *                                   mapping of it (every page faulted in)
 *   daxprobe fill FILE OFF LEN BYTE stores BYTE in LEN bytes at OFF through a
 *                                   shared writable mapping, then msync; "filled"
 *   daxprobe peek FILE OFF LEN      reads LEN bytes at OFF through a shared
 *                                   mapping: "peek B" if all are byte B, else
 *                                   "peek mixed"
 *   daxprobe shrink FILE SIZE OFF   maps the file, reads byte OFF through the
 *                                   mapping (so that its chunk is mapped in the
 *                                   window), truncates the file to SIZE, then
 *                                   touches byte OFF again: "sigbus" (past the
 *                                   new end) or "read B"
 *   daxprobe hold FILE READY GO     maps the file and reads every page of it,
 *                                   creates READY, waits for GO to exist, then
 *                                   reads every page again: "held"
 * Exit status 1 and a line naming the call on any other failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef STATX_ATTR_DAX
#define STATX_ATTR_DAX 0x00200000
#endif

static sigjmp_buf bus_jump;

static void on_sigbus(int sig) {
    (void)sig;
    siglongjmp(bus_jump, 1);
}

static int fail(const char *what) {
    printf("%s failed: %s\n", what, strerror(errno));
    return 1;
}

/* Maps all of FILE (open with FLAGS) shared; sets *len. */
static unsigned char *map_file(const char *path, int flags, size_t *len) {
    int fd = open(path, flags);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) return NULL;
    int prot = PROT_READ | ((flags & O_ACCMODE) == O_RDWR ? PROT_WRITE : 0);
    void *p = mmap(NULL, (size_t)st.st_size, prot, MAP_SHARED, fd, 0);
    close(fd);
    *len = (size_t)st.st_size;
    return p == MAP_FAILED ? NULL : p;
}

static int attr(const char *path) {
    struct statx sx;
    if (statx(AT_FDCWD, path, 0, STATX_BASIC_STATS, &sx) != 0) return fail("statx");
    printf("dax %d\n", (sx.stx_attributes & STATX_ATTR_DAX) != 0);
    return 0;
}

static int cat(const char *path) {
    size_t len;
    unsigned char *p = map_file(path, O_RDONLY, &len);
    if (!p) return fail("mmap");
    for (size_t off = 0; off < len;) {
        ssize_t n = write(1, p + off, len - off > (1 << 20) ? (1 << 20) : len - off);
        if (n <= 0) return fail("write");
        off += (size_t)n;
    }
    return 0;
}

static int fill(const char *path, size_t off, size_t n, int byte) {
    size_t len;
    unsigned char *p = map_file(path, O_RDWR, &len);
    if (!p) return fail("mmap");
    if (off + n > len) { printf("fill past the end\n"); return 1; }
    memset(p + off, byte, n);
    if (msync(p, len, MS_SYNC) != 0) return fail("msync");
    printf("filled\n");
    return 0;
}

static int peek(const char *path, size_t off, size_t n) {
    size_t len;
    unsigned char *p = map_file(path, O_RDONLY, &len);
    if (!p) return fail("mmap");
    if (off + n > len || n == 0) { printf("peek past the end\n"); return 1; }
    for (size_t i = 1; i < n; i++) {
        if (p[off + i] != p[off]) { printf("peek mixed\n"); return 0; }
    }
    printf("peek %d\n", p[off]);
    return 0;
}

static int shrink(const char *path, off_t size, size_t off) {
    size_t len;
    unsigned char *p = map_file(path, O_RDWR, &len);
    if (!p) return fail("mmap");
    if (off >= len) { printf("touch past the mapping\n"); return 1; }
    volatile unsigned char before = p[off];
    (void)before;
    if (truncate(path, size) != 0) return fail("truncate");
    signal(SIGBUS, on_sigbus);
    if (sigsetjmp(bus_jump, 1)) {
        printf("sigbus\n");
        return 0;
    }
    volatile unsigned char b = p[off];
    printf("read %d\n", b);
    return 0;
}

static int hold(const char *path, const char *ready, const char *go) {
    size_t len;
    unsigned char *p = map_file(path, O_RDONLY, &len);
    if (!p) return fail("mmap");
    volatile unsigned sum = 0;
    for (size_t off = 0; off < len; off += 4096) sum += p[off];
    close(open(ready, O_WRONLY | O_CREAT, 0644));
    while (access(go, F_OK) != 0) usleep(100000);
    for (size_t off = 0; off < len; off += 4096) sum += p[off];
    printf("held\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "attr") == 0) return attr(argv[2]);
    if (argc == 3 && strcmp(argv[1], "cat") == 0) return cat(argv[2]);
    if (argc == 6 && strcmp(argv[1], "fill") == 0)
        return fill(argv[2], strtoul(argv[3], 0, 0), strtoul(argv[4], 0, 0),
                    atoi(argv[5]));
    if (argc == 5 && strcmp(argv[1], "peek") == 0)
        return peek(argv[2], strtoul(argv[3], 0, 0), strtoul(argv[4], 0, 0));
    if (argc == 5 && strcmp(argv[1], "shrink") == 0)
        return shrink(argv[2], strtoll(argv[3], 0, 0), strtoul(argv[4], 0, 0));
    if (argc == 5 && strcmp(argv[1], "hold") == 0) return hold(argv[2], argv[3], argv[4]);
    fprintf(stderr, "usage: see the head of daxprobe.c\n");
    return 2;
}
