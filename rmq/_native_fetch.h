/*
 * rmq/_native_fetch.h: the Kafka Fetch request read from its frame, and its response written, in C
 * (included by rmq/_native.c after rmq/_native_produce.h, whose request reader and output helpers
 * it uses). The Python twin is the generated codec (kafka_bridge/protocol) with
 * kafka_bridge/handlers/fetch.py's handle_fetch, which stays the reference and handles every
 * request this path declines (kafka_bridge/handlers/fetch_frame.py, issue 24).
 *
 *   kafka_fetch_parse     a FetchRequest body (v4..v16) read into what handle_fetch uses, or None
 *                         when the request is malformed or less common (tagged fields, forgotten
 *                         topics, a replica's fetch, a non-ASCII rack id): the reference path then
 *                         decodes it and answers (or closes the connection) as before
 *   kafka_fetch_response  the whole FetchResponse frame (size, header, body) from handle_fetch's
 *                         partition entries, byte for byte what the generated encoder writes
 */

/* An int8/int16/int32/int64 of the request (big-endian); ok = 0 past the end. */
static inline int64_t fr_int(preader *r, int size)
{
    if (!r->ok || r->e - r->p < size) {
        r->ok = 0;
        return 0;
    }
    int64_t v;
    switch (size) {
    case 1: v = (int8_t)r->p[0]; break;
    case 2: v = (int16_t)rd16(r->p); break;
    case 4: v = (int32_t)rd32(r->p); break;
    default: v = (int64_t)rd64(r->p); break;
    }
    r->p += size;
    return v;
}

/* The tagged-field section of a flexible struct: ok = 0 unless it is empty (the reference decodes
 * any tags; this path takes only requests without them). */
static inline void fr_no_tags(preader *r)
{
    if (r->flex && pr_uvarint(r) != 0)
        r->ok = 0;
}

/* A non-nullable STRING as a new str (NULL with ok = 0 when null, malformed or not UTF-8). */
static PyObject *fr_string(preader *r)
{
    int64_t n = pr_len(r, 0);
    if (!r->ok || n < 0) {
        r->ok = 0;
        return NULL;
    }
    PyObject *s = PyUnicode_DecodeUTF8((const char *)r->p, (Py_ssize_t)n, NULL);
    if (s == NULL) {
        PyErr_Clear();
        r->ok = 0;
        return NULL;
    }
    r->p += n;
    return s;
}

/*
 * kafka_fetch_parse(frame, offset, version)
 *     -> (max_wait_ms, min_bytes, max_bytes, isolation_level, topics) or None
 *
 * topics: [(topic, [(partition, fetch_offset, partition_max_bytes), ...]), ...] in request order,
 * topic being the name (str) up to v12 and the 16 bytes of the topic id from v13. max_bytes is
 * 2147483647 before v3 (not taken here), as the schema's default. Fields handle_fetch does not
 * use (session, epochs, log start offsets, rack id) are read past. None: let the reference path
 * have it.
 */
