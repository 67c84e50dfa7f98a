"""The .pyi stubs of the compiled modules match the modules (mypy's stubtest, as py-lmdb does)."""

import subprocess
import sys
from pathlib import Path

import pytest

MODULES = [
    "raftcore._native.crc32c",
    "raftcore._native.records",
    "raftcore._native.segment",
    "raftcore._native.epoch_cache",
    "raftcore._native.validation",
    "raftcore._native.kv_records",
    "raftcore._native.columnar",
]


@pytest.mark.slow
def test_native_stubs_match_the_compiled_modules(tmp_path):
    allowlist = Path(__file__).with_name("stubtest-allowlist.txt")
    result = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", *MODULES, "--allowlist", str(allowlist)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,  # not the checkout: check the installed modules
    )
    assert result.returncode == 0, result.stdout + result.stderr
