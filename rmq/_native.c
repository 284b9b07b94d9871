/*
 * rmq/_native.c -> rmq._native: optional C speedups of the Kafka produce and fetch hot paths.
 *
 * Nothing here is the reference: every function is the C twin of Python code that stays
 * authoritative and is what runs when this module is missing or RMQ_NO_NATIVE=1 is set
 * (rmq/native.py loads it). Byte-identical output is tested in tests/test_native.py.
 *
 *   crc32(data, value=0)      zlib / java.util.zip.CRC32 (RocketMQ's BODYCRC is crc32 & 0x7FFFFFFF)
 *   crc32c(data, value=0)     CRC-32C (Kafka RecordBatch v2); SSE4.2 crc32 instruction when present
 *   java_string_hash(utf8)    Java String.hashCode of UTF-8 text (rmq.common.jhash), the consumequeue tag code
 *   configure_kafka_mapping   the property / header names of kafka_bridge.mapping, set once at import
 *   kafka_records_to_units    one RecordBatch's records section -> commitlog units with the offsets
 *                             left blank: kafka_bridge.mapping.record_to_message + PreparedMessage.
 *                             Returns None whenever the Python mapping has to do it (see below).
 *   write_unit                PreparedMessage.write_into: one unit, BODYCRC included (CommitLog.append)
 *   batch_body_to_units       a SEND_BATCH_MESSAGE body (MessageDecoder.encodeMessages) -> the same kind of
 *                             units: what put_messages writes for the broker's Messages of the batch
 *   append_units              CommitLog.append for such units: copy into the mapped file, fill
 *                             QUEUEOFFSET / PHYSICALOFFSET / STORETIMESTAMP / STOREHOST, write the
 *                             20-byte consumequeue units; stops where the file must roll over.
 *   index_put                 IndexFile.put_key for those units' keys (hashes computed above).
 *   kafka_fetch_batch         DefaultMessageStore.get_message + mapping.unit_to_record +
 *                             records.encode_batch: one RecordBatch straight from the mapped files.
 *   spark_pull_columns        (_native_spark.h) PULL_MESSAGE bodies -> the Arrow column buffers of the
 *                             Spark rocketmq source: decode_messages + its row building, no object per message.
 *
 * No third-party C libraries: CRCs use slicing-by-8 tables; varints and UTF-8 validation are
 * written out below. All multi-byte fields of both formats are big-endian.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>
#include <stdio.h>
#include <arpa/inet.h>
#include <sys/socket.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#include <wmmintrin.h>
#include <smmintrin.h>
#define HAVE_SSE42_CRC 1
#endif

/* ------------------------------------------------------------------ constants (rmq.common.message) */
#define MESSAGE_MAGIC_CODE ((int32_t)0xDAA320A7)
#define COMPRESSED_FLAG 0x1
#define BORNHOST_V6_FLAG 0x10
#define STOREHOSTADDRESS_V6_FLAG 0x20
#define END_FILE_MIN_BLANK_LENGTH 8
#define MAX_PROPERTIES_LENGTH 32767
#define CQ_UNIT_SIZE 20
#define CQ_BLANK_SIZE 0x7FFFFFFF
#define BATCH_HEADER_SIZE 61        /* RecordBatch v2 header */
#define BATCH_CRC_START 21          /* CRC-32C covers attributes .. end */
#define MAX_HEADERS 64              /* records with more headers / units with more properties: Python */

/* ------------------------------------------------------------------ big-endian access */
static inline uint32_t rd32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t rd64(const uint8_t *p) { return ((uint64_t)rd32(p) << 32) | rd32(p + 4); }
static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static inline void wr16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static inline void wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
static inline void wr64(uint8_t *p, uint64_t v) { wr32(p, (uint32_t)(v >> 32)); wr32(p + 4, (uint32_t)v); }

/* ------------------------------------------------------------------ CRC-32 and CRC-32C */
static uint32_t crc32_table[8][256];   /* reflected 0xEDB88320: zlib, java.util.zip.CRC32 */
static uint32_t crc32c_table[8][256];  /* reflected 0x82F63B78: Castagnoli, Kafka */
static int have_sse42 = 0;

static void make_crc_tables(uint32_t poly, uint32_t t[8][256])
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
        t[0][i] = c;
    }
    for (int i = 0; i < 256; i++)
        for (int k = 1; k < 8; k++)
            t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
}

/* slicing-by-8: eight table lookups per 8 input bytes */
static uint32_t crc_sliced(uint32_t t[8][256], uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
    while (n && ((uintptr_t)p & 7)) {
        crc = t[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint32_t a = crc ^ ((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
        uint32_t b = (uint32_t)p[4] | ((uint32_t)p[5] << 8) | ((uint32_t)p[6] << 16) | ((uint32_t)p[7] << 24);
        crc = t[7][a & 0xFF] ^ t[6][(a >> 8) & 0xFF] ^ t[5][(a >> 16) & 0xFF] ^ t[4][a >> 24] ^
              t[3][b & 0xFF] ^ t[2][(b >> 8) & 0xFF] ^ t[1][(b >> 16) & 0xFF] ^ t[0][b >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = t[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

#ifdef HAVE_SSE42_CRC
__attribute__((target("sse4.2")))
static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c = (uint32_t)~crc;
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        n--;
    }
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    while (n--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#endif

#ifdef HAVE_SSE42_CRC
static int have_pclmul = 0;

/* The last steps of the folding CRC-32s below: the 128-bit remainder x -> 64 bits (x^128 mod P
 * and x^96 mod P), -> 32 bits (x^64 mod P), then a Barrett reduction (P' and mu). */
__attribute__((target("pclmul,sse4.1")))
static inline uint32_t crc32_reduce128(__m128i x)
{
    const __m128i k3k4 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    const __m128i k5 = _mm_set_epi64x(0, 0x163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x1f7011641LL, 0x1db710641LL);
    const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);
    __m128i t = _mm_clmulepi64_si128(k3k4, x, 0x01);
    x = _mm_xor_si128(_mm_srli_si128(x, 8), t);
    t = _mm_and_si128(x, mask32);
    x = _mm_srli_si128(x, 4);
    x = _mm_xor_si128(x, _mm_clmulepi64_si128(t, k5, 0x00));
    t = _mm_and_si128(x, mask32);
    t = _mm_clmulepi64_si128(t, poly, 0x10);
    t = _mm_and_si128(t, mask32);
    t = _mm_clmulepi64_si128(t, poly, 0x00);
    x = _mm_xor_si128(x, t);
    return (uint32_t)_mm_extract_epi32(x, 1);
}

/* CRC-32 (reflected 0xEDB88320) by carry-less multiplication, folding 64 bytes per round (the
 * method of Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ"; the fold
 * constants are x^k mod P for that polynomial, the final step a Barrett reduction). Works on the
 * un-inverted CRC state; needs len >= 64 and consumes len rounded down to a multiple of 16. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc32_fold_pclmul(uint32_t c, const uint8_t *p, size_t len)
{
    const __m128i k1k2 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    __m128i x1 = _mm_loadu_si128((const __m128i *)p);
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x4 = _mm_loadu_si128((const __m128i *)(p + 48));
    __m128i t;
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)c));
    p += 64;
    len -= 64;
    while (len >= 64) {
#define FOLD64(x, off) \
        t = _mm_clmulepi64_si128(x, k1k2, 0x11); \
        x = _mm_clmulepi64_si128(x, k1k2, 0x00); \
        x = _mm_xor_si128(_mm_xor_si128(x, t), _mm_loadu_si128((const __m128i *)(p + (off))));
        FOLD64(x1, 0) FOLD64(x2, 16) FOLD64(x3, 32) FOLD64(x4, 48)
#undef FOLD64
        p += 64;
        len -= 64;
    }
#define FOLD16(x, y) \
    t = _mm_clmulepi64_si128(x, k3k4, 0x11); \
    x = _mm_clmulepi64_si128(x, k3k4, 0x00); \
    x = _mm_xor_si128(_mm_xor_si128(x, t), y);
    FOLD16(x1, x2) FOLD16(x1, x3) FOLD16(x1, x4)
    while (len >= 16) {
        FOLD16(x1, _mm_loadu_si128((const __m128i *)p))
        p += 16;
        len -= 16;
    }
#undef FOLD16
    return crc32_reduce128(x1);
}
#endif

#include "_crc_vpclmul.h"
#ifdef HAVE_CRC32_VPCLMUL
static int have_vpclmul = 0;
#endif

static inline uint32_t crc32_zlib(uint32_t crc, const uint8_t *p, size_t n)
{
#ifdef HAVE_CRC32_VPCLMUL
    if (have_vpclmul && n >= 256) {  /* 4 x 512-bit folds: ~4x the 128-bit code on 4 KiB bodies */
        size_t m = n & ~(size_t)15;
        uint32_t c = crc32_fold_vpclmul(~crc, p, m);
        return crc_sliced(crc32_table, ~c, p + m, n - m);
    }
#endif
#ifdef HAVE_SSE42_CRC
    if (have_pclmul && n >= 64) {
        size_t m = n & ~(size_t)15;
        uint32_t c = crc32_fold_pclmul(~crc, p, m);
        return crc_sliced(crc32_table, ~c, p + m, n - m);
    }
#endif
    return crc_sliced(crc32_table, crc, p, n);
}

static inline uint32_t crc32c_any(uint32_t crc, const uint8_t *p, size_t n)
{
#ifdef HAVE_SSE42_CRC
    if (have_sse42)
        return crc32c_hw(crc, p, n);
#endif
    return crc_sliced(crc32c_table, crc, p, n);
}

/* ------------------------------------------------------------------ UTF-8, Java hash */
/* Length of the strictly valid UTF-8 sequence at p (as CPython's strict decoder accepts it: no
 * overlongs, no surrogates, nothing above U+10FFFF), 0 when invalid; *cp gets the code point. */
static inline int utf8_seq(const uint8_t *p, const uint8_t *e, uint32_t *cp)
{
    uint8_t c = p[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        if (e - p < 2 || (p[1] & 0xC0) != 0x80)
            return 0;
        *cp = ((uint32_t)(c & 0x1F) << 6) | (p[1] & 0x3F);
        return 2;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (e - p < 3)
            return 0;
        uint8_t c1 = p[1];
        if (c == 0xE0 ? (c1 < 0xA0 || c1 > 0xBF) : c == 0xED ? (c1 < 0x80 || c1 > 0x9F) : (c1 & 0xC0) != 0x80)
            return 0;
        if ((p[2] & 0xC0) != 0x80)
            return 0;
        *cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(c1 & 0x3F) << 6) | (p[2] & 0x3F);
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (e - p < 4)
            return 0;
        uint8_t c1 = p[1];
        if (c == 0xF0 ? (c1 < 0x90 || c1 > 0xBF) : c == 0xF4 ? (c1 < 0x80 || c1 > 0x8F) : (c1 & 0xC0) != 0x80)
            return 0;
        if ((p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80)
            return 0;
        *cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(c1 & 0x3F) << 12) | ((uint32_t)(p[2] & 0x3F) << 6) |
              (p[3] & 0x3F);
        return 4;
    }
    return 0;
}

static int utf8_valid(const uint8_t *p, Py_ssize_t n)
{
    const uint8_t *e = p + n;
    uint32_t cp;
    while (p < e) {
        if (*p < 0x80) {
            p++;
            continue;
        }
        int k = utf8_seq(p, e, &cp);
        if (!k)
            return 0;
        p += k;
    }
    return 1;
}

/* mapping._clean_text: UTF-8 without the property separators \x01 \x02 (and, for a record key
 * that KEYS is to hold as it is, without a space). */
static int clean_text(const uint8_t *p, Py_ssize_t n, int no_space)
{
    const uint8_t *e = p + n;
    uint32_t cp;
    while (p < e) {
        uint8_t c = *p;
        if (c < 0x80) {
            if (c == 1 || c == 2 || (no_space && c == ' '))
                return 0;
            p++;
            continue;
        }
        int k = utf8_seq(p, e, &cp);
        if (!k)
            return 0;
        p += k;
    }
    return 1;
}

/* Java String.hashCode over the UTF-16 code units of valid UTF-8 text (rmq.common.jhash), continuing
 * from the hash h of a prefix. */
static uint32_t java_hash_more(uint32_t h, const uint8_t *p, Py_ssize_t n)
{
    const uint8_t *e = p + n;
    uint32_t cp;
    while (p < e) {
        int k = utf8_seq(p, e, &cp);
        if (!k) { cp = *p; k = 1; }  /* not reached for validated text */
        p += k;
        if (cp < 0x10000) {
            h = 31 * h + cp;
        } else {
            cp -= 0x10000;
            h = 31 * h + (0xD800 + (cp >> 10));
            h = 31 * h + (0xDC00 + (cp & 0x3FF));
        }
    }
    return h;
}

static int32_t java_hash_utf8(const uint8_t *p, Py_ssize_t n) { return (int32_t)java_hash_more(0, p, n); }

/* IndexFile.indexKeyHashMethod: abs(String.hashCode), Integer.MIN_VALUE -> 0 */
static int32_t index_key_hash(uint32_t h)
{
    int32_t v = (int32_t)h;
    return v == INT32_MIN ? 0 : (v < 0 ? -v : v);
}

/* ------------------------------------------------------------------ Kafka zig-zag varints */
/* kafka_bridge.records.varint: decode_varint (max_bytes 5, int32 range) and decode_varlong
 * (10, int64). Returns 0 when the varint runs past `e` or is out of range: the caller then leaves
 * the batch to the Python code, which reports the problem. */
static inline int get_varint(const uint8_t **pp, const uint8_t *e, int64_t *out, int max_bytes)
{
    const uint8_t *p = *pp;
    if (p < e && *p < 0x80) {  /* the common one-byte case */
        uint8_t b = *p;
        *out = (int64_t)(b >> 1) ^ -(int64_t)(b & 1);
        *pp = p + 1;
        return 1;
    }
    uint64_t z = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (p >= e)
            return 0;
        uint8_t b = *p++;
        if (i == 9 && (b & 0x7E))
            return 0;  /* bits beyond 64: out of the int64 range */
        z |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            int64_t v = (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
            if (max_bytes == 5 && (v < INT32_MIN || v > INT32_MAX))
                return 0;
            *out = v;
            *pp = p;
            return 1;
        }
        shift += 7;
    }
    return 0;
}

static inline int varint_size(int64_t v)
{
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 1;
    while (z >= 0x80) {
        z >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *put_varint(uint8_t *o, int64_t v)
{
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z >= 0x80) {
        *o++ = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    *o++ = (uint8_t)z;
    return o;
}

/* ------------------------------------------------------------------ configured names */
typedef struct {
    const uint8_t *s;
    Py_ssize_t n;
} name_t;

static PyObject *cfg_keep = NULL;     /* the tuple of bytes the pointers below point into */
static name_t *sys_props = NULL;      /* mapping.SYSTEM_PROPERTIES */
static Py_ssize_t n_sys_props = 0;
static name_t *reserved_hdrs = NULL;  /* rocketmq.keys, rocketmq.delay: produce leaves them to Python */
static Py_ssize_t n_reserved_hdrs = 0;
static name_t *fetch_slow_props = NULL;  /* KAFKA_KEY_B64, KAFKA_NULL_VALUE, KAFKA_HEADERS_B64 */
static Py_ssize_t n_fetch_slow_props = 0;
static name_t tags_hdr = {NULL, 0};   /* rocketmq.tags */
static int configured = 0;

static const uint8_t NAME_KEYS[] = "KEYS";
static const uint8_t NAME_TAGS[] = "TAGS";

static inline int name_eq(const uint8_t *p, Py_ssize_t n, const uint8_t *s, Py_ssize_t sn)
{
    return n == sn && memcmp(p, s, (size_t)n) == 0;
}

static inline int name_in(const uint8_t *p, Py_ssize_t n, const name_t *set, Py_ssize_t count)
{
    for (Py_ssize_t i = 0; i < count; i++)
        if (set[i].n == n && memcmp(set[i].s, p, (size_t)n) == 0)
            return 1;
    return 0;
}

static int fill_names(PyObject *seq, name_t **out, Py_ssize_t *count, PyObject *keep)
{
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of bytes");
    if (!fast)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    name_t *names = PyMem_Calloc(n ? (size_t)n : 1, sizeof(name_t));
    if (!names) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyBytes_Check(b)) {
            PyErr_SetString(PyExc_TypeError, "names must be bytes");
            PyMem_Free(names);
            Py_DECREF(fast);
            return -1;
        }
        if (PyList_Append(keep, b) < 0) {
            PyMem_Free(names);
            Py_DECREF(fast);
            return -1;
        }
        names[i].s = (const uint8_t *)PyBytes_AS_STRING(b);
        names[i].n = PyBytes_GET_SIZE(b);
    }
    Py_DECREF(fast);
    *out = names;
    *count = n;
    return 0;
}

static PyObject *py_configure_kafka_mapping(PyObject *self, PyObject *args)
{
    PyObject *sysp, *reserved, *slow, *tags;
    if (!PyArg_ParseTuple(args, "OSOO:configure_kafka_mapping", &sysp, &tags, &reserved, &slow))
        return NULL;
    PyObject *keep = PyList_New(0);
    if (!keep)
        return NULL;
    name_t *a = NULL, *b = NULL, *c = NULL;
    Py_ssize_t na = 0, nb = 0, nc = 0;
    if (fill_names(sysp, &a, &na, keep) < 0 || fill_names(reserved, &b, &nb, keep) < 0 ||
        fill_names(slow, &c, &nc, keep) < 0 || PyList_Append(keep, tags) < 0) {
        PyMem_Free(a);
        PyMem_Free(b);
        PyMem_Free(c);
        Py_DECREF(keep);
        return NULL;
    }
    PyMem_Free(sys_props);
    PyMem_Free(reserved_hdrs);
    PyMem_Free(fetch_slow_props);
    Py_XSETREF(cfg_keep, keep);
    sys_props = a; n_sys_props = na;
    reserved_hdrs = b; n_reserved_hdrs = nb;
    fetch_slow_props = c; n_fetch_slow_props = nc;
    tags_hdr.s = (const uint8_t *)PyBytes_AS_STRING(tags);
    tags_hdr.n = PyBytes_GET_SIZE(tags);
    configured = 1;
    Py_RETURN_NONE;
}

static int check_configured(void)
{
    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "rmq._native: configure_kafka_mapping() was not called");
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------ crc32 / crc32c / hash */
/* crc32 / crc32c(data, value=0): large buffers are checksummed with the GIL released */
static PyObject *crc_call(PyObject *args, const char *fmt, uint32_t (*fn)(uint32_t, const uint8_t *, size_t))
{
    Py_buffer b;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, fmt, &b, &value))
        return NULL;
    uint32_t c;
    if (b.len < 65536) {
        c = fn(value, b.buf, (size_t)b.len);
    } else {
        Py_BEGIN_ALLOW_THREADS
        c = fn(value, b.buf, (size_t)b.len);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(c);
}

static PyObject *py_crc32(PyObject *self, PyObject *args)
{
    return crc_call(args, "y*|I:crc32", crc32_zlib);
}

static PyObject *py_crc32c(PyObject *self, PyObject *args)
{
    return crc_call(args, "y*|I:crc32c", crc32c_any);
}

static PyObject *py_crc32c_sliced(PyObject *self, PyObject *args)
{
    Py_buffer b;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I:crc32c_sliced", &b, &value))
        return NULL;
    uint32_t c = crc_sliced(crc32c_table, value, b.buf, (size_t)b.len);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(c);
}

static PyObject *py_java_string_hash(PyObject *self, PyObject *args)
{
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "y*:java_string_hash", &b))
        return NULL;
    if (!utf8_valid(b.buf, b.len)) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "expected UTF-8 text");
        return NULL;
    }
    int32_t h = java_hash_utf8(b.buf, b.len);
    PyBuffer_Release(&b);
    return PyLong_FromLong(h);
}