static PyObject *py_kafka_fetch_parse(PyObject *self, PyObject *args)
{
    Py_buffer fb;
    Py_ssize_t offset;
    int version;
    if (!PyArg_ParseTuple(args, "y*ni:kafka_fetch_parse", &fb, &offset, &version))
        return NULL;
    PyObject *topics = NULL, *result = NULL;
    if (version < 4 || version > 16 || offset < 0 || offset > fb.len) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    preader r = {(const uint8_t *)fb.buf + offset, (const uint8_t *)fb.buf + fb.len, version >= 12, 1};
    const int by_id = version >= 13;
    if (version <= 14 && fr_int(&r, 4) != -1)  /* replica_id: a follower's fetch goes to the reference */
        goto decline;
    const int64_t max_wait = fr_int(&r, 4), min_bytes = fr_int(&r, 4), max_bytes = fr_int(&r, 4);
    const int64_t isolation = fr_int(&r, 1);
    if (version >= 7) {
        fr_int(&r, 4); /* session_id */
        fr_int(&r, 4); /* session_epoch */
    }
    /* smallest topic: a 1-byte name length or 16-byte id, a count, (flex) tags */
    int64_t nt = pr_count(&r, by_id ? 17 : (r.flex ? 2 : 6));
    if (!r.ok || !(topics = PyList_New((Py_ssize_t)nt)))
        goto fail;
    const int part_size = 4 + (version >= 9 ? 4 : 0) + 8 + (version >= 12 ? 4 : 0) + (version >= 5 ? 8 : 0) + 4;
    for (int64_t t = 0; t < nt; t++) {
        PyObject *key;
        if (by_id) {
            if (r.e - r.p < 16) {
                r.ok = 0;
                goto fail;
            }
            key = PyBytes_FromStringAndSize((const char *)r.p, 16);
            r.p += 16;
            if (key == NULL)
                goto fail;
        }
        else if (!(key = fr_string(&r)))
            goto fail;
        int64_t np = pr_count(&r, part_size + (r.flex ? 1 : 0));
        PyObject *parts = r.ok ? PyList_New((Py_ssize_t)np) : NULL;
        PyObject *entry = parts ? PyTuple_Pack(2, key, parts) : NULL;
        Py_DECREF(key);
        Py_XDECREF(parts);  /* the tuple holds it */
        if (entry == NULL)
            goto fail;
        PyList_SET_ITEM(topics, (Py_ssize_t)t, entry);
        for (int64_t i = 0; i < np; i++) {
            int64_t partition = fr_int(&r, 4);
            if (version >= 9)
                fr_int(&r, 4); /* current_leader_epoch */
            int64_t fetch_offset = fr_int(&r, 8);
            if (version >= 12)
                fr_int(&r, 4); /* last_fetched_epoch */
            if (version >= 5)
                fr_int(&r, 8); /* log_start_offset */
            int64_t pmax = fr_int(&r, 4);
            fr_no_tags(&r);
            if (!r.ok)
                goto fail;
            PyObject *p = Py_BuildValue("(iLi)", (int)partition, (long long)fetch_offset, (int)pmax);
            if (p == NULL)
                goto fail;
            PyList_SET_ITEM(parts, (Py_ssize_t)i, p);
        }
        fr_no_tags(&r);
        if (!r.ok)
            goto fail;
    }
    if (version >= 7) {  /* forgotten_topics_data: only fetch sessions send any (declined: session 0) */
        int64_t nf = pr_count(&r, 1);
        if (!r.ok || nf != 0)
            goto fail;
    }
    if (version >= 11) {  /* rack_id: read past; a non-ASCII one is left to the reference's decoder */
        int64_t n = pr_len(&r, 0);
        if (!r.ok || n < 0)
            goto fail;
        for (int64_t i = 0; i < n; i++)
            if (r.p[i] >= 0x80)
                goto fail;
        r.p += n;
    }
    fr_no_tags(&r);
    if (!r.ok)
        goto fail;
    result = Py_BuildValue("(iiiiO)", (int)max_wait, (int)min_bytes, (int)max_bytes, (int)isolation, topics);
    goto done;
fail:
    if (PyErr_Occurred())  /* out of memory: a real error */
        goto done;
decline:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(topics);
    PyBuffer_Release(&fb);
    return result;
}

static PyObject *s_partition_index, *s_error_code, *s_high_watermark, *s_last_stable_offset, *s_log_start_offset,
    *s_aborted_transactions, *s_preferred_read_replica, *s_records, *s_producer_id, *s_first_offset;

static int intern_fetch_names(void)
{
    if (s_records != NULL)
        return 1;
#define FETCH_NAME(v, s) if (!(v = PyUnicode_InternFromString(s))) return 0;
    FETCH_NAME(s_partition_index, "partition_index")
    FETCH_NAME(s_error_code, "error_code")
    FETCH_NAME(s_high_watermark, "high_watermark")
    FETCH_NAME(s_last_stable_offset, "last_stable_offset")
    FETCH_NAME(s_log_start_offset, "log_start_offset")
    FETCH_NAME(s_aborted_transactions, "aborted_transactions")
    FETCH_NAME(s_preferred_read_replica, "preferred_read_replica")
    FETCH_NAME(s_producer_id, "producer_id")
    FETCH_NAME(s_first_offset, "first_offset")
    FETCH_NAME(s_records, "records")
#undef FETCH_NAME
    return 1;
}

/* A field of an entry dict as an integer (`dflt` when absent, as the encoder's schema default). */
static int fetch_ll(PyObject *d, PyObject *key, long long dflt, long long *out)
{
    PyObject *v = PyDict_GetItemWithError(d, key);
    if (v == NULL) {
        *out = dflt;
        return !PyErr_Occurred();
    }
    *out = PyLong_AsLongLong(v);
    return !(*out == -1 && PyErr_Occurred());
}

