/*
 * rmq/_native_send.h: the common RocketMQ send request read from its frame in C (issue 24 item 2;
 * included by rmq/_native.c, whose helpers it uses). The Python twin is
 * rmq/server/processors/send_frame.py's SendFrame._on_frame_py / try_send, which stays the
 * reference: whatever this reader is not sure of, it declines (None) and that code decides.
 *
 *   send_frame_parse   a SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE frame payload whose
 *                      header is plain JSON: header fields read, the send header's checks made,
 *                      and the message(s) encoded as commitlog units (batch_body_to_units, as the
 *                      Python path does) with a one-entry table for DefaultMessageStore.put_entries
 *   send_frame_reply   the success response frame, byte for byte what RemotingCommand.encode
 *                      writes for the processor's response
 *
 * The JSON reader is strict and small: an object of string keys whose values are strings (with
 * the usual escapes; a surrogate escape declines), integers without fraction or exponent,
 * true / false / null, and one nested object, extFields, of scalar values (read as
 * RemotingCommand.decode reads them). Anything else (arrays, other nested objects, floats, invalid
 * UTF-8, raw control characters) declines, and the Python reader, which json.loads the header,
 * takes the request.
 */

#define SEND_MAX_EXT 64

/* utf8_valid with the ASCII run (a JSON header is nearly all ASCII) checked 8 bytes at a time */
static int send_utf8_valid(const uint8_t *p, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (w & 0x8080808080808080ull)
            break;
    }
    return utf8_valid(p + i, n - i);
}

typedef struct {
    const uint8_t *p, *e;
    uint8_t *out;  /* scratch: unescaped strings are written here (never longer than their JSON) */
} jcur;

typedef struct {
    const uint8_t *s;
    Py_ssize_t n;
} jstr;