/* ================================================================== produce: records -> units */
/* ------------------------------------------------------------------ growable output */
typedef struct {
    uint8_t *buf;   /* PyBytes storage of `obj` */
    PyObject *obj;
    Py_ssize_t len, cap;
} outbuf;

/* An empty outbuf of `cap` bytes: 0 with an exception set when out of memory. */
static int out_init(outbuf *b, Py_ssize_t cap)
{
    b->obj = PyBytes_FromStringAndSize(NULL, cap);
    b->buf = b->obj ? (uint8_t *)PyBytes_AS_STRING(b->obj) : NULL;
    b->len = 0;
    b->cap = cap;
    return b->obj != NULL;
}

/* The outbuf's bytes object cut to its length (a new reference; the outbuf gives it up), or NULL. */
static PyObject *out_finish(outbuf *b)
{
    if (b->obj != NULL && _PyBytes_Resize(&b->obj, b->len) < 0)
        b->obj = NULL;
    PyObject *o = b->obj;
    b->obj = NULL;
    b->buf = NULL;
    return o;
}

static int out_reserve(outbuf *b, Py_ssize_t extra)
{
    if (b->len + extra <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap * 2;
    if (cap < b->len + extra)
        cap = b->len + extra + 4096;
    if (_PyBytes_Resize(&b->obj, cap) < 0)
        return -1;
    b->buf = (uint8_t *)PyBytes_AS_STRING(b->obj);
    b->cap = cap;
    return 0;
}

typedef struct {
    const uint8_t *key;   /* NULL: no key */
    const uint8_t *val;
    const uint8_t *hdrs;  /* first header, after the count */
    const uint8_t *tags;  /* value of rocketmq.tags, NULL when absent */
    int64_t ts;
    Py_ssize_t klen, vlen, tlen;
    int32_t hcount;
    int32_t props_len;
    int32_t unit_size;
} rec_t;

/* Parse and check one record at *pp; 1 when the fast path maps it exactly like
 * mapping.record_to_message, 0 when the batch goes to the Python code. */
static int parse_record(const uint8_t **pp, const uint8_t *end, int64_t index, int64_t base_ts, int use_append_ts,
                        int64_t append_ts, Py_ssize_t fixed_tail, Py_ssize_t max_unit, rec_t *r)
{
    const uint8_t *p = *pp;
    int64_t len, ts_delta, offset_delta, n;
    if (!get_varint(&p, end, &len, 5) || len < 6 || len > end - p)
        return 0;
    const uint8_t *re = p + len;
    p++;  /* record attributes: unused */
    if (!get_varint(&p, re, &ts_delta, 10))
        return 0;
    if (!get_varint(&p, re, &offset_delta, 5) || offset_delta != index)
        return 0;
    if (!get_varint(&p, re, &n, 5))
        return 0;
    if (n == -1) {
        r->key = NULL;
        r->klen = 0;
    } else if (n >= 0 && n <= re - p) {
        r->key = p;
        r->klen = (Py_ssize_t)n;
        p += n;
    } else {
        return 0;
    }
    if (!get_varint(&p, re, &n, 5) || n < 0 || n > re - p)  /* a null value: Python (KAFKA_NULL_VALUE) */
        return 0;
    r->val = p;
    r->vlen = (Py_ssize_t)n;
    p += n;
    int64_t hc;
    if (!get_varint(&p, re, &hc, 5) || hc < 0 || hc > MAX_HEADERS || hc * 2 > re - p)
        return 0;
    r->hcount = (int32_t)hc;
    r->hdrs = p;
    r->tags = NULL;
    r->tlen = 0;
    Py_ssize_t props = 0;
    const uint8_t *names[MAX_HEADERS];
    Py_ssize_t name_lens[MAX_HEADERS];
    int n_user = 0;
    for (int64_t j = 0; j < hc; j++) {
        int64_t nl, vl;
        if (!get_varint(&p, re, &nl, 5) || nl < 0 || nl > re - p)
            return 0;
        const uint8_t *name = p;
        p += nl;
        if (!get_varint(&p, re, &vl, 5) || vl < 0 || vl > re - p)  /* a null header value: Python */
            return 0;
        const uint8_t *hv = p;
        p += vl;
        if (name_eq(name, nl, tags_hdr.s, tags_hdr.n)) {
            if (r->tags != NULL || !clean_text(hv, vl, 0))
                return 0;  /* repeated (the last one wins in Python) or not text (MappingError) */
            r->tags = hv;
            r->tlen = (Py_ssize_t)vl;
            props += 4 + 1 + vl + 1;
            continue;
        }
        if (nl == 0 || name_in(name, nl, reserved_hdrs, n_reserved_hdrs) || name_in(name, nl, sys_props, n_sys_props))
            return 0;
        if (!clean_text(name, nl, 0) || !clean_text(hv, vl, 0))
            return 0;  /* base64 in KAFKA_HEADERS_B64: Python */
        for (int k = 0; k < n_user; k++)
            if (name_eq(name, nl, names[k], name_lens[k]))
                return 0;  /* a repeated header name: Python */
        names[n_user] = name;
        name_lens[n_user] = (Py_ssize_t)nl;
        n_user++;
        props += nl + 1 + vl + 1;
    }
    if (p != re)
        return 0;
    if (r->key != NULL) {
        if (!clean_text(r->key, r->klen, 1))
            return 0;  /* KAFKA_KEY_B64: Python */
        props += 4 + 1 + r->klen + 1;
    }
    if (props > MAX_PROPERTIES_LENGTH)
        return 0;
    if (use_append_ts) {
        r->ts = append_ts;
    } else if (__builtin_add_overflow(base_ts, ts_delta, &r->ts)) {
        return 0;
    }
    Py_ssize_t size = fixed_tail + r->vlen + props;
    if (size > max_unit || size > INT32_MAX)
        return 0;
    r->props_len = (int32_t)props;
    r->unit_size = (int32_t)size;
    *pp = re;
    return 1;
}

/* The unit's fixed part up to BODY's length, with QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP
 * and STOREHOST zero (append_units fills them). Returns where the body goes. */
static uint8_t *put_blank_head(uint8_t *u, int32_t size, const uint8_t *body, int32_t body_len, int32_t queue_id,
                               int32_t flag, uint32_t sys_flag, int64_t born_ts, const uint8_t *born,
                               Py_ssize_t born_len, int32_t born_port, Py_ssize_t store_len, int32_t reconsume)
{
    wr32(u, (uint32_t)size);
    wr32(u + 4, (uint32_t)MESSAGE_MAGIC_CODE);
    wr32(u + 8, crc32_zlib(0, body, (size_t)body_len) & 0x7FFFFFFF);
    wr32(u + 12, (uint32_t)queue_id);
    wr32(u + 16, (uint32_t)flag);
    memset(u + 20, 0, 16);  /* QUEUEOFFSET, PHYSICALOFFSET */
    wr32(u + 36, sys_flag);
    wr64(u + 40, (uint64_t)born_ts);
    memcpy(u + 48, born, (size_t)born_len);
    wr32(u + 48 + born_len, (uint32_t)born_port);
    uint8_t *q = u + 52 + born_len;
    memset(q, 0, (size_t)(8 + store_len));  /* STORETIMESTAMP, STOREHOST */
    q += 8 + store_len;
    wr32(q, (uint32_t)reconsume);
    wr64(q + 4, 0);  /* PREPARED_TRANSACTION_OFFSET */
    wr32(q + 12, (uint32_t)body_len);
    return q + 16;
}

/* The optional outputs of the unit encoders: one int64 tag code per unit when any unit has tags,
 * one int32 hash and unit index per index key. 0 with an exception set when out of memory. */
static int alloc_unit_extras(Py_ssize_t count, int any_tags, Py_ssize_t n_keys, PyObject **tags, PyObject **hashes,
                             PyObject **units)
{
    if (any_tags && !(*tags = PyBytes_FromStringAndSize(NULL, count * 8)))
        return 0;
    if (n_keys) {
        *hashes = PyBytes_FromStringAndSize(NULL, n_keys * 4);
        *units = PyBytes_FromStringAndSize(NULL, n_keys * 4);
        if (!*hashes || !*units)
            return 0;
    }
    return 1;
}

static uint8_t *put_prop(uint8_t *o, const uint8_t *name, Py_ssize_t nl, const uint8_t *v, Py_ssize_t vl)
{
    memcpy(o, name, (size_t)nl);
    o += nl;
    *o++ = 0x01;
    memcpy(o, v, (size_t)vl);
    o += vl;
    *o++ = 0x02;
    return o;
}

/*
 * kafka_records_to_units(records, start, end, count, base_ts, append_ts, topic, queue_id,
 *                        born_addr, born_port, store_v6, max_unit_size)
 *   -> None | (units: bytes, tags_codes: bytes | None, index_hashes: bytes | None,
 *              index_units: bytes | None, max_size)
 *
 * records[start:end] is the (decompressed) records section of one RecordBatch v2 holding `count`
 * records; append_ts is the batch's max timestamp for LOG_APPEND_TIME batches, else None.
 * Units are what PreparedMessage.write_into writes for the Message record_to_message builds, with
 * QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP and STOREHOST zero (append_units fills them).
 * tags_codes: one native int64 per unit (consumequeue tag code) or None when no record has tags.
 * index_hashes / index_units: for each record with a non-empty key, the IndexFile hash of
 * "topic#key" and the record's index (native int32 each); None when no record has a key.
 * None whenever any record needs the Python mapping: invalid or unusual encodings (Python reports
 * them), null values, keys that are not UTF-8 text without separators and spaces, header values
 * or names that are not such text, repeated or system-property header names, rocketmq.keys /
 * rocketmq.delay, more than 64 headers, properties over 32767 bytes, units over max_unit_size.
 */
static PyObject *records_to_units(const uint8_t *rbuf, Py_ssize_t start, Py_ssize_t end, Py_ssize_t count,
                                  long long base_ts, int use_append_ts, long long append_ts, const Py_buffer *topicb,
                                  int queue_id, const Py_buffer *bornb, int born_port, int store_v6,
                                  Py_ssize_t max_unit);

static PyObject *py_kafka_records_to_units(PyObject *self, PyObject *args)
{
    Py_buffer rb, topic, born;
    Py_ssize_t start, end, count, max_unit;
    long long base_ts, append_ts = 0;
    PyObject *append_obj;
    int queue_id, born_port, store_v6;
    if (!PyArg_ParseTuple(args, "y*nnnLOy*iy*ipn:kafka_records_to_units", &rb, &start, &end, &count, &base_ts,
                          &append_obj, &topic, &queue_id, &born, &born_port, &store_v6, &max_unit))
        return NULL;
    PyObject *result = NULL;
    if (start < 0 || end > rb.len || start > end) {
        PyErr_SetString(PyExc_ValueError, "records range out of bounds");
        goto done;
    }
    int use_append_ts = append_obj != Py_None;
    if (use_append_ts) {
        append_ts = PyLong_AsLongLong(append_obj);
        if (append_ts == -1 && PyErr_Occurred())
            goto done;
    }
    result = records_to_units((const uint8_t *)rb.buf, start, end, count, base_ts, use_append_ts, append_ts, &topic,
                              queue_id, &born, born_port, store_v6, max_unit);
done:
    PyBuffer_Release(&rb);
    PyBuffer_Release(&topic);
    PyBuffer_Release(&born);
    return result;
}

/* Where map_records appends: the units, one native int64 tag code per unit, and per index key its
 * hash and its unit's number (native int32 each); `recs` is scratch space kept between calls. */
typedef struct {
    outbuf units, tags, hashes, iunits;
    rec_t *recs;
    Py_ssize_t recs_cap;
} mapout;

static int mapout_init(mapout *mo, Py_ssize_t units_cap)
{
    memset(mo, 0, sizeof(*mo));
    return out_init(&mo->units, units_cap) && out_init(&mo->tags, 256) && out_init(&mo->hashes, 64)
           && out_init(&mo->iunits, 64);
}

static void mapout_release(mapout *mo)
{
    Py_CLEAR(mo->units.obj);
    Py_CLEAR(mo->tags.obj);
    Py_CLEAR(mo->hashes.obj);
    Py_CLEAR(mo->iunits.obj);
    PyMem_Free(mo->recs);
    mo->recs = NULL;
}

/* What one batch's records map to (map_records). */
typedef struct {
    int any_tags;          /* some unit has a tag code (else its tag codes were not kept) */
    Py_ssize_t n_keys;     /* index keys appended */
    Py_ssize_t max_size;   /* largest unit */
} mapinfo;

/* kafka_records_to_units' work, appending to `mo`: 1 when the records were mapped (units, tag
 * codes when any_tags, index keys numbered from unit_base), 0 when the Python mapping must do it
 * (nothing appended), -1 with an exception set. */
static int map_records(mapout *mo, const uint8_t *rbuf, Py_ssize_t start, Py_ssize_t end, Py_ssize_t count,
                       long long base_ts, int use_append_ts, long long append_ts, const uint8_t *topic,
                       Py_ssize_t topic_len, int queue_id, const uint8_t *born, Py_ssize_t born_n, int born_port,
                       int store_v6, Py_ssize_t max_unit, Py_ssize_t unit_base, mapinfo *info)
{
    if (!check_configured())
        return -1;
    if (born_n != 4 && born_n != 16) {
        PyErr_SetString(PyExc_ValueError, "born_addr must be 4 (IPv4) or 16 (IPv6) bytes");
        return -1;
    }
    if (topic_len > 255) {
        PyErr_SetString(PyExc_ValueError, "topic longer than 255 bytes");
        return -1;
    }
    if (count <= 0 || count > (end - start) / 7)  /* MIN_RECORD_SIZE */
        return 0;
    if (count > mo->recs_cap) {
        rec_t *r = PyMem_Realloc(mo->recs, (size_t)count * sizeof(rec_t));
        if (!r) {
            PyErr_NoMemory();
            return -1;
        }
        mo->recs = r;
        mo->recs_cap = count;
    }
    rec_t *recs = mo->recs;
    const Py_ssize_t born_len = born_n + 4, store_len = store_v6 ? 20 : 8;
    const Py_ssize_t fixed = 72 + born_len + store_len;
    const Py_ssize_t fixed_tail = fixed + 1 + topic_len + 2;  /* + body + properties */
    const uint8_t *p = rbuf + start, *e = rbuf + end;
    Py_ssize_t total = 0, max_size = 0, n_keys = 0;
    int any_tags = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        rec_t *r = &recs[i];
        if (!parse_record(&p, e, i, base_ts, use_append_ts, append_ts, fixed_tail, max_unit, r))
            return 0;
        total += r->unit_size;
        if (r->unit_size > max_size)
            max_size = r->unit_size;
        if (r->tags && r->tlen)
            any_tags = 1;
        if (r->key && r->klen)
            n_keys++;
    }
    if (p != e)
        return 0;
    uint32_t topic_hash = 0;
    if (n_keys) {
        if (!utf8_valid(topic, topic_len)) {
            PyErr_SetString(PyExc_ValueError, "topic is not UTF-8");
            return -1;
        }
        topic_hash = java_hash_more(0, topic, topic_len);
        topic_hash = 31 * topic_hash + '#';  /* IndexService.buildKey: topic + "#" + key */
    }
    if (out_reserve(&mo->units, total) < 0 || (any_tags && out_reserve(&mo->tags, count * 8) < 0)
        || out_reserve(&mo->hashes, n_keys * 4) < 0 || out_reserve(&mo->iunits, n_keys * 4) < 0)
        return -1;
    uint8_t *o = mo->units.buf + mo->units.len;
    uint8_t *const o_end = o + total;
    const uint32_t sys_flag = (born_n == 16 ? BORNHOST_V6_FLAG : 0) | (store_v6 ? STOREHOSTADDRESS_V6_FLAG : 0);
    for (Py_ssize_t i = 0; i < count; i++) {
        rec_t *r = &recs[i];
        /* BORNTIMESTAMP = record timestamp; FLAG, RECONSUMETIMES 0 */
        uint8_t *q = put_blank_head(o, r->unit_size, r->val, (int32_t)r->vlen, queue_id, 0, sys_flag, r->ts, born,
                                    born_n, born_port, store_len, 0);
        memcpy(q, r->val, (size_t)r->vlen);
        q += r->vlen;
        *q++ = (uint8_t)topic_len;
        memcpy(q, topic, (size_t)topic_len);
        q += topic_len;
        wr16(q, (uint16_t)r->props_len);
        q += 2;
        /* properties in record_to_message's order: headers (rocketmq.tags as TAGS), then KEYS */
        const uint8_t *h = r->hdrs;
        for (int32_t j = 0; j < r->hcount; j++) {
            int64_t nl = 0, vl = 0;  /* validated by parse_record */
            get_varint(&h, e, &nl, 5);
            const uint8_t *name = h;
            h += nl;
            get_varint(&h, e, &vl, 5);
            const uint8_t *hv = h;
            h += vl;
            if (name_eq(name, nl, tags_hdr.s, tags_hdr.n))
                q = put_prop(q, NAME_TAGS, 4, hv, vl);
            else
                q = put_prop(q, name, nl, hv, vl);
        }
        if (r->key)
            q = put_prop(q, NAME_KEYS, 4, r->key, r->klen);
        o = q;
        if (any_tags) {
            int64_t code = (r->tags && r->tlen) ? (int64_t)java_hash_utf8(r->tags, r->tlen) : 0;
            memcpy(mo->tags.buf + mo->tags.len, &code, 8);
            mo->tags.len += 8;
        }
        if (r->key && r->klen) {
            int32_t kh = index_key_hash(java_hash_more(topic_hash, r->key, r->klen)), ki = (int32_t)(unit_base + i);
            memcpy(mo->hashes.buf + mo->hashes.len, &kh, 4);
            memcpy(mo->iunits.buf + mo->iunits.len, &ki, 4);
            mo->hashes.len += 4;
            mo->iunits.len += 4;
        }
    }
    if (o != o_end) {
        PyErr_SetString(PyExc_SystemError, "map_records: size mismatch");
        return -1;
    }
    mo->units.len += total;
    info->any_tags = any_tags;
    info->n_keys = n_keys;
    info->max_size = max_size;
    return 1;
}

