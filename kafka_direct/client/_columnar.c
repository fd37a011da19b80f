/*
 * Native columnar reader: one consumer of one partition, read into Arrow-layout buffers.
 *
 * librdkafka is loaded at run time (load()) and its functions resolved by name, so the
 * extension needs neither librdkafka's headers nor a link to it: it uses the very library
 * confluent-kafka ships. A Consumer is assign-only (never a group member). consume() takes
 * up to N messages of the partition with the GIL released and writes keys, values,
 * offsets, timestamps, timestamp types and (when asked) headers straight into bytes
 * objects laid out as Arrow buffers, which pyarrow wraps without copying. Every decision
 * about errors, gaps, data loss and stalls is left to the Python caller: consume() only
 * reports what it saw (records, the first error, whether the range's end was passed).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <limits.h>
#include <string.h>

#include "_rdkafka_abi.h"

#define DECLARE(ret, name, args) static ret(*p_##name) args = NULL;
RDKAFKA_FUNCTIONS(DECLARE)
#undef DECLARE

static void *library = NULL;
static PyObject *NativeError = NULL; /* raised with (code, text) */

static PyObject *
raise_kafka(rd_kafka_resp_err_t code, const char *what)
{
    PyObject *args = Py_BuildValue("(is)", (int)code, what ? what : p_rd_kafka_err2str(code));
    if (args != NULL) {
        PyErr_SetObject(NativeError, args);
        Py_DECREF(args);
    }
    return NULL;
}

static PyObject *
columnar_load(PyObject *module, PyObject *arg)
{
    const char *path = PyUnicode_AsUTF8(arg);
    if (path == NULL)
        return NULL;
    if (library == NULL) {
        void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (handle == NULL) {
            PyErr_Format(PyExc_OSError, "cannot load %s: %s", path, dlerror());
            return NULL;
        }
#define RESOLVE(ret, name, args)                                                           \
    *(void **)(&p_##name) = dlsym(handle, #name);                                          \
    if (p_##name == NULL) {                                                                \
        PyErr_Format(PyExc_OSError, "%s has no function %s", path, #name);                 \
        dlclose(handle);                                                                   \
        return NULL;                                                                       \
    }
        RDKAFKA_FUNCTIONS(RESOLVE)
#undef RESOLVE
        if (p_rd_kafka_version() < RDKAFKA_MIN_VERSION) {
            PyErr_Format(PyExc_OSError, "librdkafka %s is older than 1.6.0",
                         p_rd_kafka_version_str());
            dlclose(handle);
            return NULL;
        }
        library = handle;
    }
    return PyUnicode_FromString(p_rd_kafka_version_str());
}

typedef struct {
    PyObject_HEAD
    rd_kafka_t *rk;
    rd_kafka_queue_t *queue;
    char *topic;
    int32_t partition;
    int poll_loop;              /* rd_kafka_consumer_poll instead of the batch call */
    rd_kafka_message_t **msgs;  /* taken from librdkafka, not yet handed out */
    size_t cap, start, end;
} Consumer;

static void
drop_pending(Consumer *self)
{
    for (size_t i = self->start; i < self->end; i++)
        p_rd_kafka_message_destroy(self->msgs[i]);
    self->start = self->end = 0;
}

static int
Consumer_init(Consumer *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"config", "topic", "partition", "poll_loop", NULL};
    PyObject *config;
    const char *topic;
    int partition, poll_loop = 0;
    char errstr[512];

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Osi|p", names, &config, &topic,
                                     &partition, &poll_loop))
        return -1;
    if (library == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "librdkafka is not loaded (call load())");
        return -1;
    }
    if (self->rk != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Consumer already initialised");
        return -1;
    }
    PyObject *items = PySequence_Fast(config, "config must be a sequence of (name, value)");
    if (items == NULL)
        return -1;
    rd_kafka_conf_t *conf = p_rd_kafka_conf_new();
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items); i++) {
        const char *name, *value;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(items, i), "ss", &name, &value)) {
            p_rd_kafka_conf_destroy(conf);
            Py_DECREF(items);
            return -1;
        }
        if (p_rd_kafka_conf_set(conf, name, value, errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
            p_rd_kafka_conf_destroy(conf);
            Py_DECREF(items);
            PyErr_Format(PyExc_ValueError, "%s", errstr);
            return -1;
        }
    }
    Py_DECREF(items);
    rd_kafka_t *rk = p_rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    if (rk == NULL) {
        p_rd_kafka_conf_destroy(conf);
        PyErr_Format(PyExc_ValueError, "cannot create a consumer: %s", errstr);
        return -1;
    }
    p_rd_kafka_poll_set_consumer(rk);
    rd_kafka_queue_t *queue = p_rd_kafka_queue_get_consumer(rk);
    if (queue == NULL) {
        Py_BEGIN_ALLOW_THREADS
        p_rd_kafka_destroy(rk);
        Py_END_ALLOW_THREADS
        PyErr_SetString(PyExc_ValueError, "the consumer has no queue (is group.id set?)");
        return -1;
    }
    self->topic = strdup(topic);
    if (self->topic == NULL) {
        p_rd_kafka_queue_destroy(queue);
        p_rd_kafka_destroy(rk);
        PyErr_NoMemory();
        return -1;
    }
    self->rk = rk;
    self->queue = queue;
    self->partition = partition;
    self->poll_loop = poll_loop;
    return 0;
}

