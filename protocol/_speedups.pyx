# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled twins of the hottest pure-Python codec functions (optional; ``./dev build-ext``).

Each function here returns exactly what its pure-Python original returns (tests compare them
byte for byte over generated inputs) and is used only when this extension was built:

- `java_hash`: Java's String.hashCode (storage._hash, protocol.message.tag_hash_code).
- `decode_records`: a pull answer's records (protocol.message.decode_records); any record it
  does not take (IPv6 hosts, a bad record) goes to the pure `decode_record`, which raises
  with the same message as before.
- `decode_payload`: one frame's header word, JSON header and body (protocol.frame); binary
  headers go to the pure decoder.

The pure modules hand their classes and fallbacks over with `bind_*`, so this module
imports nothing of the project's and every object it makes is of the pure modules' classes.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcmp

cdef extern from "Python.h":
    int PyUnicode_KIND(object)
    void* PyUnicode_DATA(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)
    object PyUnicode_DecodeLatin1(const char*, Py_ssize_t, const char*)
    uint32_t PyUnicode_READ(int, void*, Py_ssize_t)

cdef enum:
    MAGIC_CODE = -626843481  # protocol.message.MAGIC_CODE
    MAX_TOPIC_BYTES = 127
    MAX_PROPERTIES_BYTES = 32767
    V6_HOST_BITS = 0x30  # BORNHOST_V6 | STOREHOST_V6
    CACHE_LIMIT = 4096


def java_hash(str text):
    """``String.hashCode`` over UTF-16 code units as a signed 32-bit int ("" -> 0)."""
    cdef uint32_t h = 0
    cdef Py_ssize_t i, n = PyUnicode_GET_LENGTH(text)
    cdef int kind = PyUnicode_KIND(text)
    cdef void* data = PyUnicode_DATA(text)
    cdef uint32_t cp
    for i in range(n):
        cp = PyUnicode_READ(kind, data, i)
        if cp >= 0x10000:
            # A supplementary character is two UTF-16 units in Java: its surrogate pair.
            cp -= 0x10000
            h = h * 31 + (0xD800 + (cp >> 10))
            h = h * 31 + (0xDC00 + (cp & 0x3FF))
        else:
            h = h * 31 + cp
    return <int32_t>h


cdef inline int32_t _i32(const unsigned char* p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8)
                     | <uint32_t>p[3])


cdef inline int64_t _i64(const unsigned char* p) noexcept nogil:
    return <int64_t>((<uint64_t><uint32_t>_i32(p) << 32) | <uint64_t><uint32_t>_i32(p + 4))


cdef object _MessageExt = None
cdef object _decode_record = None
cdef object _string_to_properties = None
cdef object _v4_host = None
cdef dict _hosts = {}
cdef dict _topics = {}


def bind_records(message_ext, decode_record, string_to_properties, v4_host):
    """Hand over the record class, the per-record fallback and the helpers to use."""
    global _MessageExt, _decode_record, _string_to_properties, _v4_host
    _MessageExt = message_ext
    _decode_record = decode_record
    _string_to_properties = string_to_properties
    _v4_host = v4_host


cdef dict _ascii_properties(const unsigned char* p, Py_ssize_t n):
    # ``name\x01value`` pairs joined by ``\x02``; pieces without a name or a value dropped
    # (string_to_properties). Only for all-ASCII bytes, where bytes and characters coincide.
    cdef dict props = {}
    cdef Py_ssize_t start = 0, i, sep
    while start <= n:
        i = start
        sep = -1
        while i < n and p[i] != 2:
            if sep < 0 and p[i] == 1:
                sep = i
            i += 1
        if sep > start and i > sep + 1:
            props[PyUnicode_DecodeLatin1(<const char*>p + start, sep - start, NULL)] = \
                PyUnicode_DecodeLatin1(<const char*>p + sep + 1, i - sep - 1, NULL)
        start = i + 1
    return props


