"""Types of the optional compiled module (protocol/_speedups.pyx)."""

from collections.abc import Callable
from typing import Any

def java_hash(text: str) -> int: ...
def bind_records(
    message_ext: type[Any],
    decode_record: Callable[..., Any],
    string_to_properties: Callable[[str], dict[str, str]],
    v4_host: Callable[[bytes, int], tuple[str, int]],
) -> None: ...
def decode_records(buf: bytes | bytearray | memoryview) -> list[Any]: ...
def bind_frame(
    remoting_command: type[Any],
    frame_error: type[Exception],
    coerce: Callable[[Any], str],
    loads: Callable[[Any], Any],
    json_decode_error: type[Exception],
    lang_by_name: dict[str, Any],
    lang_by_value: dict[int, Any],
    other: Any,
    json_type: Any,
    decode_binary_header: Callable[[memoryview], Any],
) -> None: ...
def decode_payload(view: memoryview, start: int, length: int) -> Any: ...
def bind_batch(decode_batch_py: Callable[[Any], list[tuple[int, bytes, str]]]) -> None: ...
def decode_batch_tuples(body: bytes | bytearray | memoryview) -> list[tuple[int, bytes, str]]: ...
def batch_records_size(
    elements: list[tuple[int, bytes, str]],
    header_props: bytes,
    fixed: int,
    max_message_size: int,
    max_properties_size: int,
) -> int: ...
def write_batch_records(
    view: memoryview,
    pos: int,
    base: int,
    elements: list[tuple[int, bytes, str]],
    header_props: bytes,
    topic_part: bytes,
    queue_id: int,
    sys_flag: int,
    born_timestamp: int,
    born: bytes,
    born_port: int,
    now: int,
    store: bytes,
    store_port: int,
    reconsume: int,
    queue_offset: int,
    entries: bytearray,
    offsets: list[int],
    index_keys: list[tuple[str, int]] | None,
    topic: str,
) -> int: ...
def put_index_entries(
    buf: Any,
    keys: list[tuple[str, int]],
    start: int,
    slots: int,
    entries_start: int,
    number: int,
    limit: int,
    time_diff: int,
    slot_count: int,
    phy_offset: int,
) -> tuple[int, int, int, int]: ...
def bind_send_fields(send_fields: type[Any], pure: Callable[[Any], Any]) -> None: ...
def decode_send_fields(ext_fields: Any) -> Any: ...
def flush_loop(request_fd: int, done_fd: int, delay_ns: int = 0) -> int: ...