static int
check_open(Consumer *self)
{
    if (self->rk == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the consumer is closed");
        return -1;
    }
    return 0;
}

/*
 * Whether m belongs to another partition than the one this consumer reads: one it read
 * before a retarget() that librdkafka had already queued. (librdkafka drops those when the
 * partition is unassigned; this is the guard that a record never lands in the wrong range.)
 * Runs without the GIL.
 */
static int
foreign(Consumer *self, const rd_kafka_message_t *m)
{
    if (m->rkt == NULL)
        return 0; /* an event of the consumer, not of a partition */
    return m->partition != self->partition ||
           strcmp(p_rd_kafka_topic_name(m->rkt), self->topic) != 0;
}

static rd_kafka_topic_partition_list_t *
one_partition(Consumer *self, int64_t offset)
{
    rd_kafka_topic_partition_list_t *list = p_rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_t *entry =
        p_rd_kafka_topic_partition_list_add(list, self->topic, self->partition);
    entry->offset = offset;
    return list;
}

static PyObject *
Consumer_close(Consumer *self, PyObject *unused)
{
    if (self->rk != NULL) {
        rd_kafka_t *rk = self->rk;
        self->rk = NULL;
        drop_pending(self);
        Py_BEGIN_ALLOW_THREADS
        p_rd_kafka_queue_destroy(self->queue);
        p_rd_kafka_consumer_close(rk);
        p_rd_kafka_destroy(rk);
        Py_END_ALLOW_THREADS
        self->queue = NULL;
    }
    Py_RETURN_NONE;
}

