#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Run Buildroot's utils/check-package on every file of this external tree.
# check-package needs the python modules magic and flake8: they go into a venv
# in build/buildroot/venv (pip), once. Runs from the repository root, so that
# the scripts' "shellcheck source=vmm-config/..." directives resolve.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=vmm-config/functions.sh
. "$HERE/../../vmm-config/functions.sh"
# shellcheck source=guest-image/buildroot/common.sh
. "$HERE/common.sh"

main() {
    local venv=$BR_WORK/venv
    local -a files
    need python3 shellcheck
    br_unpack
    if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import magic, flake8' 2>/dev/null; then
        say "check-package: python venv with python-magic and flake8 in $venv"
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q python-magic flake8
    fi
    cd "$XVFS_ROOT"
    mapfile -t files < <(find guest-image/buildroot -type f | LC_ALL=C sort)
    "$venv/bin/python" "$BR_SRC/utils/check-package" -b "${files[@]}"
}

main "$@"
