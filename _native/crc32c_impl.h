/* CRC-32C (Castagnoli), the checksum of Kafka record batch v2.
 *
 * rc_crc32c(value, buf, len) continues a checksum: value is a previous result (0 to start), so
 * rc_crc32c(rc_crc32c(0, a, n), b, m) == crc32c(a || b). The pre- and post-inversion of the
 * standard CRC-32C are applied inside, as in the `crc32c` Python package and in Kafka's Crc32C.
 *
 * The implementation is chosen once, at rc_crc32c_init(): SSE4.2 on x86-64, the CRC32 extension
 * on ARMv8, otherwise a table-driven software version. RAFTCORE_CRC32C=software in the
 * environment forces the software version (for tests and for comparison).
 */
#ifndef RAFTCORE_CRC32C_IMPL_H
#define RAFTCORE_CRC32C_IMPL_H

#include <stddef.h>
#include <stdint.h>

void rc_crc32c_init(void);
uint32_t rc_crc32c(uint32_t value, const void *buf, size_t len);
uint32_t rc_crc32c_software(uint32_t value, const void *buf, size_t len);
/* Returns 0 when the hardware path is not available on this CPU. */
int rc_crc32c_hardware_available(void);
uint32_t rc_crc32c_hardware(uint32_t value, const void *buf, size_t len);
/* "sse4.2", "armv8-crc" or "software". */
const char *rc_crc32c_implementation(void);

#endif
