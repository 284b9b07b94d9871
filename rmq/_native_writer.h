/* The Kafka listener's response writer: one thread that sends the responses the event loop hands
 * it (kafka_bridge/server.py, _Replies), so the loop does not make the send(2) calls itself.
 *
 * Why (issue 24): under 10k msgs/s from 8 producers and 20 consumers on a 2-core machine, a third
 * of the event loop's samples sat in the send of a response. On loopback a send does the receiver's
 * TCP work and wakes its thread, which then often takes the loop's CPU; the loop was preempted
 * about 200 times per 1,000 records, and every request queued behind it waited. Here the loop
 * copies the response into the connection's queue (a malloc and a memcpy, keeping the GIL) and
 * goes on; this thread, which never takes the GIL, writes each connection's queue with one sendmsg
 * of up to 64 responses, in order, and waits in poll(2) for sockets that would block.
 *
 * A channel owns a dup() of the connection's socket, so the asyncio transport may close its own fd
 * at any time: the responses queued before kafka_writer_close still go out (bounded: a peer that
 * reads nothing for KW_CLOSE_GRACE_MS loses them), then the dup is closed and the peer sees the
 * end of the connection. A send error (reset, broken pipe) drops what is queued and is reported by
 * the channel's next write or pending call as OSError, so the listener closes that connection.
 *
 *   kafka_writer_open(fd) -> channel            dup of fd; starts the thread on first use
 *   kafka_writer_write(channel, data, wake=True) -> int
 *                                                queue bytes or a list of them; bytes now queued
 *   kafka_writer_kick()                          wake the thread for the writes made with wake=False
 *   kafka_writer_pending(channel) -> int         bytes queued and not yet sent
 *   kafka_writer_close(channel)                  send what is queued, then close (idempotent)
 */
#include <pthread.h>
#include <sched.h>
#include <poll.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <time.h>

#define KW_IOV 64                   /* responses per sendmsg */
#define KW_CLOSE_GRACE_MS 10000     /* how long a closed channel's queue may wait for its peer */
#define KW_POLL_MS 100              /* the thread's poll timeout while some channel would block */

typedef struct kw_chunk {
    struct kw_chunk *next;
    size_t len, off;                /* bytes in data; bytes of them already sent */
    char data[];
} kw_chunk;

typedef struct kw_chan {
    struct kw_chan *next_ready;     /* in kw_ready (under kw_lock) */
    int fd;                         /* the dup; -1 once closed */
    int in_ready, blocked, closing, finished;
    int error;                      /* errno of a failed send, 0 while fine */
    int refs;                       /* the Python capsule's and the thread's (until finished) */
    kw_chunk *head, *tail;
    size_t pending;                 /* bytes queued (sent ones subtracted as they go) */
    struct timespec closed_at;
} kw_chan;

static pthread_mutex_t kw_lock = PTHREAD_MUTEX_INITIALIZER;
static kw_chan *kw_ready_head, *kw_ready_tail;   /* channels with new data or a close to do */
static int kw_started, kw_sleeping, kw_wake_fd = -1;

static void kw_free_chunks(kw_chunk *c)
{
    while (c) {
        kw_chunk *n = c->next;
        free(c);
        c = n;
    }
}

static void kw_unref_locked(kw_chan *ch)
{
    if (--ch->refs == 0) {
        kw_free_chunks(ch->head);
        free(ch);
    }
}

/* Under kw_lock: put ch on the ready list unless it is there or waits for POLLOUT; returns 1 when
 * the thread sleeps and must be woken (after the lock is released). */
static int kw_mark_ready_locked(kw_chan *ch, int wake)
{
    if (ch->in_ready || ch->blocked || ch->finished)
        return 0;
    ch->in_ready = 1;
    ch->next_ready = NULL;
    if (kw_ready_tail)
        kw_ready_tail->next_ready = ch;
    else
        kw_ready_head = ch;
    kw_ready_tail = ch;
    if (wake && kw_sleeping) {
        kw_sleeping = 0;
        return 1;
    }
    return 0;
}

