"""Per-destination request bookkeeping (Kafka's RequestManager): each destination is ready,
awaiting a response (until the request timeout), or backing off after a failure. A response
is only accepted if it answers the request in flight to that destination; anything else --
a duplicate, a late answer to a timed-out request -- is ignored."""

from __future__ import annotations

__all__ = ["RequestManager"]

INF = float("inf")


class RequestManager:
    def __init__(self, retry_backoff_ms: int, request_timeout_ms: int) -> None:
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self._inflight: dict[int, tuple[int, int]] = {}  # destination -> (correlation id, deadline)
        self._backoff: dict[int, int] = {}  # destination -> backing off until

    def is_ready(self, destination: int, now: int) -> bool:
        inflight = self._inflight.get(destination)
        if inflight is not None:
            if now < inflight[1]:
                return False
            # timed out: a failure
            del self._inflight[destination]
            self._backoff[destination] = now + self.retry_backoff_ms
        until = self._backoff.get(destination)
        if until is not None:
            if now < until:
                return False
            del self._backoff[destination]
        return True

    def on_sent(self, destination: int, correlation_id: int, now: int) -> None:
        self._inflight[destination] = (correlation_id, now + self.request_timeout_ms)

    def accept_response(self, destination: int, correlation_id: int) -> bool:
        """True, and the destination is free again, if this answers the request in flight."""
        inflight = self._inflight.get(destination)
        if inflight is None or inflight[0] != correlation_id:
            return False
        del self._inflight[destination]
        return True

    def on_failure(self, destination: int, now: int) -> None:
        self._inflight.pop(destination, None)
        self._backoff[destination] = now + self.retry_backoff_ms

    def back_off(self, destination: int, until: int) -> None:
        """Send nothing to ``destination`` before ``until`` (a longer pause than a failure's,
        chosen by the caller)."""
        self._inflight.pop(destination, None)
        self._backoff[destination] = max(until, self._backoff.get(destination, 0))

    def reset(self) -> None:
        """Forget every request (on a change of state: answers to them no longer matter)."""
        self._inflight.clear()
        self._backoff.clear()

    def next_deadline(self) -> float:
        deadline = INF
        for _, d in self._inflight.values():
            deadline = min(deadline, d)
        for d in self._backoff.values():
            deadline = min(deadline, d)
        return deadline
