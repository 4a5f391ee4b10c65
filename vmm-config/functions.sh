# shellcheck shell=bash
# Shared helpers for the xvirtiofs shell scripts. Source it; do not run it.
#
#   say MSG...   print "xvfs: MSG" on stderr
#   die MSG...   print "xvfs: error: MSG" on stderr and exit 1
#   need CMD...  die unless every CMD is on PATH

say() {
    printf 'xvfs: %s\n' "$*" >&2
}

die() {
    printf 'xvfs: error: %s\n' "$*" >&2
    exit 1
}

need() {
    local c
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 || die "'$c' not found; run 'make deps' first"
    done
}

# The repository root (this file lives in <root>/vmm-config/).
XVFS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export XVFS_ROOT