cdef object _host(bytes data, Py_ssize_t at, const unsigned char* p):
    cdef uint64_t key = (<uint64_t><uint32_t>_i32(p + at) << 32) | <uint32_t>_i32(p + at + 4)
    host = _hosts.get(key)
    if host is None:
        if len(_hosts) > CACHE_LIMIT:
            _hosts.clear()
        host = _hosts[key] = _v4_host(data[at : at + 4], _i32(p + at + 4))
    return host


def decode_records(buf):
    """Concatenated records (a pull answer's body) as MessageExt objects."""
    if _MessageExt is None:
        raise RuntimeError("protocol._speedups.decode_records used before bind_records")
    cdef list out = []
    cdef bytes data = buf if isinstance(buf, bytes) else bytes(buf)
    cdef const unsigned char* p = data
    cdef Py_ssize_t pos = 0, end = len(data), record_end, topic_at, props_at, i
    cdef int32_t total, sys_flag, body_len
    cdef Py_ssize_t topic_len, props_len
    cdef bint ascii
    cdef bytes last_raw = None
    last_topic = None
    while pos < end:
        if pos + 88 <= end:
            total = _i32(p + pos)
            sys_flag = _i32(p + pos + 36)
            body_len = _i32(p + pos + 84)
            record_end = pos + total
            topic_at = pos + 88 + body_len
            if (
                _i32(p + pos + 4) == MAGIC_CODE
                and not sys_flag & V6_HOST_BITS
                and total >= 91
                and record_end <= end
                and body_len >= 0
                and topic_at + 3 <= record_end
            ):
                topic_len = p[topic_at]
                props_at = topic_at + 3 + topic_len
                props_len = -1
                if topic_len <= MAX_TOPIC_BYTES and props_at <= record_end:
                    props_len = (p[props_at - 2] << 8) | p[props_at - 1]
                if (
                    0 <= props_len <= MAX_PROPERTIES_BYTES
                    and props_at + props_len == record_end
                ):
                    try:
                        if (
                            last_raw is not None
                            and len(last_raw) == topic_len
                            and memcmp(<const char*>last_raw, p + topic_at + 1, topic_len) == 0
                        ):
                            topic = last_topic
                        else:
                            raw_topic = data[topic_at + 1 : topic_at + 1 + topic_len]
                            topic = _topics.get(raw_topic)
                            if topic is None:
                                if len(_topics) > CACHE_LIMIT:
                                    _topics.clear()
                                topic = _topics[raw_topic] = raw_topic.decode()
                            last_raw, last_topic = raw_topic, topic
                        if props_len:
                            ascii = True
                            for i in range(props_at, record_end):
                                if p[i] >= 0x80:
                                    ascii = False
                                    break
                            if ascii:
                                properties = _ascii_properties(p + props_at, props_len)
                            else:
                                properties = _string_to_properties(
                                    PyUnicode_DecodeUTF8(
                                        <const char*>p + props_at, props_len, NULL
                                    )
                                )
                        else:
                            properties = {}
                    except UnicodeDecodeError:
                        pass  # decode_record below says where
                    else:
                        out.append(_MessageExt(
                            total, _i32(p + pos + 8), _i32(p + pos + 12), _i32(p + pos + 16),
                            _i64(p + pos + 20), _i64(p + pos + 28), sys_flag,
                            _i64(p + pos + 40), _host(data, pos + 48, p), _i64(p + pos + 56),
                            _host(data, pos + 64, p), _i32(p + pos + 72), _i64(p + pos + 76),
                            PyBytes_FromStringAndSize(<const char*>p + pos + 88, body_len),
                            topic, properties,
                        ))
                        pos = record_end
                        continue
        message = _decode_record(data, pos)  # IPv6 hosts, or a bad record: raises with details
        out.append(message)
        pos += message.store_size
    return out


# -- frames -------------------------------------------------------------------------------------

cdef object _RemotingCommand = None
cdef object _FrameError = None
cdef object _coerce = None
cdef object _loads = None
cdef object _JSONDecodeError = None
cdef dict _LANG_BY_NAME = None
cdef dict _LANG_BY_VALUE = None
cdef object _OTHER = None
cdef object _JSON = None
cdef object _decode_binary_header = None
cdef object _new_object = object.__new__


