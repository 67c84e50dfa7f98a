from typing import Final

from typing_extensions import Buffer, final

DEFAULT_MAX_KEY_SIZE: Final[int]

@final
class KvPairs:
    @property
    def pairs(self) -> list[tuple[bytes, bytes | None]]: ...
    @property
    def deletes(self) -> int: ...
    @property
    def skipped(self) -> list[tuple[int, str]]: ...
    @property
    def records(self) -> int: ...
    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def conditions(self) -> list[tuple[int, int, str, bytes | None]] | None: ...

def decode_kv_pairs(
    buffer: Buffer,
    from_offset: int = 0,
    max_key_size: int = 511,
    check_crc: bool = True,
    seal: bool = False,
) -> KvPairs: ...
