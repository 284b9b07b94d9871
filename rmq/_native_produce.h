/*
 * rmq/_native_produce.h: a whole Kafka Produce request in a few C calls (included by rmq/_native.c,
 * whose helpers it uses). The Python twin is kafka_bridge/handlers/produce.py's _produce_local,
 * which stays the reference and handles every request this path declines.
 *
 *   kafka_produce_map       the request body (v3..v11) parsed, and every partition entry that is
 *                           one plain RecordBatch v2 mapped to commitlog units (what
 *                           kafka_batch_to_units does per entry), into one table of entries
 *   produce_append          CommitLog.append_encoded_many for the chosen entries of that table:
 *                           queue offsets from the commitlog's topic queue table, units completed
 *                           in a staging buffer and written with pwrite, consumequeue units made
 *   produce_dispatch        ReputMessageService.dispatch_units_many for them: consumequeue writes,
 *                           arrival notices, the queues' log start offsets, the index keys
 *   kafka_produce_response  the ProduceResponse body from the table (and Python's answers for the
 *                           entries it handled), byte for byte what the generated encoder writes
 *
 * The table is a bytearray of entries (struct pentry below; kafka_bridge.handlers.produce_frame
 * reads it with struct format PENTRY) in request order. Units of all entries are in one buffer;
 * entry i's units are units[units_off : units_off + units_len], its records' consumequeue units go
 * to slots unit_base .. unit_base + count - 1 of the consumequeue buffer, its tag codes (when
 * tags_off >= 0) are tags[tags_off .. tags_off + count - 1] (native int64), its index keys
 * hashes/iunits[keys_off .. keys_off + n_keys - 1] (native int32, the unit numbers counted over the
 * request, as the consumequeue slots).
 */

enum { PKIND_MAPPED = 0, PKIND_PYTHON = 1, PKIND_EMPTY = 2 };

typedef struct {
    int64_t pid, units_off, units_len, rec_off, rec_len;
    int64_t base_offset;  /* result: first queue offset, -1 */
    int64_t log_start;    /* result: the queue's log start offset, -1 */
    int32_t partition, kind, seq, count, max_size, tags_off, keys_off, n_keys, unit_base, topic;
    int16_t epoch, error;
    int32_t pad;
} pentry;

_Static_assert(sizeof(pentry) == 104, "pentry must match PENTRY in kafka_bridge/handlers/produce_frame.py");

/* ------------------------------------------------------------------ request reader */
typedef struct {
    const uint8_t *p, *e;
    int flex, ok;
} preader;

static inline int64_t pr_int(preader *r, int size)
{
    if (!r->ok || r->e - r->p < size) {
        r->ok = 0;
        return 0;
    }
    int64_t v = size == 2 ? (int16_t)rd16(r->p) : (int32_t)rd32(r->p);
    r->p += size;
    return v;
}

static inline uint64_t pr_uvarint(preader *r)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 35 && r->ok; shift += 7) {
        if (r->p >= r->e)
            break;
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80)
            return v;
    }
    r->ok = 0;
    return 0;
}

/* A length: STRING (int16) / BYTES (int32), or the compact forms (unsigned varint, length + 1).
 * -1 is null; malformed (negative beyond -1, or running past the end) sets ok = 0. */
static inline int64_t pr_len(preader *r, int bytes_field)
{
    int64_t n = r->flex ? (int64_t)pr_uvarint(r) - 1 : pr_int(r, bytes_field ? 4 : 2);
    if (!r->ok || n < -1 || n > r->e - r->p || (!bytes_field && n > 32767)) {
        r->ok = 0;
        return -1;
    }
    return n;
}

static inline int64_t pr_count(preader *r, int min_item)
{
    int64_t n = r->flex ? (int64_t)pr_uvarint(r) - 1 : pr_int(r, 4);
    if (!r->ok || n < 0 || n > (r->e - r->p) / min_item) {
        r->ok = 0;
        return 0;
    }
    return n;
}

static inline void pr_skip_tags(preader *r)
{
    if (!r->flex)
        return;
    uint64_t n = pr_uvarint(r);
    for (uint64_t i = 0; i < n && r->ok; i++) {
        pr_uvarint(r);
        uint64_t size = pr_uvarint(r);
        if (!r->ok || size > (uint64_t)(r->e - r->p)) {
            r->ok = 0;
            return;
        }
        r->p += size;
    }
}

/* ------------------------------------------------------------------ duplicate partitions */
/* Whether some (topic name, partition) appears twice in the request (the Python path then keeps
 * their order of checks and puts): an open-addressing set over the entries. */
typedef struct {
    const uint8_t *name;
    Py_ssize_t len;
    int32_t partition;
    int used;
} pslot;

static int has_duplicates(const pentry *ents, Py_ssize_t n, const uint8_t *const *names, const Py_ssize_t *lens,
                          int *dup)
{
    *dup = 0;
    if (n < 2)
        return 1;
    Py_ssize_t cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
    pslot *set = PyMem_Calloc((size_t)cap, sizeof(pslot));
    if (!set) {
        PyErr_NoMemory();
        return 0;
    }
    for (Py_ssize_t i = 0; i < n && !*dup; i++) {
        const uint8_t *nm = names[ents[i].topic];
        Py_ssize_t nl = lens[ents[i].topic];
        uint32_t h = java_hash_more(0, nm, nl) * 31u + (uint32_t)ents[i].partition * 0x9E3779B1u;
        for (Py_ssize_t k = h & (cap - 1);; k = (k + 1) & (cap - 1)) {
            pslot *s = &set[k];
            if (!s->used) {
                s->used = 1;
                s->name = nm;
                s->len = nl;
                s->partition = ents[i].partition;
                break;
            }
            if (s->partition == ents[i].partition && s->len == nl && memcmp(s->name, nm, (size_t)nl) == 0) {
                *dup = 1;
                break;
            }
        }
    }
    PyMem_Free(set);
    return 1;
}