def bind_frame(remoting_command, frame_error, coerce, loads, json_decode_error, lang_by_name,
               lang_by_value, other, json_type, decode_binary_header):
    """Hand over what `decode_payload` builds, raises and falls back to (protocol.frame)."""
    global _RemotingCommand, _FrameError, _coerce, _loads, _JSONDecodeError, _LANG_BY_NAME
    global _LANG_BY_VALUE, _OTHER, _JSON, _decode_binary_header
    _RemotingCommand = remoting_command
    _FrameError = frame_error
    _coerce = coerce
    _loads = loads
    _JSONDecodeError = json_decode_error
    _LANG_BY_NAME = lang_by_name
    _LANG_BY_VALUE = lang_by_value
    _OTHER = other
    _JSON = json_type
    _decode_binary_header = decode_binary_header


cdef object _decode_json_header(object header):
    try:
        doc = _loads(header)
    except _JSONDecodeError as exc:
        raise _FrameError(f"JSON header does not parse: {exc}") from None
    if type(doc) is not dict:
        raise _FrameError("JSON header is not an object")
    cdef dict d = <dict>doc
    code = d.get("code")
    opaque = d.get("opaque", 0)
    flag = d.get("flag", 0)
    version = d.get("version", 0)
    if type(code) is not int or type(opaque) is not int or type(flag) is not int:
        raise _FrameError("JSON header needs integer code, opaque and flag")
    if type(version) is not int:
        version = 0
    language = d.get("language")
    if type(language) is str:
        lang = _LANG_BY_NAME.get(language, _OTHER)
    elif isinstance(language, int):
        lang = _LANG_BY_VALUE.get(language, _OTHER)
    else:
        lang = _OTHER
    remark = d.get("remark")
    if remark is not None and type(remark) is not str:
        remark = str(remark)
    ext = d.get("extFields")
    if ext is None:
        ext_fields = None
    elif type(ext) is dict:
        ext_fields = ext
        for value in (<dict>ext).values():
            if type(value) is not str:
                ext_fields = {
                    k: v if type(v) is str else _coerce(v)
                    for k, v in (<dict>ext).items() if v is not None
                }
                break
    else:
        raise _FrameError("JSON header extFields is not an object")
    command = _new_object(_RemotingCommand)
    command.code = code
    command.opaque = opaque
    command.flag = flag
    command.language = lang
    command.version = version
    command.remark = remark
    command.ext_fields = ext_fields
    command.body = None
    command.serialize_type = _JSON
    return command


def decode_payload(view, Py_ssize_t start, Py_ssize_t length):
    """Header word + header + body at ``view[start:start+length]`` as a RemotingCommand."""
    if _RemotingCommand is None:
        raise RuntimeError("protocol._speedups.decode_payload used before bind_frame")
    cdef const unsigned char[::1] buf = view
    if start < 0 or length < 4 or start + length > buf.shape[0]:
        # The frame decoder only passes whole frames; never read outside the buffer.
        raise ValueError(f"frame at {start} of {length} bytes lies outside the buffer")
    cdef uint32_t word = <uint32_t>_i32(&buf[start])
    cdef uint32_t serialize = word >> 24
    cdef Py_ssize_t header_start = start + 4
    cdef Py_ssize_t body_start = header_start + (word & 0x00FFFFFF)
    cdef Py_ssize_t end = start + length
    if body_start > end:
        raise _FrameError(
            f"header length {word & 0x00FFFFFF} overruns the frame of {length} bytes"
        )
    if serialize == 0:
        command = _decode_json_header(view[header_start:body_start])
    elif serialize == 1:
        command = _decode_binary_header(view[header_start:body_start])
    else:
        raise _FrameError(f"unknown serialize type {serialize} in the header word")
    if end > body_start:
        command.body = PyBytes_FromStringAndSize(<const char*>&buf[body_start], end - body_start)
    return command


