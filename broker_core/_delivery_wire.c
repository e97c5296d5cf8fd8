/* One delivery's wire bytes in C: a stored record re-tagged as a ReceivedMessage (record_wire.py).
 *
 * Every popped message is written into its answer by record_wire.append_received_message:
 * a walk over the stored record's fields that copies each delivered one under its new tag,
 * re-encodes the three times as Timestamps, and appends what the pop adds. record_wire.py
 * stays the definition of that mapping; this module does the same walk over raw bytes and
 * returns the delivery as one bytes object, or None for a record it does not accept (not
 * well-formed protobuf, or a number out of the ranges a record's writer produces), which
 * record_wire.py then walks itself, to raise its own error.
 *
 * tests/unit/broker_core/test_record_wire.py compares the two walks on every field, and on
 * malformed records.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* A varint at *pos, no longer than 10 bytes and within 64 bits; 0 when it is not one. */
static int read_varint(const uint8_t *s, Py_ssize_t end, Py_ssize_t *pos, uint64_t *out) {
    uint64_t result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*pos >= end) {
            return 0;
        }
        uint8_t byte = s[(*pos)++];
        if (shift == 63 && (byte & 0x7F) > 1) {
            return 0; /* past 64 bits: left to the Python walk */
        }
        result |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *out = result;
            return 1;
        }
    }
    return 0;
}

static Py_ssize_t varint_size(uint64_t value) {
    Py_ssize_t size = 1;
    while (value >= 0x80) {
        value >>= 7;
        size++;
    }
    return size;
}

static uint8_t *put_varint(uint8_t *at, uint64_t value) {
    while (value >= 0x80) {
        *at++ = (uint8_t)((value & 0x7F) | 0x80);
        value >>= 7;
    }
    *at++ = (uint8_t)value;
    return at;
}

/* A Timestamp field: `key`, its length, then seconds (rounded down) and nanos (never
 * negative), each left out when zero, as timestamp_message writes them. */
static Py_ssize_t timestamp_field(uint8_t key, int64_t ms, uint8_t *out) {
    int64_t seconds = ms / 1000;
    int64_t millis = ms % 1000;
    if (millis < 0) {
        millis += 1000;
        seconds -= 1;
    }
    Py_ssize_t inner = 0;
    if (seconds != 0) {
        inner += 1 + varint_size((uint64_t)seconds);
    }
    if (millis != 0) {
        inner += 1 + varint_size((uint64_t)millis * 1000000u);
    }
    if (out != NULL) {
        uint8_t *at = out;
        *at++ = key;
        *at++ = (uint8_t)inner; /* at most 17 bytes */
        if (seconds != 0) {
            *at++ = 0x08;
            at = put_varint(at, (uint64_t)seconds);
        }
        if (millis != 0) {
            *at++ = 0x10;
            at = put_varint(at, (uint64_t)millis * 1000000u);
        }
    }
    return 2 + inner;
}

/* The delivered fields of the StoredMessage s[0:end], written at `out` (or only counted,
 * when `out` is NULL); -1 when the record is not one this walk accepts. */