/*
 * kafka_produce_map(frame, offset, version, born_addr, born_port, store_v6, max_unit_size,
 *                   max_batch_size, schedule_topic)
 *   -> None | (transactional_id, acks, timeout_ms, topics, table, units, tags, hashes, iunits,
 *              duplicates, unit_count)
 *
 * The ProduceRequest body at frame[offset:] (version 3..11; 9+ flexible). topics lists
 * (name, first entry, entries) per topic entry of the request, table holds one pentry per
 * partition entry in request order. An entry is PKIND_MAPPED when its records are exactly one
 * RecordBatch v2 that kafka_batch_to_units maps, PKIND_EMPTY for null or empty records, else
 * PKIND_PYTHON (also every entry of schedule_topic). None when the body is malformed, a topic
 * name is not UTF-8, or a name is longer than 255 bytes: the generic decoder and handler then
 * take the request (and report what is wrong).
 */
static PyObject *py_kafka_produce_map(PyObject *self, PyObject *args)
{
    Py_buffer fb, born, sched;
    Py_ssize_t offset, max_unit, max_batch;
    int version, born_port, store_v6;
    if (!PyArg_ParseTuple(args, "y*niy*ipnny*:kafka_produce_map", &fb, &offset, &version, &born, &born_port,
                          &store_v6, &max_unit, &max_batch, &sched))
        return NULL;
    PyObject *result = NULL, *txn = NULL, *topics = NULL, *table = NULL;
    const uint8_t **names = NULL;
    Py_ssize_t *name_lens = NULL;
    mapout mo;
    int mo_ready = 0;
    pentry *ents = NULL;
    Py_ssize_t n_ents = 0, ents_cap = 0, n_topics = 0, units_total = 0;
    if (version < 3 || version > 11 || offset < 0 || offset > fb.len) {
        PyErr_SetString(PyExc_ValueError, "kafka_produce_map: Produce v3..v11 and an offset inside the frame");
        goto done;
    }
    preader r = {(const uint8_t *)fb.buf + offset, (const uint8_t *)fb.buf + fb.len, version >= 9, 1};
    const uint8_t *base = fb.buf;
    int64_t tl = pr_len(&r, 0);
    if (!r.ok)
        goto declined;
    if (tl >= 0) {
        txn = PyUnicode_DecodeUTF8((const char *)r.p, (Py_ssize_t)tl, NULL);
        if (!txn) {
            PyErr_Clear();
            goto declined;
        }
        r.p += tl;
    } else {
        txn = Py_NewRef(Py_None);
    }
    int acks = (int)pr_int(&r, 2);
    int timeout = (int)pr_int(&r, 4);
    n_topics = pr_count(&r, r.flex ? 3 : 6);
    if (!r.ok)
        goto declined;
    if (!mapout_init(&mo, (fb.len - offset) + 4096))
        goto done;
    mo_ready = 1;
    topics = PyList_New(n_topics);
    names = PyMem_Calloc((size_t)n_topics + 1, sizeof(*names));
    name_lens = PyMem_Calloc((size_t)n_topics + 1, sizeof(*name_lens));
    if (!topics || !names || !name_lens) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t t = 0; t < n_topics; t++) {
        int64_t nl = pr_len(&r, 0);
        if (!r.ok || nl < 0 || nl > 255)
            goto declined;
        const uint8_t *nm = r.p;
        r.p += nl;
        PyObject *name = PyUnicode_DecodeUTF8((const char *)nm, (Py_ssize_t)nl, NULL);
        if (!name) {
            PyErr_Clear();
            goto declined;
        }
        names[t] = nm;
        name_lens[t] = (Py_ssize_t)nl;
        const int scheduled = nl == sched.len && memcmp(nm, sched.buf, (size_t)nl) == 0;
        int64_t np = pr_count(&r, r.flex ? 6 : 8);
        PyObject *item = r.ok ? Py_BuildValue("(Nnn)", name, n_ents, (Py_ssize_t)np) : (Py_DECREF(name), NULL);
        if (!item) {
            if (!r.ok)
                goto declined;
            goto done;
        }
        PyList_SET_ITEM(topics, t, item);
        if (n_ents + np > ents_cap) {
            Py_ssize_t cap = ents_cap ? ents_cap * 2 : 64;
            while (cap < n_ents + np)
                cap *= 2;
            pentry *grown = PyMem_Realloc(ents, (size_t)cap * sizeof(pentry));
            if (!grown) {
                PyErr_NoMemory();
                goto done;
            }
            ents = grown;
            ents_cap = cap;
        }
        for (int64_t k = 0; k < np; k++) {
            pentry *en = &ents[n_ents];
            memset(en, 0, sizeof(*en));
            en->topic = (int32_t)t;
            en->partition = (int32_t)pr_int(&r, 4);
            int64_t rl = pr_len(&r, 1);
            if (!r.ok)
                goto declined;
            en->pid = -1;
            en->epoch = -1;
            en->seq = -1;
            en->base_offset = -1;
            en->log_start = -1;
            en->tags_off = -1;
            en->rec_off = rl >= 0 ? r.p - base : -1;
            en->rec_len = rl;
            en->unit_base = (int32_t)units_total;
            const uint8_t *b = r.p;
            if (rl > 0)
                r.p += rl;
            pr_skip_tags(&r);
            if (!r.ok)
                goto declined;
            n_ents++;
            if (rl <= 0) {
                en->kind = PKIND_EMPTY;
                continue;
            }
            en->kind = PKIND_PYTHON;
            /* kafka_batch_to_units' header checks: one whole plain batch v2 with a valid CRC */
            const Py_ssize_t n = (Py_ssize_t)rl;
            if (scheduled || n < BATCH_HEADER_SIZE || n > max_batch || b[16] != 2
                || (Py_ssize_t)(int32_t)rd32(b + 8) + 12 != n)
                continue;
            const uint16_t attrs = rd16(b + 21);
            const int32_t last_delta = (int32_t)rd32(b + 23), count = (int32_t)rd32(b + 57);
            if ((attrs & (0x07 | 0x10 | 0x20)) || count <= 0 || last_delta != count - 1
                || crc32c_any(0, b + BATCH_CRC_START, (size_t)(n - BATCH_CRC_START)) != rd32(b + 17))
                continue;
            const Py_ssize_t units_before = mo.units.len, tags_before = mo.tags.len, keys_before = mo.hashes.len / 4;
            mapinfo info;
            int rc = map_records(&mo, b, BATCH_HEADER_SIZE, n, count, (long long)rd64(b + 27), (attrs & 0x08) != 0,
                                 (long long)rd64(b + 35), nm, (Py_ssize_t)nl, en->partition, born.buf, born.len,
                                 born_port, store_v6, max_unit, units_total, &info);
            if (rc < 0)
                goto done;
            if (rc == 0)
                continue;
            en->kind = PKIND_MAPPED;
            en->pid = (int64_t)rd64(b + 43);
            en->epoch = (int16_t)rd16(b + 51);
            en->seq = (int32_t)rd32(b + 53);
            en->count = count;
            en->max_size = (int32_t)info.max_size;
            en->units_off = units_before;
            en->units_len = mo.units.len - units_before;
            en->tags_off = info.any_tags ? (int32_t)(tags_before / 8) : -1;
            if (!info.any_tags)
                mo.tags.len = tags_before;
            en->keys_off = (int32_t)keys_before;
            en->n_keys = (int32_t)info.n_keys;
            units_total += count;
        }
        pr_skip_tags(&r);
        if (!r.ok)
            goto declined;
    }
    pr_skip_tags(&r);
    if (!r.ok)
        goto declined;
    int dup;
    if (!has_duplicates(ents, n_ents, names, name_lens, &dup))
        goto done;
    table = PyByteArray_FromStringAndSize((const char *)ents, n_ents * (Py_ssize_t)sizeof(pentry));
    if (!table)
        goto done;
    PyObject *units = out_finish(&mo.units), *tags = out_finish(&mo.tags), *hashes = out_finish(&mo.hashes),
             *iunits = out_finish(&mo.iunits);
    if (units && tags && hashes && iunits)
        result = Py_BuildValue("(OiiOONNNNOn)", txn, acks, timeout, topics, table, units, tags, hashes, iunits,
                               dup ? Py_True : Py_False, units_total);
    else {
        Py_XDECREF(units);
        Py_XDECREF(tags);
        Py_XDECREF(hashes);
        Py_XDECREF(iunits);
    }
    goto done;
