# SPDX-License-Identifier: Apache-2.0
"""The raw data of a benchmark run, for report.py and daemon_report.py.

bench.sh and bench-daemon.sh pack what a run wrote under RESULT_DIR/raw/ (and
bench-daemon.sh's loadgen.log) into one archive, RESULT_DIR/raw.tar.xz, so a
results directory holds a handful of files instead of hundreds. Unpacked in
RESULT_DIR (tar -C RESULT_DIR -xJf RESULT_DIR/raw.tar.xz) it gives back raw/.
"""

import contextlib
import os
import sys
import tarfile
import tempfile

ARCHIVE = "raw.tar.xz"


@contextlib.contextmanager
def raw_dir(result_dir):
    """Yields the run's raw/ directory: RESULT_DIR/raw when it exists, else
    raw/ of RESULT_DIR/raw.tar.xz unpacked into a temporary directory that is
    removed afterwards. Paths relative to the yielded directory's parent are
    the same either way ("raw/...")."""
    raw = os.path.join(result_dir, "raw")
    archive = os.path.join(result_dir, ARCHIVE)
    if os.path.isdir(raw) or not os.path.isfile(archive):
        yield raw
        return
    with tempfile.TemporaryDirectory(prefix="xvfs-raw-") as tmp:
        with tarfile.open(archive, "r:xz") as tar:
            for m in tar.getmembers():
                parts = m.name.split("/")
                if m.name.startswith("/") or ".." in parts or not (m.isfile() or m.isdir()):
                    sys.exit(f"{archive}: refusing to unpack {m.name!r}")
            if hasattr(tarfile, "data_filter"):
                tar.extractall(tmp, filter="data")
            else:
                tar.extractall(tmp)
        yield os.path.join(tmp, "raw")
