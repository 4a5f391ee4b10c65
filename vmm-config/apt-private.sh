# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Library (source it): an apt of our own under build/runtimes/apt/ that knows
# bookworm (+updates, security, backports), trixie (+backports) and sid, for
# downloading packages of other Debian releases without installing them and
# without touching the host's apt configuration (/etc/apt, /var/lib/apt).
#
#   xvfs_apt_update           write sources.list, apt-get update (once per hour)
#   xvfs_apt CMD ARGS...      run apt-get/apt-cache CMD with the private options
#   xvfs_debian_mirror        the Debian mirror the host's apt already uses
#   XVFS_APT_DIR              build/runtimes/apt

# shellcheck source=vmm-config/functions.sh
. "$(dirname "${BASH_SOURCE[0]}")/functions.sh"

XVFS_APT_DIR=$XVFS_ROOT/build/runtimes/apt
XVFS_APT_SUITES=(bookworm bookworm-updates bookworm-backports trixie trixie-backports sid)

xvfs_debian_mirror() {
    local m=""
    if [ -r /etc/apt/sources.list.d/debian.sources ]; then
        m=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources | awk '{print $1; exit}')
    fi
    if [ -z "$m" ] && [ -r /etc/apt/sources.list ]; then
        m=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list)
    fi
    printf '%s\n' "${m:-http://deb.debian.org/debian}"
}

# The security mirror of the host (bookworm-security), if it has one.
xvfs_security_mirror() {
    [ -r /etc/apt/sources.list.d/debian.sources ] || return 0
    awk '/^URIs:/ {u = $2} /^Suites:/ && /-security/ {print u; exit}' /etc/apt/sources.list.d/debian.sources
}

xvfs_apt() {
    local cmd=$1
    shift
    "$cmd" -q \
        -o Dir::Etc::sourcelist="$XVFS_APT_DIR/sources.list" \
        -o Dir::Etc::sourceparts="$XVFS_APT_DIR/sources.list.d" \
        -o Dir::Etc::preferencesparts="$XVFS_APT_DIR/preferences.d" \
        -o Dir::State::Lists="$XVFS_APT_DIR/lists" \
        -o Dir::Cache="$XVFS_APT_DIR/cache" \
        -o Acquire::Languages=none \
        -o APT::Architectures=amd64 \
        "$@"
}

xvfs_apt_update() {
    local m sec s keyring=/usr/share/keyrings/debian-archive-keyring.gpg stamp
    m=$(xvfs_debian_mirror)
    sec=$(xvfs_security_mirror)
    mkdir -p "$XVFS_APT_DIR"/{lists/partial,cache/archives/partial,sources.list.d,preferences.d}
    {
        for s in "${XVFS_APT_SUITES[@]}"; do
            echo "deb [signed-by=$keyring] $m $s main"
        done
        [ -z "$sec" ] || echo "deb [signed-by=$keyring] $sec bookworm-security main"
    } >"$XVFS_APT_DIR/sources.list.new"
    stamp=$XVFS_APT_DIR/updated
    if cmp -s "$XVFS_APT_DIR/sources.list.new" "$XVFS_APT_DIR/sources.list" &&
        [ -n "$(find "$stamp" -mmin -60 2>/dev/null)" ]; then
        rm -f "$XVFS_APT_DIR/sources.list.new"
        return 0
    fi
    mv "$XVFS_APT_DIR/sources.list.new" "$XVFS_APT_DIR/sources.list"
    say "private apt: update of ${XVFS_APT_SUITES[*]} from $m (lists in $XVFS_APT_DIR)"
    xvfs_apt apt-get update -qq || return 1
    touch "$stamp"
}

# xvfs_apt_newest REGEX [SUITE]: newest "PACKAGE VERSION" whose name matches
# REGEX (and, with SUITE, whose version comes from that suite). Two apt-cache
# calls in all: each reads the whole cache (about a second).
xvfs_apt_newest() {
    local re=$1 suite=${2:-}
    local -a names
    mapfile -t names < <(xvfs_apt apt-cache search --names-only "$re" | awk '{print $1}')
    [ "${#names[@]}" -gt 0 ] || return 0
    xvfs_apt apt-cache madison "${names[@]}" | awk -F'|' -v s="$suite" '
        s == "" || $3 ~ (" " s "/") {gsub(/ /, "", $1); gsub(/ /, "", $2); print $1, $2}' |
        sort -V -k2 | tail -n 1
}