static void kw_wake(void)
{
    uint64_t one = 1;
    ssize_t r;
    do {
        r = write(kw_wake_fd, &one, sizeof one);
    } while (r < 0 && errno == EINTR);
}

static long kw_ms_since(const struct timespec *t)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long)((now.tv_sec - t->tv_sec) * 1000 + (now.tv_nsec - t->tv_nsec) / 1000000);
}

/* Thread only: the channel is done (closed and drained, failed, or out of grace): close the dup and
 * drop the thread's reference. */
static void kw_finish(kw_chan *ch)
{
    pthread_mutex_lock(&kw_lock);
    if (ch->in_ready || ch->finished) {  /* on the ready list again: finished when served from there */
        pthread_mutex_unlock(&kw_lock);
        return;
    }
    int fd = ch->fd;
    ch->fd = -1;
    ch->finished = 1;
    ch->blocked = 0;
    kw_free_chunks(ch->head);
    ch->head = ch->tail = NULL;
    ch->pending = 0;
    kw_unref_locked(ch);
    pthread_mutex_unlock(&kw_lock);
    if (fd >= 0)
        close(fd);
}

/* Thread only: write what ch holds. Returns 1 when the socket would block (ch is then marked
 * blocked and must be polled for POLLOUT), 0 otherwise (sent, failed or finished). */
