/* The per-handle loops of a run's receipt handles (version 4, receipt.py) in C.
 *
 * Every popped message gets a handle and every ack checks one. receipt.py computes the
 * cryptography (one SHAKE-128 stream per block of 32 handles, kept by the codec) and stays
 * the definition of the format; this module only does what it would do per handle with
 * Python objects: pack a body, slice its MAC from the stream, base64url-encode it behind
 * the broker's name, and, on the way back, decode, unpack and compare.
 *
 * `verify` accepts only what receipt.py's check accepts, and answers None for anything
 * else (another layout or broker, a malformed text, a stream not kept, a MAC that does not
 * match): receipt.py then checks that text itself, to say why it is refused. So the errors
 * and their wording live in one place, and this module cannot accept a handle the Python
 * code would refuse.
 *
 * The body layout (struct ">BIIIQQHQ") and its lengths are receipt.py's; the tests compare
 * the two codecs' texts and answers.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define BODY_BYTES 39    /* version, group, topic, queue, offset, ck_id, index, deadline */
#define MAC_BYTES 16
#define PAYLOAD_BYTES 55 /* BODY_BYTES + MAC_BYTES */
#define TEXT_CHARS 74    /* PAYLOAD_BYTES in base64url, unpadded */
#define OFFSET_AT 13
#define INDEX_AT 29
#define RUN_BLOCK 32
#define VERSION_RUN 4
#define MAX_INDEX 0xFFFF

static const char ALPHABET[65] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* By byte value, the 6 bits its base64url character stands for, or -1 for any other byte. */
static int8_t SIXES[256];

static void put_be(unsigned char *at, uint64_t value, int bytes) {
    for (int i = bytes - 1; i >= 0; i--) {
        at[i] = (unsigned char)(value & 0xFF);
        value >>= 8;
    }
}

static uint64_t get_be(const unsigned char *at, int bytes) {
    uint64_t value = 0;
    for (int i = 0; i < bytes; i++) {
        value = (value << 8) | at[i];
    }
    return value;
}

/* The canonical text of a payload: 18 whole groups of 3 bytes, then its last byte in two
 * characters whose unused low 4 bits are zero. */
static void encode_payload(const unsigned char *raw, char *out) {
    int o = 0;
    for (int i = 0; i < PAYLOAD_BYTES - 1; i += 3) {
        uint32_t v = ((uint32_t)raw[i] << 16) | ((uint32_t)raw[i + 1] << 8) | raw[i + 2];
        out[o++] = ALPHABET[v >> 18];
        out[o++] = ALPHABET[(v >> 12) & 63];
        out[o++] = ALPHABET[(v >> 6) & 63];
        out[o++] = ALPHABET[v & 63];
    }
    out[o++] = ALPHABET[raw[PAYLOAD_BYTES - 1] >> 2];
    out[o] = ALPHABET[(raw[PAYLOAD_BYTES - 1] & 3) << 4];
}

/* The payload a text spells, or 0 when it is not the one canonical spelling of one: a
 * character outside base64url's alphabet, or unused bits set in the last one. */
static int decode_payload(const unsigned char *text, unsigned char *raw) {
    int8_t sixes[TEXT_CHARS];
    int8_t bad = 0;
    for (int i = 0; i < TEXT_CHARS; i++) {
        sixes[i] = SIXES[text[i]];
        bad |= sixes[i];
    }
    if (bad < 0 || (sixes[TEXT_CHARS - 1] & 15) != 0) {
        return 0;
    }
    int r = 0;
    for (int i = 0; i < TEXT_CHARS - 2; i += 4) {
        uint32_t v = ((uint32_t)sixes[i] << 18) | ((uint32_t)sixes[i + 1] << 12) |
                     ((uint32_t)sixes[i + 2] << 6) | (uint32_t)sixes[i + 3];
        raw[r++] = (unsigned char)(v >> 16);
        raw[r++] = (unsigned char)(v >> 8);
        raw[r++] = (unsigned char)v;
    }
    raw[r] = (unsigned char)((sixes[TEXT_CHARS - 2] << 2) | (sixes[TEXT_CHARS - 1] >> 4));
    return 1;
}

/* A prefix's ASCII characters, or NULL with an exception set. */
static const char *ascii_of(PyObject *text, Py_ssize_t *length, const char *what) {
    if (!PyUnicode_Check(text) || !PyUnicode_IS_ASCII(text)) {
        PyErr_Format(PyExc_TypeError, "%s must be an ASCII str", what);
        return NULL;
    }
    *length = PyUnicode_GET_LENGTH(text);
    return (const char *)PyUnicode_DATA(text);
}

