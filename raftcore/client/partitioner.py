"""Kafka's default partitioner for keyed records: ``murmur2(key) & 0x7fffffff`` modulo the
partition count. Java's producer (``BuiltInPartitioner.partitionForKey``) and librdkafka's
``murmur2`` / ``murmur2_random`` partitioners agree on it, so a key lands on the partition it
would land on from any of them. Records without a key are the caller's choice (Java sticks to
one partition per batch, librdkafka's ``murmur2_random`` picks at random)."""

from __future__ import annotations

__all__ = ["key_partition", "murmur2"]

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """MurmurHash2 of ``data`` with Kafka's seed, as an unsigned 32-bit value (Java's int,
    read as unsigned)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest:  # the tail, little-endian, as Java's switch falls through
        if rest == 3:
            h ^= data[whole + 2] << 16
        if rest >= 2:
            h ^= data[whole + 1] << 8
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def key_partition(key: bytes, partitions: int) -> int:
    """The partition of ``key`` among ``partitions`` (Kafka's ``toPositive(murmur2(key)) %
    partitions``)."""
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, not {partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % partitions