# -- batch sends: the body decode (protocol.message._batch) and the in-place record write
# (storage.inline_batch) ------------------------------------------------------------------------

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_WRITABLE, PyBUF_SIMPLE
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from libc.stdint cimport int16_t
from libc.string cimport memcpy

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object, Py_ssize_t*) except NULL

# The CRC the pure code takes (protocol/message/_format.py): zlib-ng's where it is installed.
try:
    from zlib_ng.zlib_ng import crc32 as _crc32
except ImportError:
    from zlib import crc32 as _crc32

cdef object _decode_batch_py = None


def bind_batch(decode_batch_py):
    """Hand over the pure batch decoder (it raises for any body this one does not take)."""
    global _decode_batch_py
    _decode_batch_py = decode_batch_py


def decode_batch_tuples(body):
    """``protocol.message._batch.decode_batch_tuples``: (flag, body, properties) per element;
    any inconsistency goes to the pure decoder, which raises its own error."""
    cdef Py_buffer buf
    PyObject_GetBuffer(body, &buf, PyBUF_SIMPLE)
    cdef const unsigned char* p = <const unsigned char*>buf.buf
    cdef Py_ssize_t pos = 0, end = buf.len, props_at, next_pos
    cdef int32_t total, flag, body_len
    cdef int props_len
    cdef list elements = []
    cdef object props
    try:
        while pos < end:
            if pos + 22 > end:
                return _decode_batch_py(body)
            total = _i32(p + pos)
            flag = _i32(p + pos + 12)
            body_len = _i32(p + pos + 16)
            props_at = pos + 20 + <Py_ssize_t>body_len
            if body_len < 0 or props_at + 2 > end:
                return _decode_batch_py(body)
            props_len = <int16_t>((p[props_at] << 8) | p[props_at + 1])
            if props_len < 0 or <Py_ssize_t>total != 22 + <Py_ssize_t>body_len + props_len:
                return _decode_batch_py(body)
            next_pos = pos + total
            if next_pos > end:
                return _decode_batch_py(body)
            if props_len:
                try:
                    props = PyUnicode_DecodeUTF8(<const char*>p + props_at + 2, props_len, NULL)
                except UnicodeDecodeError:
                    return _decode_batch_py(body)
            else:
                props = ""
            elements.append((flag, PyBytes_FromStringAndSize(<const char*>p + pos + 20, body_len),
                             props))
            pos = next_pos
    finally:
        PyBuffer_Release(&buf)
    return elements


def batch_records_size(list elements, bytes header_props, Py_ssize_t fixed,
                       Py_ssize_t max_message_size, Py_ssize_t max_properties_size):
    """``storage.inline_batch.batch_records_size``: the bytes the batch's records take, or -1
    when one of them is too large or has properties too long."""
    cdef Py_ssize_t total = 0, n, props_len, header_len = len(header_props)
    cdef const char* s
    cdef tuple element
    for element in elements:
        s = PyUnicode_AsUTF8AndSize(element[2], &n)
        props_len = n + header_len
        if header_len and n and s[n - 1] != 2:
            props_len += 1
        n = fixed + len(element[1]) + props_len
        if props_len > max_properties_size or n > max_message_size:
            return -1
        total += n
    return total


cdef inline void _put32(unsigned char* p, int64_t v) noexcept nogil:
    cdef uint32_t u = <uint32_t>v
    p[0] = u >> 24
    p[1] = (u >> 16) & 0xFF
    p[2] = (u >> 8) & 0xFF
    p[3] = u & 0xFF


cdef inline void _put64(unsigned char* p, int64_t v) noexcept nogil:
    _put32(p, <int64_t>(<uint64_t>v >> 32))
    _put32(p + 4, v)


cdef inline Py_ssize_t _find(const char* s, Py_ssize_t start, Py_ssize_t end, char c) noexcept nogil:
    while start < end and s[start] != c:
        start += 1
    return start


