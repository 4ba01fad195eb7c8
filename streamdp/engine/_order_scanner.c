/*
 * streamdp.engine._order_scanner: the native reader of ordinary order records.
 *
 * One pass over the bytes of an order record ({"event_id", "event_time", "source"?, "items"})
 * in its everyday shape. It either answers (event time, content key, quantities), exactly what
 * the Python path (streamdp.engine.events.decode, periods.parse_instant,
 * raw_records.content_key) would read from the same bytes, or answers None and the Python path
 * reads the record and decides. It never refuses anything: it only declines.
 *
 * It declines every record outside a narrow, easily checked shape, so that agreeing with the
 * reference on what it accepts is a matter of reading that shape right:
 *   - at most MAX_SCANNED_BYTES bytes, all ASCII; JSON whitespace (space, tab, LF, CR) only;
 *   - one object holding exactly the keys event_id, event_time, items and optionally source,
 *     each once (no other key: "type" and unknown fields go to the reference);
 *   - strings without backslash escapes and without control characters;
 *   - event_id: 1..200 characters; source: one of the names the scanner was built with;
 *   - event_time: YYYY-MM-DDTHH:MM:SS, an optional fraction of 1-6 digits, then Z or +HH:MM /
 *     -HH:MM, a valid calendar date and time of years 1900-2199, within [earliest, latest];
 *   - items: a non-empty object of known item names, each once, to integers of at most 15
 *     digits (no sign, fraction or exponent), not all zero. The quantities answered are one
 *     per item name the scanner was built with, -1 where the record does not name the item (a
 *     named item with quantity 0 is not an absent one: a stream that does not know the item
 *     refuses it).
 *
 * The content key is BLAKE2b (RFC 7693) with a 16-byte digest of the whole record, as
 * lowercase hex: the same text as hashlib.blake2b(record, digest_size=16).hexdigest().
 *
 * The event time is the number of microseconds since the Unix epoch divided by 10^6 as a
 * double: both are exact doubles (under 2^53 for these years), so the IEEE quotient is the
 * correctly rounded one, which is what Python's datetime.timestamp() returns for an aware
 * datetime (the true division of two integers).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_SCANNED_BYTES 4096
#define MAX_ID_LENGTH 200
#define MAX_QUANTITY_DIGITS 15
#define MAX_ITEMS 64
#define DIGEST_BYTES 16

/* ------------------------------------------------------------------ BLAKE2b (RFC 7693) */

static const uint64_t blake2b_iv[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};

static const uint8_t blake2b_sigma[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
};

static inline uint64_t rotate_right(uint64_t x, int n) { return (x >> n) | (x << (64 - n)); }

static inline uint64_t load_le64(const uint8_t *p)
{
    return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16) |
           ((uint64_t)p[3] << 24) | ((uint64_t)p[4] << 32) | ((uint64_t)p[5] << 40) |
           ((uint64_t)p[6] << 48) | ((uint64_t)p[7] << 56);
}

#define MIX(a, b, c, d, x, y)                  \
    do {                                       \
        v[a] = v[a] + v[b] + (x);              \
        v[d] = rotate_right(v[d] ^ v[a], 32);  \
        v[c] = v[c] + v[d];                    \
        v[b] = rotate_right(v[b] ^ v[c], 24);  \
        v[a] = v[a] + v[b] + (y);              \
        v[d] = rotate_right(v[d] ^ v[a], 16);  \
        v[c] = v[c] + v[d];                    \
        v[b] = rotate_right(v[b] ^ v[c], 63);  \
    } while (0)

/* one compression of a 128-byte block; `counter` is the message bytes so far (the record is
 * short, so the high word of the 128-bit counter is always zero) */
