#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run-personalities-vm.sh DIR [SECONDS]: runs every Filebench personality
# (*.f) in DIR through the guest image's xfilebench, on an xvirtiofsd share,
# in one guest boot: the guest-side twin of
# host/filebench/run-personalities.sh (same overrides: $dir and $path point
# into the share, `run SECONDS` is appended where a file has no run
# statement, XFB_DEFS adds -D overrides). Prints one line per file:
#   GUEST name.f rc=N ops/s=X
# then GUEST-FAILS=N. Exit status: 0 when every file ran and printed an IO
# Summary line. Needs `make build image` and bench/image.sh (xfilebench in
# the image); a failed file's output is kept as fail-NAME.txt in the share.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: run-personalities-vm.sh DIR [SECONDS]}
secs=${2:-2}
[[ $secs =~ ^[0-9]+$ ]] || { echo "run-personalities-vm: SECONDS must be a number" >&2; exit 2; }
share=$(mktemp -d /tmp/xfb-vm-personalities.XXXXXX)
mkdir -p "$share/wl"
cp "$dir"/*.f "$share/wl/"
"$HERE/image.sh" >/dev/null

cat >"$share/run-all.sh" <<EOF
#!/bin/sh
S=/mnt/shared
DEFS="${XFB_DEFS:-}"
SECS=$secs
EOF
cat >>"$share/run-all.sh" <<'EOF'
fails=0
for f in $S/wl/*.f; do
  n=$(basename $f)
  d=$S/run/${n%.f}
  mkdir -p $d
  cp $f $S/w.f
  grep -qE '^[[:space:]]*(run|psrun)([[:space:]]|$)' $S/w.f || printf '\nrun %s\n' $SECS >> $S/w.f
  timeout 300 /opt/xvfs/bin/xfilebench -q -f $S/w.f -D dir=$d -D path=$d -D runtime=$SECS $DEFS > $S/out.txt 2>&1
  rc=$?
  ops=$(awk '/IO Summary:/ {for (i = 1; i < NF; i++) if ($(i+1) == "ops/s") v = $i} END {print v}' $S/out.txt)
  [ $rc -eq 0 ] && [ -n "$ops" ] || { fails=$((fails+1)); cp $S/out.txt $S/fail-$n.txt; }
  echo "GUEST $n rc=$rc ops/s=$ops"
  rm -rf $d
done
echo "GUEST-FAILS=$fails"
EOF

out=$share/guest.out
SHARE=$share CMD='sh /mnt/shared/run-all.sh' XVFS_TIMEOUT=${XVFS_TIMEOUT:-3600} \
    "$HERE/../vmm-config/run-vm" | tee "$out"
grep -q '^GUEST-FAILS=0' "$out"