def write_batch_records(
    view, Py_ssize_t pos, int64_t base, list elements, bytes header_props, bytes topic_part,
    int32_t queue_id, int32_t sys_flag, int64_t born_timestamp, bytes born, int32_t born_port,
    int64_t now, bytes store, int32_t store_port, int32_t reconsume, int64_t queue_offset,
    bytearray entries, list offsets, object index_keys, str topic,
):
    """``storage.inline_batch.write_batch_records``: each record of the batch written at
    ``view[pos]`` with its append-time fields, its consume-queue entry appended to
    ``entries``, its physical offset to ``offsets`` and (``index_keys`` not None) its KEYS
    and UNIQ_KEY index keys to ``index_keys``; returns the position after the last record."""
    cdef Py_buffer buf
    cdef Py_ssize_t n_elements = len(elements)
    cdef Py_ssize_t entries_at = PyByteArray_GET_SIZE(entries)
    PyByteArray_Resize(entries, entries_at + 20 * n_elements)
    cdef unsigned char* entry = <unsigned char*>PyByteArray_AS_STRING(entries) + entries_at
    PyObject_GetBuffer(view, &buf, PyBUF_WRITABLE)
    cdef unsigned char* p
    cdef unsigned char* out = <unsigned char*>buf.buf
    cdef const char* props
    cdef const char* header = header_props
    cdef Py_ssize_t n_props, header_len = len(header_props), topic_len = len(topic_part)
    cdef Py_ssize_t body_len, props_len, size, at, i, piece, stop, sep
    cdef Py_ssize_t tags_at, tags_end, keys_at, keys_end, uniq_at, uniq_end
    cdef int64_t phys, tags_code
    cdef bint separator
    cdef tuple element
    cdef bytes body
    cdef str prefix = topic + "#"
    try:
        for element in elements:
            body = element[1]
            body_len = len(body)
            props = PyUnicode_AsUTF8AndSize(element[2], &n_props)
            separator = header_len and n_props and props[n_props - 1] != 2
            props_len = n_props + header_len + separator
            size = 88 + body_len + topic_len + 2 + props_len
            if pos + size > buf.len:
                raise ValueError(f"a batch record of {size} bytes at {pos} overruns the file")
            phys = base + pos
            p = out + pos
            _put32(p, size)
            _put32(p + 4, MAGIC_CODE)
            _put32(p + 8, <int64_t>_crc32(body) & 0x7FFFFFFF)
            _put32(p + 12, queue_id)
            _put32(p + 16, <int32_t>element[0])
            _put64(p + 20, queue_offset)
            _put64(p + 28, phys)
            _put32(p + 36, sys_flag)
            _put64(p + 40, born_timestamp)
            memcpy(p + 48, <const char*>born, 4)
            _put32(p + 52, born_port)
            _put64(p + 56, now)
            memcpy(p + 64, <const char*>store, 4)
            _put32(p + 68, store_port)
            _put32(p + 72, reconsume)
            _put64(p + 76, 0)
            _put32(p + 84, body_len)
            at = 88
            memcpy(p + at, <const char*>body, body_len)
            at += body_len
            memcpy(p + at, <const char*>topic_part, topic_len)
            at += topic_len
            p[at] = (props_len >> 8) & 0xFF
            p[at + 1] = props_len & 0xFF
            at += 2
            memcpy(p + at, props, n_props)
            at += n_props
            if separator:
                p[at] = 2
                at += 1
            memcpy(p + at, header, header_len)
            pos += size
            queue_offset += 1
            offsets.append(phys)
            # The dispatch takes TAGS, KEYS and UNIQ_KEY from the element's own properties,
            # read the tolerant Java way (storage._record.split_properties): the last piece
            # with a name, a value and the separator between them wins.
            tags_at = keys_at = uniq_at = -1
            tags_end = keys_end = uniq_end = -1
            piece = 0
            while piece < n_props:
                stop = _find(props, piece, n_props, 2)
                sep = _find(props, piece, stop, 1)
                if sep < stop and sep > piece and sep + 1 < stop:
                    if sep - piece == 4 and memcmp(props + piece, b"TAGS", 4) == 0:
                        tags_at, tags_end = sep + 1, stop
                    elif sep - piece == 4 and memcmp(props + piece, b"KEYS", 4) == 0:
                        keys_at, keys_end = sep + 1, stop
                    elif sep - piece == 8 and memcmp(props + piece, b"UNIQ_KEY", 8) == 0:
                        uniq_at, uniq_end = sep + 1, stop
                piece = stop + 1
            tags_code = 0
            if tags_at >= 0:
                tags_code = java_hash(PyUnicode_DecodeUTF8(props + tags_at, tags_end - tags_at, NULL))
            _put64(entry, phys)
            _put32(entry + 8, size)
            _put64(entry + 12, tags_code)
            entry += 20
            if index_keys is not None:
                if keys_at >= 0:
                    for key in PyUnicode_DecodeUTF8(props + keys_at, keys_end - keys_at,
                                                    NULL).split(" "):
                        if key:
                            index_keys.append((prefix + key, phys))
                if uniq_at >= 0:
                    index_keys.append((prefix + PyUnicode_DecodeUTF8(
                        props + uniq_at, uniq_end - uniq_at, NULL), phys))
    finally:
        PyBuffer_Release(&buf)
    return pos


