"""The Spark session the Spark source tests share: local[2], UI off, the JVM outside the
checkout, the Python workers importing the raftcore these tests import."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def java_problem() -> str | None:
    """Why Spark's JVM cannot start here (no Java 17+), or None."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        return "Spark needs Java 17+: no java on PATH and no JAVA_HOME"
    try:
        out = subprocess.run(
            [java, "-version"], check=False, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"Spark needs Java 17+: {java} -version failed ({exc})"
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    major = int(m.group(2) if m and m.group(1) == "1" else m.group(1)) if m else 0
    return None if major >= 17 else f"Spark needs Java 17+: {java} is version {major or '?'}"


def spark_session(
    jvm_dir: Path, master: str = "local[2]", driver_memory: str = "512m"
) -> Iterator[Any]:
    """A fixture body: the session (with raftcore registered), stopped afterwards, and the
    environment it changed restored (the node processes of later tests must not inherit it)."""
    from pyspark.sql import SparkSession

    import raftcore
    from raftcore.spark import register

    saved = {
        k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")
    }
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # The Python workers import the raftcore these tests import (installed in CI, a built
    # checkout here), never the source tree of a fresh clone, which has no native modules.
    root = str(Path(raftcore.__file__).resolve().parent.parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    # The JVM, and the Python workers it starts, run in a directory of their own: in the
    # checkout's root, a worker's sys.path would find the source tree first.
    cwd = os.getcwd()
    os.chdir(jvm_dir)
    try:
        session = (
            SparkSession.builder.master(master)
            .appName("raftcore-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.default.parallelism", "2")
            .config("spark.driver.memory", driver_memory)
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.python.worker.reuse", "true")
            .getOrCreate()
        )
    finally:
        os.chdir(cwd)
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
