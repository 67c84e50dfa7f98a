"""Shared fixtures. Importing raftcore here makes a missing native build a loud collection
error for the whole suite, never a quiet skip or a slow fallback."""

import raftcore._native  # noqa: F401  (raises ImportError with instructions when not built)
