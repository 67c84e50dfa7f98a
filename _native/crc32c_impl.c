/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) with a hardware path chosen at run time.
 *
 * Hardware path: the CPU's CRC32C instruction (SSE4.2 crc32q on x86-64, crc32cx on ARMv8) has a
 * latency of about three cycles and a throughput of one per cycle, so a single dependency chain
 * runs at a third of the instruction's throughput. Large buffers are therefore cut into three
 * adjacent blocks whose CRCs run as three independent chains in the same loop; the three partial
 * CRCs are then joined with the "append n zero bytes" operator of the CRC, a linear map on the
 * 32-bit register, applied through four 256-entry tables (one per byte of the register).
 *
 *   crc(A || B) = shift_|B|(crc(A)) ^ crc0(B)   where crc0 starts from a zero register.
 *
 * Software path: slicing-by-8 tables.
 */
#include "crc32c_impl.h"

#include <stdlib.h>
#include <string.h>

#define POLY 0x82F63B78u

/* Block sizes of the interleaved loop: three LONG blocks per round for big buffers, three SHORT
 * blocks per round for the rest. */
#define LONG_BLOCK 8192
#define SHORT_BLOCK 256

static uint32_t sw_table[8][256];
static uint32_t shift_long[4][256];
static uint32_t shift_short[4][256];
static int initialized = 0;

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);
static crc_fn active = rc_crc32c_software;
static crc_fn hardware = NULL;
static const char *active_name = "software";

static inline uint64_t load64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* ---- GF(2) matrices for the zero-append operator ------------------------------------------ */

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    while (vec) {
        if (vec & 1) sum ^= *mat;
        vec >>= 1;
        mat++;
    }
    return sum;
}

/* out = a * b (apply b first, then a); out may not alias the inputs. */
static void gf2_multiply(uint32_t *out, const uint32_t *a, const uint32_t *b) {
    for (int n = 0; n < 32; n++) out[n] = gf2_times(a, b[n]);
}

/* The operator that appends `len` zero bytes to a raw (non-inverted) CRC register. */
static void zeros_operator(uint32_t *op, size_t len) {
    uint32_t bit[32], tmp[32], result[32];
    /* One zero bit: the register shifts right and folds the polynomial in when bit 0 was set. */
    bit[0] = POLY;
    for (int n = 1; n < 32; n++) bit[n] = 1u << (n - 1);
    /* Square three times: one zero byte. */
    for (int i = 0; i < 3; i++) {
        gf2_multiply(tmp, bit, bit);
        memcpy(bit, tmp, sizeof bit);
    }
    for (int n = 0; n < 32; n++) result[n] = 1u << n; /* identity */
    while (len) {
        if (len & 1) {
            gf2_multiply(tmp, bit, result);
            memcpy(result, tmp, sizeof result);
        }
        len >>= 1;
        if (len) {
            gf2_multiply(tmp, bit, bit);
            memcpy(bit, tmp, sizeof bit);
        }
    }
    memcpy(op, result, sizeof result);
}

static void shift_tables(uint32_t table[4][256], size_t len) {
    uint32_t op[32];
    zeros_operator(op, len);
    for (int n = 0; n < 256; n++) {
        table[0][n] = gf2_times(op, (uint32_t)n);
        table[1][n] = gf2_times(op, (uint32_t)n << 8);
        table[2][n] = gf2_times(op, (uint32_t)n << 16);
        table[3][n] = gf2_times(op, (uint32_t)n << 24);
    }
}

static inline uint32_t shift(uint32_t table[4][256], uint32_t crc) {
    return table[0][crc & 0xff] ^ table[1][(crc >> 8) & 0xff] ^ table[2][(crc >> 16) & 0xff] ^
           table[3][crc >> 24];
}

/* ---- software ----------------------------------------------------------------------------- */

static void init_software_tables(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t crc = n;
        for (int k = 0; k < 8; k++) crc = (crc & 1) ? (crc >> 1) ^ POLY : crc >> 1;
        sw_table[0][n] = crc;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t crc = sw_table[0][n];
        for (int k = 1; k < 8; k++) {
            crc = sw_table[0][crc & 0xff] ^ (crc >> 8);
            sw_table[k][n] = crc;
        }
    }
}

