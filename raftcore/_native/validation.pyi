from typing import Final

from typing_extensions import Buffer

FAULT_CORRUPT: Final[int]
FAULT_INVALID: Final[int]
FAULT_TOO_LARGE: Final[int]
FAULT_UNSUPPORTED_CODEC: Final[int]

def validate_batches(
    buffer: Buffer, *, client: bool = True, max_batch_bytes: int = 0
) -> tuple[int, int, int, str] | None: ...
