"""Tool parameters from the request models: a field added to a model is a tool parameter (with its description
and the spec's bounds) without editing the server; the models themselves validate (in the desk)."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import BaseModel, Field

from ..models.schema import ACTIONS, V1_SHAPES, field_descriptions


def bounds_of(prop: dict[str, Any]) -> dict[str, Any]:
    """A model field's schema without its own title and default (the tool's parameter keeps its own)."""
    return {k: v for k, v in prop.items() if k not in ("title", "default", "description")}


@functools.cache
def _schema_text(model: type[BaseModel]) -> str:
    """A request model's JSON schema as text, made once: pydantic makes it anew at each call (10-20 ms), and the
    server is built from a dozen of them."""
    return json.dumps(model.model_json_schema())


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A request model's JSON schema (every bound of the spec); the caller's own copy."""
    return json.loads(_schema_text(model))


def v1_schema() -> dict[str, Any]:
    """The v1 fields of every action's shape, each with its bounds; `action` names the shape."""
    properties: dict[str, Any] = {}
    for shape in V1_SHAPES.values():
        for name, prop in model_schema(shape)["properties"].items():
            properties.setdefault(name, prop)
    properties["action"] = {"type": "string", "enum": list(ACTIONS), "default": "auto"}
    return {"properties": properties, "required": []}


_JSON_TYPES: Mapping[frozenset[str], Any] = MappingProxyType(
    {
        frozenset({"string"}): str,
        frozenset({"integer"}): int,
        frozenset({"number"}): float,
        frozenset({"integer", "number"}): float,
        frozenset({"boolean"}): bool,
    }
)


def _loose_type(prop: dict[str, Any]) -> Any:
    """The plain type a tool parameter takes for a model field's schema: the models check the bounds (in the desk),
    so an agent's mistake is one line naming the field, as in the notebook."""
    kinds = {
        part.get("type", "string" if "enum" in part or "const" in part else "") for part in prop.get("anyOf", [prop])
    }
    return _JSON_TYPES.get(frozenset(kinds - {"null", ""}), Any)


def request_parameters(
    models: tuple[type[BaseModel], ...], defaults: Mapping[str, Any] | None = None
) -> list[inspect.Parameter]:
    """One keyword parameter per field of the request `models` (the first to declare a field wins), described by
    the model: a field added to a model is a tool parameter, with its description, without editing the server.
    A field every model requires is required (unless `defaults` gives it one); the rest default to None (not sent)."""
    defaults = defaults or {}
    descriptions = field_descriptions(*models)
    properties: dict[str, Any] = {}
    for model in models:
        for name, prop in model_schema(model)["properties"].items():
            properties.setdefault(name, prop)
    parameters = []
    for name, description in descriptions.items():
        required = all(name in m.model_fields and m.model_fields[name].is_required() for m in models)
        default = defaults.get(name, inspect.Parameter.empty if required else None)
        loose = _loose_type(properties[name])
        annotation = Annotated[loose | None if default is None else loose, Field(description=description)]
        parameters.append(
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
        )
    return parameters


def with_request_fields(
    fn: Callable[..., Any], models: tuple[type[BaseModel], ...], defaults: Mapping[str, Any] | None = None
) -> Callable[..., Any]:
    """`fn` (which takes the request as `**fields`) as a tool whose parameters are the models' fields, then its own."""
    signature = inspect.signature(fn, eval_str=True)
    own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    context = [p for p in own if p.default is inspect.Parameter.empty]
    rest = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own if p.default is not inspect.Parameter.empty]

    @functools.wraps(fn)
    async def tool(*args: Any, **kwargs: Any) -> Any:
        return await fn(*args, **kwargs)

    tool.__signature__ = signature.replace(parameters=[*context, *request_parameters(models, defaults), *rest])  # type: ignore[attr-defined]
    return tool
