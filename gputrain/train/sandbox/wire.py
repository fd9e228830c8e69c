"""Child side: JSON lines on the control pipes without importing the ``json`` package.

``import json`` pulls in ``re`` and compiles its patterns: about a quarter of what starting a sandboxed
process cost (two per program, benchmarks/RESULTS.md, issue 26). The child only writes plain data
(``codec.encode``'s output: None, bool, int, float, str, lists and str-keyed dicts) and reads the trainer's
own ``json.dumps`` lines, so CPython's C scanner and string quoter (``_json``, what ``json`` itself uses)
suffice. The trainer keeps parsing everything the child writes with ``json.loads`` and checks it: nothing
here is trusted (the program shares this process and can replace these functions).
"""

from __future__ import annotations

from _json import encode_basestring_ascii as _quote
from _json import make_scanner as _make_scanner

TYPE_CHECKING = False  # not ``typing.TYPE_CHECKING``: importing typing costs every sandbox start
if TYPE_CHECKING:
    from typing import Any

_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


#: What ``_json.make_scanner`` reads from its decoder: ``json.JSONDecoder``'s defaults.
_DECODER = {"strict": True, "object_hook": None, "object_pairs_hook": None, "parse_float": float, "parse_int": int,
            "parse_constant": _CONSTANTS.__getitem__}
_CONTEXT: Any = type("Decoder", (), _DECODER)()
_scan = _make_scanner(_CONTEXT)


def loads(text: str) -> Any:
    """One JSON document (surrounding whitespace allowed), as ``json.loads`` reads it."""
    start = len(text) - len(text.lstrip())
    try:
        obj, end = _scan(text, start)
    except StopIteration:
        raise ValueError("not a JSON document") from None
    if text[end:].strip():
        raise ValueError("extra data after the JSON document")
    return obj


def _float(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


def _encode(obj: Any, out: list[str], depth: int) -> None:
    if depth > 200:
        raise ValueError("value nested too deeply")
    if obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif isinstance(obj, str):
        out.append(_quote(obj))
    elif isinstance(obj, int):
        out.append(int.__repr__(obj))
    elif isinstance(obj, float):
        out.append(_float(obj))
    elif isinstance(obj, list | tuple):
        out.append("[")
        for i, item in enumerate(obj):
            if i:
                out.append(", ")
            _encode(item, out, depth + 1)
        out.append("]")
    elif isinstance(obj, dict):
        out.append("{")
        for i, (key, item) in enumerate(obj.items()):
            if not isinstance(key, str):
                raise TypeError(f"keys must be str, not {type(key).__name__}")
            if i:
                out.append(", ")
            out.append(_quote(key))
            out.append(": ")
            _encode(item, out, depth + 1)
        out.append("}")
    else:
        raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def dumps(obj: Any) -> str:
    """``json.dumps(obj)`` for plain data (the same text, ASCII only, NaN/Infinity as json writes them)."""
    out: list[str] = []
    _encode(obj, out, 0)
    return "".join(out)
