"""Answering a page of data the code built itself without validating it again.

A route with ``response_model`` has FastAPI validate every outgoing item against the
schema and serialise it afterwards: for a list page of 100 jobs or runs that was most of
the request's CPU, spent re-checking dicts that ``views.py`` and ``RunRecord.to_dict``
already built with the right types. :func:`page` keeps what the validation did that
clients see -- exactly the schema's fields, in its order, defaults for the absent ones,
nested schemas likewise -- and encodes the result once with the standard library.
The route keeps its ``response_model`` for the OpenAPI document; ``tests/api`` checks
that a page equals what validating it gives.
"""

from __future__ import annotations

import functools
import json
import types
import typing
from collections.abc import Callable
from typing import Any

from fastapi import Response
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

__all__ = ["page", "shape"]

_Shaper = Callable[[Any], Any]


def _same(value: Any) -> Any:
    return value


def _shaper_of(annotation: Any) -> _Shaper:
    """How to shape a value of ``annotation``: nested models and lists of them are
    projected, anything else is kept as it is."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        fields = _plan(annotation)
        return lambda v: v if v is None else _project(fields, v)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        models = [a for a in args if a is not type(None)]
        if len(models) == 1:
            return _shaper_of(models[0])
        return _same
    if origin is list and args:
        inner = _shaper_of(args[0])
        if inner is _same:
            return _same
        return lambda v: v if v is None else [inner(x) for x in v]
    return _same


@functools.cache
def _plan(model: type[BaseModel]) -> tuple[tuple[str, Any, Callable[[], Any] | None,
                                                 _Shaper], ...]:
    plan = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        default = None if field.default is PydanticUndefined else field.default
        plan.append((key, default, field.default_factory, _shaper_of(field.annotation)))
    return tuple(plan)  # type: ignore[arg-type]


def _project(plan: tuple[tuple[str, Any, Callable[[], Any] | None, _Shaper], ...],
             data: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, default, factory, shaper in plan:
        if key in data:
            value = data[key]
            out[key] = value if shaper is _same else shaper(value)
        else:
            out[key] = factory() if factory is not None else default
    return out


def shape(model: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """``data`` as ``model`` would answer it: its fields in order, defaults for the
    absent ones, no other key (nested models alike), values unchecked."""
    return _project(_plan(model), data)


def page(model: type[BaseModel], data: dict[str, Any]) -> Response:
    """A 200 JSON answer of ``data`` shaped by ``model`` (see the module)."""
    body = json.dumps(shape(model, data), ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False)
    return Response(body.encode(), media_type="application/json")