static Py_ssize_t transcode(const uint8_t *s, Py_ssize_t end, uint8_t *out) {
    Py_ssize_t pos = 0;
    Py_ssize_t size = 0;
    while (pos < end) {
        uint64_t key;
        if (!read_varint(s, end, &pos, &key)) {
            return -1;
        }
        uint64_t field = key >> 3;
        unsigned wire_type = (unsigned)(key & 7);
        if (wire_type == 2) {
            Py_ssize_t start = pos;
            uint64_t length;
            if (!read_varint(s, end, &pos, &length) || length > (uint64_t)(end - pos)) {
                return -1;
            }
            Py_ssize_t stop = pos + (Py_ssize_t)length;
            /* StoredMessage -> ReceivedMessage, as record_wire._transcode maps them; the
             * copy keeps the length prefix. */
            const char *tag;
            Py_ssize_t tag_size = 1;
            switch (field) {
            case 1: tag = "\x0a"; break;
            case 2: tag = "\x2a"; break;
            case 3: tag = "\x32"; break;
            case 4: tag = "\x3a"; break;
            case 5: tag = "\x42"; break;
            case 12: tag = "\x72"; break;
            case 14: tag = "\x82\x01"; tag_size = 2; break;
            case 16: tag = "\x8a\x01"; tag_size = 2; break;
            default: tag = NULL;
            }
            if (tag != NULL) {
                if (out != NULL) {
                    memcpy(out + size, tag, tag_size);
                    memcpy(out + size + tag_size, s + start, stop - start);
                }
                size += tag_size + (stop - start);
            }
            pos = stop;
        } else if (wire_type == 0) {
            uint64_t value;
            if (!read_varint(s, end, &pos, &value)) {
                return -1;
            }
            uint8_t time_key = 0;
            switch (field) {
            case 6: time_key = 0x4a; break;  /* born_time_ms -> born_time 9 */
            case 7: time_key = 0x52; break;  /* store_time_ms -> store_time 10 */
            case 13: time_key = 0x7a; break; /* deliver_at_ms -> deliver_time 15 */
            case 8: /* delivery_attempt -> 11 */
                if (out != NULL) {
                    out[size] = 0x58;
                    put_varint(out + size + 1, value);
                }
                size += 1 + varint_size(value);
                break;
            default: break;
            }
            if (time_key != 0) {
                size += timestamp_field(time_key, (int64_t)value, out != NULL ? out + size : NULL);
            }
        } else if (wire_type == 1) {
            pos += 8;
        } else if (wire_type == 5) {
            pos += 4;
        } else {
            return -1;
        }
    }
    return pos == end ? size : -1;
}

PyDoc_STRVAR(received_message_doc,
"received_message(stored, field_tag, topic_and_queue, offset, receipt_handle, invisible_until)\n"
"-> bytes | None\n\n"
"record_wire.append_received_message's delivery as one bytes: `field_tag`, the length, the\n"
"record's delivered fields, then what the pop adds. None for a record or offset it leaves\n"
"to record_wire.py.");

static PyObject *received_message(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "received_message takes 6 arguments");
        return NULL;
    }
    for (int i = 0; i < 6; i++) {
        if (i != 3 && !PyBytes_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "received_message takes bytes and an int offset");
            return NULL;
        }
    }
    const uint8_t *stored = (const uint8_t *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t stored_size = PyBytes_GET_SIZE(args[0]);
    unsigned long long offset = PyLong_AsUnsignedLongLong(args[3]);
    if (offset == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            return NULL;
        }
        PyErr_Clear(); /* negative or past 64 bits: record_wire.py says what it does */
        Py_RETURN_NONE;
    }
    Py_ssize_t fields = transcode(stored, stored_size, NULL);
    if (fields < 0) {
        Py_RETURN_NONE;
    }
    Py_ssize_t tag_size = PyBytes_GET_SIZE(args[1]);
    Py_ssize_t shared_size = PyBytes_GET_SIZE(args[2]);
    Py_ssize_t handle_size = PyBytes_GET_SIZE(args[4]);
    Py_ssize_t until_size = PyBytes_GET_SIZE(args[5]);
    Py_ssize_t inner = fields + shared_size + (offset ? 1 + varint_size(offset) : 0) + 1 +
                       varint_size((uint64_t)handle_size) + handle_size + until_size;
    PyObject *wire =
        PyBytes_FromStringAndSize(NULL, tag_size + varint_size((uint64_t)inner) + inner);
    if (wire == NULL) {
        return NULL;
    }
    uint8_t *at = (uint8_t *)PyBytes_AS_STRING(wire);
    memcpy(at, PyBytes_AS_STRING(args[1]), tag_size);
    at = put_varint(at + tag_size, (uint64_t)inner);
    transcode(stored, stored_size, at);
    at += fields;
    memcpy(at, PyBytes_AS_STRING(args[2]), shared_size);
    at += shared_size;
    if (offset) {
        *at++ = 0x20; /* offset 4 */
        at = put_varint(at, offset);
    }
    *at++ = 0x62; /* receipt_handle 12 */
    at = put_varint(at, (uint64_t)handle_size);
    memcpy(at, PyBytes_AS_STRING(args[4]), handle_size);
    at += handle_size;
    memcpy(at, PyBytes_AS_STRING(args[5]), until_size);
    return wire;
}

static PyMethodDef methods[] = {
    {"received_message", (PyCFunction)(void (*)(void))received_message, METH_FASTCALL,
     received_message_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "_delivery_wire",
    "One delivery's wire bytes in C (record_wire.py holds the mapping).",
    0,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__delivery_wire(void) { return PyModule_Create(&module_def); }