declined:
    result = Py_NewRef(Py_None);
done:
    if (mo_ready)
        mapout_release(&mo);
    Py_XDECREF(txn);
    Py_XDECREF(topics);
    Py_XDECREF(table);
    PyMem_Free(names);
    PyMem_Free(name_lens);
    PyMem_Free(ents);
    PyBuffer_Release(&fb);
    PyBuffer_Release(&born);
    PyBuffer_Release(&sched);
    return result;
}

/*
 * produce_select(table, limits) -> (selection, attention, biggest)
 *
 * The checks _produce_local makes of each entry before its put, over the whole table: limits
 * holds one native int32 per topic entry, the topic's writable queue count (-1: unknown or not
 * writable). An entry whose partition is outside [0, limit) gets UNKNOWN_TOPIC_OR_PARTITION (3) in
 * the table. The others go, in order, to `selection` (native int32 entry numbers) when mapped;
 * `attention` lists the entries Python must look at: not mapped (PKIND_PYTHON, PKIND_EMPTY: not in
 * the selection) or from an idempotent producer (producer id >= 0: in the selection, to be checked
 * against the producer state before the put). biggest: the largest units_len in the selection
 * (the staging buffer produce_append needs).
 */
static PyObject *py_produce_select(PyObject *self, PyObject *args)
{
    Py_buffer tb, lb;
    if (!PyArg_ParseTuple(args, "w*y*:produce_select", &tb, &lb))
        return NULL;
    PyObject *result = NULL, *attention = NULL;
    outbuf sel = {0};
    long long biggest = 0;
    const Py_ssize_t n = tb.len / (Py_ssize_t)sizeof(pentry), n_topics = lb.len / 4;
    pentry *ents = tb.buf;
    const int32_t *limits = lb.buf;
    if (tb.len % (Py_ssize_t)sizeof(pentry) || lb.len % 4) {
        PyErr_SetString(PyExc_ValueError, "produce_select: entry table or limits of the wrong size");
        goto done;
    }
    if (!out_init(&sel, n * 4 + 4) || !(attention = PyList_New(0)))
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        pentry *en = &ents[i];
        if (en->topic < 0 || en->topic >= n_topics) {
            PyErr_SetString(PyExc_ValueError, "produce_select: an entry of a topic without a limit");
            goto done;
        }
        const int32_t limit = limits[en->topic];
        if (en->partition < 0 || en->partition >= limit) {
            en->error = 3;  /* UNKNOWN_TOPIC_OR_PARTITION */
            continue;
        }
        const int mapped = en->kind == PKIND_MAPPED;
        if (!mapped || en->pid >= 0) {
            PyObject *k = PyLong_FromSsize_t(i);
            if (!k || PyList_Append(attention, k) < 0) {
                Py_XDECREF(k);
                goto done;
            }
            Py_DECREF(k);
        }
        if (mapped) {
            const int32_t v = (int32_t)i;
            memcpy(sel.buf + sel.len, &v, 4);
            sel.len += 4;
            if (en->units_len > biggest)
                biggest = en->units_len;
        }
    }
    PyObject *s = out_finish(&sel);
    if (s)
        result = Py_BuildValue("(NOL)", s, attention, biggest);
