#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# VM test: every operation of test_ops.sh through a real guest with each
# inode held as a file handle (--inode-file-handles=mandatory: a file the
# daemon could not hold as a handle would fail its lookup), issue 13.
# About a minute.
set -euo pipefail
export DAEMON_ARGS="${DAEMON_ARGS:+$DAEMON_ARGS }--inode-file-handles=mandatory"
exec "$(dirname "$0")/test_ops.sh"
