#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# VM test: the Debian package. `make deb`'s script builds
# xvirtiofsd_<version>_amd64.deb; the test checks that apt would install
# nothing else with it, installs it with dpkg -i, checks every installed file
# (daemon, vhost-user descriptor, man pages, systemd template unit), boots a
# guest served by the installed /usr/libexec/xvirtiofsd, then removes the
# package with dpkg -r and checks that nothing of it is left.
#
# It refuses to run (one failure) where a package named xvirtiofsd is already
# installed: it would replace and then remove the user's copy.
set -euo pipefail

# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"

vmt_init deb

INSTALLED_FILES=(
    /usr/libexec/xvirtiofsd
    /usr/share/qemu/vhost-user/40-xvirtiofsd.json
    /usr/share/man/man1/xvirtiofsd.1.gz
    /usr/share/man/man1/xvirtiofsd-status.1.gz
    /usr/share/man/man1/xvirtiofsd-upgrade.1.gz
    /lib/systemd/system/xvirtiofsd@.service
    /usr/share/doc/xvirtiofsd/examples/share.conf
)

package_state() {
    dpkg-query -W -f='${db:Status-Status}' xvirtiofsd 2>/dev/null || echo not-installed
}

if [ "$(package_state)" != not-installed ] && [ "$(package_state)" != config-files ]; then
    fail "a package xvirtiofsd is already installed ($(package_state)); remove it to run this test"
    vmt_summary
fi

deb=$("$XVFS_ROOT/packaging/deb/build-deb.sh" 2>"$VMT_DIR/build.log" | tail -n 1) || true
if [ ! -f "$deb" ]; then
    fail "make deb's script built no package (see $VMT_DIR/build.log)"
    tail -n 5 "$VMT_DIR/build.log" | sed 's/^/     /'
    vmt_summary
fi
pass "package built: $(basename "$deb")"
version=$("$XVFS_ROOT/host/target/release/xvirtiofsd" --version | head -n 1 | awk '{print $2}')
assert_eq "$version" "$(dpkg-deb -f "$deb" Version)" "package version is the daemon's --version"

# apt's own answer to "what would installing this pull in?"
apt-get install --simulate -q "$deb" >"$VMT_DIR/apt-simulate.out" 2>&1 || true
assert_eq xvirtiofsd "$(awk '$1 == "Inst" {print $2}' "$VMT_DIR/apt-simulate.out" | sort | tr '\n' ' ' | sed 's/ $//')" \
    "apt-get install ./package would install xvirtiofsd and nothing else"

assert_ok "dpkg -i" dpkg -i "$deb" >"$VMT_DIR/dpkg-i.out" 2>&1
assert_eq installed "$(package_state)" "dpkg reports the package installed"
for f in "${INSTALLED_FILES[@]}"; do
    assert_ok "installed: $f" test -s "$f"
done
assert_eq "xvirtiofsd $version" "$(/usr/libexec/xvirtiofsd --version | head -n 1 | cut -d" " -f1,2)" "/usr/libexec/xvirtiofsd --version"
assert_eq "fs /usr/libexec/xvirtiofsd" \
    "$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["type"], d["binary"])' \
        /usr/share/qemu/vhost-user/40-xvirtiofsd.json 2>&1)" \
    "vhost-user descriptor: type fs, binary /usr/libexec/xvirtiofsd"
assert_ok "man page xvirtiofsd(1) documents --shared-dir" \
    bash -c "zcat /usr/share/man/man1/xvirtiofsd.1.gz | grep -q '^\.TH xvirtiofsd 1' &&
             zcat /usr/share/man/man1/xvirtiofsd.1.gz | grep -q 'shared\\\\-dir'"
# The unit's own ${...} and $OPTIONS, literally (systemd expands them).
# shellcheck disable=SC2016
assert_ok "unit: ExecReload is a live upgrade to the installed binary" \
    grep -qxF 'ExecReload=/usr/libexec/xvirtiofsd upgrade --control=/run/xvirtiofsd/%i.control --binary=/usr/libexec/xvirtiofsd -- --socket-path=${SOCKET} --shared-dir=${SHARED_DIR} --control=/run/xvirtiofsd/%i.control $OPTIONS' \
    /lib/systemd/system/xvirtiofsd@.service
assert_ok "unit: options from /etc/xvirtiofsd/<name>.conf" \
    grep -qx 'EnvironmentFile=/etc/xvirtiofsd/%i.conf' /lib/systemd/system/xvirtiofsd@.service

# The installed daemon serves a guest.
share=$VMT_DIR/share
mkdir -p "$share"
echo from-host >"$share/host.txt"
rc=0
DAEMON=/usr/libexec/xvirtiofsd vmt_guest "$share" \
    'cat /mnt/shared/host.txt && echo from-guest > /mnt/shared/guest.txt' "$VMT_DIR/guest.out" || rc=$?
assert_eq 0 "$rc" "guest served by the installed daemon: command exit status"
assert_ok "guest read the host's file" grep -qx from-host "$VMT_DIR/guest.out"
assert_eq from-guest "$(cat "$share/guest.txt" 2>/dev/null)" "host sees the guest's file"

assert_ok "dpkg -r" dpkg -r xvirtiofsd >"$VMT_DIR/dpkg-r.out" 2>&1
assert_ok "dpkg -P" dpkg -P xvirtiofsd >"$VMT_DIR/dpkg-p.out" 2>&1
assert_eq not-installed "$(package_state)" "dpkg reports the package gone"
for f in "${INSTALLED_FILES[@]}"; do
    assert_ok "removed: $f" test ! -e "$f"
done

vmt_summary
