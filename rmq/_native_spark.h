/* _native_spark.h, included by _native.c: spark_pull_columns, the decoder of the Spark `rocketmq`
 * source (kafka_bridge/spark/rocketmq_source.py). It turns PULL_MESSAGE bodies straight into the
 * buffers of Arrow columns, without a Python object per message; the source wraps them with
 * pyarrow.Array.from_buffers. Self-contained (its own method table, added by PyInit__native).
 *
 * spark_pull_columns(pulls, system_names, tags) -> tuple | None
 *
 *   pulls         list of (body, lo, hi, min_offset, max_offset): one PULL_MESSAGE body each, of
 *                 which only the units with lo <= queue offset < hi are kept; min/max offset are the
 *                 response's, set as the MIN_OFFSET / MAX_OFFSET properties (processPullResult)
 *   system_names  tuple of bytes: property names that go to systemProperties, not properties
 *   tags          tuple of bytes, or None: keep only units whose TAGS is one of them (the client's
 *                 re-check of a TAG subscription; the broker compared hash codes)
 *
 * Returns (n, offset, timestamp, bornTimestamp, reconsumeTimes, value, key, keys, tags, msgId,
 * retryTopic, originMsgId, properties, systemProperties) where offset and reconsumeTimes are
 * little-endian int64 / int32 buffers; a timestamp is (validity, nulls, int64 microseconds); a
 * string or binary column is (validity, nulls, int32 offsets, data); a map is (int32 entry offsets,
 * keys column, values column). validity is None when nulls is 0. The properties are read as
 * rmq.client.message.decode_messages reads them into a dict (a repeated name keeps its first place
 * and its last value). None (no exception) when a unit is malformed, COMPRESSED, has a property
 * that is not valid UTF-8 or more than SP_MAX_PROPS properties: the caller then decodes with
 * decode_messages, the reference.
 */

#define SP_MAX_PROPS 256

typedef struct {
    outbuf valid, off, data;
    Py_ssize_t nulls;
} sp_var;

typedef struct {
    const uint8_t *k, *v;
    Py_ssize_t kl, vl;
} sp_prop;

static int sp_put(outbuf *b, const void *p, Py_ssize_t n)
{
    if (out_reserve(b, n) < 0)
        return -1;
    if (n)
        memcpy(b->buf + b->len, p, (size_t)n);
    b->len += n;
    return 0;
}

static int sp_le32(outbuf *b, uint32_t v)
{
    uint8_t t[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    return sp_put(b, t, 4);
}

static int sp_le64(outbuf *b, uint64_t v)
{
    return sp_le32(b, (uint32_t)v) < 0 ? -1 : sp_le32(b, (uint32_t)(v >> 32));
}

/* Bit `row` of an Arrow validity bitmap (LSB first). */
static int sp_bit(outbuf *b, Py_ssize_t row, int on)
{
    if ((row & 7) == 0) {
        if (out_reserve(b, 1) < 0)
            return -1;
        b->buf[b->len++] = 0;
    }
    if (on)
        b->buf[row >> 3] |= (uint8_t)(1u << (row & 7));
    return 0;
}

static int sp_var_init(sp_var *c)
{
    c->nulls = 0;
    c->valid.obj = c->off.obj = c->data.obj = NULL;
    if (!out_init(&c->valid, 1024) || !out_init(&c->off, 16384) || !out_init(&c->data, 65536))
        return -1;
    return sp_le32(&c->off, 0);
}

static void sp_var_clear(sp_var *c)
{
    Py_CLEAR(c->valid.obj);
    Py_CLEAR(c->off.obj);
    Py_CLEAR(c->data.obj);
}

static int sp_var_add(sp_var *c, Py_ssize_t row, const uint8_t *p, Py_ssize_t n, int valid)
{
    if (valid && sp_put(&c->data, p, n) < 0)
        return -1;
    if (c->data.len > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "spark_pull_columns: over 2 GiB in one column; pull less at once");
        return -1;
    }
    if (sp_bit(&c->valid, row, valid) < 0)
        return -1;
    if (!valid)
        c->nulls++;
    return sp_le32(&c->off, (uint32_t)c->data.len);
}