/* kafka_records_to_units after its argument parsing: a new reference (the tuple or None), or NULL
 * with an exception set. */
static PyObject *records_to_units(const uint8_t *rbuf, Py_ssize_t start, Py_ssize_t end, Py_ssize_t count,
                                  long long base_ts, int use_append_ts, long long append_ts, const Py_buffer *topic,
                                  int queue_id, const Py_buffer *born, int born_port, int store_v6,
                                  Py_ssize_t max_unit)
{
    mapout mo;
    mapinfo info;
    PyObject *result = NULL, *units = NULL, *tags = NULL, *hashes = NULL, *iunits = NULL;
    if (!mapout_init(&mo, end - start + 256))
        goto done;
    int rc = map_records(&mo, rbuf, start, end, count, base_ts, use_append_ts, append_ts, topic->buf, topic->len,
                         queue_id, born->buf, born->len, born_port, store_v6, max_unit, 0, &info);
    if (rc <= 0) {
        result = rc == 0 ? Py_NewRef(Py_None) : NULL;
        goto done;
    }
    units = out_finish(&mo.units);
    if (!units)
        goto done;
    if (info.any_tags && !(tags = out_finish(&mo.tags)))
        goto done;
    if (info.n_keys && (!(hashes = out_finish(&mo.hashes)) || !(iunits = out_finish(&mo.iunits))))
        goto done;
    result = Py_BuildValue("(OOOOn)", units, tags ? tags : Py_None, hashes ? hashes : Py_None,
                           iunits ? iunits : Py_None, info.max_size);
done:
    Py_XDECREF(units);
    Py_XDECREF(tags);
    Py_XDECREF(hashes);
    Py_XDECREF(iunits);
    mapout_release(&mo);
    return result;
}

/*
 * kafka_batch_to_units(records, topic, queue_id, born_addr, born_port, store_v6, max_unit_size,
 *                      max_batch_size)
 *   -> None | (producer_id, producer_epoch, base_sequence, count, units, tags_codes, index_hashes,
 *              index_units, max_size)
 *
 * A Produce request's partition entry that is exactly one RecordBatch v2, uncompressed, neither
 * transactional nor control, with a valid CRC-32C and last offset delta count - 1, no larger than
 * max_batch_size: its header fields and kafka_records_to_units of its records, in one call (what
 * iter_batches + RecordBatch + batch_to_units do for the common entry of a request of many
 * partitions). None for anything else, which the Python path then decodes (and reports).
 */
static PyObject *py_kafka_batch_to_units(PyObject *self, PyObject *args)
{
    Py_buffer rb, topic, born;
    Py_ssize_t max_unit, max_batch;
    int queue_id, born_port, store_v6;
    if (!PyArg_ParseTuple(args, "y*y*iy*ipnn:kafka_batch_to_units", &rb, &topic, &queue_id, &born, &born_port,
                          &store_v6, &max_unit, &max_batch))
        return NULL;
    PyObject *result = NULL, *mapped = NULL;
    const uint8_t *b = rb.buf;
    const Py_ssize_t n = rb.len;
    /* baseOffset 8, batchLength 4, partitionLeaderEpoch 4, magic 1, crc 4, attributes 2,
     * lastOffsetDelta 4, baseTimestamp 8, maxTimestamp 8, producerId 8, producerEpoch 2,
     * baseSequence 4, records count 4: 61 bytes */
    if (n < 61 || n > max_batch || b[16] != 2 || (Py_ssize_t)(int32_t)rd32(b + 8) + 12 != n) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    const uint16_t attrs = rd16(b + 21);
    const int32_t last_delta = (int32_t)rd32(b + 23), count = (int32_t)rd32(b + 57);
    if ((attrs & (0x07 | 0x10 | 0x20)) || count <= 0 || last_delta != count - 1
        || crc32c_any(0, b + 21, (size_t)(n - 21)) != rd32(b + 17)) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    const long long base_ts = (long long)rd64(b + 27), max_ts = (long long)rd64(b + 35);
    mapped = records_to_units(b, 61, n, count, base_ts, (attrs & 0x08) != 0, max_ts, &topic, queue_id, &born,
                              born_port, store_v6, max_unit);
    if (mapped == NULL || mapped == Py_None) {
        result = mapped;
        mapped = NULL;
        goto done;
    }
    result = Py_BuildValue("(LiiiOOOOO)", (long long)rd64(b + 43), (int)(int16_t)rd16(b + 51),
                           (int)(int32_t)rd32(b + 53), (int)count, PyTuple_GET_ITEM(mapped, 0),
                           PyTuple_GET_ITEM(mapped, 1), PyTuple_GET_ITEM(mapped, 2), PyTuple_GET_ITEM(mapped, 3),
                           PyTuple_GET_ITEM(mapped, 4));
done:
    Py_XDECREF(mapped);
    PyBuffer_Release(&rb);
    PyBuffer_Release(&topic);
    PyBuffer_Release(&born);
    return result;
}

/* ================================================================== recovery scan */
#define BLANK_MAGIC_CODE ((int32_t)0xCBD43194)
#define TRANSACTION_PREPARED_TYPE 0x4
#define TRANSACTION_ROLLBACK_TYPE 0xC

/* The checks decode_message(check_crc=...) makes of the unit at u (size bytes available from it),
 * plus PHYSICALOFFSET == phy: 1 when it would decode. */
static int unit_valid(const uint8_t *u, Py_ssize_t total, int64_t phy, int check_crc)
{
    if (total < 91)  /* UNIT_FIXED_V4 + 3 */
        return 0;
    const uint32_t sf = rd32(u + 36);
    const Py_ssize_t fixed = 72 + ((sf & BORNHOST_V6_FLAG) ? 20 : 8) + ((sf & STOREHOSTADDRESS_V6_FLAG) ? 20 : 8);
    if (total < fixed + 3)
        return 0;
    const int32_t bl = (int32_t)rd32(u + fixed - 4);
    if (bl < 0 || fixed + bl + 3 > total)
        return 0;
    if (check_crc && (crc32_zlib(0, u + fixed, (size_t)bl) & 0x7FFFFFFF) != rd32(u + 8))
        return 0;
    const Py_ssize_t tl = u[fixed + bl];
    const Py_ssize_t p = fixed + bl + 1;
    if (p + tl + 2 > total || p + tl + 2 + rd16(u + p + tl) != total)
        return 0;
    return (int64_t)rd64(u + 28) == phy;
}

/* 1 when the properties of the (valid) unit at u hold an item "KEYS\x01v" or "UNIQ_KEY\x01v" with
 * a value v that is not empty: what IndexService.build_index indexes (properties_from_bytes splits
 * the properties at \x02 and each item at its first \x01). An item repeated with an empty value
 * last still answers 1: the unit is then decoded and build_index finds nothing, never the reverse. */
static int unit_has_index_keys(const uint8_t *u, Py_ssize_t total, uint32_t sf)
{
    const Py_ssize_t fixed = 72 + ((sf & BORNHOST_V6_FLAG) ? 20 : 8) + ((sf & STOREHOSTADDRESS_V6_FLAG) ? 20 : 8);
    const Py_ssize_t tp = fixed + (int32_t)rd32(u + fixed - 4);  /* unit_valid checked these bounds */
    const Py_ssize_t pp = tp + 1 + u[tp];
    const Py_ssize_t plen = rd16(u + pp);
    const uint8_t *p = u + pp + 2, *end = p + plen;
    if (pp + 2 + plen > total)
        return 1;
    while (p < end) {
        const uint8_t *item_end = memchr(p, 0x02, (size_t)(end - p));
        if (!item_end)
            item_end = end;
        const Py_ssize_t il = item_end - p;
        if ((il > 5 && memcmp(p, "KEYS\x01", 5) == 0) || (il > 9 && memcmp(p, "UNIQ_KEY\x01", 9) == 0))
            return 1;
        p = item_end + 1;
    }
    return 0;
}

/*
 * scan_units(buf, pos, limit, file_from_offset, check_crc, queue_max, index_from)
 *   -> (stop, end_pos, units, last_store_timestamp, todo)
 *
 * CommitLog.iter_units over one mapped file in C, for abnormal recovery: walks the MESSAGE units
 * from buf[pos] while their absolute offset (file_from_offset + position) is below `limit`, with
 * decode_message's checks (body CRC with check_crc), and stops where iter_units stops. stop: 0 =
 * reached limit, 1 = end of this file (a blank unit, or exactly its end: go on with the next file),
 * 2 = a zero, torn or corrupt unit, or one not wholly below limit (the log ends at end_pos).
 * With queue_max (a dict topic bytes -> {queueId: consumequeue max offset}), `todo` lists (native
 * int64) the positions of the units a re-dispatch would change: a unit not prepared or rolled
 * back whose queue offset is at or past its consumequeue's end (or whose queue is not there), or
 * a unit at or past index_from (the index may still lack its keys) that has keys to index: not
 * rolled back, with a KEYS or UNIQ_KEY property (unit_has_index_keys; pass index_from past the
 * log when the index is off). The others are already in their consumequeue and the index, or
 * have nothing for it, so dispatching them again writes nothing. Without queue_max todo is None.
 */