/* One PartitionData from its dict (handle_fetch's entry: read_partition or _partition_error). */
static int put_fetch_partition(outbuf *o, PyObject *d, int version, int flex)
{
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "kafka_fetch_response: a partition entry must be a dict");
        return 0;
    }
    long long index, err, hw, lso, start, preferred;
    if (!fetch_ll(d, s_partition_index, 0, &index) || !fetch_ll(d, s_error_code, 0, &err)
        || !fetch_ll(d, s_high_watermark, 0, &hw) || !fetch_ll(d, s_last_stable_offset, -1, &lso)
        || !fetch_ll(d, s_log_start_offset, -1, &start) || !fetch_ll(d, s_preferred_read_replica, -1, &preferred))
        return 0;
    if (!put_be(o, (uint64_t)index, 4) || !put_be(o, (uint64_t)err, 2) || !put_be(o, (uint64_t)hw, 8)
        || !put_be(o, (uint64_t)lso, 8) || (version >= 5 && !put_be(o, (uint64_t)start, 8)))
        return 0;
    PyObject *aborted = PyDict_GetItemWithError(d, s_aborted_transactions);
    if (aborted == NULL && PyErr_Occurred())
        return 0;
    if (aborted == NULL || aborted == Py_None) {
        if (!(flex ? put_uv(o, 0) : put_be(o, 0xFFFFFFFFu, 4)))
            return 0;
    }
    else {
        if (!PyList_Check(aborted)) {
            PyErr_SetString(PyExc_TypeError, "kafka_fetch_response: aborted_transactions must be a list or None");
            return 0;
        }
        Py_ssize_t n = PyList_GET_SIZE(aborted);
        if (!put_count(o, n, flex))
            return 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *a = PyList_GET_ITEM(aborted, i);
            long long pid, first;
            if (!PyDict_Check(a)) {
                PyErr_SetString(PyExc_TypeError, "kafka_fetch_response: an aborted transaction must be a dict");
                return 0;
            }
            if (!fetch_ll(a, s_producer_id, 0, &pid) || !fetch_ll(a, s_first_offset, 0, &first)
                || !put_be(o, (uint64_t)pid, 8) || !put_be(o, (uint64_t)first, 8) || (flex && !put_uv(o, 0)))
                return 0;
        }
    }
    if (version >= 11 && !put_be(o, (uint64_t)preferred, 4))
        return 0;
    PyObject *records = PyDict_GetItemWithError(d, s_records);
    if (records == NULL && PyErr_Occurred())
        return 0;
    if (records == NULL || records == Py_None) {
        if (!(flex ? put_uv(o, 0) : put_be(o, 0xFFFFFFFFu, 4)))
            return 0;
    }
    else {
        Py_buffer rb;
        if (PyObject_GetBuffer(records, &rb, PyBUF_SIMPLE) < 0)
            return 0;
        int ok = (flex ? put_uv(o, (uint64_t)rb.len + 1) : put_be(o, (uint64_t)rb.len, 4)) && put_raw(o, rb.buf, rb.len);
        PyBuffer_Release(&rb);
        if (!ok)
            return 0;
    }
    return !flex || put_uv(o, 0);  /* no diverging_epoch, current_leader, snapshot_id */
}

/*
 * kafka_fetch_response(version, correlation_id, responses, throttle_time_ms, error_code, session_id) -> bytes
 *
 * The FetchResponse frame: its size, the response header (v1 with tags from v12), the body.
 * responses: [(topic, [partition entry dict, ...]), ...], topic being the name (str) up to v12 and
 * the topic id's 16 bytes from v13 (as kafka_fetch_parse gives them); the entry dicts are
 * handle_fetch's. No node_endpoints (v16): a single broker leads every partition it answers for.
 */
