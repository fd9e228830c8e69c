"""The plain-data codec between judge and program: tagged JSON in which only builtin types travel.

Imported by the trainer and, as source, by both sandboxed processes (stdlib only, no package imports).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not ``typing.TYPE_CHECKING``: importing typing costs every sandbox start ~4 ms
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

MAX_DEPTH = 64

_SCALARS = (type(None), bool, int, float, str)


def encode(value: Any, opaque: Callable[[Any], Any], depth: int = 0) -> Any:
    """Turn plain data into tagged JSON; anything else goes through ``opaque``."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if type(value) in _SCALARS:
        return value
    d = depth + 1
    if isinstance(value, list):
        return {"l": [encode(v, opaque, d) for v in value]}
    if isinstance(value, tuple):
        return {"t": [encode(v, opaque, d) for v in value]}
    if isinstance(value, frozenset):
        return {"fs": [encode(v, opaque, d) for v in value]}
    if isinstance(value, set):
        return {"s": [encode(v, opaque, d) for v in value]}
    if isinstance(value, dict):
        return {"d": [[encode(k, opaque, d), encode(v, opaque, d)] for k, v in value.items()]}
    if isinstance(value, bytes | bytearray):
        return {"b": bytes(value).hex()}
    if isinstance(value, complex):
        return {"c": [value.real, value.imag]}
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return opaque(value)


def decode(obj: Any, resolve: Callable[[str, Any], Any], depth: int = 0) -> Any:
    """Rebuild plain data from tagged JSON; only builtin types come out (tags ``r``/``h`` via resolve)."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if type(obj) is not dict or len(obj) != 1:
        raise ValueError(f"malformed value {type(obj).__name__}")
    ((tag, body),) = obj.items()
    d = depth + 1
    if tag in ("l", "t", "s", "fs"):
        if type(body) is not list:
            raise ValueError("malformed sequence")
        items = [decode(v, resolve, d) for v in body]
        return {"l": list, "t": tuple, "s": set, "fs": frozenset}[tag](items)
    if tag == "d":
        if type(body) is not list or any(type(p) is not list or len(p) != 2 for p in body):
            raise ValueError("malformed dict")
        return {decode(k, resolve, d): decode(v, resolve, d) for k, v in body}
    if tag == "b" and type(body) is str:
        return bytes.fromhex(body)
    if tag == "c" and type(body) is list and len(body) == 2:
        return complex(float(body[0]), float(body[1]))
    if tag in ("r", "h"):
        return resolve(tag, body)
    raise ValueError(f"unknown tag {tag!r}")