static PyObject *py_scan_units(PyObject *self, PyObject *args)
{
    Py_buffer b;
    Py_ssize_t pos;
    long long limit, file_from, index_from;
    int check_crc;
    PyObject *queue_max;
    if (!PyArg_ParseTuple(args, "y*nLLpOL:scan_units", &b, &pos, &limit, &file_from, &check_crc, &queue_max,
                          &index_from))
        return NULL;
    PyObject *result = NULL, *todo = NULL, *topic_key = NULL, *queues = NULL;
    int64_t *list = NULL;
    int cached = 0;            /* the queue of the previous unit of this topic, and its end */
    int32_t cached_qid = 0;
    long long cached_have = -1;
    Py_ssize_t n_todo = 0, cap = 0, units = 0;
    long long last_ts = 0;
    int stop = 1;
    const int track = queue_max != Py_None;
    if (track && !PyDict_Check(queue_max)) {
        PyErr_SetString(PyExc_TypeError, "queue_max must be a dict or None");
        goto done;
    }
    const uint8_t *base = b.buf;
    const Py_ssize_t fsize = b.len;
    if (pos < 0 || pos > fsize) {
        PyErr_SetString(PyExc_ValueError, "pos out of range");
        goto done;
    }
    for (;;) {
        if (pos + 8 > fsize) {
            stop = pos < fsize ? 2 : 1;  /* fewer than 8 bytes left: the log ends here */
            break;
        }
        if (file_from + pos >= limit) {
            stop = 0;
            break;
        }
        const uint8_t *u = base + pos;
        const int32_t total = (int32_t)rd32(u), magic = (int32_t)rd32(u + 4);
        if (magic == MESSAGE_MAGIC_CODE && total > 0 && total <= fsize - pos) {
            if (file_from + pos + total > limit || !unit_valid(u, total, file_from + pos, check_crc)) {
                stop = 2;
                break;
            }
            const uint32_t sf = rd32(u + 36);
            last_ts = (long long)rd64(u + 48 + ((sf & BORNHOST_V6_FLAG) ? 20 : 8));
            if (track) {
                int need = file_from + pos >= index_from
                           && (sf & TRANSACTION_ROLLBACK_TYPE) != TRANSACTION_ROLLBACK_TYPE
                           && unit_has_index_keys(u, total, sf);
                if (!need && !(sf & TRANSACTION_PREPARED_TYPE)) {
                    const Py_ssize_t fixed = 72 + ((sf & BORNHOST_V6_FLAG) ? 20 : 8)
                                             + ((sf & STOREHOSTADDRESS_V6_FLAG) ? 20 : 8);
                    const Py_ssize_t tp = fixed + (int32_t)rd32(u + fixed - 4);
                    const Py_ssize_t tl = u[tp];
                    /* units of one topic come in runs: look its queues up again only when it changes */
                    if (topic_key == NULL || PyBytes_GET_SIZE(topic_key) != tl
                        || memcmp(PyBytes_AS_STRING(topic_key), u + tp + 1, (size_t)tl) != 0) {
                        Py_XDECREF(topic_key);
                        topic_key = PyBytes_FromStringAndSize((const char *)u + tp + 1, tl);
                        if (!topic_key)
                            goto done;
                        queues = PyDict_GetItemWithError(queue_max, topic_key);  /* borrowed */
                        if (!queues && PyErr_Occurred())
                            goto done;
                        cached = 0;
                    }
                    long long have = -1;
                    const int32_t qid_v = (int32_t)rd32(u + 12);
                    if (cached && qid_v == cached_qid) {
                        have = cached_have;  /* and so do the units of one queue */
                    } else if (queues && PyDict_Check(queues)) {
                        PyObject *qid = PyLong_FromLong((long)qid_v);
                        if (!qid)
                            goto done;
                        PyObject *mx = PyDict_GetItemWithError(queues, qid);
                        Py_DECREF(qid);
                        if (mx) {
                            have = PyLong_AsLongLong(mx);
                            if (have == -1 && PyErr_Occurred())
                                goto done;
                        } else if (PyErr_Occurred()) {
                            goto done;
                        }
                    }
                    cached = 1;
                    cached_qid = qid_v;
                    cached_have = have;
                    need = have < 0 || (long long)rd64(u + 20) >= have;
                }
                if (need) {
                    if (n_todo == cap) {
                        cap = cap ? cap * 2 : 256;
                        int64_t *grown = PyMem_Realloc(list, (size_t)cap * sizeof(int64_t));
                        if (!grown) {
                            PyErr_NoMemory();
                            goto done;
                        }
                        list = grown;
                    }
                    list[n_todo++] = (int64_t)pos;
                }
            }
            pos += total;
            units++;
        } else if (magic == BLANK_MAGIC_CODE && total == fsize - pos) {
            pos = fsize;
            stop = 1;
            break;
        } else {
            stop = 2;
            break;
        }
    }
    if (track) {
        todo = PyBytes_FromStringAndSize((const char *)list, n_todo * (Py_ssize_t)sizeof(int64_t));
        if (!todo)
            goto done;
    }
    result = Py_BuildValue("(innLO)", stop, pos, units, last_ts, todo ? todo : Py_None);
done:
    Py_XDECREF(todo);
    Py_XDECREF(topic_key);
    PyMem_Free(list);
    PyBuffer_Release(&b);
    return result;
}

/* ================================================================== RocketMQ batch bodies */
/* One "name\x01value\x02" property of a batch element: name [n, n+nl), value [v, v+vl). */
typedef struct { const uint8_t *n, *v; Py_ssize_t nl, vl; } bprop_t;

#define MAX_BATCH_PROPS 64

static int name_is(const bprop_t *p, const char *s)
{
    size_t l = strlen(s);
    return (size_t)p->nl == l && memcmp(p->n, s, l) == 0;
}

/* Split properties bytes into items when they are exactly what
 * properties_to_bytes(properties_from_bytes(data)) gives back: valid UTF-8, every item
 * "name\x01value\x02" (the value may hold \x01), no empty item, no repeated name, at most
 * MAX_BATCH_PROPS. Returns the item count, or -1 when the Python decoding would change the bytes. */
static int split_props(const uint8_t *p, Py_ssize_t n, bprop_t *out, int have)
{
    if (n == 0)
        return have;
    if (p[n - 1] != 0x02 || !utf8_valid(p, n))
        return -1;
    const uint8_t *e = p + n;
    while (p < e) {
        const uint8_t *end = memchr(p, 0x02, (size_t)(e - p));
        const uint8_t *sep = memchr(p, 0x01, (size_t)(end - p));
        if (end == p || sep == NULL || have >= MAX_BATCH_PROPS)
            return -1;
        bprop_t it = {p, sep + 1, sep - p, end - sep - 1};
        for (int k = 0; k < have; k++)
            if (out[k].nl == it.nl && memcmp(out[k].n, it.n, (size_t)it.nl) == 0)
                return -1;
        out[have++] = it;
        p = end + 1;
    }
    return have;
}

/*
 * batch_body_to_units(body, topic, queue_id, sys_flag, born_ts, born_addr, born_port, store_v6,
 *                     reconsume_times, batch_props, max_unit_size[, dest, dest_pos, dest_limit])
 *   -> None | int | (units | None, tags_codes | None, index_hashes | None, index_units | None,
 *                    max_size, count, total_bytes)
 *
 * With `dest` (a writable buffer) the units are written at dest[dest_pos:] instead of into a new
 * bytes object (units is then None), if they end by dest_limit; else nothing is written and the
 * int returned is the room they need.
 *
 * A SEND_BATCH_MESSAGE body (MessageDecoder.encodeMessages: per element TOTALSIZE 4, MAGICCODE 4,
 * BODYCRC 4, FLAG 4, BODY 4+n, PROPERTIES 2+n) -> the units put_messages writes for the Messages
 * the broker makes of it (each element's properties, then the request's batch_props it lacks),
 * with the offsets left blank, like kafka_records_to_units. Index entries follow build_index:
 * UNIQ_KEY, then each KEYS word. None whenever the Python path must do it: a malformed body
 * (Python reports it), properties Python would re-encode differently, DELAY or TRAN_MSG present
 * (refused there), properties over 32767 bytes or units over max_unit_size.
 */
static PyObject *py_batch_body_to_units(PyObject *self, PyObject *args)
{
    Py_buffer body, topic, born, extra, dest = {0};
    int queue_id, born_port, store_v6, reconsume;
    unsigned int sys_flag_in;
    long long born_ts;
    Py_ssize_t max_unit, dest_pos = 0, dest_limit = 0;
    PyObject *dest_obj = Py_None;
    if (!PyArg_ParseTuple(args, "y*y*iILy*ipiy*n|Onn:batch_body_to_units", &body, &topic, &queue_id, &sys_flag_in,
                          &born_ts, &born, &born_port, &store_v6, &reconsume, &extra, &max_unit, &dest_obj,
                          &dest_pos, &dest_limit))
        return NULL;
    PyObject *result = NULL, *units = NULL, *tags_codes = NULL, *ihashes = NULL, *iunits = NULL;
    int have_dest = 0;
    bprop_t extra_props[MAX_BATCH_PROPS], props[MAX_BATCH_PROPS];
    if (born.len != 4 && born.len != 16) {
        PyErr_SetString(PyExc_ValueError, "born_addr must be 4 (IPv4) or 16 (IPv6) bytes");
        goto done;
    }
    if (topic.len > 255 || !utf8_valid(topic.buf, topic.len)) {
        PyErr_SetString(PyExc_ValueError, "topic must be UTF-8 of at most 255 bytes");
        goto done;
    }
    int n_extra = split_props(extra.buf, extra.len, extra_props, 0);
    if (n_extra < 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    const Py_ssize_t born_len = born.len + 4, store_len = store_v6 ? 20 : 8;
    const Py_ssize_t fixed_tail = 72 + born_len + store_len + 1 + topic.len + 2;
    const uint32_t sys_flag = (sys_flag_in & ~(uint32_t)(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)) |
                              (born.len == 16 ? BORNHOST_V6_FLAG : 0) | (store_v6 ? STOREHOSTADDRESS_V6_FLAG : 0);
    /* pass 1: validate, size the output */
    const uint8_t *b0 = body.buf;
    Py_ssize_t pos = 0, total = 0, max_size = 0, count = 0, n_index = 0;
    int any_tags = 0;
    while (pos < body.len) {
        const uint8_t *m = b0 + pos;
        Py_ssize_t left = body.len - pos;
        if (left < 22)
            goto python;
        Py_ssize_t tsize = (int32_t)rd32(m), blen = (int32_t)rd32(m + 16);
        if (tsize < 22 || tsize > left || blen < 0 || 20 + blen + 2 > tsize)
            goto python;
        Py_ssize_t plen = rd16(m + 20 + blen);
        if (20 + blen + 2 + plen != tsize)
            goto python;
        int np = split_props(m + 22 + blen, plen, props, 0);
        if (np < 0)
            goto python;
        Py_ssize_t out_props = plen;
        for (int k = 0; k < np; k++) {
            if (name_is(&props[k], "DELAY") || name_is(&props[k], "TRAN_MSG"))
                goto python;
            if (name_is(&props[k], "TAGS") && props[k].vl)
                any_tags = 1;
            if (name_is(&props[k], "UNIQ_KEY") && props[k].vl)
                n_index++;
            if (name_is(&props[k], "KEYS"))
                for (Py_ssize_t i = 0; i < props[k].vl; i++)
                    if (props[k].v[i] != ' ' && (i == 0 || props[k].v[i - 1] == ' '))
                        n_index++;
        }
        for (int j = 0; j < n_extra; j++) {
            int present = 0;
            for (int k = 0; k < np && !present; k++)
                present = props[k].nl == extra_props[j].nl && !memcmp(props[k].n, extra_props[j].n, (size_t)props[k].nl);
            if (present)
                continue;
            if (name_is(&extra_props[j], "DELAY") || name_is(&extra_props[j], "TRAN_MSG") ||
                name_is(&extra_props[j], "TAGS") || name_is(&extra_props[j], "KEYS") ||
                name_is(&extra_props[j], "UNIQ_KEY"))
                goto python;  /* batch-level tags / keys: rare, left to Python */
            out_props += extra_props[j].nl + extra_props[j].vl + 2;
        }
        Py_ssize_t usize = fixed_tail + blen + out_props;
        if (out_props > MAX_PROPERTIES_LENGTH || usize > max_unit || usize > INT32_MAX)
            goto python;
        total += usize;
        if (usize > max_size)
            max_size = usize;
        count++;
        pos += tsize;
    }
    if (count == 0)
        goto python;
    uint8_t *o;
    if (dest_obj != Py_None) {
        if (PyObject_GetBuffer(dest_obj, &dest, PyBUF_WRITABLE) < 0)
            goto done;
        have_dest = 1;
        if (dest_limit > dest.len)
            dest_limit = dest.len;
        if (dest_pos < 0 || dest_pos + total > dest_limit) {
            result = PyLong_FromSsize_t(total);  /* does not fit there: say how much room it takes */
            goto done;
        }
        o = (uint8_t *)dest.buf + dest_pos;
    } else {
        units = PyBytes_FromStringAndSize(NULL, total);
        if (!units)
            goto done;
        o = (uint8_t *)PyBytes_AS_STRING(units);
    }
    uint8_t *const o_start = o;
    if (!alloc_unit_extras(count, any_tags, n_index, &tags_codes, &ihashes, &iunits))
        goto done;
    uint32_t topic_hash = 0;
    if (n_index) {
        topic_hash = 31 * java_hash_more(0, topic.buf, topic.len) + '#';  /* buildKey: topic#key */
    }
    /* pass 2: write */
    Py_ssize_t idx = 0;
    pos = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        const uint8_t *m = b0 + pos;
        Py_ssize_t tsize = (int32_t)rd32(m), blen = (int32_t)rd32(m + 16), plen = rd16(m + 20 + blen);
        int np = split_props(m + 22 + blen, plen, props, 0);
        Py_ssize_t out_props = plen;
        int add[MAX_BATCH_PROPS];
        for (int j = 0; j < n_extra; j++) {
            int present = 0;
            for (int k = 0; k < np && !present; k++)
                present = props[k].nl == extra_props[j].nl && !memcmp(props[k].n, extra_props[j].n, (size_t)props[k].nl);
            add[j] = !present;
            if (add[j])
                out_props += extra_props[j].nl + extra_props[j].vl + 2;
        }
        int32_t usize = (int32_t)(fixed_tail + blen + out_props);
        uint8_t *q = put_blank_head(o, usize, m + 20, (int32_t)blen, queue_id, (int32_t)rd32(m + 12), sys_flag,
                                    born_ts, born.buf, born.len, born_port, store_len, reconsume);
        memcpy(q, m + 20, (size_t)blen);
        q += blen;
        *q++ = (uint8_t)topic.len;
        memcpy(q, topic.buf, (size_t)topic.len);
        q += topic.len;
        wr16(q, (uint16_t)out_props);
        q += 2;
        memcpy(q, m + 22 + blen, (size_t)plen);
        q += plen;
        for (int j = 0; j < n_extra; j++)
            if (add[j])
                q = put_prop(q, extra_props[j].n, extra_props[j].nl, extra_props[j].v, extra_props[j].vl);
        o = q;
        int64_t code = 0;
        const bprop_t *uniq = NULL, *keys = NULL;
        for (int k = 0; k < np; k++) {
            if (name_is(&props[k], "TAGS") && props[k].vl)
                code = java_hash_utf8(props[k].v, props[k].vl);
            else if (name_is(&props[k], "UNIQ_KEY") && props[k].vl)
                uniq = &props[k];
            else if (name_is(&props[k], "KEYS"))
                keys = &props[k];
        }
        if (tags_codes)
            memcpy(PyBytes_AS_STRING(tags_codes) + i * 8, &code, 8);
        int32_t ui = (int32_t)i;
        if (uniq) {
            int32_t kh = index_key_hash(java_hash_more(topic_hash, uniq->v, uniq->vl));
            memcpy(PyBytes_AS_STRING(ihashes) + idx * 4, &kh, 4);
            memcpy(PyBytes_AS_STRING(iunits) + idx * 4, &ui, 4);
            idx++;
        }
        if (keys) {
            Py_ssize_t a = 0;
            while (a < keys->vl) {
                if (keys->v[a] == ' ') {
                    a++;
                    continue;
                }
                Py_ssize_t z = a;
                while (z < keys->vl && keys->v[z] != ' ')
                    z++;
                int32_t kh = index_key_hash(java_hash_more(topic_hash, keys->v + a, z - a));
                memcpy(PyBytes_AS_STRING(ihashes) + idx * 4, &kh, 4);
                memcpy(PyBytes_AS_STRING(iunits) + idx * 4, &ui, 4);
                idx++;
                a = z;
            }
        }
        pos += tsize;
    }
    if (o != o_start + total || idx != n_index) {
        PyErr_SetString(PyExc_SystemError, "batch_body_to_units: size mismatch");
        goto done;
    }
    result = Py_BuildValue("(OOOOnnn)", units ? units : Py_None, tags_codes ? tags_codes : Py_None,
                           ihashes ? ihashes : Py_None, iunits ? iunits : Py_None, max_size, count, total);
    goto done;
python:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(units);
    Py_XDECREF(tags_codes);
    Py_XDECREF(ihashes);
    Py_XDECREF(iunits);
    if (have_dest)
        PyBuffer_Release(&dest);
    PyBuffer_Release(&body);
    PyBuffer_Release(&topic);
    PyBuffer_Release(&born);
    PyBuffer_Release(&extra);
    return result;
}

