"""Records into columns (issue 11): decode a buffer of record batches (1,000 or 10,000 records
each, 16-byte keys, 100-byte values, uncompressed) into a ``pyarrow.RecordBatch`` with
``raftcore.columnar.to_arrow``, against the same buffer walked with ``iter_batches`` +
``records()`` into Python lists of (offset, key, value) -- the peer. Both check every CRC.

Targets: >= 10 M records/s on one core, and >= 3x the peer. ``extra_info`` carries
``records_per_s`` (median) and, on the Arrow benchmark, ``ratio_to_records`` (peer median /
Arrow median); the peer of each group runs first.
"""

import pytest

from raftcore.columnar import to_arrow
from raftcore.records import encode_batch_kv, iter_batches

TOTAL = 200_000  # records per buffer in a real run
TS = 1_700_000_000_000
_MEDIANS: dict[tuple[str, int], float] = {}


def _buffer(per_batch: int, total: int) -> bytes:
    keys = [b"key-%012d" % i for i in range(per_batch)]
    values = [bytes([i % 251]) * 100 for i in range(per_batch)]
    return b"".join(
        encode_batch_kv(keys, values, base_offset=b * per_batch, timestamp_ms=TS)
        for b in range(max(1, total // per_batch))
    )


def _into_lists(data: bytes) -> int:
    offsets, keys, values = [], [], []
    for batch in iter_batches(data):
        for r in batch.records():
            offsets.append(r.offset)
            keys.append(r.key)
            values.append(r.value)
    return len(offsets)


def _report(benchmark, name: str, per_batch: int, records: int) -> None:
    stats = getattr(benchmark, "stats", None)
    if stats is None:  # smoke mode
        return
    median = stats.stats.median
    _MEDIANS[name, per_batch] = median
    benchmark.extra_info["records"] = records
    benchmark.extra_info["records_per_s"] = round(records / median)
    benchmark.extra_info["records_per_s_best"] = round(records / stats.stats.min)
    if name == "arrow" and ("lists", per_batch) in _MEDIANS:
        benchmark.extra_info["ratio_to_records"] = round(_MEDIANS["lists", per_batch] / median, 2)


@pytest.mark.parametrize("per_batch", [1000, 10_000])
def test_iter_batches_records_into_lists(benchmark, scale, per_batch):
    benchmark.group = f"decode {per_batch}-record batches into columns"
    data = _buffer(per_batch, int(TOTAL * scale))
    records = benchmark(_into_lists, data)
    _report(benchmark, "lists", per_batch, records)


@pytest.mark.parametrize("per_batch", [1000, 10_000])
def test_to_arrow(benchmark, scale, per_batch):
    benchmark.group = f"decode {per_batch}-record batches into columns"
    data = _buffer(per_batch, int(TOTAL * scale))
    table = benchmark(to_arrow, data)
    assert table.num_rows == _into_lists(data)
    assert table.column("value")[0].as_py() == bytes(100)
    _report(benchmark, "arrow", per_batch, table.num_rows)
