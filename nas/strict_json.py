"""JSON read strictly: an object that names a key twice is refused at its JSON path. Python's
``json`` keeps the last value, so ``{"out": 8, "out": 16}`` was a width of 16 with no word, and a
spec stored differently from the one its author reads (RFC 8259, section 4: the names within an
object SHOULD be unique; what a parser does with duplicates is unpredictable)."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

__all__ = [
    "DuplicateKeyError",
    "StrictJSONError",
    "UnencodableKeyError",
    "is_unicode_text",
    "loads_strict",
    "refuse_unencodable_keys",
]


class StrictJSONError(ValueError):
    """A JSON object at ``path`` (``$`` for the top level) whose ``key`` no reader should take;
    ``reason`` says why, in the words every reader (the API, the CLI, ``nas.parse_spec``) prints."""

    def __init__(self, path: str, key: str, reason: str) -> None:
        self.path, self.key, self.reason = path, key, reason
        super().__init__(f"{path}: {reason}")


class DuplicateKeyError(StrictJSONError):
    """A JSON object named ``key`` twice."""

    def __init__(self, path: str, key: str) -> None:
        super().__init__(path, key, f"duplicate key {key[:80]!r}: name each key of an object once")


class UnencodableKeyError(StrictJSONError):
    """A key that is no Unicode text (a lone surrogate escape, ``"\\ud800"``), at ``path`` (the
    key's own): no field has that name, and pydantic could not even read it to say so."""

    def __init__(self, path: str, key: str) -> None:
        super().__init__(path, key, "not valid Unicode text (the key holds a lone surrogate): no field is named so")


class _Refused(dict[str, Any]):
    """An object with a key to refuse, kept for the error's path: its first unencodable key, else
    its first repeated one."""

    key: str
    unencodable: bool


def is_unicode_text(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8: a lone surrogate (``"\\ud800"``, which JSON can escape)
    does not, and neither a database nor a client can store or print it."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _refused_key(pairs: list[tuple[str, Any]], distinct: int) -> tuple[str, bool] | None:
    """An object's key to refuse and whether it is unencodable (else repeated); None for none.
    ``distinct``: how many keys the object kept (fewer than its pairs when one repeats)."""
    for key, _ in pairs:
        if not is_unicode_text(key):
            return key, True
    if distinct == len(pairs):
        return None
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            return key, False
        seen.add(key)
    raise AssertionError("fewer keys than pairs, yet none repeated")


def loads_strict(text: str | bytes) -> Any:
    """``json.loads``, refusing an object with a repeated key (:class:`DuplicateKeyError`) or a key
    that is no Unicode text (:class:`UnencodableKeyError`)."""
    found = False

    def pairs_to_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal found
        obj = dict(pairs)
        refused = _refused_key(pairs, len(obj))
        if refused is None:
            return obj
        found = True
        marked = _Refused(obj)
        marked.key, marked.unencodable = refused
        return marked

    try:
        value = json.loads(text, object_pairs_hook=pairs_to_object)
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # an integer past Python's digit limit: its message names sys's setting
        raise _long_integer(text) or exc from None
    if found:
        loc, marked = _first_refused(value, ())
        if marked.unencodable:  # at the key itself, as an unknown field is named
            raise UnencodableKeyError(_path((*loc, marked.key)), marked.key)
        raise DuplicateKeyError(_path(loc), marked.key)
    return value


def refuse_unencodable_keys(value: Any) -> None:
    """Raise :class:`UnencodableKeyError` at the first key (depth first, in insertion order) of a
    Python value that is no Unicode text: what :func:`loads_strict` refuses in JSON text, for a
    spec given as a dict, whose such key pydantic could only call "unable to parse raw data"."""
    stack: list[tuple[Any, tuple[int | str, ...]]] = [(value, ())]
    while stack:  # not recursive: a value may nest deeper than Python's stack
        node, here = stack.pop()
        if isinstance(node, dict):
            for key in node:
                if isinstance(key, str) and not is_unicode_text(key):
                    raise UnencodableKeyError(_path((*here, key)), key)
            stack.extend((child, (*here, key)) for key, child in reversed(node.items()))
        elif isinstance(node, list | tuple):
            stack.extend((child, (*here, i)) for i, child in reversed(list(enumerate(node))))


def _long_integer(text: str | bytes) -> json.JSONDecodeError | None:
    """The error for the first integer longer than Python converts (``sys.get_int_max_str_digits``,
    4300 by default), at its line and column; None when there is none."""
    limit = sys.get_int_max_str_digits()
    doc = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    # an integer token: digits not within a fraction, an exponent, a string or a name
    long = re.search(rf"(?<![\w.+\-\"])-?(\d{{{limit + 1},}})(?![\w.\"])", doc) if limit else None
    if long is None:
        return None
    return json.JSONDecodeError(f"a number of {len(long.group(1))} digits, more than {limit}", doc, long.start())


def _first_refused(value: Any, loc: tuple[int | str, ...]) -> tuple[tuple[int | str, ...], _Refused]:
    """Where the first object with a key to refuse sits (depth first, in document order), and it."""
    stack: list[tuple[Any, tuple[int | str, ...]]] = [(value, loc)]
    while stack:  # not recursive: a body may nest deeper than Python's stack
        node, here = stack.pop()
        if isinstance(node, _Refused):
            return here, node
        if isinstance(node, dict):
            stack.extend((child, (*here, key)) for key, child in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((child, (*here, i)) for i, child in reversed(list(enumerate(node))))
    raise AssertionError("a key to refuse was seen but not found")


def _path(loc: tuple[int | str, ...]) -> str:
    """A JSON path as ``nas.spec.json_path`` writes one without layer tags (``blocks[0].layers[1]``,
    ``$`` for the root); its own, since ``nas.spec`` reads its text through this module."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.isidentifier():
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part, ensure_ascii=False)}]"
    return out or "$"