/* (validity or None, nulls, offsets, data); the sp_var gives up its buffers. */
static PyObject *sp_var_finish(sp_var *c)
{
    PyObject *valid = c->nulls ? out_finish(&c->valid) : Py_NewRef(Py_None);
    PyObject *off = out_finish(&c->off), *data = out_finish(&c->data);
    PyObject *t = (valid && off && data) ? Py_BuildValue("(OnOO)", valid, c->nulls, off, data) : NULL;
    Py_XDECREF(valid);
    Py_XDECREF(off);
    Py_XDECREF(data);
    sp_var_clear(c);
    return t;
}

/* Is name (n bytes) one of the names? */
static int sp_in(const uint8_t *name, Py_ssize_t n, PyObject *names)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
        PyObject *s = PyTuple_GET_ITEM(names, i);
        if (PyBytes_GET_SIZE(s) == n && memcmp(PyBytes_AS_STRING(s), name, (size_t)n) == 0)
            return 1;
    }
    return 0;
}

static int sp_is(const sp_prop *p, const char *name)
{
    size_t n = strlen(name);
    return (size_t)p->kl == n && memcmp(p->k, name, n) == 0;
}

/* Set name=value as a dict would: a repeated name keeps its place and takes the new value. 0, or -1
 * when there are too many properties. */
static int sp_set(sp_prop *props, int *count, const uint8_t *k, Py_ssize_t kl, const uint8_t *v, Py_ssize_t vl)
{
    for (int i = 0; i < *count; i++) {
        if (props[i].kl == kl && memcmp(props[i].k, k, (size_t)kl) == 0) {
            props[i].v = v;
            props[i].vl = vl;
            return 0;
        }
    }
    if (*count >= SP_MAX_PROPS)
        return -1;
    props[*count].k = k;
    props[*count].kl = kl;
    props[*count].v = v;
    props[*count].vl = vl;
    (*count)++;
    return 0;
}

enum { SP_TS_STORE, SP_TS_BORN, SP_NTS };
enum { SP_VALUE, SP_KEYS, SP_TAGS, SP_MSGID, SP_RETRY, SP_ORIGIN, SP_PK, SP_PV, SP_SK, SP_SV, SP_NVAR };

