#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that every README command line that calls the daemon names a binary
that exists after the install step README gives for it, and only options the
daemon has (part of `make check`).

Usage: tests/readme_commands.py [README]   (default: README.md at the top)

A daemon call is a line of a ```sh block, or an inline `code` span, where
`xvirtiofsd` (or a path ending in /xvirtiofsd) stands in a command's place
(line start, after `&&`, `||`, `;`, `|`, `$(`, `sudo`, `exec`), or a path
ending in /xvirtiofsd given as an argument (`--binary PATH`). The binary must
be one of:

  xvirtiofsd (on PATH)          after `make install` (/usr/local/bin) or the
                                Debian package (/usr/bin);
  host/target/release/xvirtiofsd  after `make daemon`;
  /usr/local/libexec/xvirtiofsd, /usr/local/bin/xvirtiofsd  after `make install`;
  /usr/libexec/xvirtiofsd, /usr/bin/xvirtiofsd  after the Debian package.

The install steps are run for real, into scratch directories: `make
install-files DESTDIR=...` with the debug build (what `make install` does
after `make daemon`), and `packaging/deb/build-deb.sh --stage-only` (what the
package holds); `make -n daemon` must build the release binary. Each call's
options (`--name`, up to the end of its command) must be in `--help` of the
daemon or of its command (`status`, `upgrade`, `completions`).

Prints one line per call and `README commands: N checked, M failed`; exits 1
on any failure.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEBUG_BIN = os.path.join(ROOT, "host/target/debug/xvirtiofsd")
COMMANDS = ("status", "upgrade", "completions")
# Where each documented route puts the daemon (relative to its root).
INSTALL_PATHS = ("/usr/local/libexec/xvirtiofsd", "/usr/local/bin/xvirtiofsd")
DEB_PATHS = ("/usr/libexec/xvirtiofsd", "/usr/bin/xvirtiofsd")
TREE_PATH = "host/target/release/xvirtiofsd"
CALL = re.compile(r"(?:^|&&|\|\||;|\||\$\(|\bsudo\s|\bexec\s)\s*"
                  r"((?:\S*(?:bin|libexec|release|debug)/)?xvirtiofsd)(?=\s|$|\))")
PATH_ARG = re.compile(r"[\"']?(\S*(?:bin|libexec|release|debug)/xvirtiofsd)[\"']?(?=\s|$)")
CODE_SPAN = re.compile(r"`([^`]+)`")


def calls(readme):
    """(line number, command text) of each daemon call in README."""
    out = []
    in_sh = False
    with open(readme, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for n, line in enumerate(lines, 1):
        if line.startswith("```"):
            in_sh = line.strip() in ("```sh", "```bash", "```shell") and not in_sh
            continue
        texts = [line.split(" #")[0]] if in_sh else CODE_SPAN.findall(line)
        for t in texts:
            for seg in re.split(r"&&|\|\||;|(?<![|])\|(?![|])|&(?!&)", t):
                seg = seg.strip()
                if CALL.search(" " + seg) or PATH_ARG.search(seg):
                    if seg != "xvirtiofsd":
                        out.append((n, seg))
    return out


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, **kw)


def daemon_binary():
    if not os.access(DEBUG_BIN, os.X_OK):
        r = subprocess.run(["cargo", "build", "-q", "-p", "xvirtiofsd"],
                           cwd=os.path.join(ROOT, "host"))
        if r.returncode != 0:
            sys.exit("readme_commands: cannot build the daemon")
    return DEBUG_BIN


def resolve(root, path):
    """`path` inside `root`, following absolute symlinks inside it too."""
    p = os.path.join(root, path.lstrip("/"))
    for _ in range(8):
        if not os.path.islink(p):
            break
        t = os.readlink(p)
        p = os.path.join(root, t.lstrip("/")) if t.startswith("/") else \
            os.path.normpath(os.path.join(os.path.dirname(p), t))
    return p


def routes(binary, scratch):
    """What each install route gives: {path: route}, and the failures."""
    given, failures = {}, []
    dest = os.path.join(scratch, "install")
    r = run(["make", "--no-print-directory", "install-files", "DESTDIR=" + dest,
             "DAEMON_BIN=" + binary])
    if r.returncode != 0:
        failures.append("make install-files failed:\n" + r.stdout + r.stderr)
    for p in INSTALL_PATHS:
        if os.access(resolve(dest, p), os.X_OK):
            given[p] = "make install"
        else:
            failures.append(f"make install does not give {p}")
    env = dict(os.environ, XVFS_DEB_BIN=binary, XVFS_DEB_OUT=os.path.join(scratch, "deb"))
    r = run(["packaging/deb/build-deb.sh", "--stage-only"], env=env)
    stage = r.stdout.strip().splitlines()[-1] if r.returncode == 0 and r.stdout.strip() else ""
    if not stage:
        failures.append("build-deb.sh --stage-only failed:\n" + r.stdout + r.stderr)
    for p in DEB_PATHS:
        if stage and os.access(resolve(stage, p), os.X_OK):
            given[p] = "the Debian package"
        else:
            failures.append(f"the Debian package does not give {p}")
    r = run(["make", "-n", "--no-print-directory", "daemon"])
    if "cargo build --release -p xvirtiofsd" in r.stdout:
        given[TREE_PATH] = "make daemon"
    else:
        failures.append("make daemon does not build host/target/release/xvirtiofsd")
    # A bare name needs a route that puts it in a directory on PATH.
    if "/usr/local/bin/xvirtiofsd" in given or "/usr/bin/xvirtiofsd" in given:
        given["xvirtiofsd"] = "PATH after make install or the Debian package"
    return given, failures


def help_options(binary, command):
    args = [binary] + ([command] if command else []) + ["--help"]
    r = subprocess.run(args, capture_output=True, text=True)
    return set(re.findall(r"--[a-z][a-z0-9-]*", r.stdout))


def check_call(binary, given, n, seg):
    """The problems of one call."""
    problems = []
    m = CALL.search(" " + seg)
    named = [m.group(1)] if m else []
    named += [p for p in PATH_ARG.findall(seg) if p not in named]
    for b in named:
        b = b.strip("\"'").replace("$PWD/", "")
        if b not in given:
            problems.append(f"{b}: no install step gives this binary")
    if m:
        words = seg[m.start(1) - 1:].split()
        command = words[1] if len(words) > 1 and words[1] in COMMANDS else None
        # Options after `--` are the new daemon's (upgrade).
        mine, theirs = (seg.split(" -- ", 1) + [""])[:2]
        known = help_options(binary, command)
        for o in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", mine[m.end() - 1:]):
            if o not in known:
                problems.append(f"{o}: not an option of xvirtiofsd{' ' + command if command else ''}")
        if theirs:
            daemon = help_options(binary, None)
            for o in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", theirs):
                if o not in daemon:
                    problems.append(f"{o}: not a daemon option")
    return problems


def main():
    readme = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "README.md")
    binary = daemon_binary()
    scratch = tempfile.mkdtemp(prefix="xvfs-readme-")
    try:
        given, failed = routes(binary, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for f in failed:
        print("FAIL:", f)
    checked = 0
    for n, seg in calls(readme):
        checked += 1
        problems = check_call(binary, given, n, seg)
        for p in problems:
            print(f"FAIL: README.md:{n}: {seg}\n      {p}")
        if problems:
            failed.append(seg)
        else:
            print(f"ok: README.md:{n}: {seg}")
    print(f"README commands: {checked} checked, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