done:
    Py_XDECREF(sel.obj);
    Py_XDECREF(attention);
    PyBuffer_Release(&tb);
    PyBuffer_Release(&lb);
    return result;
}

/* The table argument as entries (a writable buffer whose size is a whole number of them) and the
 * selection as entry numbers inside it: 0 with an exception set otherwise. */
static int table_and_selection(Py_buffer *tb, Py_buffer *sb, pentry **ents, const int32_t **sel, Py_ssize_t *n_sel)
{
    if (tb->len % (Py_ssize_t)sizeof(pentry) || sb->len % 4) {
        PyErr_SetString(PyExc_ValueError, "entry table or selection of the wrong size");
        return 0;
    }
    Py_ssize_t n = tb->len / (Py_ssize_t)sizeof(pentry);
    *ents = tb->buf;
    *sel = sb->buf;
    *n_sel = sb->len / 4;
    for (Py_ssize_t i = 0; i < *n_sel; i++)
        if ((*sel)[i] < 0 || (*sel)[i] >= n) {
            PyErr_SetString(PyExc_ValueError, "selection names an entry outside the table");
            return 0;
        }
    return 1;
}

/* The (topic, queue id) key of an entry, as the store's tables are keyed: a new reference. */
static PyObject *entry_key(PyObject *names, const pentry *en)
{
    PyObject *name = PyList_GetItem(names, en->topic);
    if (!name)
        return NULL;
    PyObject *qid = PyLong_FromLong(en->partition);
    if (!qid)
        return NULL;
    PyObject *key = PyTuple_Pack(2, name, qid);
    Py_DECREF(qid);
    return key;
}

/* Below this many bytes a pwrite keeps the GIL: the kernel's copy takes a few microseconds, and
 * releasing the GIL for it hands it to the flush thread, whose Python then runs until its next
 * fdatasync while this thread waits (in-process, a 32 KiB request took 60 instead of 44 µs). */
#define PWRITE_RELEASE_GIL_BYTES (256 * 1024)

static int pwrite_all(int fd, const uint8_t *p, Py_ssize_t n, long long at)
{
    while (n > 0) {
        ssize_t w;
        if (n >= PWRITE_RELEASE_GIL_BYTES) {
            Py_BEGIN_ALLOW_THREADS
            w = pwrite(fd, p, (size_t)n, (off_t)at);
            Py_END_ALLOW_THREADS
        } else {
            w = pwrite(fd, p, (size_t)n, (off_t)at);
        }
        if (w < 0) {
            if (errno == EINTR)
                continue;
            PyErr_SetFromErrno(PyExc_OSError);
            return 0;
        }
        p += w;
        n -= w;
        at += w;
    }
    return 1;
}

/*
 * produce_append(staging, fd, file_pos, file_from, file_size, table, selection, units, tags, names,
 *                queue_table, store_ts, store_addr, store_port, cq)
 *   -> None | (file_pos after, end physical offset, units appended)
 *
 * CommitLog.append_encoded_many for the PKIND_MAPPED entries of `table` numbered in `selection`
 * (native int32), in that order: each entry's first queue offset is queue_table[(name, queue id)]
 * (0 when absent) and is written to its base_offset; its units are completed (QUEUEOFFSET,
 * PHYSICALOFFSET, STORETIMESTAMP, STOREHOST) in `staging` and written to the file (fd) at
 * file_pos onwards with one pwrite per staging buffer's worth (the GIL released for large
 * writes only); its consumequeue units go to cq[20 * unit_base ...]. queue_table is updated once
 * every write succeeded. None, with nothing done, when the units do not all fit in this file (the
 * caller rolls over one entry at a time). The caller holds the put lock.
 */
