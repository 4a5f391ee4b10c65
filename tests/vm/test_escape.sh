#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# VM test (issue 29): a directory the guest holds is moved out of the share
# by a host process, next to a host secret. The guest, whose shell sits in
# that directory, then tries to reach the secret through `..` (one to four
# levels up) and lists `..`: nothing outside the share may be reachable.
# (A stock guest kernel answers `..` of a directory it holds from its own
# dentry cache, so its relative paths stay inside the share's tree; the
# LOOKUP ".." a hostile guest driver sends from the moved directory is
# refused by the daemon, shown with a real vhost-user front-end in
# host/xvirtiofsd/tests/escape.rs for a fresh start, a live upgrade and a
# crash restart.) One boot, about 10 s.
set -euo pipefail

# shellcheck source=tests/vm/lib.sh
. "$(dirname "$0")/lib.sh"

vmt_init escape

SHARE=$VMT_DIR/share
OUTSIDE=$VMT_DIR/outside
mkdir -p "$SHARE/a/held" "$OUTSIDE"
echo "host secret $$" >"$OUTSIDE/secret"
cat >"$SHARE/escape.sh" <<'EOF'
#!/bin/sh
S=/mnt/shared
cd $S/a/held || exit 1
echo mine >mine
touch $S/ready
i=0
while [ ! -e $S/moved ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
[ -e $S/moved ] && echo moved-seen
# Past the entry timeout (1 s with the default cache): the guest asks again.
sleep 2
for p in ../secret ../../secret ../../outside/secret ../../../outside/secret ../../../../secret; do
  if out=$(cat "$p" 2>&1); then echo "READ $p: $out"; else echo "REFUSED $p"; fi
done
ls -a .. 2>&1 | sed 's/^/LS-PARENT /'
ls -a ../.. 2>&1 | sed 's/^/LS-GRANDPARENT /'
echo escape-done
EOF

# Host side: once the guest sits in a/held, move it out of the share.
host_side() {
    local n=0
    while [ ! -e "$SHARE/ready" ] && [ "$n" -lt 240 ]; do
        sleep 0.5
        n=$((n + 1))
    done
    mv "$SHARE/a/held" "$OUTSIDE/held"
    touch "$SHARE/moved"
}
host_side &
HOST_PID=$!
rc=0
XVFS_TIMEOUT=300 vmt_guest "$SHARE" "sh /mnt/shared/escape.sh" "$VMT_DIR/guest.out" || rc=$?
wait "$HOST_PID" || true
OUT=$VMT_DIR/guest.out
assert_eq 0 "$rc" "guest script exit status"
assert_ok "the guest saw the move" grep -q '^moved-seen' "$OUT"
assert_ok "the guest script ran to the end" grep -q '^escape-done' "$OUT"
assert_eq 5 "$(grep -c '^REFUSED ' "$OUT")" "every .. path to the secret refused"
assert_ok "the secret never reached the guest" bash -c "! grep -q 'host secret' '$OUT'"
assert_ok "the parent listed is the share's a/, not the host's directory" \
    bash -c "! grep -q '^LS-PARENT secret' '$OUT' && ! grep -q '^LS-PARENT held' '$OUT'"
assert_ok "the directory was moved on the host" test -e "$OUTSIDE/held/mine"
vmt_summary
