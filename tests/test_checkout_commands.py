"""Commands run from the root of a source checkout without a build in place (as the README has
you stand after ``pip install .``) use the installed native modules, not fail on the checkout's
``raftcore/`` shadowing the installed one; an installed build of other sources is refused."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from checkout_helpers import RAFTCORE_ROOT, unbuilt_checkout

import raftcore._native

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        check=False,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )


def env_with(pythonpath: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return env if pythonpath is None else {**env, "PYTHONPATH": str(pythonpath)}


def installed_without_pythonpath(tmp_path: Path) -> bool:
    """Whether this interpreter has a built raftcore of its own (site-packages or editable)."""
    probe = "import raftcore._native.crc32c"
    return run(["-c", probe], tmp_path, env_with(None)).returncode == 0


@pytest.mark.parametrize("install", ["on PYTHONPATH", "installed"])
def test_commands_from_an_unbuilt_checkout_use_the_installed_native_modules(tmp_path, install):
    checkout = unbuilt_checkout(tmp_path / "checkout")
    if install == "on PYTHONPATH":
        env = env_with(RAFTCORE_ROOT)
    elif installed_without_pythonpath(tmp_path):
        env = env_with(None)
    else:
        pytest.skip("this interpreter has no raftcore installed but the one on PYTHONPATH")
    probe = "import raftcore._native.columnar as m, raftcore; print(raftcore.__file__, m.__file__)"
    done = run(["-c", probe], checkout, env)
    assert done.returncode == 0, done.stderr[-2000:]
    source, native = done.stdout.split()
    assert Path(source).is_relative_to(checkout)  # the checkout's raftcore/ is the one imported
    assert not Path(native).is_relative_to(checkout)
    for command in (["-m", "raftcore", "--help"], ["-m", "raftcore.sim", "--seeds", "2"]):
        done = run(command, checkout, env)
        assert done.returncode == 0, f"{command}: {done.stderr[-2000:]}"
    assert "2 seeds ok" in done.stdout


def test_an_installed_build_of_other_sources_is_refused_in_one_line(tmp_path):
    checkout = unbuilt_checkout(tmp_path / "checkout")
    with open(checkout / "raftcore" / "_native" / "crc32c.pyi", "a") as stub:
        stub.write("def changed() -> None: ...\n")
    done = run(["-m", "raftcore", "--help"], checkout, env_with(RAFTCORE_ROOT))
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: raftcore's native modules are not built in "), last
    assert "(its crc32c.pyi differs from this source tree's)" in last


def test_an_installed_build_of_another_version_is_refused(tmp_path):
    """Stubs alike are not enough when the metadata beside the build names another version."""
    here = Path(raftcore._native.__file__).parent
    site = tmp_path / "site-packages"
    shutil.copytree(here, site / "raftcore" / "_native", ignore=shutil.ignore_patterns("*.py"))
    assert raftcore._native._difference(site / "raftcore" / "_native") is None
    metadata = site / "raftcore-9.9.dist-info" / "METADATA"
    metadata.parent.mkdir()
    metadata.write_text("Metadata-Version: 2.1\nName: raftcore\nVersion: 9.9\n")
    assert raftcore._native._difference(site / "raftcore" / "_native") == (
        f"it is raftcore 9.9, this source tree is {raftcore.__version__}"
    )