static PyObject *py_produce_append(PyObject *self, PyObject *args)
{
    Py_buffer stg, tb, sb, ub, tg, addr, cqb;
    int fd, port;
    Py_ssize_t file_pos, file_size;
    long long file_from, store_ts;
    PyObject *names, *qtable;
    if (!PyArg_ParseTuple(args, "w*inLnw*y*y*y*O!O!Ly*iw*:produce_append", &stg, &fd, &file_pos, &file_from,
                          &file_size, &tb, &sb, &ub, &tg, &PyList_Type, &names, &PyDict_Type, &qtable, &store_ts,
                          &addr, &port, &cqb))
        return NULL;
    PyObject *result = NULL, **keys = NULL;
    pentry *ents;
    const int32_t *sel;
    Py_ssize_t n_sel = 0;
    if (!table_and_selection(&tb, &sb, &ents, &sel, &n_sel))
        goto done;
    if (addr.len != 4 && addr.len != 16) {
        PyErr_SetString(PyExc_ValueError, "store_addr must be 4 or 16 bytes");
        goto done;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n_sel; i++) {
        const pentry *en = &ents[sel[i]];
        if (en->kind != PKIND_MAPPED || en->units_off < 0 || en->units_len > ub.len - en->units_off
            || en->units_len > stg.len || en->unit_base < 0
            || ((Py_ssize_t)en->unit_base + en->count) * CQ_UNIT_SIZE > cqb.len
            || (en->tags_off >= 0 && ((Py_ssize_t)en->tags_off + en->count) * 8 > tg.len)) {
            PyErr_SetString(PyExc_ValueError, "produce_append: an entry that is not mapped or out of its buffers");
            goto done;
        }
        total += en->units_len;
    }
    if (file_pos < 0 || file_pos + total + END_FILE_MIN_BLANK_LENGTH > file_size) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    keys = PyMem_Calloc((size_t)n_sel + 1, sizeof(PyObject *));
    if (!keys) {
        PyErr_NoMemory();
        goto done;
    }
    uint8_t *buf = stg.buf;
    const Py_ssize_t cap = stg.len;
    long long at = file_pos;  /* where buf[0] goes in the file */
    Py_ssize_t off = 0, n_units = 0;
    long long end_phy = file_from + file_pos;
    for (Py_ssize_t i = 0; i < n_sel; i++) {
        pentry *en = &ents[sel[i]];
        if (!(keys[i] = entry_key(names, en)))
            goto done;
        long long qoff = 0;
        PyObject *cur = PyDict_GetItemWithError(qtable, keys[i]);
        if (cur) {
            qoff = PyLong_AsLongLong(cur);
            if (qoff == -1 && PyErr_Occurred())
                goto done;
        } else if (PyErr_Occurred()) {
            goto done;
        }
        if (off + en->units_len > cap) {
            if (!pwrite_all(fd, buf, off, at))
                goto done;
            at += off;
            off = 0;
        }
        en->base_offset = qoff;
        const uint8_t *u = (const uint8_t *)ub.buf + en->units_off, *ue = u + en->units_len;
        for (int32_t k = 0; k < en->count; k++) {
            Py_ssize_t size, born_len;
            if (!unit_shape(u, ue - u, addr.len, "produce_append", &size, &born_len))
                goto done;
            uint8_t *w = buf + off;
            const long long phy = file_from + at + off;
            memcpy(w, u, (size_t)size);
            int64_t code = 0;
            if (en->tags_off >= 0)
                memcpy(&code, (const uint8_t *)tg.buf + ((Py_ssize_t)en->tags_off + k) * 8, 8);
            finish_unit(w, size, born_len, qoff + k, phy, store_ts, &addr, port, code,
                        (uint8_t *)cqb.buf + ((Py_ssize_t)en->unit_base + k) * CQ_UNIT_SIZE);
            off += size;
            u += size;
            end_phy = phy + size;
        }
        n_units += en->count;
    }
    if (off && !pwrite_all(fd, buf, off, at))
        goto done;
    for (Py_ssize_t i = 0; i < n_sel; i++) {
        const pentry *en = &ents[sel[i]];
        PyObject *next = PyLong_FromLongLong(en->base_offset + en->count);
        if (!next || PyDict_SetItem(qtable, keys[i], next) < 0) {
            Py_XDECREF(next);
            goto done;
        }
        Py_DECREF(next);
    }
    result = Py_BuildValue("(LLn)", at + off, end_phy, n_units);
done:
    if (keys) {
        for (Py_ssize_t i = 0; i < n_sel; i++)
            Py_XDECREF(keys[i]);
        PyMem_Free(keys);
    }
    PyBuffer_Release(&stg);
    PyBuffer_Release(&tb);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&ub);
    PyBuffer_Release(&tg);
    PyBuffer_Release(&addr);
    PyBuffer_Release(&cqb);
    return result;
}

/* ------------------------------------------------------------------ consumequeue writes */
static PyObject *s_mfq, *s_files, *s_wrote_position, *s_file_size, *s_file_from_offset, *s_prepared_until,
    *s_prepare_pages, *s_mm, *s_max_physic_offset, *s_min_logic_offset;

static int intern_produce_names(void)
{
#define INTERN(var, text) if (!(var = PyUnicode_InternFromString(text))) return 0;
    INTERN(s_mfq, "mfq")
    INTERN(s_files, "files")
    INTERN(s_wrote_position, "wrote_position")
    INTERN(s_file_size, "file_size")
    INTERN(s_file_from_offset, "file_from_offset")
    INTERN(s_prepared_until, "prepared_until")
    INTERN(s_prepare_pages, "prepare_pages")
    INTERN(s_mm, "mm")
    INTERN(s_max_physic_offset, "max_physic_offset")
    INTERN(s_min_logic_offset, "min_logic_offset")
#undef INTERN
    return 1;
}