/* ================================================================== store: append units */
/*
 * append_units(mm, pos, file_size, units, upos, index, queue_offset, file_from_offset, store_ts,
 *              store_addr, store_port, tags_codes, cq_out, force_first) -> (written, pos, upos)
 *
 * CommitLog.append for units kafka_records_to_units made: copies units[upos:] into the mapped file
 * at pos while each unit + END_FILE_MIN_BLANK_LENGTH fits in file_size (the first one regardless
 * when force_first: it opens a fresh file, as append() writes it), filling QUEUEOFFSET
 * (queue_offset + its index in the batch), PHYSICALOFFSET, STORETIMESTAMP and STOREHOST, and
 * writes its consumequeue unit (offset, size, tag code) at cq_out[20 * index]. `index` is the
 * batch index of units[upos]. Returns how many units were written and the new positions; fewer
 * than all means the caller rolls the file over (blank unit) and calls again.
 */
/* The size and BORNHOST length of the encoded unit at u (`avail` bytes from it), checked against a
 * store host of addr_len bytes: 0 with `what` in a ValueError when the unit is truncated or bad. */
static int unit_shape(const uint8_t *u, Py_ssize_t avail, Py_ssize_t addr_len, const char *what, Py_ssize_t *size,
                      Py_ssize_t *born_len)
{
    if (avail < 88) {
        PyErr_Format(PyExc_ValueError, "%s: truncated unit", what);
        return 0;
    }
    const uint32_t sys_flag = rd32(u + 36);
    const Py_ssize_t store_len = (sys_flag & STOREHOSTADDRESS_V6_FLAG) ? 20 : 8;
    *size = (Py_ssize_t)(int32_t)rd32(u);
    *born_len = (sys_flag & BORNHOST_V6_FLAG) ? 20 : 8;
    if (*size < 72 + *born_len + store_len + 3 || *size > avail || store_len - 4 != addr_len) {
        PyErr_Format(PyExc_ValueError, "%s: bad unit size or store host form", what);
        return 0;
    }
    return 1;
}

/* What appending gives the unit at w (copied there already): QUEUEOFFSET, PHYSICALOFFSET,
 * STORETIMESTAMP and STOREHOST, and its 20-byte consumequeue unit at c. */
static inline void finish_unit(uint8_t *w, Py_ssize_t size, Py_ssize_t born_len, long long queue_offset,
                               long long phy, long long store_ts, const Py_buffer *addr, int port, int64_t tag_code,
                               uint8_t *c)
{
    wr64(w + 20, (uint64_t)queue_offset);
    wr64(w + 28, (uint64_t)phy);
    wr64(w + 48 + born_len, (uint64_t)store_ts);
    memcpy(w + 56 + born_len, addr->buf, (size_t)addr->len);
    wr32(w + 56 + born_len + addr->len, (uint32_t)port);
    wr64(c, (uint64_t)phy);
    wr32(c + 8, (uint32_t)size);
    wr64(c + 12, (uint64_t)tag_code);
}

static PyObject *py_append_units(PyObject *self, PyObject *args)
{
    Py_buffer mm, units, addr, cq;
    Py_ssize_t pos, file_size, upos, index;
    long long queue_offset, file_from, store_ts;
    int port, force_first;
    PyObject *tags_obj;
    if (!PyArg_ParseTuple(args, "w*nny*nnLLLy*iOw*p:append_units", &mm, &pos, &file_size, &units, &upos, &index,
                          &queue_offset, &file_from, &store_ts, &addr, &port, &tags_obj, &cq, &force_first))
        return NULL;
    PyObject *result = NULL;
    Py_buffer tags = {0};
    int have_tags = 0;
    if (tags_obj != Py_None) {
        if (PyObject_GetBuffer(tags_obj, &tags, PyBUF_SIMPLE) < 0)
            goto done;
        have_tags = 1;
    }
    if (addr.len != 4 && addr.len != 16) {
        PyErr_SetString(PyExc_ValueError, "store_addr must be 4 or 16 bytes");
        goto done;
    }
    if (pos < 0 || upos < 0 || index < 0) {  /* each unit is checked against mm.len below */
        PyErr_SetString(PyExc_ValueError, "append_units: positions out of range");
        goto done;
    }
    uint8_t *m = mm.buf;
    const uint8_t *u0 = units.buf;
    Py_ssize_t written = 0;
    while (upos < units.len) {
        const uint8_t *u = u0 + upos;
        Py_ssize_t size, born_len;
        if (!unit_shape(u, units.len - upos, addr.len, "append_units", &size, &born_len))
            goto done;
        if (!(force_first && written == 0) && pos + size + END_FILE_MIN_BLANK_LENGTH > file_size)
            break;  /* roll over: the caller writes the blank unit and continues in the next file */
        Py_ssize_t k = index + written;
        if (pos + size > mm.len || (k + 1) * CQ_UNIT_SIZE > cq.len || (have_tags && (k + 1) * 8 > tags.len)) {
            PyErr_SetString(PyExc_ValueError, "append_units: buffer too small");
            goto done;
        }
        uint8_t *w = m + pos;
        int64_t phy = file_from + pos;
        if (w != u)  /* units batch_body_to_units wrote in place are where they belong already */
            memcpy(w, u, (size_t)size);
        int64_t code = 0;
        if (have_tags)
            memcpy(&code, (const uint8_t *)tags.buf + k * 8, 8);
        finish_unit(w, size, born_len, queue_offset + k, phy, store_ts, &addr, port, code,
                    (uint8_t *)cq.buf + k * CQ_UNIT_SIZE);
        pos += size;
        upos += size;
        written++;
    }
    result = Py_BuildValue("(nnn)", written, pos, upos);
done:
    if (have_tags)
        PyBuffer_Release(&tags);
    PyBuffer_Release(&mm);
    PyBuffer_Release(&units);
    PyBuffer_Release(&addr);
    PyBuffer_Release(&cq);
    return result;
}

/* ================================================================== store: one unit */
static int arg_i64(PyObject *o, long long *out)
{
    *out = PyLong_AsLongLong(o);
    return !(*out == -1 && PyErr_Occurred());
}

/*
 * write_unit(mm, pos, size, body, topic, props, born_addr, store_addr, queue_id, flag, queue_offset,
 *            phy_offset, sys_flag, born_ts, born_port, store_ts, store_port, reconsume_times,
 *            prepared_offset) -> None
 *
 * PreparedMessage.write_into in one call: the whole 4.x unit of `size` bytes (the caller computed
 * it with calc_msg_length) at mm[pos:], BODYCRC included. topic / props are the UTF-8 bytes; the
 * host forms (4 or 16 address bytes) must agree with sys_flag's V6 bits.
 */
static PyObject *py_write_unit(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 19) {
        PyErr_SetString(PyExc_TypeError, "write_unit takes 19 arguments");
        return NULL;
    }
    for (int i = 3; i <= 7; i++)
        if (!PyBytes_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "write_unit: body, topic, props and addresses must be bytes");
            return NULL;
        }
    long long v[13];
    for (int i = 0; i < 11; i++)
        if (!arg_i64(args[8 + i], &v[i]))
            return NULL;
    long long pos, size;
    if (!arg_i64(args[1], &pos) || !arg_i64(args[2], &size))
        return NULL;
    const long long queue_id = v[0], flag = v[1], queue_offset = v[2], phy = v[3], sys_flag = v[4], born_ts = v[5],
                    born_port = v[6], store_ts = v[7], store_port = v[8], reconsume = v[9], prepared = v[10];
    const Py_ssize_t blen = PyBytes_GET_SIZE(args[3]), tlen = PyBytes_GET_SIZE(args[4]),
                     plen = PyBytes_GET_SIZE(args[5]), balen = PyBytes_GET_SIZE(args[6]),
                     salen = PyBytes_GET_SIZE(args[7]);
    if (balen != ((sys_flag & BORNHOST_V6_FLAG) ? 16 : 4) || salen != ((sys_flag & STOREHOSTADDRESS_V6_FLAG) ? 16 : 4)) {
        PyErr_SetString(PyExc_ValueError, "write_unit: host address length does not match sysFlag");
        return NULL;
    }
    if (tlen > 255 || plen > 0xFFFF) {
        PyErr_SetString(PyExc_ValueError, "write_unit: topic or properties too long");
        return NULL;
    }
    const long long want = 72 + (balen + 4) + (salen + 4) + blen + 1 + tlen + 2 + plen;
    if (size != want) {
        PyErr_Format(PyExc_ValueError, "write_unit: size %lld, the unit takes %lld bytes", size, want);
        return NULL;
    }
    Py_buffer mm;
    if (PyObject_GetBuffer(args[0], &mm, PyBUF_WRITABLE) < 0)
        return NULL;
    if (pos < 0 || pos + size > mm.len) {
        PyBuffer_Release(&mm);
        PyErr_SetString(PyExc_ValueError, "write_unit: the unit does not fit the buffer");
        return NULL;
    }
    const uint8_t *body = (const uint8_t *)PyBytes_AS_STRING(args[3]);
    uint8_t *u = (uint8_t *)mm.buf + pos;
    wr32(u, (uint32_t)size);
    wr32(u + 4, (uint32_t)MESSAGE_MAGIC_CODE);
    wr32(u + 8, crc32_zlib(0, body, (size_t)blen) & 0x7FFFFFFF);
    wr32(u + 12, (uint32_t)queue_id);
    wr32(u + 16, (uint32_t)flag);
    wr64(u + 20, (uint64_t)queue_offset);
    wr64(u + 28, (uint64_t)phy);
    wr32(u + 36, (uint32_t)sys_flag);
    wr64(u + 40, (uint64_t)born_ts);
    uint8_t *q = u + 48;
    memcpy(q, PyBytes_AS_STRING(args[6]), (size_t)balen);
    wr32(q + balen, (uint32_t)born_port);
    q += balen + 4;
    wr64(q, (uint64_t)store_ts);
    memcpy(q + 8, PyBytes_AS_STRING(args[7]), (size_t)salen);
    wr32(q + 8 + salen, (uint32_t)store_port);
    q += 12 + salen;
    wr32(q, (uint32_t)reconsume);
    wr64(q + 4, (uint64_t)prepared);
    wr32(q + 12, (uint32_t)blen);
    q += 16;
    memcpy(q, body, (size_t)blen);
    q += blen;
    *q++ = (uint8_t)tlen;
    memcpy(q, PyBytes_AS_STRING(args[4]), (size_t)tlen);
    q += tlen;
    wr16(q, (uint16_t)plen);
    memcpy(q + 2, PyBytes_AS_STRING(args[5]), (size_t)plen);
    PyBuffer_Release(&mm);
    Py_RETURN_NONE;
}

/* ================================================================== store: index keys */
/*
 * index_put(mm, hash_slot_num, index_num, entries_base, state, key_hashes, key_units, start,
 *           cq_units, store_ts) -> (next, state)
 *
 * IndexService.build_index + IndexFile.put_key for units' index keys (index_hashes / index_units of
 * kafka_records_to_units or batch_body_to_units; a unit's keys are consecutive), in one IndexFile: state is its header
 * (begin_ts, end_ts, begin_phy, end_phy, hash_slot_count, index_count), written back to the file
 * and returned. The unit's commitlog offset comes from cq_units. Stops when the file is full
 * (the caller opens the next one and calls again from `next`).
 */
static PyObject *py_index_put(PyObject *self, PyObject *args)
{
    Py_buffer mm, hashes, kunits, cq;
    long long slots, index_num, entries_base, begin_ts, end_ts, begin_phy, end_phy, slot_count, index_count, store_ts;
    Py_ssize_t k;
    if (!PyArg_ParseTuple(args, "w*LLL(LLLLLL)y*y*ny*L:index_put", &mm, &slots, &index_num, &entries_base, &begin_ts,
                          &end_ts, &begin_phy, &end_phy, &slot_count, &index_count, &hashes, &kunits, &k, &cq,
                          &store_ts))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = hashes.len / 4;
    if (slots <= 0 || kunits.len != hashes.len || k < 0 || entries_base < 40 + slots * 4 ||
        entries_base + index_num * 20 > mm.len) {
        PyErr_SetString(PyExc_ValueError, "index_put: bad arguments");
        goto done;
    }
    uint8_t *m = mm.buf;
    int32_t prev_unit = -1;
    int skip = 0;
    for (; k < n; k++) {
        if (index_count >= index_num)
            break;  /* full */
        int32_t h, unit;
        memcpy(&h, (const uint8_t *)hashes.buf + k * 4, 4);
        memcpy(&unit, (const uint8_t *)kunits.buf + k * 4, 4);
        if (unit < 0 || (Py_ssize_t)(unit + 1) * CQ_UNIT_SIZE > cq.len) {
            PyErr_SetString(PyExc_ValueError, "index_put: unit index out of range");
            goto done;
        }
        long long phy = (long long)rd64((const uint8_t *)cq.buf + (Py_ssize_t)unit * CQ_UNIT_SIZE);
        if (unit != prev_unit) {  /* build_index decides once per unit, before its keys */
            prev_unit = unit;
            skip = phy < end_phy || (phy == end_phy && (index_count > 1 || end_phy > 0));
        }
        if (skip)
            continue;  /* already indexed (a repeated dispatch) */
        if (index_count < 0 || h < 0) {
            PyErr_SetString(PyExc_ValueError, "index_put: bad header or hash");
            goto done;
        }
        long long abs_slot = 40 + (long long)(h % slots) * 4;
        int32_t slot_value = (int32_t)rd32(m + abs_slot);
        if (slot_value <= 0 || slot_value > index_count)
            slot_value = 0;
        long long diff = 0;
        if (begin_ts > 0) {
            diff = store_ts >= begin_ts ? (store_ts - begin_ts) / 1000 : -((begin_ts - store_ts) / 1000);
            if (diff < 0)
                diff = 0;
            if (diff > INT32_MAX)
                diff = INT32_MAX;
        }
        uint8_t *e = m + entries_base + index_count * 20;
        wr32(e, (uint32_t)h);
        wr64(e + 4, (uint64_t)phy);
        wr32(e + 12, (uint32_t)diff);
        wr32(e + 16, (uint32_t)slot_value);
        wr32(m + abs_slot, (uint32_t)index_count);
        if (index_count <= 1) {
            begin_phy = phy;
            begin_ts = store_ts;
        }
        slot_count++;
        index_count++;
        end_phy = phy;
        end_ts = store_ts;
    }
    wr64(m, (uint64_t)begin_ts);
    wr64(m + 8, (uint64_t)end_ts);
    wr64(m + 16, (uint64_t)begin_phy);
    wr64(m + 24, (uint64_t)end_phy);
    wr32(m + 32, (uint32_t)slot_count);
    wr32(m + 36, (uint32_t)index_count);
    result = Py_BuildValue("(n(LLLLLL))", k, begin_ts, end_ts, begin_phy, end_phy, slot_count, index_count);
done:
    PyBuffer_Release(&mm);
    PyBuffer_Release(&hashes);
    PyBuffer_Release(&kunits);
    PyBuffer_Release(&cq);
    return result;
}

