#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Minimal QMP client for the VM tests.

    qmp.py SOCKET COMMAND [JSON-ARGUMENTS]   run one command, print its return
    qmp.py SOCKET migrate URI [TIMEOUT]      migrate to URI, wait for the end,
                                             print "completed DOWNTIME_MS" or
                                             "failed REASON"; exit 0 / 1
"""
import json
import socket
import sys
import time


class Qmp:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(path)
        self.buf = b""
        self.read()  # greeting
        self.cmd("qmp_capabilities")

    def read(self):
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("QMP connection closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def cmd(self, name, args=None):
        msg = {"execute": name}
        if args:
            msg["arguments"] = args
        self.sock.sendall(json.dumps(msg).encode() + b"\n")
        while True:
            reply = self.read()
            if "event" in reply:
                continue
            if "error" in reply:
                raise RuntimeError(f"{name}: {reply['error'].get('desc')}")
            return reply.get("return")


def migrate(q, uri, timeout):
    # Unlimited bandwidth on a local socket; the default (128 MiB/s) only
    # makes a TCG guest's migration slow.
    q.cmd("migrate-set-parameters", {"max-bandwidth": 10 << 30})
    q.cmd("migrate", {"uri": uri})
    end = time.time() + timeout
    while time.time() < end:
        st = q.cmd("query-migrate")
        status = st.get("status")
        if status == "completed":
            print(f"completed {st.get('downtime', -1)}")
            return 0
        if status in ("failed", "cancelled"):
            print(f"failed {st.get('error-desc', status)}")
            return 1
        time.sleep(0.1)
    q.cmd("migrate_cancel")
    print("failed timeout")
    return 1


def main():
    path, name = sys.argv[1], sys.argv[2]
    q = Qmp(path)
    if name == "migrate":
        timeout = float(sys.argv[4]) if len(sys.argv) > 4 else 300
        sys.exit(migrate(q, sys.argv[3], timeout))
    args = json.loads(sys.argv[3]) if len(sys.argv) > 3 else None
    print(json.dumps(q.cmd(name, args)))


if __name__ == "__main__":
    main()