static inline void j_ws(jcur *c)
{
    while (c->p < c->e && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static inline int hexval(uint8_t h)
{
    if (h >= '0' && h <= '9')
        return h - '0';
    if (h >= 'a' && h <= 'f')
        return h - 'a' + 10;
    if (h >= 'A' && h <= 'F')
        return h - 'A' + 10;
    return -1;
}

/* A JSON string at c->p (its opening quote): unescaped into the scratch, 1; 0 to decline. */
static int j_string(jcur *c, jstr *out)
{
    if (c->p >= c->e || *c->p != '"')
        return 0;
    c->p++;
    uint8_t *o = c->out;
    out->s = o;
    while (c->p < c->e) {
        uint8_t ch = *c->p++;
        if (ch == '"') {
            out->n = o - out->s;
            c->out = o;
            return 1;
        }
        if (ch < 0x20)
            return 0;  /* json.loads (strict) refuses raw control characters */
        if (ch != '\\') {
            *o++ = ch;
            continue;
        }
        if (c->p >= c->e)
            return 0;
        ch = *c->p++;
        switch (ch) {
        case '"': case '\\': case '/': *o++ = ch; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            if (c->e - c->p < 4)
                return 0;
            int a = hexval(c->p[0]), b = hexval(c->p[1]), d = hexval(c->p[2]), f = hexval(c->p[3]);
            if (a < 0 || b < 0 || d < 0 || f < 0)
                return 0;
            uint32_t cp = (uint32_t)(a << 12 | b << 8 | d << 4 | f);
            c->p += 4;
            if (cp >= 0xD800 && cp <= 0xDFFF)
                return 0;  /* surrogates: RemotingCommand.decode's checks decide */
            if (cp < 0x80) {
                *o++ = (uint8_t)cp;
            } else if (cp < 0x800) {
                *o++ = (uint8_t)(0xC0 | cp >> 6);
                *o++ = (uint8_t)(0x80 | (cp & 0x3F));
            } else {
                *o++ = (uint8_t)(0xE0 | cp >> 12);
                *o++ = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
                *o++ = (uint8_t)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default:
            return 0;
        }
    }
    return 0;
}

enum { JV_STR, JV_INT, JV_TRUE, JV_FALSE, JV_NULL, JV_OBJECT };

/* An integer (no fraction, no exponent, at most 18 digits): 1, else 0. */
static int j_int(jcur *c, long long *v)
{
    int neg = 0;
    if (c->p < c->e && *c->p == '-') {
        neg = 1;
        c->p++;
    }
    const uint8_t *s = c->p;
    while (c->p < c->e && *c->p >= '0' && *c->p <= '9')
        c->p++;
    Py_ssize_t n = c->p - s;
    if (n == 0 || n > 18 || (n > 1 && *s == '0'))
        return 0;
    if (c->p < c->e && (*c->p == '.' || *c->p == 'e' || *c->p == 'E'))
        return 0;
    long long x = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        x = x * 10 + (s[i] - '0');
    *v = neg ? -x : x;
    return 1;
}

static int j_literal(jcur *c, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(c->e - c->p) < n || memcmp(c->p, word, n) != 0)
        return 0;
    c->p += n;
    return 1;
}

/* A scalar value or the start of an object: its kind, or -1 to decline. */
static int j_value(jcur *c, jstr *s, long long *i)
{
    if (c->p >= c->e)
        return -1;
    switch (*c->p) {
    case '"': return j_string(c, s) ? JV_STR : -1;
    case '{': return JV_OBJECT;
    case 't': return j_literal(c, "true") ? JV_TRUE : -1;
    case 'f': return j_literal(c, "false") ? JV_FALSE : -1;
    case 'n': return j_literal(c, "null") ? JV_NULL : -1;
    default: return j_int(c, i) ? JV_INT : -1;
    }
}

static inline int jstr_is(const jstr *s, const char *lit)
{
    size_t n = strlen(lit);
    return (size_t)s->n == n && memcmp(s->s, lit, n) == 0;
}

typedef struct {
    long long code, opaque, flag, version;
    int have_code, ext_seen;
    jstr language, remark;
    int language_set, remark_set;  /* 1: a string, 0: absent or null */
    jstr keys[SEND_MAX_EXT], vals[SEND_MAX_EXT];
    int n_ext;
} sendhead;

/* The extFields object at c->p: 1, or 0 to decline. Later duplicates win, as in json.loads. */
static int j_ext(jcur *c, sendhead *h)
{
    c->p++;  /* '{' */
    h->n_ext = 0;
    h->ext_seen = 1;
    j_ws(c);
    if (c->p < c->e && *c->p == '}') {
        c->p++;
        return 1;
    }
    for (;;) {
        jstr k, v;
        j_ws(c);
        if (!j_string(c, &k))
            return 0;
        j_ws(c);
        if (c->p >= c->e || *c->p++ != ':')
            return 0;
        j_ws(c);
        /* values as RemotingCommand.decode keeps them: strings; integers and booleans as their
         * text (str(), "true" / "false", as a C++ client writes some fields); null leaves the key
         * out. Floats, lists and objects decline. */
        long long iv = 0;
        int kind = j_value(c, &v, &iv);
        if (kind == JV_INT) {
            char num[24];
            int m = snprintf(num, sizeof num, "%lld", iv);  /* never longer than its JSON text */
            memcpy(c->out, num, (size_t)m);
            v.s = c->out;
            v.n = m;
            c->out += m;
        } else if (kind == JV_TRUE || kind == JV_FALSE) {
            v.s = (const uint8_t *)(kind == JV_TRUE ? "true" : "false");
            v.n = kind == JV_TRUE ? 4 : 5;
        } else if (kind != JV_STR && kind != JV_NULL) {
            return 0;
        }
        int slot = h->n_ext;
        for (int i = 0; i < h->n_ext; i++)
            if (h->keys[i].n == k.n && memcmp(h->keys[i].s, k.s, (size_t)k.n) == 0)
                slot = i;
        if (kind == JV_NULL) {  /* json.loads keeps the last value: a null one drops the key */
            if (slot < h->n_ext) {
                h->n_ext--;
                h->keys[slot] = h->keys[h->n_ext];
                h->vals[slot] = h->vals[h->n_ext];
            }
        } else if (slot == h->n_ext) {
            if (h->n_ext >= SEND_MAX_EXT)
                return 0;
            h->n_ext++;
        }
        if (kind != JV_NULL) {
            h->keys[slot] = k;
            h->vals[slot] = v;
        }
        j_ws(c);
        if (c->p >= c->e)
            return 0;
        if (*c->p == ',') {
            c->p++;
            continue;
        }
        if (*c->p++ == '}')
            return 1;
        return 0;
    }
}

/* The whole header: 1 when it is an object this reader takes, else 0. */
static int j_header(jcur *c, sendhead *h)
{
    j_ws(c);
    if (c->p >= c->e || *c->p++ != '{')
        return 0;
    j_ws(c);
    if (c->p < c->e && *c->p == '}') {
        c->p++;
    } else {
        for (;;) {
            jstr k, s = {0};
            long long iv = 0;
            j_ws(c);
            if (!j_string(c, &k))
                return 0;
            j_ws(c);
            if (c->p >= c->e || *c->p++ != ':')
                return 0;
            j_ws(c);
            int kind = j_value(c, &s, &iv);
            if (kind < 0)
                return 0;
            if (jstr_is(&k, "extFields")) {
                if (kind != JV_OBJECT || !j_ext(c, h))
                    return 0;
            } else if (kind == JV_OBJECT) {
                return 0;
            } else if (jstr_is(&k, "code")) {
                if (kind != JV_INT)
                    return 0;
                h->code = iv;
                h->have_code = 1;
            } else if (jstr_is(&k, "opaque") || jstr_is(&k, "flag") || jstr_is(&k, "version")) {
                if (kind != JV_INT)
                    return 0;
                *(k.s[0] == 'o' ? &h->opaque : k.s[0] == 'f' ? &h->flag : &h->version) = iv;
            } else if (jstr_is(&k, "language") || jstr_is(&k, "remark")) {
                if (kind != JV_STR && kind != JV_NULL)
                    return 0;
                if (k.s[0] == 'l') {
                    h->language = s;
                    h->language_set = kind == JV_STR;
                } else {
                    h->remark = s;
                    h->remark_set = kind == JV_STR;
                }
            }
            j_ws(c);
            if (c->p >= c->e)
                return 0;
            if (*c->p == ',') {
                c->p++;
                continue;
            }
            if (*c->p++ == '}')
                break;
            return 0;
        }
    }
    j_ws(c);
    return c->p == c->e;
}

/* The value of extFields[name], or NULL when absent. */
static const jstr *ext_get(const sendhead *h, const char *name)
{
    for (int i = 0; i < h->n_ext; i++)
        if (jstr_is(&h->keys[i], name))
            return &h->vals[i];
    return NULL;
}

/* try_send's _int: a non-negative decimal of 1..digits ASCII digits, else -1. */
static long long ext_uint(const jstr *s, int digits)
{
    if (s == NULL || s->n == 0 || s->n > digits)
        return -1;
    long long v = 0;
    for (Py_ssize_t i = 0; i < s->n; i++) {
        if (s->s[i] < '0' || s->s[i] > '9')
            return -1;
        v = v * 10 + (s->s[i] - '0');
    }
    return v;
}

static const char *const SEND_V1[] = {"producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId",
                                      "sysFlag", "bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode",
                                      "batch", "maxReconsumeTimes"};
static const char *const SEND_V2[] = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m", "l"};

enum { SF_GROUP, SF_TOPIC, SF_DEFAULT, SF_DNUMS, SF_QID, SF_SYSFLAG, SF_BORN, SF_FLAG, SF_PROPS, SF_RECONSUME,
       SF_UNIT, SF_BATCH, SF_MAXRE, SF_COUNT };

static inline int is_false_text(const jstr *s)
{
    return s == NULL || jstr_is(s, "false") || jstr_is(s, "0") || s->n == 0;
}

static inline int is_true_text(const jstr *s) { return s != NULL && (jstr_is(s, "true") || jstr_is(s, "1")); }

/*
 * send_frame_parse(payload, born_addr, born_port, store_v6, max_message_size)
 *   -> None
 *    | (code, opaque, version, language, topic, queue_id, batch, table, units, tags_codes,
 *       index_hashes, index_units, max_size, count)
 *
 * payload is the frame after its length field. The message(s) come encoded as commitlog units
 * with their offsets blank: a single message as batch_body_to_units encodes a batch body of one
 * element (what SendFrame.try_send does), a batch (SEND_BATCH_MESSAGE, or batch=true) as
 * DefaultMessageStore.put_batch encodes its body (the request's properties added to each element
 * that lacks them). table is a bytearray of one pentry (rmq/_native_produce.h) for
 * DefaultMessageStore.put_entries (topic number 0, the queue id, `count` units; tags_off -1 when
 * no unit has a tag code); tags_codes / index_hashes / index_units are b"" when there are none.
 * language is None when the header has none (the caller uses LanguageCode.JAVA, as
 * RemotingCommand.decode does).
 *
 * None whenever the Python reader must decide: not a send code, not this JSON shape, flag not 0,
 * opaque / version outside int32, a send header field missing or not plain digits, a
 * transaction sys flag, unitMode set, a batch spelling other than true/1/false/0/"", a body over
 * max_message_size, properties over 32767 bytes, or units batch_body_to_units declines (delay,
 * transaction, properties it would not write back as they are, a malformed batch body, a unit
 * over max_message_size). The topic's checks (legal name, topic table, permission, queue count,
 * filter type) are the caller's.
 */
static PyObject *py_send_frame_parse(PyObject *self, PyObject *args)
{
    Py_buffer pb, born;
    int born_port, store_v6;
    Py_ssize_t max_msg;
    if (!PyArg_ParseTuple(args, "y*y*ipn:send_frame_parse", &pb, &born, &born_port, &store_v6, &max_msg))
        return NULL;
    PyObject *result = NULL, *language = NULL, *topic = NULL;
    uint8_t *scratch = NULL;
    sendhead *h = NULL;
    const uint8_t *p = pb.buf;
    const Py_ssize_t n = pb.len;
    if (n < 4)
        goto declined;
    const uint32_t word = rd32(p);
    const Py_ssize_t hlen = word & 0xFFFFFF;
    if ((word >> 24) != 0 || hlen > n - 4)
        goto declined;  /* not JSON (ROCKETMQ headers go through RemotingCommand.decode) */
    const uint8_t *head = p + 4;
    if (!send_utf8_valid(head, hlen))
        goto declined;
    scratch = PyMem_Malloc((size_t)hlen + 1);
    h = PyMem_Calloc(1, sizeof(*h));
    if (!scratch || !h) {
        PyErr_NoMemory();
        goto done;
    }
    jcur c = {head, head + hlen, scratch};
    if (!j_header(&c, h) || !h->have_code || !h->ext_seen)
        goto declined;
    const long long code = h->code;
    if ((code != 10 && code != 310 && code != 320) || h->flag != 0 || h->opaque < INT32_MIN || h->opaque > INT32_MAX
        || h->version < INT32_MIN || h->version > INT32_MAX)
        goto declined;
    const char *const *names = code == 10 ? SEND_V1 : SEND_V2;
    const jstr *f[SF_COUNT];
    for (int i = 0; i < SF_COUNT; i++)
        f[i] = ext_get(h, names[i]);
    if (!f[SF_GROUP] || !f[SF_TOPIC] || !f[SF_DEFAULT])
        goto declined;
    const long long qid = ext_uint(f[SF_QID], 9), sys_flag = ext_uint(f[SF_SYSFLAG], 9),
                    flag = ext_uint(f[SF_FLAG], 9), born_ts = ext_uint(f[SF_BORN], 18);
    const long long reconsume = f[SF_RECONSUME] ? ext_uint(f[SF_RECONSUME], 9) : 0;
    if (qid < 0 || sys_flag < 0 || flag < 0 || born_ts < 0 || ext_uint(f[SF_DNUMS], 9) < 0
        || (f[SF_MAXRE] && ext_uint(f[SF_MAXRE], 9) < 0) || reconsume < 0 || (sys_flag & 0x0C))
        goto declined;
    if (!is_false_text(f[SF_UNIT]) || !(is_false_text(f[SF_BATCH]) || is_true_text(f[SF_BATCH])))
        goto declined;
    const int batch = is_true_text(f[SF_BATCH]) || code == 320;
    const jstr *tp = f[SF_TOPIC], *pr = f[SF_PROPS];
    if (tp->n > 255)
        goto declined;  /* never a legal topic; batch_body_to_units takes at most 255 bytes */
    const uint8_t *body = head + hlen;
    const Py_ssize_t blen = n - 4 - hlen;
    if (blen > max_msg)
        goto declined;
    if (born.len != 4 && born.len != 16) {
        PyErr_SetString(PyExc_ValueError, "born_addr must be 4 (IPv4) or 16 (IPv6) bytes");
        goto done;
    }
    if (h->language_set) {
        language = PyUnicode_DecodeUTF8((const char *)h->language.s, h->language.n, NULL);
        if (!language)
            goto done;
    } else {
        language = Py_NewRef(Py_None);
    }
    topic = PyUnicode_DecodeUTF8((const char *)tp->s, tp->n, NULL);
    if (!topic)
        goto done;
    const Py_ssize_t plen = pr ? pr->n : 0;
    if (plen > MAX_PROPERTIES_LENGTH)
        goto declined;
    PyObject *element;
    if (batch) {
        /* put_batch's encoding: the body's elements, with the request's properties added where an
         * element lacks them (split_props declines properties Python would not write back as is) */
        element = PyBytes_FromStringAndSize((const char *)body, blen);
        if (!element)
            goto done;
    } else {
        /* the element MessageDecoder.encodeMessages writes for this one message */
        element = PyBytes_FromStringAndSize(NULL, 22 + blen + plen);
        if (!element)
            goto done;
        uint8_t *w = (uint8_t *)PyBytes_AS_STRING(element);
        wr32(w, (uint32_t)(22 + blen + plen));
        wr32(w + 4, 0);
        wr32(w + 8, 0);
        wr32(w + 12, (uint32_t)flag);
        wr32(w + 16, (uint32_t)blen);
        memcpy(w + 20, body, (size_t)blen);
        wr16(w + 20 + blen, (uint16_t)plen);
        if (plen)
            memcpy(w + 22 + blen, pr->s, (size_t)plen);
    }
    PyObject *call = Py_BuildValue("(Ny#iILy#iiiy#n)", element, (const char *)tp->s, tp->n, (int)qid,
                                   (unsigned int)sys_flag, born_ts, (const char *)born.buf, born.len, born_port,
                                   store_v6, (int)reconsume, batch && plen ? (const char *)pr->s : "",
                                   batch ? plen : (Py_ssize_t)0, max_msg);
    if (!call)
        goto done;
    PyObject *out = py_batch_body_to_units(NULL, call);
    Py_DECREF(call);
    if (!out)
        goto done;
    const Py_ssize_t count =
        PyTuple_Check(out) && PyTuple_GET_SIZE(out) == 7 ? PyLong_AsSsize_t(PyTuple_GET_ITEM(out, 5)) : 0;
    if (count < 1 || (!batch && count != 1) || count > INT32_MAX) {
        Py_DECREF(out);
        goto declined;  /* None: the Python path decides (delay, transaction, unusual properties, malformed) */
    }
    /* the one-entry table DefaultMessageStore.put_entries appends (as kafka_produce_map makes them) */
    PyObject *units = PyTuple_GET_ITEM(out, 0), *tags = PyTuple_GET_ITEM(out, 1), *hashes = PyTuple_GET_ITEM(out, 2),
             *iunits = PyTuple_GET_ITEM(out, 3);
    pentry en;
    memset(&en, 0, sizeof en);
    en.pid = -1;
    en.units_len = PyBytes_GET_SIZE(units);
    en.base_offset = -1;
    en.log_start = -1;
    en.partition = (int32_t)qid;
    en.kind = PKIND_MAPPED;
    en.seq = -1;
    en.count = (int32_t)count;
    en.max_size = (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(out, 4));
    en.tags_off = tags != Py_None ? 0 : -1;
    en.n_keys = hashes != Py_None ? (int32_t)(PyBytes_GET_SIZE(hashes) / 4) : 0;
    en.epoch = -1;
    PyObject *table = PyByteArray_FromStringAndSize((const char *)&en, sizeof en);
    if (table) {
        PyObject *empty = PyBytes_FromStringAndSize(NULL, 0);
        if (empty)
            result = Py_BuildValue("(LLLOOLiNOOOOOn)", code, h->opaque, h->version, language, topic, qid, batch,
                                   table, units, tags != Py_None ? tags : empty, hashes != Py_None ? hashes : empty,
                                   iunits != Py_None ? iunits : empty, PyTuple_GET_ITEM(out, 4), count);
        else
            Py_DECREF(table);
        Py_XDECREF(empty);
    }
    Py_DECREF(out);
    goto done;
declined:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(language);
    Py_XDECREF(topic);
    PyMem_Free(scratch);
    PyMem_Free(h);
    PyBuffer_Release(&pb);
    PyBuffer_Release(&born);
    return result;
}

/*
 * send_frame_reply(id_prefix, units, first_offset, queue_id, queue_offset, opaque, version) -> bytes
 *
 * The whole frame (length field included) of the SUCCESS response to a send, as
 * RemotingCommand.encode writes the processor's response: msgId is, for each unit of `units`
 * (written back to back from physical offset first_offset on), id_prefix (the store host's hex,
 * ASCII) followed by the unit's physical offset as 16 upper-case hex digits, comma-separated.
 */
static PyObject *py_send_frame_reply(PyObject *self, PyObject *args)
{
    Py_buffer pre, ub;
    int queue_id, opaque, version;
    long long first, queue_offset;
    if (!PyArg_ParseTuple(args, "y*y*LiLii:send_frame_reply", &pre, &ub, &first, &queue_id, &queue_offset, &opaque,
                          &version))
        return NULL;
    PyObject *result = NULL;
    outbuf o = {0};
    if (ub.len < 4 || pre.len > 64 || first < 0) {
        PyErr_SetString(PyExc_ValueError, "send_frame_reply: units, a short id prefix, a physical offset");
        goto done;
    }
    if (!out_init(&o, 256 + (ub.len / 64 + 1) * (pre.len + 17)))
        goto done;
    o.len = 8;  /* frame length and header length, filled in at the end */
    char tmp[320];
    int m = snprintf(tmp, sizeof tmp, "{\"code\":0,\"extFields\":{\"msgId\":\"");
    if (!put_raw(&o, tmp, m))
        goto done;
    const uint8_t *u = ub.buf;
    for (Py_ssize_t at = 0; at < ub.len;) {
        const int32_t size = ub.len - at >= 4 ? (int32_t)rd32(u + at) : 0;
        if (size <= 0 || size > ub.len - at) {
            PyErr_SetString(PyExc_ValueError, "send_frame_reply: units of inconsistent sizes");
            goto done;
        }
        if ((at && !put_raw(&o, ",", 1)) || !put_raw(&o, pre.buf, pre.len))
            goto done;
        /* "%016llX" without snprintf (a batch has one id per message) */
        unsigned long long v = (unsigned long long)(first + at);
        for (int d = 15; d >= 0; d--, v >>= 4)
            tmp[d] = "0123456789ABCDEF"[v & 15];
        if (!put_raw(&o, tmp, 16))
            goto done;
        at += size;
    }
    m = snprintf(tmp, sizeof tmp,
                 "\",\"queueId\":\"%d\",\"queueOffset\":\"%lld\",\"MSG_REGION\":\"DefaultRegion\",\"TRACE_ON\":\"true\"},"
                 "\"flag\":1,\"language\":\"JAVA\",\"opaque\":%d,\"serializeTypeCurrentRPC\":\"JSON\",\"version\":%d}",
                 queue_id, queue_offset, opaque, version);
    if (m <= 0 || m >= (int)sizeof tmp || !put_raw(&o, tmp, m)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_SystemError, "send_frame_reply: response header too long");
        goto done;
    }
    wr32(o.buf, (uint32_t)(o.len - 4));
    wr32(o.buf + 4, (uint32_t)(o.len - 8));
    result = out_finish(&o);
done:
    Py_XDECREF(o.obj);
    PyBuffer_Release(&pre);
    PyBuffer_Release(&ub);
    return result;
}