/* ================================================================== fetch: units -> RecordBatch */
/* The commitlog file holding a physical offset: MappedFileQueue.find_by_offset, then the mapped
 * bytes and wrote_position, kept while consecutive units sit in the same file. */
typedef struct {
    PyObject *files;     /* the CommitLog's list of MappedFile */
    Py_ssize_t file_size;
    PyObject *cur;       /* the MappedFile in use (strong ref) */
    long long from, wrote;
    Py_buffer view;
    int have_view;
} clfiles;

static long long attr_ll(PyObject *o, const char *name, int *ok)
{
    PyObject *v = PyObject_GetAttrString(o, name);
    if (!v) {
        *ok = 0;
        return 0;
    }
    long long x = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred())
        *ok = 0;
    return x;
}

static void cl_release(clfiles *c)
{
    if (c->have_view)
        PyBuffer_Release(&c->view);
    c->have_view = 0;
    Py_CLEAR(c->cur);
}

/* The unit's bytes, or NULL (no exception) when CommitLog.read would return None. -1 on error. */
static int cl_read(clfiles *c, long long phy, Py_ssize_t size, const uint8_t **out)
{
    *out = NULL;
    if (!(c->cur && c->from <= phy && phy < c->from + c->file_size)) {
        cl_release(c);
        Py_ssize_t n = PyList_GET_SIZE(c->files);
        if (n == 0)
            return 0;
        int ok = 1;
        long long first = attr_ll(PyList_GET_ITEM(c->files, 0), "file_from_offset", &ok);
        if (!ok)
            return -1;
        PyObject *found = NULL;
        long long from = 0;
        long long idx = (phy - first) >= 0 ? (phy - first) / c->file_size : -1;
        if (idx >= 0 && idx < n) {
            PyObject *f = PyList_GET_ITEM(c->files, idx);
            from = attr_ll(f, "file_from_offset", &ok);
            if (!ok)
                return -1;
            if (from <= phy && phy < from + c->file_size)
                found = f;
        }
        for (Py_ssize_t i = 0; !found && i < PyList_GET_SIZE(c->files); i++) {
            PyObject *f = PyList_GET_ITEM(c->files, i);
            from = attr_ll(f, "file_from_offset", &ok);
            if (!ok)
                return -1;
            if (from <= phy && phy < from + c->file_size)
                found = f;
        }
        if (!found)
            return 0;
        Py_INCREF(found);
        c->cur = found;
        c->from = from;
        c->wrote = attr_ll(found, "wrote_position", &ok);
        if (!ok)
            return -1;
        PyObject *mm = PyObject_GetAttrString(found, "mm");
        if (!mm)
            return -1;
        int r = PyObject_GetBuffer(mm, &c->view, PyBUF_SIMPLE);
        Py_DECREF(mm);
        if (r < 0) {
            if (!PyErr_ExceptionMatches(PyExc_ValueError))
                return -1;
            PyErr_Clear();  /* a closed mapping (file deleted by cleanup): read() returns None */
            c->wrote = -1;
        } else {
            c->have_view = 1;
        }
    }
    long long pos = phy - c->from;
    if (!c->have_view || pos + size > c->wrote || pos + size > c->view.len)
        return 0;
    *out = (const uint8_t *)c->view.buf + pos;
    return 0;
}

typedef struct {
    const uint8_t *n, *v;
    Py_ssize_t nl, vl;
    int system;
} prop_t;

typedef struct {
    int64_t ts;
    const uint8_t *body, *key, *tags;
    Py_ssize_t blen, klen, tlen;
    int nprops;
    prop_t props[MAX_HEADERS];
} unitrec;

/* 1 when unit_to_record maps this unit without its slow paths; 0: ask Python. */
static int parse_unit(const uint8_t *u, Py_ssize_t size, unitrec *r)
{
    if (size < 88 || (int32_t)rd32(u + 4) != MESSAGE_MAGIC_CODE)
        return 0;
    uint32_t sf = rd32(u + 36);
    if (sf & COMPRESSED_FLAG)
        return 0;
    Py_ssize_t fixed = 72 + ((sf & BORNHOST_V6_FLAG) ? 20 : 8) + ((sf & STOREHOSTADDRESS_V6_FLAG) ? 20 : 8);
    if (size < fixed + 3)
        return 0;
    int32_t bl = (int32_t)rd32(u + fixed - 4);
    if (bl < 0 || bl > size - fixed - 3)
        return 0;
    const uint8_t *p = u + fixed + bl;
    Py_ssize_t rest = size - fixed - bl;
    Py_ssize_t tl = p[0];
    if (1 + tl + 2 > rest)
        return 0;
    p += 1 + tl;
    Py_ssize_t pl = rd16(p);
    p += 2;
    if (1 + tl + 2 + pl != rest || !utf8_valid(p, pl))
        return 0;  /* invalid UTF-8 becomes U+FFFD in Python: leave it to Python */
    r->ts = (int64_t)rd64(u + 40);  /* BORNTIMESTAMP */
    r->body = u + fixed;
    r->blen = bl;
    r->key = r->tags = NULL;
    r->klen = r->tlen = 0;
    r->nprops = 0;
    const uint8_t *q = p, *e = p + pl;
    while (q < e) {
        const uint8_t *it = q;
        const uint8_t *ie = memchr(q, 0x02, (size_t)(e - q));
        if (!ie)
            ie = e;
        q = ie < e ? ie + 1 : e;
        if (ie == it)
            continue;
        const uint8_t *sep = memchr(it, 0x01, (size_t)(ie - it));
        const uint8_t *name = it, *val = sep ? sep + 1 : ie;
        Py_ssize_t nl = (sep ? sep : ie) - it, vl = sep ? ie - val : 0;
        if (r->nprops == MAX_HEADERS || name_in(name, nl, fetch_slow_props, n_fetch_slow_props))
            return 0;
        for (int k = 0; k < r->nprops; k++)
            if (name_eq(name, nl, r->props[k].n, r->props[k].nl))
                return 0;  /* a repeated name: dict semantics in Python */
        prop_t *pr = &r->props[r->nprops++];
        pr->n = name; pr->nl = nl; pr->v = val; pr->vl = vl;
        pr->system = name_in(name, nl, sys_props, n_sys_props);
        if (name_eq(name, nl, NAME_KEYS, 4)) {
            r->key = val;
            r->klen = vl;
        } else if (name_eq(name, nl, NAME_TAGS, 4)) {
            r->tags = val;
            r->tlen = vl;
        }
    }
    return 1;
}

/* One record of encode_batch's records section: [length][attributes 0][timestamp delta]
 * [offset delta][key][value][headers]. */
static int encode_fast_record(outbuf *b, const unitrec *r, int64_t ts_delta, int64_t off_delta)
{
    Py_ssize_t hcount = 0, hbytes = 0;
    for (int k = 0; k < r->nprops; k++) {
        const prop_t *pr = &r->props[k];
        if (!pr->system) {
            hcount++;
            hbytes += varint_size(pr->nl) + pr->nl + varint_size(pr->vl) + pr->vl;
        }
    }
    if (r->tags) {
        hcount++;
        hbytes += varint_size(tags_hdr.n) + tags_hdr.n + varint_size(r->tlen) + r->tlen;
    }
    Py_ssize_t len = 1 + varint_size(ts_delta) + varint_size(off_delta) +
                     (r->key ? varint_size(r->klen) + r->klen : 1) + varint_size(r->blen) + r->blen +
                     varint_size(hcount) + hbytes;
    if (out_reserve(b, len + 10) < 0)
        return -1;
    uint8_t *o = b->buf + b->len;
    o = put_varint(o, len);
    *o++ = 0;
    o = put_varint(o, ts_delta);
    o = put_varint(o, off_delta);
    if (r->key) {
        o = put_varint(o, r->klen);
        memcpy(o, r->key, (size_t)r->klen);
        o += r->klen;
    } else {
        *o++ = 0x01;  /* -1: null key */
    }
    o = put_varint(o, r->blen);
    memcpy(o, r->body, (size_t)r->blen);
    o += r->blen;
    o = put_varint(o, hcount);
    for (int k = 0; k < r->nprops; k++) {
        const prop_t *pr = &r->props[k];
        if (pr->system)
            continue;
        o = put_varint(o, pr->nl);
        memcpy(o, pr->n, (size_t)pr->nl);
        o += pr->nl;
        o = put_varint(o, pr->vl);
        memcpy(o, pr->v, (size_t)pr->vl);
        o += pr->vl;
    }
    if (r->tags) {
        o = put_varint(o, tags_hdr.n);
        memcpy(o, tags_hdr.s, (size_t)tags_hdr.n);
        o += tags_hdr.n;
        o = put_varint(o, r->tlen);
        memcpy(o, r->tags, (size_t)r->tlen);
        o += r->tlen;
    }
    b->len = o - b->buf;
    return 0;
}

/* A (bytes-like | None) field of a record from Python: encode_batch writes -1 for None. */
typedef struct {
    Py_buffer view;
    int have;
} optbuf;

static int get_optbuf(PyObject *o, optbuf *ob)
{
    ob->have = 0;
    if (o == Py_None)
        return 0;
    if (PyObject_GetBuffer(o, &ob->view, PyBUF_SIMPLE) < 0)
        return -1;
    ob->have = 1;
    return 0;
}

static void rel_optbuf(optbuf *ob)
{
    if (ob->have)
        PyBuffer_Release(&ob->view);
    ob->have = 0;
}

/* encode_batch's encoding of one (key, value, headers, timestamp) from the Python unit_to_record. */
static int encode_py_record(outbuf *b, PyObject *rec, int64_t *ts_out, int first, int64_t first_ts, int64_t off_delta)
{
    int rc = -1;
    PyObject *fast = NULL, *hfast = NULL;
    optbuf key = {{0}}, val = {{0}};
    optbuf *hv = NULL;
    const char **hn = NULL;
    Py_ssize_t *hnl = NULL, nh = 0;
    PyObject **hkeep = NULL;
    fast = PySequence_Fast(rec, "unit_to_record must return a sequence");
    if (!fast)
        goto out;
    if (PySequence_Fast_GET_SIZE(fast) < 4) {
        PyErr_SetString(PyExc_ValueError, "expected (key, value, headers, timestamp)");
        goto out;
    }
    PyObject **it = PySequence_Fast_ITEMS(fast);
    long long ts = PyLong_AsLongLong(it[3]);
    if (ts == -1 && PyErr_Occurred())
        goto out;
    *ts_out = ts;
    int64_t ts_delta = 0;
    if (!first && __builtin_sub_overflow((int64_t)ts, first_ts, &ts_delta)) {
        PyErr_SetString(PyExc_OverflowError, "varlong out of range");
        goto out;
    }
    if (get_optbuf(it[0], &key) < 0 || get_optbuf(it[1], &val) < 0)
        goto out;
    PyObject *headers = it[2];
    Py_ssize_t hbytes = 0;
    int truthy = headers == Py_None ? 0 : PyObject_IsTrue(headers);
    if (truthy < 0)
        goto out;
    if (truthy) {
        hfast = PySequence_Fast(headers, "headers must be a sequence");
        if (!hfast)
            goto out;
        nh = PySequence_Fast_GET_SIZE(hfast);
        hv = PyMem_Calloc((size_t)nh + 1, sizeof(optbuf));
        hn = PyMem_Calloc((size_t)nh + 1, sizeof(char *));
        hnl = PyMem_Calloc((size_t)nh + 1, sizeof(Py_ssize_t));
        hkeep = PyMem_Calloc((size_t)nh + 1, sizeof(PyObject *));
        if (!hv || !hn || !hnl || !hkeep) {
            PyErr_NoMemory();
            goto out;
        }
        for (Py_ssize_t j = 0; j < nh; j++) {
            PyObject *pair = PySequence_Fast(PySequence_Fast_GET_ITEM(hfast, j), "header must be a pair");
            if (!pair)
                goto out;
            hkeep[j] = pair;
            if (PySequence_Fast_GET_SIZE(pair) != 2) {
                PyErr_SetString(PyExc_ValueError, "header must be a (name, value) pair");
                goto out;
            }
            PyObject *hk = PySequence_Fast_GET_ITEM(pair, 0);
            if (PyUnicode_Check(hk)) {
                hn[j] = PyUnicode_AsUTF8AndSize(hk, &hnl[j]);
                if (!hn[j])
                    goto out;
            } else if (PyBytes_Check(hk)) {
                hn[j] = PyBytes_AS_STRING(hk);
                hnl[j] = PyBytes_GET_SIZE(hk);
            } else {
                PyErr_SetString(PyExc_TypeError, "header name must be str or bytes");
                goto out;
            }
            if (get_optbuf(PySequence_Fast_GET_ITEM(pair, 1), &hv[j]) < 0)
                goto out;
            hbytes += varint_size(hnl[j]) + hnl[j] + (hv[j].have ? varint_size(hv[j].view.len) + hv[j].view.len : 1);
        }
    }
    Py_ssize_t len = 1 + varint_size(ts_delta) + varint_size(off_delta) +
                     (key.have ? varint_size(key.view.len) + key.view.len : 1) +
                     (val.have ? varint_size(val.view.len) + val.view.len : 1) + varint_size(nh) + hbytes;
    if (out_reserve(b, len + 10) < 0)
        goto out;
    uint8_t *o = b->buf + b->len;
    o = put_varint(o, len);
    *o++ = 0;
    o = put_varint(o, ts_delta);
    o = put_varint(o, off_delta);
    if (key.have) {
        o = put_varint(o, key.view.len);
        memcpy(o, key.view.buf, (size_t)key.view.len);
        o += key.view.len;
    } else {
        *o++ = 0x01;
    }
    if (val.have) {
        o = put_varint(o, val.view.len);
        memcpy(o, val.view.buf, (size_t)val.view.len);
        o += val.view.len;
    } else {
        *o++ = 0x01;
    }
    o = put_varint(o, nh);
    for (Py_ssize_t j = 0; j < nh; j++) {
        o = put_varint(o, hnl[j]);
        memcpy(o, hn[j], (size_t)hnl[j]);
        o += hnl[j];
        if (hv[j].have) {
            o = put_varint(o, hv[j].view.len);
            memcpy(o, hv[j].view.buf, (size_t)hv[j].view.len);
            o += hv[j].view.len;
        } else {
            *o++ = 0x01;
        }
    }
    b->len = o - b->buf;
    rc = 0;
out:
    rel_optbuf(&key);
    rel_optbuf(&val);
    for (Py_ssize_t j = 0; j < nh; j++) {
        if (hv)
            rel_optbuf(&hv[j]);
        if (hkeep)
            Py_XDECREF(hkeep[j]);
    }
    PyMem_Free(hv);
    PyMem_Free(hn);
    PyMem_Free(hnl);
    PyMem_Free(hkeep);
    Py_XDECREF(hfast);
    Py_XDECREF(fast);
    return rc;
}

/*
 * kafka_fetch_batch(cq, cq_start, cq_end, offset, files, file_size, commitlog_min, max_bytes,
 *                   max_count, slow, leader_epoch) -> None | (batch: bytes, records: int)
 *
 * cq[cq_start:cq_end] are the consumequeue units from queue offset `offset` (ConsumeQueue.get_units
 * without the copy); files is the CommitLog's MappedFileQueue.files. Selects units exactly as
 * DefaultMessageStore.get_message does without a filter (blank/empty units skipped, units below
 * commitlog_min or no longer readable skipped, max_bytes of unit sizes with at least one unit,
 * max_count) and encodes them as encode_batch(records, base_offset=first offset, offset_deltas,
 * partition_leader_epoch) would with records from unit_to_record. A unit that needs unit_to_record's
 * slow paths (COMPRESSED body, KAFKA_KEY_B64 / KAFKA_NULL_VALUE / KAFKA_HEADERS_B64, invalid UTF-8
 * or repeated property names) is given to slow(raw_unit) -> (key, value, headers, timestamp).
 */
