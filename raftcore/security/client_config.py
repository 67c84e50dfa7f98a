"""``--command-config FILE`` for the client commands: librdkafka-style ``key=value`` lines
(``#`` comments) that give a :class:`~raftcore.security.config.ClientSecurity`.

This is the SASL branch's small version: it knows ``security.protocol``, ``sasl.mechanism``
(librdkafka's ``sasl.mechanisms`` too), ``sasl.username`` and ``sasl.password``. (The TLS work
brings the ``ssl.*`` keys; one parser will stay.)
"""

from __future__ import annotations

from pathlib import Path

from raftcore.security.config import SECURITY_PROTOCOLS, ClientSecurity

__all__ = ["parse_client_config", "read_client_config"]

_KEYS = {
    "security.protocol": "protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_username",
    "sasl.password": "sasl_password",
}


def parse_client_config(text: str, source: str = "<config>") -> ClientSecurity:
    """ValueError naming the line for a line that is not ``key=value`` or an unknown key."""
    values: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"{source} line {n}: expected key=value")
        if key not in _KEYS:
            raise ValueError(f"{source} line {n}: unknown key {key!r} (known: {', '.join(_KEYS)})")
        values[_KEYS[key]] = value.strip() if key != "sasl.password" else value.lstrip()
    protocol = values.pop("protocol", "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ValueError(
            f"{source}: security.protocol {protocol!r} is not one of {SECURITY_PROTOCOLS}"
        )
    return ClientSecurity(protocol=protocol, **values)  # type: ignore[arg-type]


def read_client_config(path: str | Path) -> ClientSecurity:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    return parse_client_config(text, str(path))
