"""A request the Kafka API will not answer (an API or version not served, a field it forbids):
the node closes the connection, as a Kafka broker does."""

from __future__ import annotations

__all__ = ["InvalidRequest"]


class InvalidRequest(Exception):
    """The message says what was wrong with the request."""
