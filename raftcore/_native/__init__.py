"""The compiled modules of raftcore (built from ``_native/`` by ``setup.py``).

Importing this package fails loudly when the native build is missing: raftcore has no silent
pure-Python fallback.
"""

try:
    from . import crc32c, epoch_cache, records, segment  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only on a broken install
    raise ImportError(
        "raftcore's native modules are not built. Install raftcore with `pip install .` "
        "(or run `python setup.py build_ext --inplace` in a source checkout). "
        f"Original error: {exc}"
    ) from exc