uint32_t rc_crc32c_software(uint32_t value, const void *buf, size_t len) {
    const uint8_t *p = (const uint8_t *)buf;
    uint32_t crc = ~value;
    if (!initialized) rc_crc32c_init();
    while (len && ((uintptr_t)p & 7)) {
        crc = sw_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        len--;
    }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (len >= 8) {
        uint64_t w = load64(p) ^ crc;
        crc = sw_table[7][w & 0xff] ^ sw_table[6][(w >> 8) & 0xff] ^
              sw_table[5][(w >> 16) & 0xff] ^ sw_table[4][(w >> 24) & 0xff] ^
              sw_table[3][(w >> 32) & 0xff] ^ sw_table[2][(w >> 40) & 0xff] ^
              sw_table[1][(w >> 48) & 0xff] ^ sw_table[0][w >> 56];
        p += 8;
        len -= 8;
    }
#endif
    while (len--) crc = sw_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* ---- hardware: one body, two instruction sets --------------------------------------------- */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HW_TARGET __attribute__((target("sse4.2")))
#define HW_CRC8(c, v) _mm_crc32_u8((uint32_t)(c), (v))
#define HW_CRC64(c, v) _mm_crc32_u64((c), (v))
#define HW_NAME "sse4.2"
static int hw_detect(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2");
}
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#include <arm_acle.h>
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif
#define HW_TARGET __attribute__((target("+crc")))
#define HW_CRC8(c, v) __crc32cb((uint32_t)(c), (v))
#define HW_CRC64(c, v) __crc32cd((uint32_t)(c), (v))
#define HW_NAME "armv8-crc"
static int hw_detect(void) { return (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0; }
#endif

#ifdef HW_NAME
HW_TARGET static uint32_t hw_crc32c(uint32_t value, const void *buf, size_t len) {
    const uint8_t *p = (const uint8_t *)buf;
    uint32_t crc = ~value;
    while (len && ((uintptr_t)p & 7)) {
        crc = HW_CRC8(crc, *p++);
        len--;
    }
    uint64_t c0 = crc;
    while (len >= 3 * LONG_BLOCK) {
        uint64_t c1 = 0, c2 = 0;
        const uint8_t *end = p + LONG_BLOCK;
        do {
            c0 = HW_CRC64(c0, load64(p));
            c1 = HW_CRC64(c1, load64(p + LONG_BLOCK));
            c2 = HW_CRC64(c2, load64(p + 2 * LONG_BLOCK));
            c0 = HW_CRC64(c0, load64(p + 8));
            c1 = HW_CRC64(c1, load64(p + LONG_BLOCK + 8));
            c2 = HW_CRC64(c2, load64(p + 2 * LONG_BLOCK + 8));
            p += 16;
        } while (p < end);
        c0 = shift(shift_long, (uint32_t)c0) ^ (uint32_t)c1;
        c0 = shift(shift_long, (uint32_t)c0) ^ (uint32_t)c2;
        p += 2 * LONG_BLOCK;
        len -= 3 * LONG_BLOCK;
    }
    while (len >= 3 * SHORT_BLOCK) {
        uint64_t c1 = 0, c2 = 0;
        const uint8_t *end = p + SHORT_BLOCK;
        do {
            c0 = HW_CRC64(c0, load64(p));
            c1 = HW_CRC64(c1, load64(p + SHORT_BLOCK));
            c2 = HW_CRC64(c2, load64(p + 2 * SHORT_BLOCK));
            p += 8;
        } while (p < end);
        c0 = shift(shift_short, (uint32_t)c0) ^ (uint32_t)c1;
        c0 = shift(shift_short, (uint32_t)c0) ^ (uint32_t)c2;
        p += 2 * SHORT_BLOCK;
        len -= 3 * SHORT_BLOCK;
    }
    while (len >= 8) {
        c0 = HW_CRC64(c0, load64(p));
        p += 8;
        len -= 8;
    }
    crc = (uint32_t)c0;
    while (len--) crc = HW_CRC8(crc, *p++);
    return ~crc;
}
#endif

/* ---- dispatch ----------------------------------------------------------------------------- */

void rc_crc32c_init(void) {
    if (initialized) return;
    init_software_tables();
    shift_tables(shift_long, LONG_BLOCK);
    shift_tables(shift_short, SHORT_BLOCK);
#ifdef HW_NAME
    if (hw_detect()) hardware = hw_crc32c;
#endif
    const char *force = getenv("RAFTCORE_CRC32C");
    if (hardware && !(force && strcmp(force, "software") == 0)) {
        active = hardware;
#ifdef HW_NAME
        active_name = HW_NAME;
#endif
    }
    initialized = 1;
}

uint32_t rc_crc32c(uint32_t value, const void *buf, size_t len) { return active(value, buf, len); }

int rc_crc32c_hardware_available(void) { return hardware != NULL; }

uint32_t rc_crc32c_hardware(uint32_t value, const void *buf, size_t len) {
    return hardware ? hardware(value, buf, len) : rc_crc32c_software(value, buf, len);
}

const char *rc_crc32c_implementation(void) { return active_name; }