PyDoc_STRVAR(encode_doc,
"encode(prefix, shared, first, count, streams) -> list[str]\n\n"
"The texts of a run's `count` handles, for offsets first, first + 1, ...: each `shared`\n"
"(a packed version 4 body) with its offset and index put in, MACed by its 16-byte slice\n"
"of `streams[index // 32]`, base64url-encoded after `prefix`.");

static PyObject *encode(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "encode takes 5 arguments");
        return NULL;
    }
    Py_ssize_t prefix_chars;
    const char *prefix = ascii_of(args[0], &prefix_chars, "prefix");
    if (prefix == NULL) {
        return NULL;
    }
    if (!PyBytes_Check(args[1]) || PyBytes_GET_SIZE(args[1]) != BODY_BYTES) {
        PyErr_Format(PyExc_ValueError, "shared must be a packed body of %d bytes", BODY_BYTES);
        return NULL;
    }
    const unsigned char *shared = (const unsigned char *)PyBytes_AS_STRING(args[1]);
    unsigned long long first = PyLong_AsUnsignedLongLong(args[2]);
    if (first == (unsigned long long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[3]);
    if (count == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (count < 0) {
        PyErr_SetString(PyExc_ValueError, "count must not be negative");
        return NULL;
    }
    /* Offsets are unsigned 64-bit and indexes 16-bit, as struct packs them. */
    if (count > MAX_INDEX + 1 || (count > 0 && first > UINT64_MAX - (uint64_t)(count - 1))) {
        PyErr_SetString(PyExc_OverflowError, "a run's offset or index does not fit its field");
        return NULL;
    }
    PyObject *streams = args[4];
    if (!PyList_Check(streams) ||
        PyList_GET_SIZE(streams) != (count + RUN_BLOCK - 1) / RUN_BLOCK) {
        PyErr_SetString(PyExc_ValueError, "streams must be a list of one stream a block of 32");
        return NULL;
    }
    PyObject *texts = PyList_New(count);
    if (texts == NULL) {
        return NULL;
    }
    unsigned char payload[PAYLOAD_BYTES];
    memcpy(payload, shared, BODY_BYTES);
    const char *stream = NULL;
    for (Py_ssize_t index = 0; index < count; index++) {
        if (index % RUN_BLOCK == 0) {
            PyObject *block = PyList_GET_ITEM(streams, index / RUN_BLOCK);
            Py_ssize_t in_block = count - index < RUN_BLOCK ? count - index : RUN_BLOCK;
            if (!PyBytes_Check(block) || PyBytes_GET_SIZE(block) < in_block * MAC_BYTES) {
                Py_DECREF(texts);
                PyErr_SetString(PyExc_ValueError, "a block's stream is shorter than its MACs");
                return NULL;
            }
            stream = PyBytes_AS_STRING(block);
        }
        put_be(payload + OFFSET_AT, first + (uint64_t)index, 8);
        put_be(payload + INDEX_AT, (uint64_t)index, 2);
        memcpy(payload + BODY_BYTES, stream + (index % RUN_BLOCK) * MAC_BYTES, MAC_BYTES);
        PyObject *text = PyUnicode_New(prefix_chars + TEXT_CHARS, 127);
        if (text == NULL) {
            Py_DECREF(texts);
            return NULL;
        }
        char *chars = (char *)PyUnicode_DATA(text);
        memcpy(chars, prefix, prefix_chars);
        encode_payload(payload, chars + prefix_chars);
        PyList_SET_ITEM(texts, index, text);
    }
    return texts;
}

/* The handle of one text, a new reference; Py_None (new reference) when this module does
 * not accept it; NULL with an exception set when Python fails (memory). */
static PyObject *verify_one(PyObject *text, const char *prefix, Py_ssize_t prefix_chars,
                            PyObject *streams, PyTypeObject *handle_type) {
    if (!PyUnicode_CheckExact(text) || !PyUnicode_IS_ASCII(text) ||
        PyUnicode_GET_LENGTH(text) != prefix_chars + TEXT_CHARS) {
        Py_RETURN_NONE;
    }
    const unsigned char *chars = (const unsigned char *)PyUnicode_DATA(text);
    unsigned char raw[PAYLOAD_BYTES];
    if (memcmp(chars, prefix, prefix_chars) != 0 || !decode_payload(chars + prefix_chars, raw) ||
        raw[0] != VERSION_RUN) {
        Py_RETURN_NONE;
    }
    uint64_t offset = get_be(raw + OFFSET_AT, 8);
    uint64_t index = get_be(raw + INDEX_AT, 2);
    if (offset < index) {
        Py_RETURN_NONE;
    }
    PyObject *fields[7] = {
        PyLong_FromUnsignedLong((unsigned long)get_be(raw + 1, 4)),
        PyLong_FromUnsignedLong((unsigned long)get_be(raw + 5, 4)),
        PyLong_FromUnsignedLong((unsigned long)get_be(raw + 9, 4)),
        PyLong_FromUnsignedLongLong(offset),
        PyLong_FromUnsignedLongLong(get_be(raw + 21, 8)),
        PyLong_FromUnsignedLong((unsigned long)index),
        PyLong_FromUnsignedLongLong(get_be(raw + 31, 8)),
    };
    PyObject *first = PyLong_FromUnsignedLongLong(offset - index);
    PyObject *block = PyLong_FromUnsignedLong((unsigned long)(index / RUN_BLOCK));
    PyObject *key = NULL, *handle = NULL;
    for (int i = 0; i < 7; i++) {
        if (fields[i] == NULL) {
            goto done;
        }
    }
    if (first == NULL || block == NULL) {
        goto done;
    }
    /* The run block's key, as receipt.py builds it: (group, topic, queue, first offset,
     * ck_id, block, deadline). */
    key = PyTuple_Pack(7, fields[0], fields[1], fields[2], first, fields[4], block, fields[6]);
    if (key == NULL) {
        goto done;
    }
    PyObject *stream = PyDict_GetItemWithError(streams, key); /* borrowed */
    if (stream == NULL) {
        if (!PyErr_Occurred()) {
            handle = Py_NewRef(Py_None); /* not kept: receipt.py computes it */
        }
        goto done;
    }
    Py_ssize_t at = (Py_ssize_t)(index % RUN_BLOCK) * MAC_BYTES;
    if (!PyBytes_Check(stream) || PyBytes_GET_SIZE(stream) < at + MAC_BYTES) {
        handle = Py_NewRef(Py_None);
        goto done;
    }
    /* In constant time, as hmac.compare_digest compares. */
    const unsigned char *mac = (const unsigned char *)PyBytes_AS_STRING(stream) + at;
    unsigned char differ = 0;
    for (int i = 0; i < MAC_BYTES; i++) {
        differ |= (unsigned char)(mac[i] ^ raw[BODY_BYTES + i]);
    }
    if (differ) {
        handle = Py_NewRef(Py_None);
        goto done;
    }
    /* What tuple.__new__(handle_type, fields) builds, without the call. */
    handle = handle_type->tp_alloc(handle_type, 7);
    if (handle == NULL) {
        goto done;
    }
    for (int i = 0; i < 7; i++) {
        PyTuple_SET_ITEM(handle, i, fields[i]);
        fields[i] = NULL; /* the handle owns it now */
    }
done:
    for (int i = 0; i < 7; i++) {
        Py_XDECREF(fields[i]);
    }
    Py_XDECREF(first);
    Py_XDECREF(block);
    Py_XDECREF(key);
    return handle;
}

PyDoc_STRVAR(verify_doc,
"verify(texts, prefix, streams, handle_type) -> list[handle_type | None]\n\n"
"Each text's handle when it is a version 4 handle after `prefix` whose MAC is its slice\n"
"of a stream kept in `streams` (by its run block's key); None for any other text.");

static PyObject *verify(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "verify takes 4 arguments");
        return NULL;
    }
    Py_ssize_t prefix_chars;
    const char *prefix = ascii_of(args[1], &prefix_chars, "prefix");
    if (prefix == NULL) {
        return NULL;
    }
    if (!PyDict_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "streams must be a dict");
        return NULL;
    }
    if (!PyType_Check(args[3]) || !PyType_IsSubtype((PyTypeObject *)args[3], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "handle_type must be a tuple subclass");
        return NULL;
    }
    PyObject *texts = PySequence_Fast(args[0], "texts must be a sequence");
    if (texts == NULL) {
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(texts);
    PyObject *handles = PyList_New(count);
    if (handles == NULL) {
        Py_DECREF(texts);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *handle = verify_one(PySequence_Fast_GET_ITEM(texts, i), prefix, prefix_chars,
                                      args[2], (PyTypeObject *)args[3]);
        if (handle == NULL) {
            Py_DECREF(handles);
            Py_DECREF(texts);
            return NULL;
        }
        PyList_SET_ITEM(handles, i, handle);
    }
    Py_DECREF(texts);
    return handles;
}

static PyMethodDef methods[] = {
    {"encode", (PyCFunction)(void (*)(void))encode, METH_FASTCALL, encode_doc},
    {"verify", (PyCFunction)(void (*)(void))verify, METH_FASTCALL, verify_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "_receipt_runs",
    "The per-handle loops of a run's receipt handles in C (receipt.py holds the format).",
    0,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__receipt_runs(void) {
    memset(SIXES, -1, sizeof SIXES);
    for (int i = 0; i < 64; i++) {
        SIXES[(unsigned char)ALPHABET[i]] = (int8_t)i;
    }
    return PyModule_Create(&module_def);
}
