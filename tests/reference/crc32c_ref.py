"""CRC-32C one bit at a time, straight from the definition (reflected polynomial 0x82F63B78)."""

POLY = 0x82F63B78


def crc32c_bitwise(data: bytes, value: int = 0) -> int:
    crc = value ^ 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ POLY if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF
