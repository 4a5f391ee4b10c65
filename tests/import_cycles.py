#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Finds import cycles between the modules of each Rust crate in the tree.

Usage: tests/import_cycles.py [CRATE-DIR ...]   (default: every crate under host/
and virtio-fs-ext/; CRATE-DIRs are relative to the repository's top)

A module "imports" another when its files name a path into it (`use crate::a::b`,
`crate::a::f()`, `super::x`, `self::y`, grouped `use` trees included; paths in
an inline `mod tests { ... }` are resolved from inside it). At every level of
the module tree, the children of one module, each standing for itself and
everything below it, must not import each other in a circle (`queue` ->
`chain` -> `queue`, or `upgrade/*` -> `crash_restart/*` -> `upgrade/*`).

A child module may use its parent's items (`super::PassthroughFs` in a file
that implements part of it): the parent and the files below it are one module
to everyone else.

Prints each cycle as `crate: a -> b -> a` and exits 1 if there is any; prints
`import cycles: none (N modules in M crates)` and exits 0 otherwise.
"""

import os
import re
import sys

COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
STRING = re.compile(r'b?"(?:\\.|[^"\\])*"|b?r#*"(?:.|\n)*?"#*', re.S)
USE = re.compile(r"\buse\s+((?:crate|super|self)\s*::[^;]*);", re.S)
PATH = re.compile(r"\b((?:crate|super|self)(?:\s*::\s*[A-Za-z_][A-Za-z0-9_]*)+)")
MOD = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", re.M)


def strip(text):
    """Removes comments and string literals (they may hold paths in prose)."""
    text = COMMENT.sub(" ", text)
    return STRING.sub('""', text)


def expand(tree):
    """Expands a use tree `a::{b, c::{d, e}}` into paths a::b, a::c::d, a::c::e."""
    tree = re.sub(r"\s+", " ", tree).strip()
    tree = re.sub(r"\s*(::|[{},])\s*", r"\1", tree)
    parts = []
    if "{" not in tree:
        return [tree.split(" as ")[0]]
    start = tree.index("{")
    prefix, inner = tree[:start], tree[start + 1 : tree.rindex("}")]
    depth, cur = 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        if p:
            out.extend(expand(prefix + p) if p != "self" else [prefix.rstrip(":")])
    return out


def crate_modules(src):
    """Maps module path tuples to their file, from the crate's file layout."""
    mods = {}
    for root in ("lib.rs", "main.rs"):
        if os.path.exists(os.path.join(src, root)):
            walk(src, os.path.join(src, root), (), mods)
            return mods
    return mods


def walk(src, path, modpath, mods):
    mods[modpath] = path
    with open(path, encoding="utf-8") as f:
        text = strip(f.read())
    base = os.path.dirname(path)
    if not path.endswith(("mod.rs", "lib.rs", "main.rs")):
        base = os.path.join(base, os.path.basename(path)[:-3])
    for name in MOD.findall(text):
        for cand in (os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")):
            if os.path.exists(cand):
                walk(src, cand, modpath + (name,), mods)
                break


def resolve(modpath, path, mods):
    """The module a path names, or None when it leaves the crate."""
    segs = [s.strip() for s in path.split("::")]
    if segs[0] == "crate":
        cur, segs = (), segs[1:]
    else:
        cur = modpath
        while segs and segs[0] in ("self", "super"):
            if segs[0] == "super":
                cur = cur[:-1]
            segs = segs[1:]
    for s in segs:
        if cur + (s,) in mods:
            cur = cur + (s,)
        else:
            break
    return cur


INLINE = re.compile(r"\bmod\s+([a-z_][a-z0-9_]*)\s*\{")


def inline_modules(modpath, text):
    """The file's text outside inline modules, then each inline module's body,
    with the module path its relative paths start from."""
    out, rest, pos = [], "", 0
    for m in INLINE.finditer(text):
        if m.start() < pos:
            continue
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        rest += text[pos : m.start()]
        out.extend(inline_modules(modpath + (m.group(1),), text[m.end() : i - 1]))
        pos = i
    rest += text[pos:]
    return [(modpath, rest)] + out


def imports(mods):
    """Edges module -> set of modules it names (excluding itself)."""
    edges = {}
    for modpath, path in mods.items():
        with open(path, encoding="utf-8") as f:
            text = strip(f.read())
        found = set()
        for where, body in inline_modules(modpath, text):
            for tree in USE.findall(body):
                for p in expand(tree):
                    found.add(resolve(where, p, mods))
            for p in PATH.findall(USE.sub(" ", body)):
                found.add(resolve(where, p, mods))
        found = {m for m in found if m[: len(modpath)] != modpath}
        edges[modpath] = found
    return edges


def cycles(nodes, edges):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def name(m):
    return "::".join(m) or "crate"


def check_crate(src):
    mods = crate_modules(src)
    edges = imports(mods)
    problems = []
    for parent in mods:
        kids = [m for m in mods if len(m) == len(parent) + 1 and m[: len(parent)] == parent]
        if len(kids) < 2:
            continue
        sib = {k: set() for k in kids}
        for m, targets in edges.items():
            if m[: len(parent) + 1] not in sib:
                continue
            src_kid = m[: len(parent) + 1]
            for t in targets:
                t_kid = t[: len(parent) + 1]
                if t_kid in sib and t_kid != src_kid:
                    sib[src_kid].add(t_kid)
        for comp in cycles(kids, sib):
            problems.append(" <-> ".join(name(c) for c in comp))
    return len(mods), problems


def main(argv):
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    dirs = argv or sorted(
        os.path.dirname(os.path.join(d, "Cargo.toml"))
        for top in ("host", "virtio-fs-ext")
        for d, _, files in os.walk(top)
        if "Cargo.toml" in files and "target" not in d.split(os.sep)
    )
    total, crates, bad = 0, 0, 0
    for d in dirs:
        src = os.path.join(d, "src")
        if not os.path.isdir(src):
            continue
        n, problems = check_crate(src)
        total, crates = total + n, crates + 1
        for p in problems:
            print(f"{d}: import cycle: {p}")
            bad += 1
    if bad:
        print(f"import cycles: {bad} found")
        return 1
    print(f"import cycles: none ({total} modules in {crates} crates)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
