#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Start a vhost-user-fs daemon the way libvirt does: create the listening
socket here and pass it as --fd=N.

Usage: XVFS_REAL_DAEMON=BINARY fd-launcher.py --socket-path PATH [arguments...]
(--socket-path is replaced by --fd=N; everything else is passed on to BINARY.)
"""
import os
import socket
import sys


def main() -> None:
    daemon = os.environ.get("XVFS_REAL_DAEMON")
    if not daemon:
        sys.exit("fd-launcher: set XVFS_REAL_DAEMON to the daemon binary")
    args = sys.argv[1:]
    path = None
    rest = []
    i = 0
    while i < len(args):
        if args[i] == "--socket-path":
            path = args[i + 1]
            i += 2
        elif args[i].startswith("--socket-path="):
            path = args[i].split("=", 1)[1]
            i += 1
        else:
            rest.append(args[i])
            i += 1
    if path is None:
        sys.exit("fd-launcher: --socket-path is required")
    if os.path.exists(path):
        os.unlink(path)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(1)
    os.set_inheritable(s.fileno(), True)
    os.execv(daemon, [daemon, f"--fd={s.fileno()}"] + rest)


if __name__ == "__main__":
    main()