static void
Consumer_dealloc(Consumer *self)
{
    PyObject *done = Consumer_close(self, NULL);
    Py_XDECREF(done);
    free(self->msgs);
    free(self->topic);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* assign(offset): this partition from offset; anything taken before is dropped. */
static PyObject *
Consumer_assign(Consumer *self, PyObject *arg)
{
    long long offset = PyLong_AsLongLong(arg);
    rd_kafka_resp_err_t err;
    if ((offset == -1 && PyErr_Occurred()) || check_open(self) < 0)
        return NULL;
    drop_pending(self);
    rd_kafka_topic_partition_list_t *list = one_partition(self, offset);
    Py_BEGIN_ALLOW_THREADS
    err = p_rd_kafka_assign(self->rk, list);
    Py_END_ALLOW_THREADS
    p_rd_kafka_topic_partition_list_destroy(list);
    if (err)
        return raise_kafka(err, NULL);
    Py_RETURN_NONE;
}

/*
 * retarget(topic, partition): read another partition from now on. The partition read so far
 * is unassigned (what was taken of it is dropped); the next assign() starts the new one.
 */
static PyObject *
Consumer_retarget(Consumer *self, PyObject *args)
{
    const char *topic;
    int partition;
    rd_kafka_resp_err_t err;
    if (!PyArg_ParseTuple(args, "si", &topic, &partition) || check_open(self) < 0)
        return NULL;
    char *copy = strdup(topic);
    if (copy == NULL)
        return PyErr_NoMemory();
    drop_pending(self);
    Py_BEGIN_ALLOW_THREADS
    err = p_rd_kafka_assign(self->rk, NULL);
    Py_END_ALLOW_THREADS
    if (err) {
        free(copy);
        return raise_kafka(err, NULL);
    }
    free(self->topic);
    self->topic = copy;
    self->partition = partition;
    Py_RETURN_NONE;
}

static PyObject *
pause_or_resume(Consumer *self, int pause)
{
    rd_kafka_resp_err_t err;
    if (check_open(self) < 0)
        return NULL;
    rd_kafka_topic_partition_list_t *list = one_partition(self, -1001);
    Py_BEGIN_ALLOW_THREADS
    err = pause ? p_rd_kafka_pause_partitions(self->rk, list)
                : p_rd_kafka_resume_partitions(self->rk, list);
    Py_END_ALLOW_THREADS
    if (!err)
        err = list->elems[0].err;
    p_rd_kafka_topic_partition_list_destroy(list);
    if (err)
        return raise_kafka(err, NULL);
    Py_RETURN_NONE;
}

static PyObject *
Consumer_pause(Consumer *self, PyObject *unused)
{
    return pause_or_resume(self, 1);
}

static PyObject *
Consumer_resume(Consumer *self, PyObject *unused)
{
    return pause_or_resume(self, 0);
}

/* seek(offset, timeout_ms): the assigned partition fetches from offset next. */
static PyObject *
Consumer_seek(Consumer *self, PyObject *args)
{
    long long offset;
    int timeout_ms;
    rd_kafka_error_t *error;
    if (!PyArg_ParseTuple(args, "Li", &offset, &timeout_ms) || check_open(self) < 0)
        return NULL;
    drop_pending(self);
    rd_kafka_topic_partition_list_t *list = one_partition(self, offset);
    Py_BEGIN_ALLOW_THREADS
    error = p_rd_kafka_seek_partitions(self->rk, list, timeout_ms);
    Py_END_ALLOW_THREADS
    rd_kafka_resp_err_t err = list->elems[0].err;
    p_rd_kafka_topic_partition_list_destroy(list);
    if (error != NULL) {
        PyObject *raised = raise_kafka(p_rd_kafka_error_code(error),
                                       p_rd_kafka_error_string(error));
        p_rd_kafka_error_destroy(error);
        return raised;
    }
    if (err)
        return raise_kafka(err, NULL);
    Py_RETURN_NONE;
}

/* position(): the offset the consumer fetches next (-1001 when it has none). */
static PyObject *
Consumer_position(Consumer *self, PyObject *unused)
{
    rd_kafka_resp_err_t err;
    if (check_open(self) < 0)
        return NULL;
    rd_kafka_topic_partition_list_t *list = one_partition(self, -1001);
    err = p_rd_kafka_position(self->rk, list);
    long long offset = list->elems[0].offset;
    p_rd_kafka_topic_partition_list_destroy(list);
    if (err)
        return raise_kafka(err, NULL);
    return PyLong_FromLongLong(offset);
}

/* watermarks(timeout_ms) -> (low, high), asked of the partition's leader. */
static PyObject *
Consumer_watermarks(Consumer *self, PyObject *arg)
{
    int timeout_ms = PyLong_AsLong(arg);
    int64_t low = -1, high = -1;
    rd_kafka_resp_err_t err;
    if ((timeout_ms == -1 && PyErr_Occurred()) || check_open(self) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    err = p_rd_kafka_query_watermark_offsets(self->rk, self->topic, self->partition, &low,
                                             &high, timeout_ms);
    Py_END_ALLOW_THREADS
    if (err)
        return raise_kafka(err, NULL);
    return Py_BuildValue("(LL)", (long long)low, (long long)high);
}

/* Takes up to max messages from librdkafka into self->msgs (GIL released by the caller). */
static ssize_t
fetch(Consumer *self, size_t max, int timeout_ms)
{
    if (!self->poll_loop) {
        /* What is ready now; else wait for one message and take what came with it. Waiting
         * for a full batch would leave the fetcher idle while the queue fills. */
        ssize_t ready = p_rd_kafka_consume_batch_queue(self->queue, 0, self->msgs, max);
        if (ready != 0 || max == 1)
            return ready != 0 ? ready
                              : p_rd_kafka_consume_batch_queue(self->queue, timeout_ms,
                                                               self->msgs, 1);
        ready = p_rd_kafka_consume_batch_queue(self->queue, timeout_ms, self->msgs, 1);
        if (ready <= 0)
            return ready;
        ssize_t more = p_rd_kafka_consume_batch_queue(self->queue, 0, self->msgs + 1,
                                                      max - 1);
        return more < 0 ? ready : ready + more;
    }
    size_t count = 0;
    while (count < max) {
        rd_kafka_message_t *m = p_rd_kafka_consumer_poll(self->rk, count ? 0 : timeout_ms);
        if (m == NULL)
            break;
        self->msgs[count++] = m;
    }
    return (ssize_t)count;
}

static PyObject *
new_bytes(Py_ssize_t size, int zero)
{
    PyObject *bytes = PyBytes_FromStringAndSize(NULL, size);
    if (bytes != NULL && zero)
        memset(PyBytes_AS_STRING(bytes), 0, size);
    return bytes;
}

#define SET_BIT(bits, i) ((bits)[(i) >> 3] |= (uint8_t)(1u << ((i) & 7)))
#define BITMAP_SIZE(n) ((Py_ssize_t)(((n) + 7) / 8))

/* consume()'s columns: which of the copied columns a read builds. */
enum { WANT_KEY = 1, WANT_VALUE = 2, WANT_HEADERS = 4 };

enum {
    KEY_OFFSETS, KEY_DATA, KEY_VALID, VALUE_OFFSETS, VALUE_DATA, VALUE_VALID, OFFSETS,
    STAMPS, STAMPS_VALID, TYPES, HEADER_OFFSETS, HEADER_VALID, HKEY_OFFSETS, HKEY_DATA,
    HVALUE_OFFSETS, HVALUE_DATA, HVALUE_VALID, BUFFERS
};

/*
 * consume(max, timeout_ms, position, until, columns, min_ms, max_ms) -> tuple
 *
 * Takes up to max records of the partition, skipping records below position (left from
 * before a seek), stopping at the first record at or past until (the rest is dropped)
 * and at the first error (the messages after it stay for the next call). Returns
 * (count, received, last_offset, reached_until, error, buffers, bad_index, bad_ms):
 * received is whether librdkafka delivered anything at all; error is None or (code,
 * offset, text); buffers is None without records, else the 17 Arrow buffers (bytes; a
 * validity bitmap is None when nothing is null; the key's, the value's and the headers'
 * buffers None unless columns has WANT_KEY, WANT_VALUE, WANT_HEADERS: a column not read
 * is never copied);
 * bad_index is the first record whose timestamp lies outside [min_ms, max_ms], or -1.
 */
static PyObject *
Consumer_consume(Consumer *self, PyObject *args)
{
    Py_ssize_t max_records;
    int timeout_ms, wanted;
    long long position, until, min_ms, max_ms;
    if (!PyArg_ParseTuple(args, "niLLiLL", &max_records, &timeout_ms, &position, &until,
                          &wanted, &min_ms, &max_ms) || check_open(self) < 0)
        return NULL;
    int want_key = (wanted & WANT_KEY) != 0, want_value = (wanted & WANT_VALUE) != 0;
    int want_headers = (wanted & WANT_HEADERS) != 0;
    if (max_records < 1)
        max_records = 1;
    if (self->start == self->end && self->cap < (size_t)max_records) {
        rd_kafka_message_t **grown = realloc(self->msgs, max_records * sizeof *grown);
        if (grown == NULL)
            return PyErr_NoMemory();
        self->msgs = grown;
        self->cap = max_records;
    }

    ssize_t fetched = 0;
    size_t n = 0, i, first, kbytes = 0, vbytes = 0, hcount = 0, hkbytes = 0, hvbytes = 0;
    size_t knulls = 0, vnulls = 0, tnulls = 0, hnulls = 0, hvnulls = 0;
    int reached = 0, received, error_code = 0;
    long long error_offset = -1;
    char error_text[512] = "";

    Py_BEGIN_ALLOW_THREADS
    if (self->start == self->end) {
        fetched = fetch(self, (size_t)max_records, timeout_ms);
        self->start = 0;
        self->end = fetched > 0 ? (size_t)fetched : 0;
    }
    first = self->start;
    received = self->end > self->start;
    for (i = first; i < self->end && n < (size_t)max_records; i++) {
        rd_kafka_message_t *m = self->msgs[i];
        if (foreign(self, m))
            continue;
        if (m->err) {
            if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
                continue;
            error_code = m->err;
            error_offset = m->offset;
            if (m->payload != NULL && m->len > 0)
                snprintf(error_text, sizeof error_text, "%s: %.*s",
                         p_rd_kafka_err2str(m->err), (int)(m->len > 400 ? 400 : m->len),
                         (const char *)m->payload);
            else
                snprintf(error_text, sizeof error_text, "%s", p_rd_kafka_err2str(m->err));
            break;
        }
        if (m->offset < position)
            continue;
        if (m->offset >= until) {
            reached = 1;
            break;
        }
        size_t mhcount = 0, mhk = 0, mhv = 0, mhvnulls = 0;
        if (want_headers) {
            rd_kafka_headers_t *hdrs = NULL;
            if (p_rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
                const char *name;
                const void *value;
                size_t size;
                while (p_rd_kafka_header_get_all(hdrs, mhcount, &name, &value, &size) ==
                       RD_KAFKA_RESP_ERR_NO_ERROR) {
                    mhcount++;
                    mhk += strlen(name);
                    if (value == NULL)
                        mhvnulls++;
                    else
                        mhv += size;
                }
            }
        }
        size_t klen = m->key && want_key ? m->key_len : 0;
        size_t vlen = m->payload && want_value ? m->len : 0;
        if (n > 0 && (kbytes + klen > INT32_MAX || vbytes + vlen > INT32_MAX ||
                      hkbytes + mhk > INT32_MAX || hvbytes + mhv > INT32_MAX ||
                      hcount + mhcount > INT32_MAX))
            break; /* the offsets are int32: the rest waits for the next call */
        kbytes += klen;
        vbytes += vlen;
        knulls += m->key == NULL;
        vnulls += m->payload == NULL;
        hcount += mhcount;
        hkbytes += mhk;
        hvbytes += mhv;
        hvnulls += mhvnulls;
        hnulls += mhcount == 0;
        n++;
    }
    /* Timestamps without a type (kind 0) need a pass of their own. */
    for (size_t j = first; j < i; j++) {
        rd_kafka_message_t *m = self->msgs[j];
        if (!m->err && m->offset >= position && !foreign(self, m)) {
            rd_kafka_timestamp_type_t kind;
            p_rd_kafka_message_timestamp(m, &kind);
            tnulls += kind == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        }
    }
    Py_END_ALLOW_THREADS
    if (fetched < 0)
        return raise_kafka(-1, "rd_kafka_consume_batch_queue failed");
    size_t last = i; /* messages [first, last) are consumed by this call */
    if (error_code)
        last = i + 1;

    PyObject *buffers[BUFFERS] = {NULL};
    int failed = 0;
    if (n > 0) {
        Py_ssize_t sizes[BUFFERS] = {
            [KEY_OFFSETS] = 4 * (n + 1), [KEY_DATA] = kbytes, [VALUE_OFFSETS] = 4 * (n + 1),
            [VALUE_DATA] = vbytes, [OFFSETS] = 8 * n, [STAMPS] = 8 * n, [TYPES] = 4 * n};
        sizes[KEY_VALID] = knulls ? BITMAP_SIZE(n) : -1;
        sizes[VALUE_VALID] = vnulls ? BITMAP_SIZE(n) : -1;
        if (!want_key)
            sizes[KEY_OFFSETS] = sizes[KEY_DATA] = sizes[KEY_VALID] = -1;
        if (!want_value)
            sizes[VALUE_OFFSETS] = sizes[VALUE_DATA] = sizes[VALUE_VALID] = -1;
        sizes[STAMPS_VALID] = tnulls ? BITMAP_SIZE(n) : -1;
        for (int b = HEADER_OFFSETS; b <= HVALUE_VALID; b++)
            sizes[b] = -1;
        if (want_headers) {
            sizes[HEADER_OFFSETS] = 4 * (n + 1);
            sizes[HEADER_VALID] = hnulls ? BITMAP_SIZE(n) : -1;
            sizes[HKEY_OFFSETS] = 4 * (hcount + 1);
            sizes[HKEY_DATA] = hkbytes;
            sizes[HVALUE_OFFSETS] = 4 * (hcount + 1);
            sizes[HVALUE_DATA] = hvbytes;
            sizes[HVALUE_VALID] = hvnulls ? BITMAP_SIZE(hcount) : -1;
        }
        for (int b = 0; b < BUFFERS && !failed; b++) {
            if (sizes[b] < 0)
                continue;
            int bitmap = b == KEY_VALID || b == VALUE_VALID || b == STAMPS_VALID ||
                         b == HEADER_VALID || b == HVALUE_VALID;
            buffers[b] = new_bytes(sizes[b], bitmap);
            failed = buffers[b] == NULL;
        }
    }

    long long bad_index = -1, bad_ms = 0, last_offset = -1;
    if (!failed) {
#define DATA(b, type) (buffers[b] ? (type *)PyBytes_AS_STRING(buffers[b]) : NULL)
        int32_t *koff = DATA(KEY_OFFSETS, int32_t), *voff = DATA(VALUE_OFFSETS, int32_t);
        char *kdata = DATA(KEY_DATA, char), *vdata = DATA(VALUE_DATA, char);
        uint8_t *kvalid = DATA(KEY_VALID, uint8_t), *vvalid = DATA(VALUE_VALID, uint8_t);
        int64_t *offsets = DATA(OFFSETS, int64_t), *stamps = DATA(STAMPS, int64_t);
        uint8_t *tvalid = DATA(STAMPS_VALID, uint8_t);
        int32_t *types = DATA(TYPES, int32_t), *hoff = DATA(HEADER_OFFSETS, int32_t);
        uint8_t *hvalid = DATA(HEADER_VALID, uint8_t), *hvvalid = DATA(HVALUE_VALID, uint8_t);
        int32_t *hkoff = DATA(HKEY_OFFSETS, int32_t), *hvoff = DATA(HVALUE_OFFSETS, int32_t);
        char *hkdata = DATA(HKEY_DATA, char), *hvdata = DATA(HVALUE_DATA, char);
#undef DATA
        Py_BEGIN_ALLOW_THREADS
        size_t row = 0, h = 0;
        int32_t kpos = 0, vpos = 0, hkpos = 0, hvpos = 0;
        if (n > 0) {
            if (koff != NULL)
                koff[0] = 0;
            if (voff != NULL)
                voff[0] = 0;
            if (hoff != NULL)
                hoff[0] = hkoff[0] = hvoff[0] = 0;
        }
        for (size_t j = first; j < i && row < n; j++) {
            rd_kafka_message_t *m = self->msgs[j];
            if (m->err || m->offset < position || foreign(self, m))
                continue;
            if (koff != NULL) {
                if (m->key != NULL) {
                    memcpy(kdata + kpos, m->key, m->key_len);
                    kpos += (int32_t)m->key_len;
                    if (kvalid)
                        SET_BIT(kvalid, row);
                }
                koff[row + 1] = kpos;
            }
            if (voff != NULL) {
                if (m->payload != NULL) {
                    memcpy(vdata + vpos, m->payload, m->len);
                    vpos += (int32_t)m->len;
                    if (vvalid)
                        SET_BIT(vvalid, row);
                }
                voff[row + 1] = vpos;
            }
            offsets[row] = m->offset;
            last_offset = m->offset;
            rd_kafka_timestamp_type_t kind;
            int64_t ms = p_rd_kafka_message_timestamp(m, &kind);
            types[row] = (int32_t)kind - 1;
            if (kind == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE) {
                stamps[row] = 0;
            } else {
                if (tvalid)
                    SET_BIT(tvalid, row);
                if (ms < min_ms || ms > max_ms) {
                    if (bad_index < 0) {
                        bad_index = (long long)row;
                        bad_ms = ms;
                    }
                    stamps[row] = 0;
                } else {
                    stamps[row] = ms * 1000;
                }
            }
            if (hoff != NULL) {
                rd_kafka_headers_t *hdrs = NULL;
                size_t mh = 0;
                if (p_rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
                    const char *name;
                    const void *value;
                    size_t size;
                    while (p_rd_kafka_header_get_all(hdrs, mh, &name, &value, &size) ==
                           RD_KAFKA_RESP_ERR_NO_ERROR) {
                        size_t len = strlen(name);
                        memcpy(hkdata + hkpos, name, len);
                        hkpos += (int32_t)len;
                        hkoff[h + 1] = hkpos;
                        if (value != NULL) {
                            memcpy(hvdata + hvpos, value, size);
                            hvpos += (int32_t)size;
                            if (hvvalid)
                                SET_BIT(hvvalid, h);
                        }
                        hvoff[h + 1] = hvpos;
                        h++;
                        mh++;
                    }
                }
                if (mh > 0 && hvalid)
                    SET_BIT(hvalid, row);
                hoff[row + 1] = (int32_t)h;
            }
            row++;
        }
        Py_END_ALLOW_THREADS
    }

    /* Hand the taken messages back to librdkafka; past the range, the rest too. */
    for (size_t j = first; j < last; j++)
        p_rd_kafka_message_destroy(self->msgs[j]);
    self->start = last;
    if (reached || self->start >= self->end) {
        for (size_t j = self->start; j < self->end; j++)
            p_rd_kafka_message_destroy(self->msgs[j]);
        self->start = self->end = 0;
    }
    if (failed) {
        for (int b = 0; b < BUFFERS; b++)
            Py_XDECREF(buffers[b]);
        return NULL;
    }

    PyObject *columns = Py_None;
    Py_INCREF(Py_None);
    if (n > 0) {
        Py_DECREF(Py_None);
        columns = PyTuple_New(BUFFERS);
        if (columns == NULL) {
            for (int b = 0; b < BUFFERS; b++)
                Py_XDECREF(buffers[b]);
            return NULL;
        }
        for (int b = 0; b < BUFFERS; b++) {
            PyObject *item = buffers[b] ? buffers[b] : Py_None;
            if (buffers[b] == NULL)
                Py_INCREF(Py_None);
            PyTuple_SET_ITEM(columns, b, item);
        }
    }
    PyObject *error;
    if (error_code)
        error = Py_BuildValue("(iLs)", error_code, error_offset, error_text);
    else {
        error = Py_None;
        Py_INCREF(Py_None);
    }
    if (error == NULL) {
        Py_DECREF(columns);
        return NULL;
    }
    return Py_BuildValue("(nOLONNLL)", (Py_ssize_t)n, received ? Py_True : Py_False,
                         last_offset, reached ? Py_True : Py_False, error, columns,
                         bad_index, bad_ms);
}

static PyMethodDef Consumer_methods[] = {
    {"assign", (PyCFunction)Consumer_assign, METH_O, "Assign the partition from an offset."},
    {"retarget", (PyCFunction)Consumer_retarget, METH_VARARGS,
     "retarget(topic, partition): read another partition (assign() it next)."},
    {"pause", (PyCFunction)Consumer_pause, METH_NOARGS, "Pause fetching the partition."},
    {"resume", (PyCFunction)Consumer_resume, METH_NOARGS, "Resume fetching the partition."},
    {"seek", (PyCFunction)Consumer_seek, METH_VARARGS, "seek(offset, timeout_ms)."},
    {"position", (PyCFunction)Consumer_position, METH_NOARGS, "The next fetch offset."},
    {"watermarks", (PyCFunction)Consumer_watermarks, METH_O, "(low, high) of the log."},
    {"consume", (PyCFunction)Consumer_consume, METH_VARARGS, "Records as Arrow buffers."},
    {"close", (PyCFunction)Consumer_close, METH_NOARGS, "Close the consumer."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ConsumerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafka_direct.client._columnar.Consumer",
    .tp_basicsize = sizeof(Consumer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Consumer(config, topic, partition, poll_loop=False): one partition, assign only.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Consumer_init,
    .tp_dealloc = (destructor)Consumer_dealloc,
    .tp_methods = Consumer_methods,
};

static PyMethodDef module_methods[] = {
    {"load", columnar_load, METH_O, "load(path) -> version: load librdkafka from path."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef columnar_module = {
    PyModuleDef_HEAD_INIT, "_columnar", "Native columnar Kafka reader.", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__columnar(void)
{
    if (PyType_Ready(&ConsumerType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&columnar_module);
    if (module == NULL)
        return NULL;
    NativeError = PyErr_NewException("kafka_direct.client._columnar.NativeError",
                                     PyExc_RuntimeError, NULL);
    Py_INCREF(&ConsumerType);
    if (NativeError == NULL || PyModule_AddObject(module, "Consumer",
                                                  (PyObject *)&ConsumerType) < 0 ||
        PyModule_AddObject(module, "NativeError", NativeError) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(NativeError);
    return module;
}