static PyObject *py_kafka_fetch_batch(PyObject *self, PyObject *args)
{
    PyObject *cq_obj, *files, *slow;
    Py_ssize_t cq_start, cq_end, file_size, max_count;
    long long offset, cl_min, max_bytes;
    int leader_epoch;
    if (!PyArg_ParseTuple(args, "OnnLO!nLLnOi:kafka_fetch_batch", &cq_obj, &cq_start, &cq_end, &offset, &PyList_Type,
                          &files, &file_size, &cl_min, &max_bytes, &max_count, &slow, &leader_epoch))
        return NULL;
    if (!check_configured())
        return NULL;
    if (file_size <= 0) {
        PyErr_SetString(PyExc_ValueError, "file_size must be positive");
        return NULL;
    }
    Py_buffer cq;
    if (PyObject_GetBuffer(cq_obj, &cq, PyBUF_SIMPLE) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_ValueError))
            return NULL;
        PyErr_Clear();  /* a closed consumequeue file: get_units returns b"" */
        Py_RETURN_NONE;
    }
    PyObject *result = NULL;
    clfiles cl = {files, file_size, NULL, 0, 0, {0}, 0};
    Py_INCREF(files);
    outbuf b = {NULL, NULL, 0, 0};
    if (cq_start < 0 || cq_end > cq.len || cq_start > cq_end) {
        PyErr_SetString(PyExc_ValueError, "consumequeue range out of bounds");
        goto done;
    }
    Py_ssize_t n_units = (cq_end - cq_start) / CQ_UNIT_SIZE;
    long long guess = (long long)(n_units < max_count ? n_units : max_count) * 192;  /* grows when short */
    if (guess > max_bytes + 65536)
        guess = max_bytes + 65536;
    if (guess < 0)
        guess = 0;
    b.cap = BATCH_HEADER_SIZE + (Py_ssize_t)guess + 1024;
    b.obj = PyBytes_FromStringAndSize(NULL, b.cap);
    if (!b.obj)
        goto done;
    b.buf = (uint8_t *)PyBytes_AS_STRING(b.obj);
    b.len = BATCH_HEADER_SIZE;
    const uint8_t *cqb = (const uint8_t *)cq.buf + cq_start;
    long long total = 0, first_off = -1, last_off = 0;
    int64_t first_ts = 0, max_ts = 0;
    Py_ssize_t n_msgs = 0;
    unitrec r;
    for (Py_ssize_t i = 0; i < n_units; i++) {
        const uint8_t *c = cqb + i * CQ_UNIT_SIZE;
        long long phy = (long long)rd64(c);
        int32_t size = (int32_t)rd32(c + 8);
        if (size <= 0 || size == CQ_BLANK_SIZE)
            continue;
        if (phy < cl_min)
            continue;  /* removed by cleanup */
        if (n_msgs && total + size > max_bytes)
            break;
        const uint8_t *u;
        if (cl_read(&cl, phy, size, &u) < 0)
            goto done;
        if (!u)
            continue;  /* removed */
        long long qoff = offset + i;
        int64_t ts;
        if (parse_unit(u, size, &r)) {
            ts = r.ts;
            int64_t d = 0;
            if (n_msgs && __builtin_sub_overflow(ts, first_ts, &d)) {
                PyErr_SetString(PyExc_OverflowError, "varlong out of range");
                goto done;
            }
            if (encode_fast_record(&b, &r, d, n_msgs ? qoff - first_off : 0) < 0)
                goto done;
        } else {
            PyObject *raw = PyBytes_FromStringAndSize((const char *)u, size);
            if (!raw)
                goto done;
            PyObject *rec = PyObject_CallOneArg(slow, raw);
            Py_DECREF(raw);
            if (!rec)
                goto done;
            int rc = encode_py_record(&b, rec, &ts, n_msgs == 0, first_ts, n_msgs ? qoff - first_off : 0);
            Py_DECREF(rec);
            if (rc < 0)
                goto done;
        }
        if (n_msgs == 0) {
            first_off = qoff;
            first_ts = max_ts = ts;
        } else if (ts > max_ts) {
            max_ts = ts;
        }
        last_off = qoff;
        n_msgs++;
        total += size;
        if (n_msgs >= max_count)
            break;
    }
    if (n_msgs == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (b.len - 12 > INT32_MAX || last_off - first_off > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "record batch too large");
        goto done;
    }
    uint8_t *h = b.buf;
    wr64(h, (uint64_t)first_off);                     /* baseOffset */
    wr32(h + 8, (uint32_t)(b.len - 12));              /* batchLength */
    wr32(h + 12, (uint32_t)leader_epoch);             /* partitionLeaderEpoch */
    h[16] = 2;                                        /* magic */
    wr16(h + 21, 0);                                  /* attributes */
    wr32(h + 23, (uint32_t)(last_off - first_off));   /* lastOffsetDelta */
    wr64(h + 27, (uint64_t)first_ts);                 /* baseTimestamp */
    wr64(h + 35, (uint64_t)max_ts);                   /* maxTimestamp */
    wr64(h + 43, (uint64_t)(int64_t)-1);              /* producerId */
    wr16(h + 51, (uint16_t)-1);                       /* producerEpoch */
    wr32(h + 53, (uint32_t)-1);                       /* baseSequence */
    wr32(h + 57, (uint32_t)n_msgs);                   /* recordsCount */
    wr32(h + 17, crc32c_any(0, h + BATCH_CRC_START, (size_t)(b.len - BATCH_CRC_START)));
    if (_PyBytes_Resize(&b.obj, b.len) < 0)
        goto done;
    result = Py_BuildValue("(On)", b.obj, n_msgs);
done:
    Py_XDECREF(b.obj);
    cl_release(&cl);
    Py_DECREF(files);
    PyBuffer_Release(&cq);
    return result;
}


/* ================================================================== pull: units -> PULL_MESSAGE body */
/*
 * pull_units(cq, cq_start, cq_end, files, file_size, commitlog_min, max_bytes, max_count, codes)
 *     -> (body: bytes, messages: int, consumed: int, removed: int, last_phy: int)
 *
 * DefaultMessageStore.get_message's walk for PULL_MESSAGE without a SQL92 filter, in one pass over
 * cq[cq_start:cq_end] (the consumequeue units from the pulled offset; ConsumeQueue.units_range
 * without the copy): blank units skipped, units below commitlog_min or no longer readable counted
 * as removed, `codes` (None: every tag; else a tuple of int32 tag codes) as the consumequeue
 * pre-filter, max_bytes of unit sizes with at least one message, max_count messages. The selected
 * commitlog units are copied once, back to back, into the body (what RocketMQ answers). `consumed`
 * is how many consumequeue units the walk used (next offset = offset + consumed) and last_phy the
 * commitlog offset of the last of them (-1 when none).
 */
static PyObject *py_pull_units(PyObject *self, PyObject *args)
{
    PyObject *cq_obj, *files, *codes_obj;
    Py_ssize_t cq_start, cq_end, file_size, max_count;
    long long cl_min, max_bytes;
    if (!PyArg_ParseTuple(args, "OnnO!nLLnO:pull_units", &cq_obj, &cq_start, &cq_end, &PyList_Type, &files,
                          &file_size, &cl_min, &max_bytes, &max_count, &codes_obj))
        return NULL;
    if (file_size <= 0 || max_count <= 0) {
        PyErr_SetString(PyExc_ValueError, "file_size and max_count must be positive");
        return NULL;
    }
    int32_t *codes = NULL;
    Py_ssize_t n_codes = -1;  /* -1: no tag filter */
    if (codes_obj != Py_None) {
        if (!PyTuple_Check(codes_obj)) {
            PyErr_SetString(PyExc_TypeError, "codes must be None or a tuple of int");
            return NULL;
        }
        n_codes = PyTuple_GET_SIZE(codes_obj);
        codes = PyMem_Malloc(sizeof(int32_t) * (size_t)(n_codes + 1));
        if (!codes)
            return PyErr_NoMemory();
        for (Py_ssize_t j = 0; j < n_codes; j++) {
            long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(codes_obj, j));
            if (v == -1 && PyErr_Occurred()) {
                PyMem_Free(codes);
                return NULL;
            }
            if (v < INT32_MIN || v > INT32_MAX) {
                PyMem_Free(codes);
                PyErr_SetString(PyExc_ValueError, "tag code out of int32 range");
                return NULL;
            }
            codes[j] = (int32_t)v;
        }
    }
    Py_buffer cq;
    if (PyObject_GetBuffer(cq_obj, &cq, PyBUF_SIMPLE) < 0) {
        PyMem_Free(codes);
        if (!PyErr_ExceptionMatches(PyExc_ValueError))
            return NULL;
        PyErr_Clear();  /* a closed consumequeue file: get_units returns b"" */
        Py_RETURN_NONE;
    }
    PyObject *result = NULL, *body = NULL;
    clfiles cl = {files, file_size, NULL, 0, 0, {0}, 0};
    Py_INCREF(files);
    long long *phys = NULL;
    Py_ssize_t *sizes = NULL;
    if (cq_start < 0 || cq_end > cq.len || cq_start > cq_end) {
        PyErr_SetString(PyExc_ValueError, "consumequeue range out of bounds");
        goto done;
    }
    Py_ssize_t n_units = (cq_end - cq_start) / CQ_UNIT_SIZE;
    Py_ssize_t cap = n_units < max_count ? n_units : max_count;
    phys = PyMem_Malloc(sizeof(*phys) * (size_t)(cap + 1));
    sizes = PyMem_Malloc(sizeof(*sizes) * (size_t)(cap + 1));
    if (!phys || !sizes) {
        PyErr_NoMemory();
        goto done;
    }
    const uint8_t *cqb = (const uint8_t *)cq.buf + cq_start;
    long long total = 0;
    Py_ssize_t n_msgs = 0, consumed = 0, removed = 0;
    for (Py_ssize_t i = 0; i < n_units; i++) {
        const uint8_t *c = cqb + i * CQ_UNIT_SIZE;
        long long phy = (long long)rd64(c);
        int32_t size = (int32_t)rd32(c + 8);
        consumed = i + 1;
        if (size <= 0 || size == CQ_BLANK_SIZE)
            continue;
        if (phy < cl_min) {
            removed++;
            continue;
        }
        if (n_codes >= 0) {
            int32_t code = (int32_t)(uint32_t)rd64(c + 12);
            int hit = 0;
            for (Py_ssize_t j = 0; j < n_codes && !hit; j++)
                hit = codes[j] == code;
            if (!hit)
                continue;
        }
        if (n_msgs && total + size > max_bytes) {
            consumed = i;
            break;
        }
        const uint8_t *u;
        if (cl_read(&cl, phy, size, &u) < 0)
            goto done;
        if (!u) {
            removed++;
            continue;
        }
        phys[n_msgs] = phy;
        sizes[n_msgs] = size;
        n_msgs++;
        total += size;
        if (n_msgs >= max_count)
            break;
    }
    body = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!body)
        goto done;
    {   /* second pass: the copies (the allocation above may have run Python code, so the units
         * are looked up again rather than kept as pointers) */
        char *o = PyBytes_AS_STRING(body);
        for (Py_ssize_t k = 0; k < n_msgs; k++) {
            const uint8_t *u;
            if (cl_read(&cl, phys[k], sizes[k], &u) < 0)
                goto done;
            if (!u) {
                PyErr_SetString(PyExc_RuntimeError, "a commitlog unit went away during the pull");
                goto done;
            }
            memcpy(o, u, (size_t)sizes[k]);
            o += sizes[k];
        }
    }
    long long last_phy = consumed ? (long long)rd64(cqb + (consumed - 1) * CQ_UNIT_SIZE) : -1;
    result = Py_BuildValue("(OnnnL)", body, n_msgs, consumed, removed, last_phy);
done:
    Py_XDECREF(body);
    PyMem_Free(phys);
    PyMem_Free(sizes);
    PyMem_Free(codes);
    cl_release(&cl);
    Py_DECREF(files);
    PyBuffer_Release(&cq);
    return result;
}


/* ================================================================== client: PULL body -> messages */
/* The (ip, port) tuple of a stored host; the last one is reused while units repeat it. */
typedef struct { uint8_t addr[16]; int alen; int32_t port; PyObject *tuple; } hostcache;

static PyObject *host_tuple(hostcache *hc, const uint8_t *addr, int alen, int32_t port)
{
    if (hc->tuple && hc->alen == alen && hc->port == port && memcmp(hc->addr, addr, (size_t)alen) == 0)
        return Py_NewRef(hc->tuple);
    char text[64];
    if (alen == 4) {
        snprintf(text, sizeof text, "%u.%u.%u.%u", addr[0], addr[1], addr[2], addr[3]);
    } else {
        /* socket.inet_ntop(AF_INET6): compressed form, as glibc writes it */
        if (!inet_ntop(AF_INET6, addr, text, sizeof text)) {
            PyErr_SetString(PyExc_ValueError, "bad IPv6 address");
            return NULL;
        }
    }
    PyObject *t = Py_BuildValue("(si)", text, (int)port);
    if (!t)
        return NULL;
    Py_XSETREF(hc->tuple, Py_NewRef(t));
    memcpy(hc->addr, addr, (size_t)alen);
    hc->alen = alen;
    hc->port = port;
    return t;
}

/* Short strings that repeat from unit to unit (property names, tags, "true"): one str object each
 * per decode_units call instead of one per message. Round-robin over a few entries. */
#define STRCACHE_N 16
#define STRCACHE_MAXLEN 24
typedef struct { const uint8_t *p; Py_ssize_t n; PyObject *s; } strcache_entry;
typedef struct { strcache_entry e[STRCACHE_N]; int next; } strcache;

static PyObject *cached_str(strcache *sc, const uint8_t *p, Py_ssize_t n)
{
    if (n > STRCACHE_MAXLEN)
        return PyUnicode_DecodeUTF8((const char *)p, n, "replace");
    for (int i = 0; i < STRCACHE_N; i++) {
        strcache_entry *e = &sc->e[i];
        if (e->s && e->n == n && memcmp(e->p, p, (size_t)n) == 0)
            return Py_NewRef(e->s);
    }
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, "replace");
    if (!s)
        return NULL;
    strcache_entry *e = &sc->e[sc->next];
    sc->next = (sc->next + 1) % STRCACHE_N;
    Py_XSETREF(e->s, Py_NewRef(s));
    e->p = p;   /* points into the body buffer, held for the whole call */
    e->n = n;
    return s;
}

static void strcache_clear(strcache *sc)
{
    for (int i = 0; i < STRCACHE_N; i++)
        Py_CLEAR(sc->e[i].s);
}

/* MessageDecoder.string2messageProperties over bytes: "k\x01v\x02..." into `d`. */
static int props_into(PyObject *d, const uint8_t *p, Py_ssize_t n, strcache *sc)
{
    Py_ssize_t i = 0;
    while (i < n) {
        Py_ssize_t j = i;
        while (j < n && p[j] != 2)
            j++;
        if (j > i) {
            Py_ssize_t k = i;
            while (k < j && p[k] != 1)
                k++;
            if (k < j) {
                PyObject *key = cached_str(sc, p + i, k - i);
                if (!key)
                    return -1;
                PyObject *val = cached_str(sc, p + k + 1, j - k - 1);
                if (!val) {
                    Py_DECREF(key);
                    return -1;
                }
                int r = PyDict_SetItem(d, key, val);
                Py_DECREF(key);
                Py_DECREF(val);
                if (r < 0)
                    return -1;
            }
        }
        i = j + 1;
    }
    return 0;
}

/* A slotted class's instance layout for building messages without running its __init__ (a
 * dataclass's generated __init__ is a Python call of 17 arguments per message): the offsets of
 * its member slots, the 17 decoded fields first, then the rest with their default values. */
#define LAYOUT_MAX 32
typedef struct { PyTypeObject *cls; Py_ssize_t nslots; Py_ssize_t off[LAYOUT_MAX]; PyObject *defaults; } slotlayout;

/* layout = (member_descriptors, defaults): checked against cls; 0 with *ok = 0 when it does not fit
 * (then cls is called per message), -1 on error. */
