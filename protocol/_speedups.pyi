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