static void blake2b_compress(uint64_t h[8], const uint8_t block[128], uint64_t counter, int last)
{
    uint64_t m[16], v[16];
    for (int i = 0; i < 16; i++) m[i] = load_le64(block + 8 * i);
    for (int i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = blake2b_iv[i];
    }
    v[12] ^= counter;
    if (last) v[14] = ~v[14];
    for (int r = 0; r < 12; r++) {
        const uint8_t *s = blake2b_sigma[r];
        MIX(0, 4, 8, 12, m[s[0]], m[s[1]]);
        MIX(1, 5, 9, 13, m[s[2]], m[s[3]]);
        MIX(2, 6, 10, 14, m[s[4]], m[s[5]]);
        MIX(3, 7, 11, 15, m[s[6]], m[s[7]]);
        MIX(0, 5, 10, 15, m[s[8]], m[s[9]]);
        MIX(1, 6, 11, 12, m[s[10]], m[s[11]]);
        MIX(2, 7, 8, 13, m[s[12]], m[s[13]]);
        MIX(3, 4, 9, 14, m[s[14]], m[s[15]]);
    }
    for (int i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
}

/* the unkeyed 16-byte BLAKE2b digest of data[0:n] as 32 lowercase hex characters */
static void blake2b_128_hex(const uint8_t *data, size_t n, char hex[2 * DIGEST_BYTES])
{
    static const char digits[] = "0123456789abcdef";
    uint64_t h[8];
    uint8_t block[128];
    size_t done = 0;
    memcpy(h, blake2b_iv, sizeof h);
    h[0] ^= 0x01010000ULL ^ (uint64_t)DIGEST_BYTES; /* depth 1, fanout 1, no key */
    while (n - done > 128) {
        blake2b_compress(h, data + done, (uint64_t)(done + 128), 0);
        done += 128;
    }
    memset(block, 0, sizeof block);
    memcpy(block, data + done, n - done);
    blake2b_compress(h, block, (uint64_t)n, 1);
    for (int i = 0; i < DIGEST_BYTES; i++) {
        uint8_t byte = (uint8_t)(h[i / 8] >> (8 * (i % 8)));
        hex[2 * i] = digits[byte >> 4];
        hex[2 * i + 1] = digits[byte & 15];
    }
}

/* ------------------------------------------------------------------ the record's shape */

typedef struct {
    const uint8_t *at;
    const uint8_t *end;
} Cursor;

static inline void skip_whitespace(Cursor *c)
{
    while (c->at < c->end && (*c->at == ' ' || *c->at == '\t' || *c->at == '\n' || *c->at == '\r'))
        c->at++;
}

/* an expected single byte after optional whitespace */
static inline int take(Cursor *c, uint8_t byte)
{
    skip_whitespace(c);
    if (c->at < c->end && *c->at == byte) {
        c->at++;
        return 1;
    }
    return 0;
}

/* a string without escapes or control characters, all ASCII: its content is [*text, +*len) */
static int take_plain_string(Cursor *c, const uint8_t **text, Py_ssize_t *len)
{
    if (!take(c, '"')) return 0;
    const uint8_t *start = c->at;
    while (c->at < c->end) {
        uint8_t byte = *c->at;
        if (byte == '"') {
            *text = start;
            *len = c->at - start;
            c->at++;
            return 1;
        }
        if (byte < 0x20 || byte >= 0x80 || byte == '\\') return 0;
        c->at++;
    }
    return 0;
}

/* a JSON integer of 1..MAX_QUANTITY_DIGITS digits, no sign, no leading zero, not followed by a
 * fraction or an exponent */
static int take_quantity(Cursor *c, long long *value)
{
    skip_whitespace(c);
    const uint8_t *start = c->at;
    long long total = 0;
    while (c->at < c->end && *c->at >= '0' && *c->at <= '9') {
        total = total * 10 + (*c->at - '0');
        c->at++;
        if (c->at - start > MAX_QUANTITY_DIGITS) return 0;
    }
    Py_ssize_t digits = c->at - start;
    if (digits == 0 || (digits > 1 && *start == '0')) return 0;
    if (c->at < c->end && (*c->at == '.' || *c->at == 'e' || *c->at == 'E')) return 0;
    *value = total;
    return 1;
}

static inline int same_text(const uint8_t *text, Py_ssize_t len, const char *literal)
{
    return (size_t)len == strlen(literal) && memcmp(text, literal, (size_t)len) == 0;
}

/* ------------------------------------------------------------------ the event time */

static int read_digits(const uint8_t *p, int count, int *value)
{
    int total = 0;
    for (int i = 0; i < count; i++) {
        if (p[i] < '0' || p[i] > '9') return 0;
        total = total * 10 + (p[i] - '0');
    }
    *value = total;
    return 1;
}

/* days from 1970-01-01 to the proleptic Gregorian date (year, month 1-12, day 1-31) */
static long long days_from_civil(int year, int month, int day)
{
    long long y = year - (month <= 2);
    long long era = (y >= 0 ? y : y - 399) / 400;
    long long year_of_era = y - era * 400;
    long long day_of_year = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
    long long day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    return era * 146097 + day_of_era - 719468;
}

static int days_in_month(int year, int month)
{
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (month == 2 && ((year % 4 == 0 && year % 100 != 0) || year % 400 == 0)) return 29;
    return days[month - 1];
}

/* seconds since the epoch of YYYY-MM-DDTHH:MM:SS[.f{1,6}](Z|+HH:MM|-HH:MM); 0 to decline */
static int read_instant(const uint8_t *s, Py_ssize_t n, double *seconds)
{
    int year, month, day, hour, minute, second, fraction = 0;
    if (n < 20) return 0;
    if (!read_digits(s, 4, &year) || s[4] != '-' || !read_digits(s + 5, 2, &month) ||
        s[7] != '-' || !read_digits(s + 8, 2, &day) || s[10] != 'T' ||
        !read_digits(s + 11, 2, &hour) || s[13] != ':' || !read_digits(s + 14, 2, &minute) ||
        s[16] != ':' || !read_digits(s + 17, 2, &second))
        return 0;
    if (year < 1900 || year > 2199 || month < 1 || month > 12 || day < 1 ||
        day > days_in_month(year, month) || hour > 23 || minute > 59 || second > 59)
        return 0;
    Py_ssize_t at = 19;
    if (s[at] == '.') {
        at++;
        int count = 0;
        while (at < n && s[at] >= '0' && s[at] <= '9') {
            if (++count > 6) return 0;
            fraction = fraction * 10 + (s[at] - '0');
            at++;
        }
        if (count == 0) return 0;
        for (; count < 6; count++) fraction *= 10;
    }
    long long offset_seconds = 0;
    if (at + 1 == n && s[at] == 'Z') {
        /* UTC */
    } else if (at + 6 == n && (s[at] == '+' || s[at] == '-') && s[at + 3] == ':') {
        int offset_hours, offset_minutes;
        if (!read_digits(s + at + 1, 2, &offset_hours) ||
            !read_digits(s + at + 4, 2, &offset_minutes) || offset_hours > 23 ||
            offset_minutes > 59)
            return 0;
        offset_seconds = offset_hours * 3600LL + offset_minutes * 60LL;
        if (s[at] == '-') offset_seconds = -offset_seconds;
    } else {
        return 0;
    }
    long long whole = days_from_civil(year, month, day) * 86400LL + hour * 3600LL +
                      minute * 60LL + second - offset_seconds;
    long long microseconds = whole * 1000000LL + fraction; /* |.| < 2^53: an exact double */
    *seconds = (double)microseconds / 1e6;
    return 1;
}

/* ------------------------------------------------------------------ the scanner object */

typedef struct {
    PyObject_HEAD
    PyObject *sources;   /* tuple of bytes: the names a record's "source" may hold */
    PyObject *items;     /* tuple of bytes: the item names, in quantity order */
    double earliest;     /* event times outside [earliest, latest] go to the reference */
    double latest;
} OrderScanner;

static void scanner_dealloc(OrderScanner *self)
{
    Py_XDECREF(self->sources);
    Py_XDECREF(self->items);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* a tuple of str (ASCII) as a tuple of bytes; NULL with an exception otherwise */
static PyObject *ascii_names(PyObject *names, const char *what)
{
    if (!PyTuple_Check(names)) {
        PyErr_Format(PyExc_TypeError, "%s must be a tuple of str", what);
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    PyObject *out = PyTuple_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        PyObject *encoded = PyUnicode_Check(name) ? PyUnicode_AsASCIIString(name) : NULL;
        if (encoded == NULL) {
            /* a non-ASCII name never matches a scanned (ASCII) record: keep an impossible one */
            PyErr_Clear();
            if (!PyUnicode_Check(name)) {
                Py_DECREF(out);
                PyErr_Format(PyExc_TypeError, "%s must be a tuple of str", what);
                return NULL;
            }
            encoded = PyBytes_FromStringAndSize("\x80", 1);
            if (encoded == NULL) {
                Py_DECREF(out);
                return NULL;
            }
        }
        PyTuple_SET_ITEM(out, i, encoded);
    }
    return out;
}

static int scanner_init(OrderScanner *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"sources", "items", "earliest", "latest", NULL};
    PyObject *sources, *items;
    double earliest, latest;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOdd", keywords, &sources, &items,
                                     &earliest, &latest))
        return -1;
    PyObject *source_bytes = ascii_names(sources, "sources");
    if (source_bytes == NULL) return -1;
    PyObject *item_bytes = ascii_names(items, "items");
    if (item_bytes == NULL) {
        Py_DECREF(source_bytes);
        return -1;
    }
    if (PyTuple_GET_SIZE(item_bytes) > MAX_ITEMS) {
        Py_DECREF(source_bytes);
        Py_DECREF(item_bytes);
        PyErr_Format(PyExc_ValueError, "at most %d items", MAX_ITEMS);
        return -1;
    }
    Py_XSETREF(self->sources, source_bytes);
    Py_XSETREF(self->items, item_bytes);
    self->earliest = earliest;
    self->latest = latest;
    return 0;
}

