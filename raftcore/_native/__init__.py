"""The compiled modules of raftcore (built from ``_native/`` by ``setup.py``).

Importing this package fails loudly when the native build is missing: raftcore has no silent
pure-Python fallback. A source checkout without a build in place is not a missing build,
though: run from the checkout's root (``python -m raftcore.sim``, a script there, Spark's
Python worker), its ``raftcore/`` comes first on ``sys.path`` and shadows the installed
raftcore. Then the compiled modules of the installed raftcore are used, provided they were
built from the same sources: the same stubs (``*.pyi``, which tests/test_stubs.py holds to the
modules) and, where its metadata is beside it, the same version.
"""

import importlib.machinery
import sys
from pathlib import Path

from raftcore import __version__

_HERE = Path(__file__).resolve().parent
_MODULES = sorted(p.stem for p in _HERE.glob("*.pyi") if p.stem != "__init__")


def _built(folder: Path) -> bool:
    """Whether ``folder`` holds a compiled extension for each of the modules."""
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    return all(any((folder / f"{m}{s}").is_file() for s in suffixes) for m in _MODULES)


def _installed_folders() -> list[Path]:
    """The ``raftcore/_native`` folders other than this one: on ``sys.path`` (site-packages),
    then where another import finder puts raftcore (an editable install)."""
    found = [Path(entry or ".").resolve() / "raftcore" / "_native" for entry in sys.path]
    for finder in sys.meta_path:
        spec = None
        if finder is not importlib.machinery.PathFinder and hasattr(finder, "find_spec"):
            spec = finder.find_spec("raftcore", None)
        for location in (spec and spec.submodule_search_locations) or ():
            found.append(Path(location).resolve() / "_native")
    return [f for f in dict.fromkeys(found) if f != _HERE and f.is_dir()]


def _difference(folder: Path) -> str | None:
    """How the build in ``folder`` differs from these sources, or None when it does not."""
    for name in _MODULES:
        theirs = folder / f"{name}.pyi"
        if not theirs.is_file() or theirs.read_bytes() != (_HERE / f"{name}.pyi").read_bytes():
            return f"its {name}.pyi differs from this source tree's"
    from importlib.metadata import Distribution

    metadata = folder.parent.parent.glob("raftcore-*.dist-info")
    versions = sorted({Distribution.at(path).version for path in metadata})
    if versions and __version__ not in versions:
        return f"it is raftcore {', '.join(versions)}, this source tree is {__version__}"
    return None


def _use_an_installed_build() -> None:
    """Add the first installed build of these sources to this package's ``__path__``."""
    built = [folder for folder in _installed_folders() if _built(folder)]
    differences = {folder: _difference(folder) for folder in built}
    same = [folder for folder, difference in differences.items() if difference is None]
    if same:
        __path__.append(str(same[0]))
    elif built:
        raise ImportError(
            f"raftcore's native modules are not built in {_HERE}, and the installed ones in "
            f"{built[0]} are of other sources ({differences[built[0]]}): run `pip install .` "
            "again, or run from outside this source tree"
        )
    else:
        raise ImportError(
            f"raftcore's native modules are not built in {_HERE} nor installed: install "
            "raftcore with `pip install .` (or run `python setup.py build_ext --inplace` "
            "in a source checkout)"
        )


if not _built(_HERE):
    _use_an_installed_build()

try:
    from . import crc32c, epoch_cache, records, segment  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only on a broken install
    raise ImportError(
        "raftcore's native modules do not import. Install raftcore with `pip install .` "
        "(or run `python setup.py build_ext --inplace` in a source checkout). "
        f"Original error: {exc}"
    ) from exc
