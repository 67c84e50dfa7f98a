"""The release before dynamic voters, built from this checkout's git history, for tests that run
its nodes beside this release's (tests/test_upgrade_processes.py).

That release (commit ``PREVIOUS_RELEASE``) has a static voter set (``--voters``), no
``directory.id`` in ``meta.properties``, quorum-state files of data_version 0, zero directory ids
on the wire, and neither UpdateRaftVoter nor the KRaftVersion and Voters control records.

It is built once per test session: ``git archive`` of the commit's sources into a temporary
directory (nothing in the checkout or its ``.git`` changes), then ``pip install --no-deps
--target`` there, which compiles its native modules (pip's build isolation takes setuptools and
Cython from the package index; its run-time dependencies are this environment's). Its nodes run
as ``python -m raftcore`` with ``PYTHONPATH`` naming that directory alone, from a directory that
is not the checkout, so they import the old code and nothing of this one.

Without the commit in the history (a shallow clone, a source archive) or without access to the
package index, the tests that need it skip and say why.
``RAFTCORE_PREVIOUS_RELEASE_SITE`` names a directory built by an earlier session (the session's
line says where) to skip the build.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PREVIOUS_RELEASE", "PreviousRelease", "build_previous_release"]

# The last release with a static voter set: main before KIP-853 (dynamic voters) was merged.
PREVIOUS_RELEASE = "d131a1fccb53da5e7aead50787fce582da4940e7"
SOURCE_ROOT = Path(__file__).resolve().parent.parent
# What `pip install` needs of the sources (README.md: pyproject.toml names it as the readme).
SOURCES = ("pyproject.toml", "setup.py", "README.md", "_native", "raftcore")
STAMP = "raftcore-previous-release"
BUILD_TIMEOUT_S = 900
# pip's words when the package index cannot be reached or lacks what the build needs
NO_INDEX = (
    "No matching distribution found",
    "Could not find a version that satisfies",
    "NewConnectionError",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "Max retries exceeded",
)


class Unavailable(Exception):
    """The previous release cannot be built here; the message says why (the tests skip)."""


@dataclass(frozen=True)
class PreviousRelease:
    commit: str
    site: Path  # the directory it is installed in
    build_seconds: float  # 0.0: built by an earlier session

    def env(self) -> dict[str, str]:
        """The environment of a process that runs this release: its directory alone on
        PYTHONPATH (an absolute path: the checkout's raftcore must not be found first)."""
        return dict(os.environ, PYTHONPATH=str(self.site))


def build_previous_release(directory: Path) -> PreviousRelease:
    """Build the release ``PREVIOUS_RELEASE`` into ``directory/site`` (or take the one named by
    ``RAFTCORE_PREVIOUS_RELEASE_SITE``) and check that its nodes import it. Raises
    :class:`Unavailable` with the reason when it cannot be built here."""
    given = os.environ.get("RAFTCORE_PREVIOUS_RELEASE_SITE")
    if given:
        site = Path(given).absolute()
        stamp = site / STAMP
        if not stamp.is_file() or stamp.read_text().strip() != PREVIOUS_RELEASE:
            raise RuntimeError(
                f"RAFTCORE_PREVIOUS_RELEASE_SITE={given}: not a build of {PREVIOUS_RELEASE} "
                f"(no {STAMP} file naming it)"
            )
        release = PreviousRelease(PREVIOUS_RELEASE, site, 0.0)
    else:
        started = time.monotonic()
        site = directory / "site"
        sources = directory / "src"
        _export_sources(sources)
        _pip_install(sources, site)
        shutil.rmtree(sources, ignore_errors=True)
        (site / STAMP).write_text(PREVIOUS_RELEASE + "\n")
        release = PreviousRelease(PREVIOUS_RELEASE, site, time.monotonic() - started)
    _check_imports(release, directory)
    return release


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["git", "-C", str(SOURCE_ROOT), *args], capture_output=True, timeout=120, check=False
    )


def _export_sources(into: Path) -> None:
    if shutil.which("git") is None:
        raise Unavailable("git is not installed: the previous release is built from the history")
    found = _git("rev-parse", "--verify", "--quiet", f"{PREVIOUS_RELEASE}^{{commit}}")
    if found.returncode != 0:
        repository = _git("rev-parse", "--is-shallow-repository")
        if repository.returncode != 0:
            why = f"no git repository at {SOURCE_ROOT} ({repository.stderr.decode().strip()})"
        elif repository.stdout.decode().strip() == "true":
            why = "this is a shallow clone (git fetch --unshallow fetches the history)"
        else:
            why = "the commit is not in this clone's history"
        raise Unavailable(f"the previous release {PREVIOUS_RELEASE[:7]} cannot be built: {why}")
    archive = _git("archive", "--format=tar", PREVIOUS_RELEASE, *SOURCES)
    if archive.returncode != 0:
        raise RuntimeError(f"git archive {PREVIOUS_RELEASE[:7]}: {archive.stderr.decode()}")
    into.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into, filter="data")
        else:  # Python < 3.10.12: our own history, no links outside
            tar.extractall(into)


def _pip_install(sources: Path, site: Path) -> None:
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-input", "--quiet"]
    command += ["--disable-pip-version-check", "--target", str(site), str(sources)]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        cwd=sources,
        check=False,
    )
    if done.returncode == 0:
        return
    output = done.stdout + done.stderr
    tail = "\n".join(output.splitlines()[-15:])
    if any(words in output for words in NO_INDEX):
        raise Unavailable(f"the package index is out of reach for the build: {tail}")
    raise RuntimeError(f"building {PREVIOUS_RELEASE[:7]} failed:\n{tail}")


def _check_imports(release: PreviousRelease, cwd: Path) -> None:
    """A process with the release's environment imports the release (compiled), not this
    checkout: its raftcore is under its directory and has no voter changes."""
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib.util, raftcore, raftcore._native.records as r; "
            "print(raftcore.__file__); print(r.__file__); "
            "print(importlib.util.find_spec('raftcore.raft.reconfig') is None)",
        ],
        env=release.env(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = probe.stdout.split()
    if probe.returncode != 0 or len(lines) != 3:
        raise RuntimeError(f"the previous release does not import: {probe.stderr}")
    package, native, no_reconfig = lines
    site = str(release.site)
    assert package.startswith(site) and native.startswith(site), (package, native)
    assert no_reconfig == "True", "the previous release has raftcore.raft.reconfig"
