/* SPDX-License-Identifier: Apache-2.0 */
/* Lock helper for tests/vm/test_locks.sh, run in the guest (static).
 *   lockprobe hold-fcntl|hold-flock FILE READY RELEASE
 *       take a write (exclusive) lock, waiting; create READY; exit when
 *       RELEASE exists (the close drops the lock)
 *   lockprobe try-fcntl|try-flock FILE    prints the errno of a non-blocking try (0: got it)
 *   lockprobe wait-fcntl|wait-flock FILE  waits for the lock, prints "got"
 *   lockprobe getlk FILE                  prints F_GETLK's l_type for a write lock
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

static int lock(int fd, int posix, int wait) {
    if (posix) {
        struct flock f = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
        return fcntl(fd, wait ? F_SETLKW : F_SETLK, &f);
    }
    return flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB));
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const char *m = argv[1];
    int posix = strstr(m, "fcntl") != NULL || strcmp(m, "getlk") == 0;
    int fd = open(argv[2], O_RDWR | O_CREAT, 0644);
    if (fd < 0) { printf("open %d\n", errno); return 1; }
    if (strncmp(m, "hold-", 5) == 0 && argc == 5) {
        if (lock(fd, posix, 1) != 0) { printf("lock %d\n", errno); return 1; }
        close(open(argv[3], O_WRONLY | O_CREAT, 0644));
        while (access(argv[4], F_OK) != 0) usleep(100000);
        return 0;
    }
    if (strncmp(m, "try-", 4) == 0) {
        printf("%d\n", lock(fd, posix, 0) == 0 ? 0 : errno);
        return 0;
    }
    if (strncmp(m, "wait-", 5) == 0) {
        if (lock(fd, posix, 1) != 0) { printf("lock %d\n", errno); return 1; }
        printf("got\n");
        return 0;
    }
    if (strcmp(m, "getlk") == 0) {
        struct flock f = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
        if (fcntl(fd, F_GETLK, &f) != 0) { printf("getlk %d\n", errno); return 1; }
        printf("%d\n", f.l_type);
        return 0;
    }
    return 2;
}