def put_index_entries(buf, list keys, Py_ssize_t start, Py_ssize_t slots,
                      Py_ssize_t entries_start, int64_t number, int64_t limit, int32_t time_diff,
                      int64_t slot_count, int64_t phy_offset):
    """``storage.index_file.put_index_entries_py``: index entries for ``keys[start:]`` (full
    key, commit-log offset) written into an index file's map until ``number`` reaches
    ``limit``; returns (next position in keys, number, slot count, last commit-log offset)."""
    cdef Py_buffer view
    cdef Py_ssize_t i = start, end = len(keys), slot_pos, at
    cdef int64_t khash, previous
    if slots <= 0:
        raise ZeroDivisionError("an index file needs at least one hash slot")
    PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    cdef unsigned char* p = <unsigned char*>view.buf
    try:
        while i < end and number < limit:
            key, offset = keys[i]
            phy_offset = offset
            i += 1
            khash = java_hash(key)
            if khash < 0:
                khash = 0 if khash == -0x80000000 else -khash
            slot_pos = 40 + (khash % slots) * 4
            at = entries_start + number * 20
            if slot_pos + 4 > view.len or at + 20 > view.len:
                raise ValueError(f"index entry {number} lies past the end of the file")
            previous = _i32(p + slot_pos)
            if previous <= 0 or previous > number:
                previous = 0
                slot_count += 1
            _put32(p + at, khash)
            _put64(p + at + 4, phy_offset)
            _put32(p + at + 12, time_diff)
            _put32(p + at + 16, previous)
            _put32(p + slot_pos, number)
            number += 1
    finally:
        PyBuffer_Release(&view)
    return i, number, slot_count, phy_offset


# -- the send path's header fields (protocol.headers._send_pull.decode_send_fields) ------------

cdef object _SendFields = None
cdef object _send_fields_py = None
cdef object _new_tuple = tuple.__new__
cdef dict _BOOL_WORDS = {"true": True, "false": False}


def bind_send_fields(send_fields, pure):
    """Hand over the `SendFields` class and the pure `decode_send_fields` (the fallback)."""
    global _SendFields, _send_fields_py
    _SendFields = send_fields
    _send_fields_py = pure


cdef inline bint _str_or_none(object value):
    return value is None or type(value) is str


