"""Build the native extension modules of raftcore.

The Cython and C sources live in ``_native/`` (outside the package, as python-zstandard keeps
its C sources) and are compiled into ``raftcore._native.<name>``.

Environment switches:
  RAFTCORE_DEBUG=1        -O0 -g, C asserts on, Cython bounds and wraparound checks on.
  RAFTCORE_SANITIZE=...   adds -fsanitize=... (e.g. "address,undefined"); run with the
                          matching runtime preloaded.
"""

import os

from Cython.Build import cythonize
from setuptools import Extension, setup

DEBUG = os.environ.get("RAFTCORE_DEBUG") == "1"
SANITIZE = os.environ.get("RAFTCORE_SANITIZE", "")

cflags = ["-std=c11", "-Wall", "-Wno-unused-function", "-Wno-unreachable-code"]
ldflags = []
if DEBUG:
    cflags += ["-O0", "-g3", "-UNDEBUG"]
else:
    cflags += ["-O3"]
if SANITIZE:
    cflags += [f"-fsanitize={SANITIZE}", "-fno-omit-frame-pointer"]
    ldflags += [f"-fsanitize={SANITIZE}"]

CRC = "_native/crc32c_impl.c"


def ext(name, *sources):
    return Extension(
        f"raftcore._native.{name}",
        [f"_native/{name}.pyx", *sources],
        include_dirs=["_native"],
        extra_compile_args=cflags,
        extra_link_args=ldflags,
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )


extensions = [
    ext("crc32c", CRC),
    ext("records", CRC),
    ext("segment", CRC),
    ext("epoch_cache"),
    ext("validation", CRC),
    ext("kv_records", CRC),
    ext("columnar", CRC),
]

directives = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    "cdivision": True,
    "embedsignature": True,
}

JOBS = os.cpu_count() or 1  # seven modules: translate and compile them side by side

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives=directives,
        include_path=["_native"],
        build_dir="build/cython",
        quiet=True,
        nthreads=JOBS,
    ),
    options={"build_ext": {"parallel": JOBS}},
)