static int get_ll(PyObject *o, PyObject *name, long long *out)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (!v)
        return 0;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return !(*out == -1 && PyErr_Occurred());
}

static int set_ll(PyObject *o, PyObject *name, long long value)
{
    PyObject *v = PyLong_FromLongLong(value);
    if (!v)
        return 0;
    int rc = PyObject_SetAttr(o, name, v);
    Py_DECREF(v);
    return rc == 0;
}

/* The consumequeue's list of files (a new reference), or NULL. */
static PyObject *cq_files(PyObject *cq)
{
    PyObject *mfq = PyObject_GetAttr(cq, s_mfq);
    if (!mfq)
        return NULL;
    PyObject *files = PyObject_GetAttr(mfq, s_files);
    Py_DECREF(mfq);
    if (files && !PyList_Check(files)) {
        Py_DECREF(files);
        PyErr_SetString(PyExc_TypeError, "MappedFileQueue.files must be a list");
        return NULL;
    }
    return files;
}

/* ConsumeQueue.put_unit's in-place case for `n` units: 1 written, 0 not this case (nothing
 * written), -1 error. */
static int cq_put_in_place(PyObject *files, long long queue_offset, const uint8_t *units, Py_ssize_t n)
{
    Py_ssize_t nf = PyList_GET_SIZE(files);
    if (nf == 0)
        return 0;
    PyObject *mf = PyList_GET_ITEM(files, nf - 1);
    long long wp, fs, from, prepared;
    if (!get_ll(mf, s_wrote_position, &wp) || !get_ll(mf, s_file_size, &fs) || !get_ll(mf, s_file_from_offset, &from))
        return -1;
    const long long need = (long long)n * CQ_UNIT_SIZE;
    if (wp + need > fs || from + wp != queue_offset * CQ_UNIT_SIZE)
        return 0;
    if (!get_ll(mf, s_prepared_until, &prepared))
        return -1;
    if (wp + need > prepared) {
        PyObject *upto = PyLong_FromLongLong(wp + need);
        PyObject *r = upto ? PyObject_CallMethodOneArg(mf, s_prepare_pages, upto) : NULL;
        Py_XDECREF(upto);
        if (!r)
            return -1;
        Py_DECREF(r);
    }
    PyObject *mm = PyObject_GetAttr(mf, s_mm);
    if (!mm)
        return -1;
    Py_buffer view;
    int rc = PyObject_GetBuffer(mm, &view, PyBUF_WRITABLE);
    Py_DECREF(mm);
    if (rc < 0)
        return -1;
    if (wp + need > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "consumequeue file mapping shorter than its size");
        return -1;
    }
    memcpy((uint8_t *)view.buf + wp, units, (size_t)need);
    PyBuffer_Release(&view);
    return set_ll(mf, s_wrote_position, wp + need) ? 1 : -1;
}

/*
 * produce_dispatch(table, selection, cq, names, consume_queue_table, find_consume_queue, listener)
 *   -> (units dispatched, index hashes, index units)
 *
 * ReputMessageService.dispatch_units_many for the entries produce_append appended: each entry's
 * consumequeue units (cq[20 * unit_base ...]) written to its ConsumeQueue at base_offset (in place
 * as put_unit does, else through ConsumeQueue.put_units), its max_physic_offset raised, the
 * arrival listener told listener(topic, queue id, next offset) (None: no listener), and its
 * log_start set to the queue's min offset. Returns the index keys of those entries (hashes and
 * unit numbers, for IndexService.build_index_hashed with cq), empty when none.
 */
