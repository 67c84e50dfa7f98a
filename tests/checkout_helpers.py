"""A copy of the source checkout as a fresh clone has it: its files, no native build in place.

Commands run from such a copy's root see its ``raftcore/`` first on ``sys.path``, as the README's
reader does in the checkout (CI's ``pip install .`` puts the built modules in site-packages, not
in the checkout). ``RAFTCORE_ROOT`` is the directory holding the raftcore under test (the
checkout when it is built in place, or site-packages): on PYTHONPATH it stands for the install.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import raftcore

SOURCE_ROOT = Path(__file__).resolve().parent.parent
RAFTCORE_ROOT = Path(raftcore.__file__).resolve().parent.parent
BUILD_PRODUCTS = (".git", ".venv*", "build", "dist", "*.egg-info", "*.so", "__pycache__")


def unbuilt_checkout(dest: Path) -> Path:
    """Copy the checkout's tracked files (all of it, without its build products, when it is not
    a git checkout) to ``dest``, a new directory, and return it."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(SOURCE_ROOT), "ls-files", "-z"],
            check=True,
            capture_output=True,
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        shutil.copytree(SOURCE_ROOT, dest, ignore=shutil.ignore_patterns(*BUILD_PRODUCTS))
        return dest
    for name in filter(None, listed.split("\0")):
        source = SOURCE_ROOT / name
        if source.is_file():  # a file deleted but not yet committed is not copied
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    assert not list((dest / "raftcore" / "_native").glob("*.so")), "a native build was copied"
    return dest