static int layout_from(slotlayout *lo, PyObject *cls, PyObject *layout, int *ok)
{
    *ok = 0;
    if (layout == Py_None)
        return 0;
    if (!PyType_Check(cls) || !PyTuple_Check(layout) || PyTuple_GET_SIZE(layout) != 2) {
        PyErr_SetString(PyExc_TypeError, "layout must be (member_descriptors, defaults) for a class");
        return -1;
    }
    PyObject *descrs = PyTuple_GET_ITEM(layout, 0), *defaults = PyTuple_GET_ITEM(layout, 1);
    if (!PyTuple_Check(descrs) || !PyTuple_Check(defaults) || PyTuple_GET_SIZE(descrs) > LAYOUT_MAX
            || PyTuple_GET_SIZE(descrs) != 17 + PyTuple_GET_SIZE(defaults)) {
        PyErr_SetString(PyExc_TypeError, "layout: 17 + len(defaults) member descriptors expected");
        return -1;
    }
    PyTypeObject *tp = (PyTypeObject *)cls;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(descrs); i++) {
        PyObject *d = PyTuple_GET_ITEM(descrs, i);
        if (!PyObject_TypeCheck(d, &PyMemberDescr_Type))
            return 0;
        PyMemberDescrObject *md = (PyMemberDescrObject *)d;
        PyMemberDef *m = md->d_member;
        if (m->type != T_OBJECT_EX || (m->flags & READONLY) || !PyType_IsSubtype(tp, md->d_common.d_type)
                || m->offset < (Py_ssize_t)sizeof(PyObject) || m->offset + (Py_ssize_t)sizeof(PyObject *) > tp->tp_basicsize)
            return 0;
        lo->off[i] = m->offset;
    }
    lo->cls = tp;
    lo->nslots = PyTuple_GET_SIZE(descrs);
    lo->defaults = defaults;
    *ok = 1;
    return 0;
}

/* A new instance of lo->cls with a[0..16] (references stolen) and the defaults in its slots. */
static PyObject *build_from_layout(slotlayout *lo, PyObject **a)
{
    PyObject *o = lo->cls->tp_alloc(lo->cls, 0);
    if (!o)
        return NULL;
    for (Py_ssize_t i = 0; i < lo->nslots; i++) {
        PyObject *v = i < 17 ? a[i] : Py_NewRef(PyTuple_GET_ITEM(lo->defaults, i - 17));
        if (i < 17)
            a[i] = NULL;
        *(PyObject **)((char *)o + lo->off[i]) = v;
    }
    return o;
}

/*
 * decode_units(body, cls, broker_name, extra, layout=None) -> list | None
 *
 * rmq.client.message.decode_messages for a PULL_MESSAGE body in one call: each unit becomes
 * cls(topic, body, queue_id, flag, properties, sys_flag, born_timestamp, born_host, store_timestamp,
 * store_host, reconsume_times, prepared_transaction_offset, queue_offset, commit_log_offset,
 * store_size, body_crc, broker_name), with the (name, value) pairs of `extra` (a tuple, e.g.
 * MIN_OFFSET/MAX_OFFSET) set in every properties dict. None (no exception) when a unit is malformed
 * or has a COMPRESSED body: the caller then runs the Python decoder, which raises or inflates.
 * With `layout` (member descriptors and defaults of cls's slots, see rmq.common.message) the
 * objects are filled in place as cls(...) would, without a Python call per message; a layout
 * that does not fit cls falls back to calling cls.
 */
static PyObject *py_decode_units(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    PyObject *cls, *broker_name, *extra, *layout = Py_None;
    if (!PyArg_ParseTuple(args, "y*OUO!|O:decode_units", &buf, &cls, &broker_name, &PyTuple_Type, &extra, &layout))
        return NULL;
    slotlayout lo;
    memset(&lo, 0, sizeof lo);
    int use_layout = 0;
    if (layout_from(&lo, cls, layout, &use_layout) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    strcache sc;
    memset(&sc, 0, sizeof sc);
    PyObject *out = PyList_New(0);
    hostcache born = {{0}, 0, 0, NULL}, store = {{0}, 0, 0, NULL};
    const uint8_t *b = buf.buf;
    Py_ssize_t n = buf.len, pos = 0;
    int declined = 0;
    if (!out)
        goto fail;
    while (pos < n) {
        Py_ssize_t avail = n - pos;
        const uint8_t *u = b + pos;
        if (avail < 8) { declined = 1; break; }
        int32_t total = (int32_t)rd32(u);
        if ((int32_t)rd32(u + 4) != (int32_t)0xDAA320A7) { declined = 1; break; }
        if (total < 88 + 3 || total > avail) { declined = 1; break; }
        int32_t sys_flag = (int32_t)rd32(u + 36);
        if (sys_flag & 0x1) { declined = 1; break; }  /* COMPRESSED: zlib in Python */
        int b6 = (sys_flag & (1 << 4)) != 0, s6 = (sys_flag & (1 << 5)) != 0;
        Py_ssize_t balen = b6 ? 16 : 4, salen = s6 ? 16 : 4;
        Py_ssize_t fixed = 88 + (balen - 4) + (salen - 4);
        if (total < fixed + 3) { declined = 1; break; }
        Py_ssize_t q = 48;
        const uint8_t *baddr = u + q; q += balen;
        int32_t bport = (int32_t)rd32(u + q); q += 4;
        int64_t store_ts = (int64_t)rd64(u + q); q += 8;
        const uint8_t *saddr = u + q; q += salen;
        int32_t sport = (int32_t)rd32(u + q); q += 4;
        int32_t reconsume = (int32_t)rd32(u + q); q += 4;
        int64_t prepared = (int64_t)rd64(u + q); q += 8;
        int32_t body_len = (int32_t)rd32(u + q); q += 4;
        Py_ssize_t end = total;
        if (body_len < 0 || q + body_len + 3 > end) { declined = 1; break; }
        Py_ssize_t body_at = q;
        q += body_len;
        Py_ssize_t topic_len = u[q];
        q += 1;
        if (q + topic_len + 2 > end) { declined = 1; break; }
        Py_ssize_t topic_at = q;
        q += topic_len;
        Py_ssize_t props_len = rd16(u + q);
        q += 2;
        if (q + props_len != end) { declined = 1; break; }
        PyObject *a[17] = {NULL};
        a[0] = cached_str(&sc, u + topic_at, topic_len);
        a[1] = PyBytes_FromStringAndSize((const char *)u + body_at, body_len);
        a[2] = PyLong_FromLong((int32_t)rd32(u + 12));
        a[3] = PyLong_FromLong((int32_t)rd32(u + 16));
        a[4] = PyDict_New();
        a[5] = PyLong_FromLong(sys_flag);
        a[6] = PyLong_FromLongLong((int64_t)rd64(u + 40));
        a[7] = host_tuple(&born, baddr, (int)balen, bport);
        a[8] = PyLong_FromLongLong(store_ts);
        a[9] = host_tuple(&store, saddr, (int)salen, sport);
        a[10] = PyLong_FromLong(reconsume);
        a[11] = PyLong_FromLongLong(prepared);
        a[12] = PyLong_FromLongLong((int64_t)rd64(u + 20));
        a[13] = PyLong_FromLongLong((int64_t)rd64(u + 28));
        a[14] = PyLong_FromLong(total);
        a[15] = PyLong_FromLong((int32_t)rd32(u + 8));
        a[16] = Py_NewRef(broker_name);
        int bad = 0;
        for (int k = 0; k < 17; k++)
            bad |= a[k] == NULL;
        if (!bad && props_into(a[4], u + q, props_len, &sc) < 0)
            bad = 1;
        for (Py_ssize_t k = 0; !bad && k < PyTuple_GET_SIZE(extra); k++) {
            PyObject *pair = PyTuple_GET_ITEM(extra, k);
            if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
                PyErr_SetString(PyExc_TypeError, "extra must hold (name, value) pairs");
                bad = 1;
            } else if (PyDict_SetItem(a[4], PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1)) < 0) {
                bad = 1;
            }
        }
        PyObject *m = bad ? NULL : use_layout ? build_from_layout(&lo, a) : PyObject_Vectorcall(cls, a, 17, NULL);
        for (int k = 0; k < 17; k++)
            Py_XDECREF(a[k]);
        if (!m)
            goto fail;
        int r = PyList_Append(out, m);
        Py_DECREF(m);
        if (r < 0)
            goto fail;
        pos += total;
    }
    Py_XDECREF(born.tuple);
    Py_XDECREF(store.tuple);
    strcache_clear(&sc);
    PyBuffer_Release(&buf);
    if (declined) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
fail:
    Py_XDECREF(out);
    Py_XDECREF(born.tuple);
    Py_XDECREF(store.tuple);
    strcache_clear(&sc);
    PyBuffer_Release(&buf);
    return NULL;
}

/* ------------------------------------------------------------------ module */
#include "_native_produce.h"
#include "_native_send.h"
#include "_native_spark.h"
#include "_native_fetch.h"
#include "_native_writer.h"

/* pwrite_all(fd, data, at): MappedFile.write_through's loop in C. Below PWRITE_RELEASE_GIL_BYTES
 * the GIL is kept (os.pwrite always releases it, and the flush thread then holds it until its next
 * fdatasync while the writer waits); OSError (ENOSPC ...) as os.pwrite raises it. */
static PyObject *py_pwrite_all(PyObject *self, PyObject *args)
{
    int fd;
    Py_buffer data;
    long long at;
    if (!PyArg_ParseTuple(args, "iy*L:pwrite_all", &fd, &data, &at))
        return NULL;
    int ok = at >= 0 ? pwrite_all(fd, data.buf, data.len, at) : (PyErr_SetString(PyExc_ValueError, "negative offset"), 0);
    PyBuffer_Release(&data);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"pwrite_all", py_pwrite_all, METH_VARARGS, "pwrite_all(fd, data, at): write all of data at offset at."},
    {"crc32", py_crc32, METH_VARARGS, "crc32(data, value=0): zlib / java.util.zip.CRC32."},
    {"crc32c", py_crc32c, METH_VARARGS, "crc32c(data, value=0): CRC-32C (Castagnoli)."},
    {"crc32c_sliced", py_crc32c_sliced, METH_VARARGS, "crc32c with the table code (tests the non-SSE path)."},
    {"java_string_hash", py_java_string_hash, METH_VARARGS, "Java String.hashCode of UTF-8 text."},
    {"configure_kafka_mapping", py_configure_kafka_mapping, METH_VARARGS,
     "configure_kafka_mapping(system_properties, tags_header, other_reserved_headers, fetch_slow_properties)."},
    {"kafka_records_to_units", py_kafka_records_to_units, METH_VARARGS,
     "A RecordBatch's records section -> commitlog units (offsets blank), or None for the Python path."},
    {"kafka_batch_to_units", py_kafka_batch_to_units, METH_VARARGS,
     "A partition entry of one plain RecordBatch v2 -> its producer fields and units, or None."},
    {"batch_body_to_units", py_batch_body_to_units, METH_VARARGS,
     "A SEND_BATCH_MESSAGE body -> commitlog units (offsets blank), or None for the Python path."},
    {"append_units", py_append_units, METH_VARARGS, "Copy encoded units into a mapped commitlog file."},
    {"scan_units", py_scan_units, METH_VARARGS,
     "Recovery: validate a mapped commitlog file's units; where re-dispatch would change something."},
    {"write_unit", (PyCFunction)(void (*)(void))py_write_unit, METH_FASTCALL,
     "PreparedMessage.write_into: one whole unit, BODYCRC included, into a mapped file."},
    {"index_put", py_index_put, METH_VARARGS, "IndexFile.put_key for precomputed key hashes."},
    {"decode_units", py_decode_units, METH_VARARGS,
     "A PULL_MESSAGE body's units as message objects (None: malformed or compressed; decode in Python)."},
    {"pull_units", py_pull_units, METH_VARARGS,
     "DefaultMessageStore.get_message's walk for PULL_MESSAGE: the selected commitlog units back to back."},
    {"kafka_fetch_batch", py_kafka_fetch_batch, METH_VARARGS,
     "Consumequeue units + commitlog files -> one RecordBatch v2."},
    {"kafka_produce_map", py_kafka_produce_map, METH_VARARGS,
     "A ProduceRequest body -> its topics and a table of its partition entries, mapped to units."},
    {"produce_select", py_produce_select, METH_VARARGS,
     "The per-entry checks of a produce table: what to put, what Python must look at."},
    {"produce_append", py_produce_append, METH_VARARGS,
     "Append the chosen entries of a produce table to the commitlog file (staging + pwrite)."},
    {"produce_dispatch", py_produce_dispatch, METH_VARARGS,
     "Write the appended entries' consumequeue units, notify arrivals, read log start offsets."},
    {"kafka_produce_response", py_kafka_produce_response, METH_VARARGS,
     "The ProduceResponse body for a produce table (and Python's answers for some entries)."},
    {"send_frame_parse", py_send_frame_parse, METH_VARARGS,
     "A RocketMQ send frame's JSON header read and checked, a single message encoded (None: Python decides)."},
    {"send_frame_reply", py_send_frame_reply, METH_VARARGS,
     "The SUCCESS response frame to a send (msgId, queueId, queueOffset)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "rmq._native",
    "C speedups of the Kafka produce/fetch hot paths (see rmq/native.py; RMQ_NO_NATIVE=1 disables).",
    -1, methods,
};

int rmq_add_client_functions(PyObject *m);   /* the client block at the end of this file */

PyMODINIT_FUNC PyInit__native(void)
{
    make_crc_tables(0xEDB88320u, crc32_table);
    make_crc_tables(0x82F63B78u, crc32c_table);
#ifdef HAVE_SSE42_CRC
    __builtin_cpu_init();
    have_sse42 = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    have_pclmul = (__builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1")) ? 1 : 0;
#endif
#ifdef HAVE_CRC32_VPCLMUL
    have_vpclmul = (!getenv("RMQ_NO_VPCLMUL") && cpu_has_vpclmul()) ? 1 : 0;
#endif
    if (!intern_produce_names())
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    if (rmq_add_spark_functions(m) < 0 || rmq_add_fetch_functions(m) < 0 || rmq_add_writer_functions(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "HAVE_SSE42", have_sse42) < 0 || rmq_add_client_functions(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

/* ================================================================== client side (rmq/client)
 * Functions the project's Python client uses on its hot paths, kept in this block so the broker's
 * blocks above merge independently. */

/* Largest write send_keep_gil takes; anything bigger goes through the asyncio transport. */
#define SEND_KEEP_GIL_MAX (256 * 1024)

/* send_keep_gil(fd, data) -> int: one non-blocking send(2) of a small request WITHOUT releasing the
 * GIL, as pwrite_all does for small commitlog writes. socket.send (and so the asyncio transport)
 * always releases it; on a 2-core machine the client's consume threads then take it, and the
 * event loop waits up to the switch interval (5 ms) to get it back after every pull request it
 * writes. Returns the bytes sent: 0 when the socket would block or data is over 256 KiB (the
 * caller hands the rest to the transport); OSError for any other failure. */
static PyObject *py_send_keep_gil(PyObject *self, PyObject *args)
{
    int fd;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "iy*:send_keep_gil", &fd, &data))
        return NULL;
    if (fd < 0) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "send_keep_gil: negative file descriptor");
        return NULL;
    }
    if (data.len > SEND_KEEP_GIL_MAX || data.len == 0) {
        PyBuffer_Release(&data);
        return PyLong_FromLong(0);
    }
    ssize_t n;
    do {
        n = send(fd, data.buf, (size_t)data.len, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    PyBuffer_Release(&data);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return PyLong_FromLong(0);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromSsize_t(n);
}

static PyMethodDef client_methods[] = {
    {"send_keep_gil", py_send_keep_gil, METH_VARARGS,
     "send_keep_gil(fd, data): non-blocking send of up to 256 KiB keeping the GIL; bytes sent (0: would block)."},
    {NULL, NULL, 0, NULL},
};

int rmq_add_client_functions(PyObject *m)
{
    return PyModule_AddFunctions(m, client_methods);
}
