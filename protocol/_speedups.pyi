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
def bind_send_fields(send_fields: type[Any], pure: Callable[[Any], Any]) -> None: ...
def decode_send_fields(ext_fields: Any) -> Any: ...