static PyObject *py_produce_dispatch(PyObject *self, PyObject *args)
{
    Py_buffer tb, sb, cqb, hb, ib;
    PyObject *names, *cq_table, *find, *listener;
    if (!PyArg_ParseTuple(args, "w*y*y*O!O!OOy*y*:produce_dispatch", &tb, &sb, &cqb, &PyList_Type, &names,
                          &PyDict_Type, &cq_table, &find, &listener, &hb, &ib))
        return NULL;
    PyObject *result = NULL;
    outbuf kh = {0}, ku = {0};
    pentry *ents;
    const int32_t *sel;
    Py_ssize_t n_sel = 0, n_units = 0;
    if (!table_and_selection(&tb, &sb, &ents, &sel, &n_sel) || !out_init(&kh, 64) || !out_init(&ku, 64))
        goto done;
    for (Py_ssize_t i = 0; i < n_sel; i++) {
        pentry *en = &ents[sel[i]];
        const Py_ssize_t n = en->count;
        if (en->base_offset < 0 || n <= 0 || en->unit_base < 0 || ((Py_ssize_t)en->unit_base + n) * CQ_UNIT_SIZE > cqb.len
            || (en->n_keys && ((Py_ssize_t)en->keys_off + en->n_keys) * 4 > hb.len)) {
            PyErr_SetString(PyExc_ValueError, "produce_dispatch: an entry that was not appended");
            goto done;
        }
        PyObject *name = PyList_GetItem(names, en->topic);
        if (!name)
            goto done;
        PyObject *qid = PyLong_FromLong(en->partition);
        if (!qid)
            goto done;
        PyObject *queues = PyDict_GetItemWithError(cq_table, name), *cq = NULL;
        if (queues && PyDict_Check(queues))
            cq = Py_XNewRef(PyDict_GetItemWithError(queues, qid));
        if (!cq && !PyErr_Occurred())
            cq = PyObject_CallFunctionObjArgs(find, name, qid, NULL);
        if (!cq) {
            Py_DECREF(qid);
            goto done;
        }
        const uint8_t *units = (const uint8_t *)cqb.buf + (Py_ssize_t)en->unit_base * CQ_UNIT_SIZE;
        const uint8_t *last = units + (n - 1) * CQ_UNIT_SIZE;
        const long long end = (long long)rd64(last) + (int32_t)rd32(last + 8);
        PyObject *files = cq_files(cq);
        int rc = files ? cq_put_in_place(files, en->base_offset, units, n) : -1;
        Py_XDECREF(files);
        if (rc == 0) {
            PyObject *r = PyObject_CallMethod(cq, "put_units", "Ly#L", (long long)en->base_offset, (const char *)units,
                                              n * CQ_UNIT_SIZE, end);
            rc = r ? 1 : -1;
            Py_XDECREF(r);
        } else if (rc == 1) {
            long long maxp;
            if (!get_ll(cq, s_max_physic_offset, &maxp) || (end > maxp && !set_ll(cq, s_max_physic_offset, end)))
                rc = -1;
        }
        long long min_logic = 0, first_from = 0;
        if (rc == 1) {
            files = cq_files(cq);
            if (!files || !get_ll(cq, s_min_logic_offset, &min_logic))
                rc = -1;
            else if (PyList_GET_SIZE(files) && !get_ll(PyList_GET_ITEM(files, 0), s_file_from_offset, &first_from))
                rc = -1;
            Py_XDECREF(files);
        }
        Py_DECREF(cq);
        if (rc == 1 && listener != Py_None) {
            PyObject *next = PyLong_FromLongLong(en->base_offset + n);
            PyObject *r = next ? PyObject_CallFunctionObjArgs(listener, name, qid, next, NULL) : NULL;
            Py_XDECREF(next);
            rc = r ? 1 : -1;
            Py_XDECREF(r);
        }
        Py_DECREF(qid);
        if (rc != 1)
            goto done;
        en->log_start = (min_logic > first_from ? min_logic : first_from) / CQ_UNIT_SIZE;
        n_units += n;
        if (en->n_keys) {
            if (out_reserve(&kh, en->n_keys * 4) < 0 || out_reserve(&ku, en->n_keys * 4) < 0)
                goto done;
            memcpy(kh.buf + kh.len, (const uint8_t *)hb.buf + (Py_ssize_t)en->keys_off * 4, (size_t)en->n_keys * 4);
            memcpy(ku.buf + ku.len, (const uint8_t *)ib.buf + (Py_ssize_t)en->keys_off * 4, (size_t)en->n_keys * 4);
            kh.len += en->n_keys * 4;
            ku.len += en->n_keys * 4;
        }
    }
    PyObject *h = out_finish(&kh), *u = out_finish(&ku);
    if (h && u)
        result = Py_BuildValue("(nNN)", n_units, h, u);
    else {
        Py_XDECREF(h);
        Py_XDECREF(u);
    }
done:
    Py_XDECREF(kh.obj);
    Py_XDECREF(ku.obj);
    PyBuffer_Release(&tb);
    PyBuffer_Release(&sb);
    PyBuffer_Release(&cqb);
    PyBuffer_Release(&hb);
    PyBuffer_Release(&ib);
    return result;
}

/* ------------------------------------------------------------------ the response */
static int put_raw(outbuf *o, const void *p, Py_ssize_t n)
{
    if (out_reserve(o, n) < 0)
        return 0;
    memcpy(o->buf + o->len, p, (size_t)n);
    o->len += n;
    return 1;
}

static int put_be(outbuf *o, uint64_t v, int size)
{
    uint8_t b[8];
    for (int i = 0; i < size; i++)
        b[i] = (uint8_t)(v >> (8 * (size - 1 - i)));
    return put_raw(o, b, size);
}