static int names_index(PyObject *names, const uint8_t *text, Py_ssize_t len)
{
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        if (PyBytes_GET_SIZE(name) == len && memcmp(PyBytes_AS_STRING(name), text, (size_t)len) == 0)
            return (int)i;
    }
    return -1;
}

/* the items object: quantities[i] for known item i (-1 where absent); 0 to decline */
static int take_items(Cursor *c, PyObject *names, long long *quantities)
{
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    int any = 0;
    for (Py_ssize_t i = 0; i < n; i++) quantities[i] = -1;
    if (!take(c, '{')) return 0;
    for (;;) {
        const uint8_t *name;
        Py_ssize_t len;
        long long quantity;
        if (!take_plain_string(c, &name, &len) || !take(c, ':')) return 0;
        int i = names_index(names, name, len);
        if (i < 0 || quantities[i] >= 0 || !take_quantity(c, &quantity)) return 0;
        quantities[i] = quantity;
        any |= quantity != 0;
        if (take(c, '}')) return any;
        if (!take(c, ',')) return 0;
    }
}

static PyObject *decline(void) { Py_RETURN_NONE; }

/* scan(record) -> (event time, content key, quantities) | None */
static PyObject *scanner_scan(OrderScanner *self, PyObject *record)
{
    if (!PyBytes_CheckExact(record)) return decline();
    const uint8_t *data = (const uint8_t *)PyBytes_AS_STRING(record);
    Py_ssize_t size = PyBytes_GET_SIZE(record);
    if (size > MAX_SCANNED_BYTES) return decline();
    Cursor c = {data, data + size};
    long long quantities[MAX_ITEMS];
    double seconds = 0.0;
    int have_id = 0, have_time = 0, have_items = 0, have_source = 0;
    if (!take(&c, '{')) return decline();
    for (;;) {
        const uint8_t *key, *text;
        Py_ssize_t key_len, text_len;
        if (!take_plain_string(&c, &key, &key_len) || !take(&c, ':')) return decline();
        if (same_text(key, key_len, "event_id")) {
            if (have_id || !take_plain_string(&c, &text, &text_len) || text_len < 1 ||
                text_len > MAX_ID_LENGTH)
                return decline();
            have_id = 1;
        } else if (same_text(key, key_len, "event_time")) {
            if (have_time || !take_plain_string(&c, &text, &text_len) ||
                !read_instant(text, text_len, &seconds) || !(seconds >= self->earliest) ||
                !(seconds <= self->latest))
                return decline();
            have_time = 1;
        } else if (same_text(key, key_len, "source")) {
            if (have_source || !take_plain_string(&c, &text, &text_len) ||
                names_index(self->sources, text, text_len) < 0)
                return decline();
            have_source = 1;
        } else if (same_text(key, key_len, "items")) {
            if (have_items || !take_items(&c, self->items, quantities)) return decline();
            have_items = 1;
        } else {
            return decline();
        }
        if (take(&c, '}')) break;
        if (!take(&c, ',')) return decline();
    }
    skip_whitespace(&c);
    if (c.at != c.end || !have_id || !have_time || !have_items) return decline();

    char hex[2 * DIGEST_BYTES];
    blake2b_128_hex(data, (size_t)size, hex);
    Py_ssize_t n = PyTuple_GET_SIZE(self->items);
    PyObject *counts = PyTuple_New(n);
    if (counts == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *q = PyLong_FromLongLong(quantities[i]);
        if (q == NULL) {
            Py_DECREF(counts);
            return NULL;
        }
        PyTuple_SET_ITEM(counts, i, q);
    }
    PyObject *key = PyUnicode_FromStringAndSize(hex, 2 * DIGEST_BYTES);
    if (key == NULL) {
        Py_DECREF(counts);
        return NULL;
    }
    PyObject *when = PyFloat_FromDouble(seconds);
    if (when == NULL) {
        Py_DECREF(counts);
        Py_DECREF(key);
        return NULL;
    }
    PyObject *result = PyTuple_New(3);
    if (result == NULL) {
        Py_DECREF(counts);
        Py_DECREF(key);
        Py_DECREF(when);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, when);
    PyTuple_SET_ITEM(result, 1, key);
    PyTuple_SET_ITEM(result, 2, counts);
    return result;
}

