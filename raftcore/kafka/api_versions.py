"""ApiVersions (key 18): every API this node serves, with its versions (SaslHandshake and
SaslAuthenticate only on a SASL listener, the Raft RPCs not on a client listener); a version
we do not speak is answered at v0 with UNSUPPORTED_VERSION and the list, so the client
retries lower (KIP-511)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raftcore.error_codes import Errors
from raftcore.protocol.api import (
    RAFT_ONLY_APIS,
    SUPPORTED_VERSIONS,
    UNADVERTISED,
    ApiKey,
    response_spec,
)

if TYPE_CHECKING:
    from raftcore.kafka.partition import Broker

__all__ = ["api_versions", "api_versions_body"]

_SASL_APIS = (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)


def api_versions_body(version: int, sasl: bool = False, *, raft: bool = True) -> Any:
    """Every API we serve; SaslHandshake and SaslAuthenticate only on a SASL listener, the
    Raft RPCs only with ``raft`` (not on a client listener)."""
    cls = response_spec(ApiKey.API_VERSIONS).cls
    keys = [
        cls.ApiVersion(api_key=int(k), min_version=lo, max_version=hi)
        for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())
        if (sasl or k not in _SASL_APIS)
        and k not in UNADVERTISED
        and (raft or k not in RAFT_ONLY_APIS)
    ]
    return cls(error_code=Errors.NONE, api_keys=keys, throttle_time_ms=0)


def api_versions(broker: Broker, body: Any, version: int) -> Any:
    return api_versions_body(version, broker.uses_sasl)