static int kw_service(kw_chan *ch)
{
    pthread_mutex_lock(&kw_lock);
    ch->in_ready = 0;
    kw_chunk *head = ch->head;
    ch->head = ch->tail = NULL;
    int closing = ch->closing, failed = ch->error != 0;
    if (failed)
        ch->pending = 0;
    pthread_mutex_unlock(&kw_lock);
    if (failed) {
        kw_free_chunks(head);
        if (closing)
            kw_finish(ch);
        return 0;
    }
    while (head) {
        struct iovec iov[KW_IOV];
        int n = 0;
        for (kw_chunk *c = head; c && n < KW_IOV; c = c->next, n++) {
            iov[n].iov_base = c->data + c->off;
            iov[n].iov_len = c->len - c->off;
        }
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = iov;
        msg.msg_iovlen = (size_t)n;
        ssize_t sent;
        do {
            sent = sendmsg(ch->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        } while (sent < 0 && errno == EINTR);
        if (sent < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            int err = errno;
            kw_free_chunks(head);
            pthread_mutex_lock(&kw_lock);
            ch->error = err;
            kw_free_chunks(ch->head);   /* written meanwhile: dropped as well */
            ch->head = ch->tail = NULL;
            ch->pending = 0;
            closing = ch->closing;
            pthread_mutex_unlock(&kw_lock);
            if (closing)
                kw_finish(ch);
            return 0;
        }
        size_t left = (size_t)sent;
        while (head && left >= head->len - head->off) {
            left -= head->len - head->off;
            kw_chunk *next = head->next;
            free(head);
            head = next;
        }
        if (head)
            head->off += left;
        pthread_mutex_lock(&kw_lock);
        ch->pending -= (size_t)sent;
        pthread_mutex_unlock(&kw_lock);
    }
    pthread_mutex_lock(&kw_lock);
    if (head) {                         /* would block: the rest goes first once writable */
        kw_chunk *last = head;
        while (last->next)
            last = last->next;
        last->next = ch->head;
        if (!ch->tail)
            ch->tail = last;
        ch->head = head;
        if (ch->in_ready) {             /* written meanwhile and on the ready list: tried again from there */
            pthread_mutex_unlock(&kw_lock);
            return 0;
        }
        ch->blocked = 1;
        pthread_mutex_unlock(&kw_lock);
        return 1;
    }
    closing = ch->closing;
    int more = ch->head != NULL;
    pthread_mutex_unlock(&kw_lock);
    if (closing && !more)
        kw_finish(ch);
    return 0;
}

static void *kw_thread(void *arg)
{
    (void)arg;
#ifdef SCHED_BATCH
    /* SCHED_BATCH (same nice, no privilege needed): when the event loop wakes this thread it does
     * not preempt the loop on its CPU; it runs on an idle CPU or at the next scheduler tick. A
     * wake-up preemption per kick put a tenth of the loop's samples in the kick's write(2). */
    struct sched_param sp;
    memset(&sp, 0, sizeof sp);
    (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
#endif
    (void)pthread_setname_np(pthread_self(), "KafkaWriter");
    kw_chan **blocked = NULL;
    size_t nblocked = 0, cap = 0;
    struct pollfd *fds = NULL;
    size_t fds_cap = 0;
    for (;;) {
        pthread_mutex_lock(&kw_lock);
        kw_chan *list = kw_ready_head;
        kw_ready_head = kw_ready_tail = NULL;
        if (!list)
            kw_sleeping = 1;
        pthread_mutex_unlock(&kw_lock);
        if (list) {
            while (list) {
                kw_chan *next = list->next_ready;
                if (kw_service(list)) {
                    if (nblocked == cap) {
                        size_t ncap = cap ? 2 * cap : 16;
                        kw_chan **nb = realloc(blocked, ncap * sizeof *nb);
                        if (!nb) {          /* no memory: keep it ready and try again later */
                            pthread_mutex_lock(&kw_lock);
                            list->blocked = 0;
                            kw_mark_ready_locked(list, 0);
                            pthread_mutex_unlock(&kw_lock);
                            list = next;
                            continue;
                        }
                        blocked = nb;
                        cap = ncap;
                    }
                    blocked[nblocked++] = list;
                }
                list = next;
            }
            if (!nblocked)
                continue;                   /* look for more before sleeping */
            pthread_mutex_lock(&kw_lock);
            int more = kw_ready_head != NULL;
            if (!more)
                kw_sleeping = 1;
            pthread_mutex_unlock(&kw_lock);
            if (more)
                continue;
        }
        if (fds_cap < nblocked + 1) {
            struct pollfd *nf = realloc(fds, (nblocked + 1) * sizeof *nf);
            if (!nf) {
                usleep(1000);
                continue;
            }
            fds = nf;
            fds_cap = nblocked + 1;
        }
        fds[0].fd = kw_wake_fd;
        fds[0].events = POLLIN;
        fds[0].revents = 0;
        for (size_t i = 0; i < nblocked; i++) {
            fds[i + 1].fd = blocked[i]->fd;
            fds[i + 1].events = POLLOUT;
            fds[i + 1].revents = 0;
        }
        int r = poll(fds, (nfds_t)(nblocked + 1), nblocked ? KW_POLL_MS : -1);
        pthread_mutex_lock(&kw_lock);
        kw_sleeping = 0;
        pthread_mutex_unlock(&kw_lock);
        if (r < 0 && errno != EINTR) {
            usleep(1000);
            continue;
        }
        if (r > 0 && (fds[0].revents & POLLIN)) {
            uint64_t v;
            ssize_t rd = read(kw_wake_fd, &v, sizeof v);
            (void)rd;
        }
        size_t keep = 0;
        for (size_t i = 0; i < nblocked; i++) {
            kw_chan *ch = blocked[i];
            short ev = r > 0 ? fds[i + 1].revents : 0;
            pthread_mutex_lock(&kw_lock);
            int closing = ch->closing;
            pthread_mutex_unlock(&kw_lock);
            if (ev) {                       /* writable, or an error the next send reports */
                pthread_mutex_lock(&kw_lock);
                ch->blocked = 0;
                kw_mark_ready_locked(ch, 0);   /* served at the next turn, in the ready list's order */
                pthread_mutex_unlock(&kw_lock);
            } else if (closing && kw_ms_since(&ch->closed_at) > KW_CLOSE_GRACE_MS) {
                kw_finish(ch);              /* the peer read nothing: what is queued is dropped */
            } else {
                blocked[keep++] = ch;
            }
        }
        nblocked = keep;
    }
    return NULL;
}

static void kw_after_fork_child(void)
{
    /* the thread does not exist in a child: start afresh (channels inherited are not used) */
    pthread_mutex_init(&kw_lock, NULL);
    kw_ready_head = kw_ready_tail = NULL;
    kw_started = 0;
    kw_sleeping = 0;
    if (kw_wake_fd >= 0)
        close(kw_wake_fd);
    kw_wake_fd = -1;
}

/* Under the GIL: the writer thread running (started once per process). */
static int kw_start(void)
{
    if (kw_started)
        return 0;
    static int atfork_done;
    if (!atfork_done) {
        if (pthread_atfork(NULL, NULL, kw_after_fork_child) != 0) {
            PyErr_SetString(PyExc_RuntimeError, "kafka_writer: pthread_atfork failed");
            return -1;
        }
        atfork_done = 1;
    }
    kw_wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (kw_wake_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t tid;
    int rc = pthread_create(&tid, &attr, kw_thread, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        close(kw_wake_fd);
        kw_wake_fd = -1;
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    kw_started = 1;
    return 0;
}

#define KW_CAPSULE "rmq._native.kafka_writer"

/* Under the GIL: mark the channel closing (the thread drains and closes it). */
static void kw_close(kw_chan *ch)
{
    pthread_mutex_lock(&kw_lock);
    int wake = 0;
    if (!ch->closing) {
        ch->closing = 1;
        clock_gettime(CLOCK_MONOTONIC, &ch->closed_at);
        wake = kw_mark_ready_locked(ch, 1);
    }
    pthread_mutex_unlock(&kw_lock);
    if (wake)
        kw_wake();
}

static void kw_capsule_free(PyObject *cap)
{
    kw_chan *ch = PyCapsule_GetPointer(cap, KW_CAPSULE);
    if (!ch)
        return;
    kw_close(ch);
    pthread_mutex_lock(&kw_lock);
    kw_unref_locked(ch);
    pthread_mutex_unlock(&kw_lock);
}

static PyObject *py_kafka_writer_open(PyObject *self, PyObject *args)
{
    int fd;
    if (!PyArg_ParseTuple(args, "i:kafka_writer_open", &fd))
        return NULL;
    if (fd < 0) {
        PyErr_SetString(PyExc_ValueError, "kafka_writer_open: negative file descriptor");
        return NULL;
    }
    if (kw_start() < 0)
        return NULL;
    kw_chan *ch = calloc(1, sizeof *ch);
    if (!ch)
        return PyErr_NoMemory();
    ch->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (ch->fd < 0) {
        free(ch);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    ch->refs = 2;
    PyObject *cap = PyCapsule_New(ch, KW_CAPSULE, kw_capsule_free);
    if (!cap) {
        close(ch->fd);
        free(ch);
    }
    return cap;
}

static kw_chan *kw_arg(PyObject *cap)
{
    return PyCapsule_GetPointer(cap, KW_CAPSULE);   /* sets TypeError/ValueError when not one */
}

/* NULL with OSError set when the channel failed, ValueError when it is closed. */
static kw_chan *kw_usable(PyObject *cap)
{
    kw_chan *ch = kw_arg(cap);
    if (!ch)
        return NULL;
    pthread_mutex_lock(&kw_lock);
    int err = ch->error, closing = ch->closing;
    pthread_mutex_unlock(&kw_lock);
    if (err) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        return NULL;
    }
    if (closing) {
        PyErr_SetString(PyExc_ValueError, "kafka_writer: channel closed");
        return NULL;
    }
    return ch;
}

static PyObject *py_kafka_writer_write(PyObject *self, PyObject *args)
{
    PyObject *cap, *data;
    int wake_now = 1;
    if (!PyArg_ParseTuple(args, "OO|p:kafka_writer_write", &cap, &data, &wake_now))
        return NULL;
    kw_chan *ch = kw_usable(cap);
    if (!ch)
        return NULL;
    /* one chunk holding all the buffers (a list's items concatenated) */
    Py_ssize_t nparts = PyList_Check(data) ? PyList_GET_SIZE(data) : 1;
    size_t total = 0;
    for (Py_ssize_t i = 0; i < nparts; i++) {
        PyObject *part = PyList_Check(data) ? PyList_GET_ITEM(data, i) : data;
        Py_buffer b;
        if (PyObject_GetBuffer(part, &b, PyBUF_SIMPLE) < 0)
            return NULL;
        total += (size_t)b.len;
        PyBuffer_Release(&b);
    }
    if (total == 0) {
        pthread_mutex_lock(&kw_lock);
        size_t pending = ch->pending;
        pthread_mutex_unlock(&kw_lock);
        return PyLong_FromSize_t(pending);
    }
    kw_chunk *c = malloc(sizeof *c + total);
    if (!c)
        return PyErr_NoMemory();
    c->next = NULL;
    c->len = total;
    c->off = 0;
    size_t at = 0;
    for (Py_ssize_t i = 0; i < nparts; i++) {
        PyObject *part = PyList_Check(data) ? PyList_GET_ITEM(data, i) : data;
        Py_buffer b;
        if (PyObject_GetBuffer(part, &b, PyBUF_SIMPLE) < 0) {
            free(c);
            return NULL;
        }
        if (at + (size_t)b.len > total) {   /* a buffer grew since it was measured */
            PyBuffer_Release(&b);
            free(c);
            PyErr_SetString(PyExc_ValueError, "kafka_writer_write: a buffer changed size");
            return NULL;
        }
        memcpy(c->data + at, b.buf, (size_t)b.len);
        at += (size_t)b.len;
        PyBuffer_Release(&b);
    }
    c->len = at;
    pthread_mutex_lock(&kw_lock);
    if (ch->tail)
        ch->tail->next = c;
    else
        ch->head = c;
    ch->tail = c;
    ch->pending += at;
    size_t pending = ch->pending;
    int wake = kw_mark_ready_locked(ch, wake_now);
    pthread_mutex_unlock(&kw_lock);
    if (wake)
        kw_wake();
    return PyLong_FromSize_t(pending);
}

static PyObject *py_kafka_writer_pending(PyObject *self, PyObject *args)
{
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "O:kafka_writer_pending", &cap))
        return NULL;
    kw_chan *ch = kw_arg(cap);
    if (!ch)
        return NULL;
    pthread_mutex_lock(&kw_lock);
    int err = ch->error;
    size_t pending = ch->pending;
    pthread_mutex_unlock(&kw_lock);
    if (err) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromSize_t(pending);
}

static PyObject *py_kafka_writer_close(PyObject *self, PyObject *args)
{
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "O:kafka_writer_close", &cap))
        return NULL;
    kw_chan *ch = kw_arg(cap);
    if (!ch)
        return NULL;
    kw_close(ch);
    Py_RETURN_NONE;
}