static PyMethodDef scanner_methods[] = {
    {"scan", (PyCFunction)scanner_scan, METH_O,
     "scan(record) -> (event time, content key, quantities; -1: absent) or None (the reference "
     "decides)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject OrderScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "streamdp.engine._order_scanner.OrderScanner",
    .tp_basicsize = sizeof(OrderScanner),
    .tp_dealloc = (destructor)scanner_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "OrderScanner(sources, items, earliest, latest): the native reader of ordinary "
              "order records (see the module's source)",
    .tp_methods = scanner_methods,
    .tp_init = (initproc)scanner_init,
    .tp_new = PyType_GenericNew,
};

/* content_digest(data) -> the content key of any bytes (for tests against hashlib) */
static PyObject *content_digest(PyObject *module, PyObject *data)
{
    (void)module;
    if (!PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "content_digest takes bytes");
        return NULL;
    }
    char hex[2 * DIGEST_BYTES];
    blake2b_128_hex((const uint8_t *)PyBytes_AS_STRING(data), (size_t)PyBytes_GET_SIZE(data), hex);
    return PyUnicode_FromStringAndSize(hex, 2 * DIGEST_BYTES);
}

static PyMethodDef module_methods[] = {
    {"content_digest", content_digest, METH_O,
     "content_digest(data) -> 32 hex characters of BLAKE2b with a 16-byte digest"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef order_scanner_module = {
    PyModuleDef_HEAD_INIT, "streamdp.engine._order_scanner",
    "The native reader of ordinary order records (see the source's header).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__order_scanner(void)
{
    if (PyType_Ready(&OrderScannerType) < 0) return NULL;
    PyObject *module = PyModule_Create(&order_scanner_module);
    if (module == NULL) return NULL;
    Py_INCREF(&OrderScannerType);
    if (PyModule_AddObject(module, "OrderScanner", (PyObject *)&OrderScannerType) < 0) {
        Py_DECREF(&OrderScannerType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