static PyObject *py_spark_pull_columns(PyObject *self, PyObject *args)
{
    PyObject *pulls, *names, *tags;
    if (!PyArg_ParseTuple(args, "O!O!O:spark_pull_columns", &PyList_Type, &pulls, &PyTuple_Type, &names, &tags))
        return NULL;
    if (tags != Py_None && !PyTuple_Check(tags)) {
        PyErr_SetString(PyExc_TypeError, "spark_pull_columns: tags must be a tuple of bytes or None");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
        if (!PyBytes_Check(PyTuple_GET_ITEM(names, i))) {
            PyErr_SetString(PyExc_TypeError, "spark_pull_columns: system_names must hold bytes");
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; tags != Py_None && i < PyTuple_GET_SIZE(tags); i++) {
        if (!PyBytes_Check(PyTuple_GET_ITEM(tags, i))) {
            PyErr_SetString(PyExc_TypeError, "spark_pull_columns: tags must hold bytes");
            return NULL;
        }
    }
    outbuf offs = {0}, rec = {0}, ts[SP_NTS] = {{0}}, tsv[SP_NTS] = {{0}}, keyv = {0}, pmap = {0}, smap = {0};
    Py_ssize_t tsnulls[SP_NTS] = {0}, keynulls = 0;
    sp_var v[SP_NVAR];
    sp_prop *props = PyMem_Malloc(sizeof(sp_prop) * SP_MAX_PROPS);
    PyObject *result = NULL;
    int declined = 0, ok = props != NULL;
    for (int i = 0; i < SP_NVAR; i++)
        v[i].valid.obj = v[i].off.obj = v[i].data.obj = NULL;
    if (!props)
        PyErr_NoMemory();
    for (int i = 0; ok && i < SP_NVAR; i++)
        ok = sp_var_init(&v[i]) == 0;
    for (int i = 0; ok && i < SP_NTS; i++)
        ok = out_init(&ts[i], 65536) && out_init(&tsv[i], 1024);
    ok = ok && out_init(&offs, 65536) && out_init(&rec, 32768) && out_init(&keyv, 1024) && out_init(&pmap, 32768)
         && out_init(&smap, 32768) && sp_le32(&pmap, 0) == 0 && sp_le32(&smap, 0) == 0;
    if (!ok)
        goto done;
    Py_ssize_t row = 0;
    for (Py_ssize_t pi = 0; pi < PyList_GET_SIZE(pulls) && !declined; pi++) {
        PyObject *item = PyList_GET_ITEM(pulls, pi);
        Py_buffer buf;
        long long lo, hi, min_off, max_off;
        if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "y*LLLL:spark_pull_columns pull", &buf, &lo, &hi,
                                                      &min_off, &max_off)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "spark_pull_columns: each pull is (body, lo, hi, min_offset, max_offset)");
            goto done;
        }
        char mins[24], maxs[24];
        int minl = snprintf(mins, sizeof mins, "%lld", min_off), maxl = snprintf(maxs, sizeof maxs, "%lld", max_off);
        const uint8_t *b = buf.buf;
        Py_ssize_t n = buf.len, pos = 0;
        int err = 0;
        while (pos < n && !declined && !err) {
            Py_ssize_t avail = n - pos;
            const uint8_t *u = b + pos;
            if (avail < 8) { declined = 1; break; }
            int32_t total = (int32_t)rd32(u);
            if ((int32_t)rd32(u + 4) != (int32_t)0xDAA320A7 || total < 88 + 3 || total > avail) { declined = 1; break; }
            int32_t sys_flag = (int32_t)rd32(u + 36);
            if (sys_flag & 0x1) { declined = 1; break; }   /* COMPRESSED: zlib in Python */
            int b6 = (sys_flag & (1 << 4)) != 0, s6 = (sys_flag & (1 << 5)) != 0;
            Py_ssize_t balen = b6 ? 16 : 4, salen = s6 ? 16 : 4;
            if (total < 88 + (balen - 4) + (salen - 4) + 3) { declined = 1; break; }
            Py_ssize_t q = 48 + balen + 4;
            int64_t store_ms = (int64_t)rd64(u + q); q += 8;
            Py_ssize_t saddr_at = q; q += salen + 4;
            int32_t reconsume = (int32_t)rd32(u + q); q += 4 + 8;
            int32_t body_len = (int32_t)rd32(u + q); q += 4;
            if (body_len < 0 || q + body_len + 3 > total) { declined = 1; break; }
            Py_ssize_t body_at = q;
            q += body_len;
            q += 1 + u[q];
            if (q + 2 > total) { declined = 1; break; }
            Py_ssize_t props_len = rd16(u + q);
            q += 2;
            if (q + props_len != total) { declined = 1; break; }
            int64_t qoff = (int64_t)rd64(u + 20);
            pos += total;
            if (qoff < lo || qoff >= hi)
                continue;
            /* the properties as a dict holds them (properties_from_bytes / props_into) */
            const uint8_t *p = u + q;
            int np = 0;
            for (Py_ssize_t i = 0; i < props_len && !declined;) {
                Py_ssize_t j = i;
                while (j < props_len && p[j] != 2)
                    j++;
                Py_ssize_t k = i;
                while (k < j && p[k] != 1)
                    k++;
                if (j > i && k < j) {
                    if (!utf8_valid(p + i, k - i) || !utf8_valid(p + k + 1, j - k - 1) ||
                        sp_set(props, &np, p + i, k - i, p + k + 1, j - k - 1) < 0)
                        declined = 1;
                }
                i = j + 1;
            }
            if (declined || sp_set(props, &np, (const uint8_t *)"MIN_OFFSET", 10, (const uint8_t *)mins, minl) < 0 ||
                sp_set(props, &np, (const uint8_t *)"MAX_OFFSET", 10, (const uint8_t *)maxs, maxl) < 0) {
                declined = 1;
                break;
            }
            const sp_prop *pk = NULL, *pt = NULL, *pu = NULL, *pr = NULL, *po = NULL;
            for (int i = 0; i < np; i++) {
                const sp_prop *e = &props[i];
                if (sp_is(e, "KEYS")) pk = e;
                else if (sp_is(e, "TAGS")) pt = e;
                else if (sp_is(e, "UNIQ_KEY")) pu = e;
                else if (sp_is(e, "RETRY_TOPIC")) pr = e;
                else if (sp_is(e, "ORIGIN_MESSAGE_ID")) po = e;
            }
            if (tags != Py_None && (pt == NULL || !sp_in(pt->v, pt->vl, tags)))
                continue;
            int64_t born_ms = (int64_t)rd64(u + 40);
            int64_t stamps[SP_NTS] = {store_ms, born_ms};
            for (int i = 0; i < SP_NTS && !err; i++) {
                int on = stamps[i] > 0;
                err = sp_le64(&ts[i], on ? (uint64_t)(stamps[i] * 1000) : 0) < 0 || sp_bit(&tsv[i], row, on) < 0;
                tsnulls[i] += !on;
            }
            if (err || sp_le64(&offs, (uint64_t)qoff) < 0 || sp_le32(&rec, (uint32_t)reconsume) < 0)
                { err = 1; break; }
            /* msgId: UNIQ_KEY, else the offsetMsgId (store host, port, commitlog offset in upper hex) */
            char hex[2 * 28];
            const uint8_t *mid;
            Py_ssize_t midl;
            if (pu && pu->vl > 0) {
                mid = pu->v;
                midl = pu->vl;
            } else {
                uint8_t raw[28];
                memcpy(raw, u + saddr_at, (size_t)salen + 4);
                memcpy(raw + salen + 4, u + 28, 8);
                static const char digits[] = "0123456789ABCDEF";
                midl = 0;
                for (Py_ssize_t i = 0; i < salen + 12; i++) {
                    hex[midl++] = digits[raw[i] >> 4];
                    hex[midl++] = digits[raw[i] & 15];
                }
                mid = (const uint8_t *)hex;
            }
            if (sp_var_add(&v[SP_VALUE], row, u + body_at, body_len, 1) < 0 ||
                sp_var_add(&v[SP_KEYS], row, pk ? pk->v : NULL, pk ? pk->vl : 0, pk != NULL) < 0 ||
                sp_bit(&keyv, row, pk != NULL && pk->vl > 0) < 0 ||
                sp_var_add(&v[SP_TAGS], row, pt ? pt->v : NULL, pt ? pt->vl : 0, pt != NULL) < 0 ||
                sp_var_add(&v[SP_MSGID], row, mid, midl, 1) < 0 ||
                sp_var_add(&v[SP_RETRY], row, pr ? pr->v : NULL, pr ? pr->vl : 0, pr != NULL) < 0 ||
                sp_var_add(&v[SP_ORIGIN], row, po ? po->v : NULL, po ? po->vl : 0, po != NULL) < 0)
                { err = 1; break; }
            keynulls += !(pk != NULL && pk->vl > 0);
            for (int i = 0; i < np && !err; i++) {
                int sys = sp_in(props[i].k, props[i].kl, names);
                sp_var *kc = &v[sys ? SP_SK : SP_PK], *vc = &v[sys ? SP_SV : SP_PV];
                err = sp_var_add(kc, kc->off.len / 4 - 1, props[i].k, props[i].kl, 1) < 0 ||
                      sp_var_add(vc, vc->off.len / 4 - 1, props[i].v, props[i].vl, 1) < 0;
            }
            if (err || sp_le32(&pmap, (uint32_t)(v[SP_PK].off.len / 4 - 1)) < 0 ||
                sp_le32(&smap, (uint32_t)(v[SP_SK].off.len / 4 - 1)) < 0)
                { err = 1; break; }
            row++;
        }
        PyBuffer_Release(&buf);
        if (err)
            goto done;
    }
    if (declined) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *cols[SP_NVAR] = {NULL}, *tcols[SP_NTS] = {NULL};
    PyObject *key = NULL, *pm = NULL, *sm = NULL, *o = NULL, *r = NULL;
    /* key (binary) shares the KEYS column's offsets and data, with its own validity: an empty KEYS
     * is "" in keys but null in key */
    PyObject *kv = keynulls ? out_finish(&keyv) : Py_NewRef(Py_None);
    Py_ssize_t koff_len = v[SP_KEYS].off.len, kdata_len = v[SP_KEYS].data.len;
    PyObject *koff = kv ? PyBytes_FromStringAndSize((const char *)v[SP_KEYS].off.buf, koff_len) : NULL;
    PyObject *kdata = koff ? PyBytes_FromStringAndSize((const char *)v[SP_KEYS].data.buf, kdata_len) : NULL;
    if (kdata)
        key = Py_BuildValue("(OnOO)", kv, keynulls, koff, kdata);
    Py_XDECREF(kv);
    Py_XDECREF(koff);
    Py_XDECREF(kdata);
    int good = key != NULL;
    for (int i = 0; i < SP_NVAR; i++) {
        cols[i] = sp_var_finish(&v[i]);
        good &= cols[i] != NULL;
    }
    for (int i = 0; i < SP_NTS; i++) {
        PyObject *valid = tsnulls[i] ? out_finish(&tsv[i]) : Py_NewRef(Py_None);
        PyObject *data = out_finish(&ts[i]);
        tcols[i] = (valid && data) ? Py_BuildValue("(OnO)", valid, tsnulls[i], data) : NULL;
        Py_XDECREF(valid);
        Py_XDECREF(data);
        good &= tcols[i] != NULL;
    }
    PyObject *pmo = out_finish(&pmap), *smo = out_finish(&smap), *ro = out_finish(&rec);
    o = out_finish(&offs);
    if (good && pmo && smo && ro && o) {
        pm = Py_BuildValue("(OOO)", pmo, cols[SP_PK], cols[SP_PV]);
        sm = Py_BuildValue("(OOO)", smo, cols[SP_SK], cols[SP_SV]);
        if (pm && sm)
            r = Py_BuildValue("(nOOOOOOOOOOOOO)", row, o, tcols[SP_TS_STORE], tcols[SP_TS_BORN], ro, cols[SP_VALUE],
                              key, cols[SP_KEYS], cols[SP_TAGS], cols[SP_MSGID], cols[SP_RETRY], cols[SP_ORIGIN],
                              pm, sm);
    }
    Py_XDECREF(pmo);
    Py_XDECREF(smo);
    Py_XDECREF(ro);
    Py_XDECREF(o);
    Py_XDECREF(pm);
    Py_XDECREF(sm);
    Py_XDECREF(key);
    for (int i = 0; i < SP_NVAR; i++)
        Py_XDECREF(cols[i]);
    for (int i = 0; i < SP_NTS; i++)
        Py_XDECREF(tcols[i]);
    result = r;
done:
    PyMem_Free(props);
    for (int i = 0; i < SP_NVAR; i++)
        sp_var_clear(&v[i]);
    for (int i = 0; i < SP_NTS; i++) {
        Py_XDECREF(ts[i].obj);
        Py_XDECREF(tsv[i].obj);
    }
    Py_XDECREF(offs.obj);
    Py_XDECREF(rec.obj);
    Py_XDECREF(keyv.obj);
    Py_XDECREF(pmap.obj);
    Py_XDECREF(smap.obj);
    return result;
}

static PyMethodDef spark_methods[] = {
    {"spark_pull_columns", py_spark_pull_columns, METH_VARARGS,
     "spark_pull_columns(pulls, system_names, tags): PULL_MESSAGE bodies as Arrow column buffers for the Spark "
     "rocketmq source (None: decode in Python)."},
    {NULL, NULL, 0, NULL},
};

static int rmq_add_spark_functions(PyObject *m)
{
    return PyModule_AddFunctions(m, spark_methods);
}