static int put_uv(outbuf *o, uint64_t v)
{
    uint8_t b[10];
    int n = 0;
    while (v >= 0x80) {
        b[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    b[n++] = (uint8_t)v;
    return put_raw(o, b, n);
}

/* An array length or a (nullable) string in the version's form; s == NULL is null. */
static int put_count(outbuf *o, Py_ssize_t n, int flex) { return flex ? put_uv(o, (uint64_t)n + 1) : put_be(o, (uint64_t)n, 4); }

static int put_str(outbuf *o, const char *s, Py_ssize_t n, int flex)
{
    if (s == NULL)
        return flex ? put_uv(o, 0) : put_be(o, 0xFFFF, 2);
    if (!(flex ? put_uv(o, (uint64_t)n + 1) : put_be(o, (uint64_t)n, 2)))
        return 0;
    return put_raw(o, s, n);
}

static int put_pystr(outbuf *o, PyObject *s, int flex)
{
    if (s == NULL || s == Py_None)
        return put_str(o, NULL, 0, flex);
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    return u != NULL && put_str(o, u, n, flex);
}

/* A field of an override dict as an integer (`dflt` when absent). */
static int dict_ll(PyObject *d, const char *key, long long dflt, long long *out)
{
    PyObject *v = PyDict_GetItemString(d, key);
    if (v == NULL) {
        *out = dflt;
        return 1;
    }
    *out = PyLong_AsLongLong(v);
    return !(*out == -1 && PyErr_Occurred());
}

/* One PartitionProduceResponse: from the table, or from Python's dict for it. */
static int put_partition(outbuf *o, const pentry *en, PyObject *d, int version, int flex)
{
    long long index = en->partition, err = en->error, base = en->base_offset, append = -1, start = en->log_start;
    PyObject *record_errors = NULL, *message = NULL;
    if (d != NULL) {
        if (!PyDict_Check(d)) {
            PyErr_SetString(PyExc_TypeError, "a partition response must be a dict");
            return 0;
        }
        if (!dict_ll(d, "index", index, &index) || !dict_ll(d, "error_code", 0, &err)
            || !dict_ll(d, "base_offset", -1, &base) || !dict_ll(d, "log_append_time_ms", -1, &append)
            || !dict_ll(d, "log_start_offset", -1, &start))
            return 0;
        record_errors = PyDict_GetItemString(d, "record_errors");
        message = PyDict_GetItemString(d, "error_message");
    }
    if (!put_be(o, (uint64_t)index, 4) || !put_be(o, (uint64_t)err, 2) || !put_be(o, (uint64_t)base, 8)
        || !put_be(o, (uint64_t)append, 8))
        return 0;
    if (version >= 5 && !put_be(o, (uint64_t)start, 8))
        return 0;
    if (version >= 8) {
        Py_ssize_t n = record_errors != NULL && record_errors != Py_None ? PySequence_Length(record_errors) : 0;
        if (n < 0 || !put_count(o, n, flex))
            return 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *re = PySequence_GetItem(record_errors, i);
            long long bi;
            int ok = re != NULL && PyDict_Check(re) && dict_ll(re, "batch_index", 0, &bi) && put_be(o, (uint64_t)bi, 4)
                     && put_pystr(o, PyDict_GetItemString(re, "batch_index_error_message"), flex)
                     && (!flex || put_uv(o, 0));
            if (re != NULL && !PyDict_Check(re) && !PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "a record error must be a dict");
            Py_XDECREF(re);
            if (!ok)
                return 0;
        }
        if (!put_pystr(o, message, flex))
            return 0;
    }
    return !flex || put_uv(o, 0);
}

/*
 * kafka_produce_response(version, topics, table, answers, throttle_time_ms) -> bytes
 *
 * The ProduceResponse body (after the response header) for the request kafka_produce_map read:
 * one topic response per topic entry, one partition response per entry from the table (error,
 * base_offset, log_start; log_append_time -1, no record errors, no message), except where
 * `answers` (a dict entry number -> PartitionProduceResponse dict, or None) holds Python's.
 */
static PyObject *py_kafka_produce_response(PyObject *self, PyObject *args)
{
    int version, throttle;
    PyObject *topics, *answers;
    Py_buffer tb;
    if (!PyArg_ParseTuple(args, "iO!y*Oi:kafka_produce_response", &version, &PyList_Type, &topics, &tb, &answers,
                          &throttle))
        return NULL;
    PyObject *result = NULL;
    outbuf o = {0};
    const int flex = version >= 9;
    const pentry *ents = tb.buf;
    const Py_ssize_t n_ents = tb.len / (Py_ssize_t)sizeof(pentry);
    if (version < 3 || version > 11 || tb.len % (Py_ssize_t)sizeof(pentry) || (answers != Py_None && !PyDict_Check(answers))) {
        PyErr_SetString(PyExc_ValueError, "kafka_produce_response: Produce v3..v11, an entry table, answers dict or None");
        goto done;
    }
    const Py_ssize_t nt = PyList_GET_SIZE(topics);
    if (!out_init(&o, 64 + n_ents * 48) || !put_count(&o, nt, flex))
        goto done;
    for (Py_ssize_t t = 0; t < nt; t++) {
        PyObject *item = PyList_GET_ITEM(topics, t);
        PyObject *name;
        Py_ssize_t first, n;
        if (!PyArg_ParseTuple(item, "Onn", &name, &first, &n))
            goto done;
        if (first < 0 || n < 0 || first + n > n_ents) {
            PyErr_SetString(PyExc_ValueError, "kafka_produce_response: a topic's entries outside the table");
            goto done;
        }
        if (!put_pystr(&o, name, flex) || !put_count(&o, n, flex))
            goto done;
        for (Py_ssize_t i = first; i < first + n; i++) {
            PyObject *d = NULL;
            if (answers != Py_None && PyDict_GET_SIZE(answers)) {
                PyObject *k = PyLong_FromSsize_t(i);
                if (!k)
                    goto done;
                d = PyDict_GetItemWithError(answers, k);
                Py_DECREF(k);
                if (!d && PyErr_Occurred())
                    goto done;
            }
            if (!put_partition(&o, &ents[i], d, version, flex))
                goto done;
        }
        if (flex && !put_uv(&o, 0))
            goto done;
    }
    if (!put_be(&o, (uint64_t)(uint32_t)throttle, 4) || (flex && !put_uv(&o, 0)))
        goto done;
    result = out_finish(&o);
done:
    Py_XDECREF(o.obj);
    PyBuffer_Release(&tb);
    return result;
}