static PyObject *py_kafka_fetch_response(PyObject *self, PyObject *args)
{
    int version, correlation_id, throttle, error, session;
    PyObject *responses;
    if (!PyArg_ParseTuple(args, "iiO!iii:kafka_fetch_response", &version, &correlation_id, &PyList_Type, &responses,
                          &throttle, &error, &session))
        return NULL;
    if (version < 4 || version > 16) {
        PyErr_SetString(PyExc_ValueError, "kafka_fetch_response: Fetch v4..v16");
        return NULL;
    }
    if (!intern_fetch_names())
        return NULL;
    const int flex = version >= 12, by_id = version >= 13;
    outbuf o = {0};
    PyObject *result = NULL;
    const Py_ssize_t nt = PyList_GET_SIZE(responses);
    Py_ssize_t cap = 64;
    for (Py_ssize_t t = 0; t < nt; t++) {  /* room for the records up front: one copy of each */
        PyObject *item = PyList_GET_ITEM(responses, t);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 || !PyList_Check(PyTuple_GET_ITEM(item, 1))) {
            PyErr_SetString(PyExc_TypeError, "kafka_fetch_response: responses must be (topic, [entries]) tuples");
            return NULL;
        }
        PyObject *parts = PyTuple_GET_ITEM(item, 1);
        cap += 64 + 80 * PyList_GET_SIZE(parts);
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(parts); i++) {
            PyObject *d = PyList_GET_ITEM(parts, i);
            PyObject *rec = PyDict_Check(d) ? PyDict_GetItem(d, s_records) : NULL;
            if (rec != NULL && PyBytes_Check(rec))
                cap += PyBytes_GET_SIZE(rec);
        }
    }
    if (!out_init(&o, cap) || !put_be(&o, 0, 4) || !put_be(&o, (uint64_t)(uint32_t)correlation_id, 4)
        || (flex && !put_uv(&o, 0)))
        goto done;
    if (!put_be(&o, (uint64_t)(uint32_t)throttle, 4))
        goto done;
    if (version >= 7 && (!put_be(&o, (uint64_t)error, 2) || !put_be(&o, (uint64_t)(uint32_t)session, 4)))
        goto done;
    if (!put_count(&o, nt, flex))
        goto done;
    for (Py_ssize_t t = 0; t < nt; t++) {
        PyObject *item = PyList_GET_ITEM(responses, t);
        PyObject *topic = PyTuple_GET_ITEM(item, 0), *parts = PyTuple_GET_ITEM(item, 1);
        if (by_id) {
            if (!PyBytes_Check(topic) || PyBytes_GET_SIZE(topic) != 16) {
                PyErr_SetString(PyExc_TypeError, "kafka_fetch_response: a topic id must be 16 bytes");
                goto done;
            }
            if (!put_raw(&o, PyBytes_AS_STRING(topic), 16))
                goto done;
        }
        else if (!PyUnicode_Check(topic)) {
            PyErr_SetString(PyExc_TypeError, "kafka_fetch_response: a topic name must be a str");
            goto done;
        }
        else if (!put_pystr(&o, topic, flex))
            goto done;
        const Py_ssize_t np = PyList_GET_SIZE(parts);
        if (!put_count(&o, np, flex))
            goto done;
        for (Py_ssize_t i = 0; i < np; i++)
            if (!put_fetch_partition(&o, PyList_GET_ITEM(parts, i), version, flex))
                goto done;
        if (flex && !put_uv(&o, 0))
            goto done;
    }
    if (flex && !put_uv(&o, 0))
        goto done;
    if (o.len - 4 > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "kafka_fetch_response: response over 2 GiB");
        goto done;
    }
    {
        uint32_t size = (uint32_t)(o.len - 4);
        uint8_t *b = o.buf;
        b[0] = (uint8_t)(size >> 24), b[1] = (uint8_t)(size >> 16), b[2] = (uint8_t)(size >> 8), b[3] = (uint8_t)size;
    }
    result = out_finish(&o);
done:
    Py_XDECREF(o.obj);
    return result;
}

static PyMethodDef fetch_methods[] = {
    {"kafka_fetch_parse", py_kafka_fetch_parse, METH_VARARGS,
     "kafka_fetch_parse(frame, offset, version): a FetchRequest v4..v16 body read, or None (left to the codec)."},
    {"kafka_fetch_response", py_kafka_fetch_response, METH_VARARGS,
     "kafka_fetch_response(version, correlation_id, responses, throttle_time_ms, error_code, session_id): the "
     "FetchResponse frame."},
    {NULL, NULL, 0, NULL},
};

static int rmq_add_fetch_functions(PyObject *m)
{
    return PyModule_AddFunctions(m, fetch_methods);
}