def decode_send_fields(ext_fields):
    """Twin of the pure `decode_send_fields`: V2 keys of plain strings read here, anything
    else (and every error) left to the pure function."""
    if _SendFields is None:
        raise RuntimeError("protocol._speedups.decode_send_fields used before bind_send_fields")
    if type(ext_fields) is not dict or "b" not in <dict>ext_fields:
        return _send_fields_py(ext_fields)
    cdef dict d = <dict>ext_fields
    a = d.get("a")
    b = d.get("b")
    c = d.get("c")
    nums = d.get("d")
    qid = d.get("e")
    sys_flag = d.get("f")
    born = d.get("g")
    flag = d.get("h")
    props = d.get("i")
    reconsume = d.get("j")
    max_reconsume = d.get("l")
    broker_name = d.get("n")
    k = d.get("k", "false")
    m = d.get("m", "false")
    unit_mode = _BOOL_WORDS.get(k) if type(k) is str else None
    batch = _BOOL_WORDS.get(m) if type(m) is str else None
    if (
        type(a) is not str or type(b) is not str or type(c) is not str
        or type(nums) is not str or type(qid) is not str or type(sys_flag) is not str
        or type(born) is not str or type(flag) is not str
        or not _str_or_none(props) or not _str_or_none(reconsume)
        or not _str_or_none(max_reconsume) or not _str_or_none(broker_name)
        or unit_mode is None or batch is None
    ):
        return _send_fields_py(ext_fields)
    try:
        values = (
            a, b, c, int(nums), int(qid), int(sys_flag), int(born), int(flag), props,
            None if reconsume is None else int(reconsume), unit_mode,
            None if max_reconsume is None else int(max_reconsume), batch, broker_name,
        )
    except ValueError:
        return _send_fields_py(ext_fields)
    return _new_tuple(_SendFields, values)


# -- the SYNC_FLUSH flush loop ---------------------------------------------------------------
# Not a codec, but the one place with a compiler: the group commit's fdatasync loop, run by a
# thread that never takes the interpreter lock while it waits or syncs (storage.flush_thread).

from libc.errno cimport errno, EINTR
from libc.stdint cimport int64_t as _req_t

cdef extern from "<unistd.h>" nogil:
    ssize_t _sys_read "read"(int fd, void* buf, size_t count)
    ssize_t _sys_write "write"(int fd, const void* buf, size_t count)
    int _sys_fdatasync "fdatasync"(int fd)

cdef extern from "<time.h>" nogil:
    ctypedef long time_t
    cdef struct timespec:
        time_t tv_sec
        long tv_nsec
    int nanosleep(const timespec* req, timespec* rem)


cdef int _read_exact(int fd, char* buf, size_t n) noexcept nogil:
    """0 once ``n`` bytes were read; -1 on end of file or an error."""
    cdef size_t got = 0
    cdef ssize_t r
    while got < n:
        r = _sys_read(fd, buf + got, n - got)
        if r > 0:
            got += <size_t>r
        elif r < 0 and errno == EINTR:
            continue
        else:
            return -1
    return 0


cdef int _write_all(int fd, const char* buf, size_t n) noexcept nogil:
    cdef size_t put = 0
    cdef ssize_t r
    while put < n:
        r = _sys_write(fd, buf + put, n - put)
        if r > 0:
            put += <size_t>r
        elif r < 0 and errno == EINTR:
            continue
        else:
            return -1
    return 0


def flush_loop(int request_fd, int done_fd, long delay_ns=0):
    """Serve fdatasync requests until a stop request, without the interpreter lock.

    Each request is one native-endian int64 on ``request_fd``: a file descriptor to
    fdatasync, or a negative number to stop. Each answer is one int64 on ``done_fd``: 0, or
    the errno of the failed fdatasync. ``delay_ns`` sleeps before each fdatasync (a slow disk,
    for tests). Returns the number of requests served; ends too when a pipe fails."""
    cdef _req_t request = 0
    cdef _req_t answer = 0
    cdef long served = 0
    cdef timespec pause
    pause.tv_sec = delay_ns // 1000000000
    pause.tv_nsec = delay_ns % 1000000000
    with nogil:
        while True:
            if _read_exact(request_fd, <char*>&request, sizeof(request)) != 0 or request < 0:
                break
            if delay_ns > 0:
                nanosleep(&pause, NULL)
            answer = 0 if _sys_fdatasync(<int>request) == 0 else errno
            served += 1
            if _write_all(done_fd, <const char*>&answer, sizeof(answer)) != 0:
                break
    return served
