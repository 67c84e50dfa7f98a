"""Deliberately naive reference implementations, for differential tests."""
