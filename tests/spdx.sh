#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every source file carries an SPDX license line (LICENSE: Apache-2.0).
#
#   tests/spdx.sh         list the files without one; status 1 if any
#   tests/spdx.sh --fix   add the line where it is missing (after a #! line)
#
# Source files: *.rs, *.sh, *.py, *.c, *.mk, Makefile, and every other
# tracked file that starts with #! (scripts). Benchmark results are data.
set -euo pipefail
cd "$(dirname "$0")/.."
LINE='SPDX-License-Identifier: Apache-2.0'

sources() {
    git ls-files -z | while IFS= read -r -d '' f; do
        case $f in bench/results/*) continue ;; esac
        [ -f "$f" ] || continue
        case $f in
            *.rs | *.sh | *.py | *.c | *.mk | Makefile | */Makefile) echo "$f" ;;
            *) head -c 2 "$f" | grep -q '^#!' && echo "$f" ;;
        esac
    done
}

comment_for() {
    case $1 in
        *.rs) echo "// $LINE" ;;
        *.c) echo "/* $LINE */" ;;
        *) echo "# $LINE" ;;
    esac
}

missing=0
while IFS= read -r f; do
    grep -q "$LINE" "$f" && continue
    if [ "${1:-}" = --fix ]; then
        c=$(comment_for "$f")
        if head -n 1 "$f" | grep -q '^#!'; then
            sed -i "1a $c" "$f"
        else
            sed -i "1i $c" "$f"
        fi
    else
        echo "no SPDX line: $f"
        missing=$((missing + 1))
    fi
done < <(sources)
[ "$missing" -eq 0 ] || { echo "$missing source file(s) without '$LINE' (tests/spdx.sh --fix)"; exit 1; }
