"""Kafka's default partitioner for keyed records (raftcore.client.partitioner): murmur2 with
Kafka's seed, as Java's ``Utils.murmur2`` computes it (its own test's vectors, signed as Java
prints them), and ``toPositive(murmur2(key)) % partitions``."""

from __future__ import annotations

import pytest

from raftcore.client.partitioner import key_partition, murmur2

# org.apache.kafka.common.utils.UtilsTest.testMurmur2: every tail length (0..3 bytes past a
# multiple of four) is among them
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("data", "signed"), list(KAFKA_VECTORS.items()))
def test_murmur2_is_javas_utils_murmur2(data: bytes, signed: int) -> None:
    assert murmur2(data) == signed & 0xFFFFFFFF


def test_a_key_goes_to_its_hash_with_the_sign_bit_cleared_modulo_the_partitions() -> None:
    h = murmur2(b"21")  # negative in Java: toPositive clears the sign bit, not abs()
    assert h >= 1 << 31
    assert key_partition(b"21", 12) == (h & 0x7FFFFFFF) % 12
    assert key_partition(b"21", 1) == 0
    with pytest.raises(ValueError, match="at least one partition"):
        key_partition(b"21", 0)
