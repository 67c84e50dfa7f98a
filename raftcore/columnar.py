"""Record batches v2 straight into Arrow: one ``pyarrow.RecordBatch`` per buffer of batches,
decoded natively (``raftcore._native.columnar``) with every CRC checked and no Python object
per record.

The schema (:func:`arrow_schema`) is fixed:

==================  ==================================================  ========
field               type                                                nullable
==================  ==================================================  ========
offset              int64                                               no
leader_epoch        int32 (the batch's partition leader epoch)          no
timestamp           int64, ms since the epoch (see below)               no
key                 binary                                              yes
value               binary                                              yes
headers             list<struct<key: string not null, value: binary>>   no
batch_base_offset   int64                                               no
==================  ==================================================  ========

``timestamp`` is the batch's base timestamp plus the record's delta (CreateTime), or the batch's
max timestamp for a LogAppendTime batch, as Kafka's consumers see it; -1 means "none".

Keys, values and headers are ``binary`` (int32 offsets), not ``large_binary``: it is the type
Spark maps BinaryType to by default, and its offsets take half the room. Its limit is 2 GiB of
keys (or values, header keys, header values) in one array: :func:`to_arrow` refuses a buffer
above it, and :func:`iter_arrow` splits at batch boundaries below it.

pyarrow is needed only here, and is imported when first used (``pip install raftcore[arrow]``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from raftcore._native.columnar import MAX_ARRAY_BYTES, Columns, decode_columns

if TYPE_CHECKING:
    import pyarrow as pa
    from typing_extensions import Buffer

__all__ = ["MAX_ARRAY_BYTES", "Columns", "arrow_schema", "iter_arrow", "to_arrow"]


@functools.cache
def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError as exc:
        raise ImportError(
            "raftcore.columnar needs pyarrow: pip install 'raftcore[arrow]' or pyarrow"
        ) from exc
    return pyarrow


def arrow_schema() -> pa.Schema:
    """The schema of every batch :func:`to_arrow` and :func:`iter_arrow` return."""
    pa = _pyarrow()
    return pa.schema(
        [
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("leader_epoch", pa.int32(), nullable=False),
            pa.field("timestamp", pa.int64(), nullable=False),
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
            pa.field("headers", _headers_type(pa), nullable=False),
            pa.field("batch_base_offset", pa.int64(), nullable=False),
        ]
    )


def _headers_type(pa: Any) -> pa.DataType:
    return pa.list_(
        pa.field(
            "item",
            pa.struct(
                [pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())]
            ),
            nullable=False,
        )
    )


def to_arrow(
    buffer: Buffer, *, include_control: bool = False, check_crc: bool = True
) -> pa.RecordBatch:
    """Decode the record batches of ``buffer`` into one ``pyarrow.RecordBatch``.

    Every batch's CRC-32C is checked (unless ``check_crc`` is False) and every record is
    validated as ``RecordBatch.records()`` does; a truncated or corrupt batch raises
    CorruptRecordError (a compressed one too: gzip, snappy, lz4 or zstd). Control batches are
    left out unless ``include_control``. The arrays are numpy buffers wrapped without a copy.

    Raises ValueError when the keys, values or headers pass 2 GiB (use :func:`iter_arrow`).
    """
    columns = decode_columns(buffer, include_control=include_control, check_crc=check_crc)
    if columns.end != memoryview(buffer).nbytes:
        raise ValueError(
            f"the record batches from byte position {columns.end} on do not fit in one Arrow "
            f"batch (more than {MAX_ARRAY_BYTES} bytes of keys, values or headers); "
            "use iter_arrow()"
        )
    return columns_to_arrow(columns)


def iter_arrow(
    buffer: Buffer,
    *,
    max_records: int = 65536,
    include_control: bool = False,
    check_crc: bool = True,
) -> Iterator[pa.RecordBatch]:
    """Decode the record batches of ``buffer`` into ``pyarrow.RecordBatch`` objects of about
    ``max_records`` rows each, split at batch boundaries (a record batch larger than
    ``max_records`` makes one Arrow batch of its own). Same checks as :func:`to_arrow`; an
    error in a later batch is raised after the Arrow batches before it were yielded."""
    if max_records < 1:
        raise ValueError(f"max_records must be positive, got {max_records}")
    size = memoryview(buffer).nbytes
    pos = 0
    while pos < size:
        columns = decode_columns(
            buffer,
            pos,
            include_control=include_control,
            check_crc=check_crc,
            max_records=max_records,
        )
        pos = columns.end
        if columns.num_records:
            yield columns_to_arrow(columns)


def columns_to_arrow(columns: Columns) -> pa.RecordBatch:
    """Wrap decoded :class:`Columns` as a ``pyarrow.RecordBatch`` (no copy)."""
    pa = _pyarrow()
    n = columns.num_records
    buf = pa.py_buffer

    def validity(bitmap: Any, nulls: int) -> Any:
        return buf(bitmap) if nulls else None

    def binary(offsets: Any, data: Any, bitmap: Any, nulls: int, type_: Any = None) -> Any:
        return pa.Array.from_buffers(
            type_ or pa.binary(),
            len(offsets) - 1,
            [validity(bitmap, nulls), buf(offsets), buf(data)],
            null_count=nulls,
        )

    header_keys = binary(columns.header_key_offsets, columns.header_key_data, None, 0, pa.string())
    header_values = binary(
        columns.header_value_offsets,
        columns.header_value_data,
        columns.header_value_validity,
        columns.header_value_nulls,
    )
    headers_type = _headers_type(pa)
    header_structs = pa.StructArray.from_arrays(
        [header_keys, header_values], fields=list(headers_type.value_type)
    )
    headers = pa.Array.from_buffers(
        headers_type,
        n,
        [None, buf(columns.header_offsets)],
        null_count=0,
        children=[header_structs],
    )
    arrays = [
        pa.Array.from_buffers(pa.int64(), n, [None, buf(columns.offset)], null_count=0),
        pa.Array.from_buffers(pa.int32(), n, [None, buf(columns.leader_epoch)], null_count=0),
        pa.Array.from_buffers(pa.int64(), n, [None, buf(columns.timestamp)], null_count=0),
        binary(columns.key_offsets, columns.key_data, columns.key_validity, columns.key_nulls),
        binary(
            columns.value_offsets,
            columns.value_data,
            columns.value_validity,
            columns.value_nulls,
        ),
        headers,
        pa.Array.from_buffers(pa.int64(), n, [None, buf(columns.batch_base_offset)], null_count=0),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema())
