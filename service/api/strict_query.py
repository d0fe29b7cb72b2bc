"""The query string, read strictly, as the body is (``json_body``): a parameter the route does not
take, one given twice that the route takes once, and a number written as Python reads it but a
person would not (``5_0``, ``+5``, `` 5``), and a switch other than ``true`` or ``false`` (pydantic
also reads ``yes``, ``on`` and ``1``) are refused at ``query.<name>``.

FastAPI keeps the last of a repeated parameter and ignores an unknown one, so
``?study=s1&study=s2`` listed ``s2``'s candidates and ``?studdy=s1`` listed every study's; pydantic
reads a query's number with ``int()`` and ``float()``, which take underscores, a sign and spaces.
"""

from __future__ import annotations

import re
import types
from typing import Any, Union, get_args, get_origin

from fastapi import Depends, Request

from service.api.problems import ProblemError

__all__ = ["StrictQueryDep"]

# a decimal number as a person writes it: digits, a fraction, an exponent, a minus and no other sign
# (ASCII digits: re's \d also takes "١٢", which int() reads as 12)
_NUMBER = re.compile(r"-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_INTEGER = re.compile(r"-?[0-9]+")


def _types(annotation: Any) -> tuple[Any, ...]:
    """The types an annotation admits, ``None`` and ``Annotated`` unwrapped."""
    if get_origin(annotation) in (Union, types.UnionType):
        return tuple(t for arg in get_args(annotation) for t in _types(arg) if t is not type(None))
    return (annotation,)


def _declared(request: Request) -> dict[str, tuple[Any, ...]]:
    """The query parameters of the route that matched, by name, with the types each admits."""
    declared: dict[str, tuple[Any, ...]] = {}
    stack = [getattr(request.scope.get("route"), "dependant", None)]
    while stack:  # the endpoint's parameters and its dependencies', at any depth
        if (dependant := stack.pop()) is not None:
            declared.update((field.alias, _types(field.field_info.annotation)) for field in dependant.query_params)
            stack.extend(dependant.dependencies)
    return declared


async def _strict_query(request: Request) -> None:
    declared = _declared(request)
    for name in dict.fromkeys(request.query_params.keys()):
        path = f"query.{name[:64]}"
        if name not in declared:
            takes = ", ".join(sorted(declared)) or "none"
            raise ProblemError.at(path, f"unknown parameter (this route takes: {takes})")
        values = request.query_params.getlist(name)
        admitted = declared[name]
        repeatable = any(get_origin(t) is list for t in admitted)
        if len(values) > 1 and not repeatable:
            raise ProblemError.at(path, f"given {len(values)} times; give it once")
        item_types = {a for t in admitted for a in (get_args(t) if get_origin(t) is list else (t,))}
        for i, value in enumerate(values):
            where = f"{path}[{i}]" if repeatable else path
            if int in item_types and float not in item_types and not _INTEGER.fullmatch(value):
                raise ProblemError.at(where, f"{value[:32]!r} is not a decimal integer")
            if float in item_types and not _NUMBER.fullmatch(value):
                raise ProblemError.at(where, f"{value[:32]!r} is not a decimal number")
            if bool in item_types and value not in ("true", "false"):
                raise ProblemError.at(where, f"{value[:32]!r} is not true or false")


StrictQueryDep = Depends(_strict_query)
