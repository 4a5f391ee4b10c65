# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Builds of the releases listed in RELEASES, for the cross-version tests.
# Source after lib.sh.
#
#   release_commit NAME   the commit of release NAME ("0.2.0", "pre-0.2.0")
#   release_previous      the newest release that is not HEAD's own source
#                         (the one before it when HEAD is a release)
#   release_supported     the releases HEAD must upgrade and migrate to and
#                         from (docs/live-upgrade.md, "Compatibility": the two
#                         before HEAD's sources), oldest first, one per line
#   release_binary NAME   path of release NAME's daemon, built once from git
#                         history (a detached worktree under build/releases/,
#                         one shared target directory) and cached by commit;
#                         a release whose daemon sources equal HEAD's is
#                         HEAD's own build (host/target/release/xvirtiofsd)

RELEASES_FILE=$XVFS_ROOT/RELEASES
RELEASES_DIR=$XVFS_ROOT/build/releases

release_commit() {
    awk -v n="$1" '$1 == n { print $2 }' "$RELEASES_FILE"
}

# What the daemon is built from: a commit that changes only tests or docs
# builds the same daemon.
RELEASE_SOURCES=(host/Cargo.toml host/Cargo.lock host/xvirtiofsd/Cargo.toml
    host/xvirtiofsd/build.rs host/xvirtiofsd/src host/fs/Cargo.toml host/fs/src
    virtio-fs-ext/Cargo.toml virtio-fs-ext/src)

# Whether the daemon's sources at commit C are HEAD's (then HEAD's build is C's).
release_is_head() {
    git -C "$XVFS_ROOT" diff --quiet "$1" HEAD -- "${RELEASE_SOURCES[@]}" 2>/dev/null
}

release_previous() {
    local name commit last=""
    while read -r name commit _; do
        case $name in '#'* | pre-*) continue ;; esac
        if release_is_head "$commit"; then break; fi
        last=$name
    done <"$RELEASES_FILE"
    echo "$last"
}

release_supported() {
    local name commit
    local -a all=()
    while read -r name commit _; do
        case $name in '#'* | pre-*) continue ;; esac
        if release_is_head "$commit"; then break; fi
        all+=("$name")
    done <"$RELEASES_FILE"
    local from=$((${#all[@]} > 2 ? ${#all[@]} - 2 : 0))
    [ "${#all[@]}" -gt 0 ] || return 0
    printf '%s\n' "${all[@]:from}"
}

release_binary() {
    local name=$1 commit src out
    commit=$(release_commit "$name")
    [ -n "$commit" ] || { echo "no release $name in RELEASES" >&2; return 1; }
    if release_is_head "$commit"; then
        echo "$XVFS_ROOT/host/target/release/xvirtiofsd"
        return
    fi
    out=$RELEASES_DIR/bin/xvirtiofsd-$commit
    if [ ! -x "$out" ]; then
        src=$RELEASES_DIR/src-$commit
        mkdir -p "$RELEASES_DIR/bin"
        rm -rf "$src"
        git -C "$XVFS_ROOT" worktree prune
        git -C "$XVFS_ROOT" worktree add -q --detach "$src" "$commit" >&2
        say "building release $name ($commit) in $src" >&2
        (cd "$src/host" && CARGO_TARGET_DIR=$RELEASES_DIR/target cargo build -q --release -p xvirtiofsd) >&2
        cp "$RELEASES_DIR/target/release/xvirtiofsd" "$out"
        git -C "$XVFS_ROOT" worktree remove --force "$src"
    fi
    echo "$out"
}