static PyObject *py_kafka_writer_kick(PyObject *self, PyObject *unused)
{
    pthread_mutex_lock(&kw_lock);
    int wake = kw_ready_head != NULL && kw_sleeping;
    if (wake)
        kw_sleeping = 0;
    pthread_mutex_unlock(&kw_lock);
    if (wake)
        kw_wake();
    Py_RETURN_NONE;
}

static PyMethodDef writer_methods[] = {
    {"kafka_writer_open", py_kafka_writer_open, METH_VARARGS,
     "kafka_writer_open(fd) -> channel: a dup of the socket fd, written by the writer thread."},
    {"kafka_writer_write", py_kafka_writer_write, METH_VARARGS,
     "kafka_writer_write(channel, data, wake=True): queue bytes (or a list of them, as one write); bytes queued "
     "now. wake=False leaves the thread asleep until kafka_writer_kick."},
    {"kafka_writer_kick", py_kafka_writer_kick, METH_NOARGS,
     "kafka_writer_kick(): wake the writer thread if it sleeps while writes wait."},
    {"kafka_writer_pending", py_kafka_writer_pending, METH_VARARGS,
     "kafka_writer_pending(channel) -> bytes queued and not yet sent (OSError once a send failed)."},
    {"kafka_writer_close", py_kafka_writer_close, METH_VARARGS,
     "kafka_writer_close(channel): send what is queued, then close the dup."},
    {NULL, NULL, 0, NULL},
};

static int rmq_add_writer_functions(PyObject *m)
{
    return PyModule_AddFunctions(m, writer_methods);
}
