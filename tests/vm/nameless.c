/* SPDX-License-Identifier: Apache-2.0 */
/* Guest side of tests/vm/test_nameless.sh: holds four files with no name
 * left on the share while the host kills (and upgrades) the daemon, and
 * checks every read and write of them.
 *
 *   nameless DIR
 *
 * In DIR (on the share): (a) a file unlinked while open, (b) an O_TMPFILE
 * file, (c) a file renamed over by another, (d) a directory removed while
 * it is the cwd. Then DIR/ready, and rounds until DIR/done: each round
 * appends a line to (a), (b), (c) and reads each back in full through its
 * descriptor and through a new open of /proc/self/fd/N (an OPEN of a node
 * with no name), and stats and lists (d). After DIR/done, (b) is linked in
 * as DIR/b-linked. Prints "rounds=N errors=M" and one line per error.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int errors;

static void bad(const char *what, int round)
{
    fprintf(stdout, "error round %d: %s: %s\n", round, what, strerror(errno));
    fflush(stdout);
    errors++;
}

/* The expected content of a file after `rounds` rounds. */
static size_t expect(char *buf, size_t room, const char *tag, int rounds)
{
    size_t n = 0;
    for (int i = 1; i <= rounds && n < room; i++)
        n += (size_t)snprintf(buf + n, room - n, "%s%d\n", tag, i);
    return n;
}

static int check_content(int fd, const char *tag, int round, const char *what)
{
    static char want[1 << 20], got[1 << 20];
    size_t n = expect(want, sizeof want, tag, round);
    ssize_t r = pread(fd, got, sizeof got, 0);
    if (r < 0) {
        bad(what, round);
        return -1;
    }
    if ((size_t)r != n || memcmp(want, got, n) != 0) {
        errno = EILSEQ;
        bad(what, round);
        return -1;
    }
    return 0;
}

static void append(int fd, const char *tag, int round, const char *what)
{
    char line[64];
    int n = snprintf(line, sizeof line, "%s%d\n", tag, round);
    off_t end = lseek(fd, 0, SEEK_END);
    if (end < 0 || pwrite(fd, line, (size_t)n, end) != n)
        bad(what, round);
}

/* Reads fd's file through a new open of /proc/self/fd/N. */
static void reopen_check(int fd, const char *tag, int round, const char *what)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int again = open(path, O_RDONLY);
    if (again < 0) {
        bad(what, round);
        return;
    }
    check_content(again, tag, round, what);
    close(again);
}

static int exists(const char *dir, const char *name)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: nameless DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    char p[4096], q[4096];
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        bad("mkdir DIR", 0);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd < 0) {
        bad("open DIR", 0);
        return 1;
    }
    /* (a) unlinked while open. */
    int a = openat(dfd, "a", O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (a < 0 || unlinkat(dfd, "a", 0) < 0)
        bad("(a) create and unlink", 0);
    /* (b) O_TMPFILE. */
    int b = openat(dfd, ".", O_RDWR | O_TMPFILE, 0644);
    if (b < 0)
        bad("(b) O_TMPFILE", 0);
    /* (c) renamed over. */
    int c = openat(dfd, "c", O_RDWR | O_CREAT | O_TRUNC, 0644);
    int cnew = openat(dfd, "c.new", O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (c < 0 || cnew < 0 || write(cnew, "new\n", 4) != 4 ||
        renameat(dfd, "c.new", dfd, "c") < 0)
        bad("(c) create and rename over", 0);
    close(cnew);
    /* (d) a removed directory as cwd. */
    snprintf(p, sizeof p, "%s/d", dir);
    if (mkdir(p, 0755) < 0 || chdir(p) < 0 || rmdir(p) < 0)
        bad("(d) mkdir, chdir, rmdir", 0);
    snprintf(p, sizeof p, "%s/ready", dir);
    close(open(p, O_WRONLY | O_CREAT, 0644));

    int round = 0;
    while (!exists(dir, "done")) {
        round++;
        append(a, "a", round, "(a) append");
        append(b, "b", round, "(b) append");
        append(c, "c", round, "(c) append");
        check_content(a, "a", round, "(a) read");
        check_content(b, "b", round, "(b) read");
        check_content(c, "c", round, "(c) read");
        reopen_check(a, "a", round, "(a) reopen");
        reopen_check(b, "b", round, "(b) reopen");
        struct stat st;
        if (stat(".", &st) < 0)
            bad("(d) stat cwd", round);
        else if (st.st_nlink != 0) {
            errno = EEXIST;
            bad("(d) cwd has links", round);
        }
        int cwd = open(".", O_RDONLY | O_DIRECTORY);
        if (cwd < 0) {
            bad("(d) open cwd", round);
        } else {
            DIR *ds = fdopendir(cwd);
            errno = 0;
            while (ds && readdir(ds))
                ;
            if (!ds || errno)
                bad("(d) list cwd", round);
            if (ds)
                closedir(ds);
        }
        usleep(100000);
    }
    /* (b) gets a name. */
    snprintf(q, sizeof q, "/proc/self/fd/%d", b);
    if (linkat(AT_FDCWD, q, dfd, "b-linked", AT_SYMLINK_FOLLOW) < 0)
        bad("(b) linkat", round);
    if (fsync(a) < 0 || fsync(b) < 0 || fsync(c) < 0)
        bad("fsync", round);
    /* The share's "c" is the file that renamed it over, untouched. */
    int cn = openat(dfd, "c", O_RDONLY);
    char buf[16] = {0};
    if (cn < 0 || read(cn, buf, sizeof buf) != 4 || memcmp(buf, "new\n", 4) != 0) {
        errno = EILSEQ;
        bad("(c) the new c", round);
    }
    printf("rounds=%d errors=%d\n", round, errors);
    return errors != 0;
}
