"""One request vocabulary: a field's description lives on its model, once; the agent server's tool parameters and
the studio's fields are read from the models, so a field added to a model appears in both without editing them."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from types import MappingProxyType
from typing import Annotated, Any

import anyio
import pytest
from mcp import types
from mcp.client import Client
from pydantic import Field

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.config import Settings
from ipymusicgen.mcp import AgentDesk, build_server
from ipymusicgen.models import schema
from ipymusicgen.widgets.studio import Studio
from ipymusicgen.workspace.workspace import build_client

MOOD = "how the song should feel, e.g. wistful"


class MoodyCustomRequest(schema.CustomRequest):
    """A custom song with a field the spec might add tomorrow."""

    mood: Annotated[str | None, Field(max_length=40, description=MOOD)] = None


@pytest.fixture
def client(tmp_path: Any) -> Iterator[MusicClient]:
    made = build_client(Settings.from_env().with_changes(journal_path=tmp_path / "journal.sqlite3"))
    yield made
    made.close()


@pytest.fixture
def moody(monkeypatch: pytest.MonkeyPatch) -> None:
    """The v1 shapes with the moody custom song, where each reads them (the table is a read-only constant)."""
    shapes = MappingProxyType({**schema.V1_SHAPES, "custom": MoodyCustomRequest})
    for name in ("models.schema", "mcp.tool_params", "mcp.tools", "widgets.studio", "notebook.args"):
        monkeypatch.setattr(importlib.import_module(f"ipymusicgen.{name}"), "V1_SHAPES", shapes)


def tools(client: MusicClient) -> dict[str, types.Tool]:
    async def listing() -> list[types.Tool]:
        async with Client(build_server(AgentDesk(client))) as session:
            return (await session.list_tools()).tools

    return {tool.name: tool for tool in anyio.run(listing)}


def test_every_request_field_is_described_on_its_model() -> None:
    for model in (*schema.V1_SHAPES.values(), schema.V2Request, schema.LyricsRequest):
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name} has no description"
    # one definition for the fields the v1 shapes share: the same words in every shape that has them
    for name in ("mv", "instrumental", "style", "lyrics", "title", "gender"):
        said = {m.model_fields[name].description for m in schema.V1_SHAPES.values() if name in m.model_fields}
        assert len(said) == 1, (name, said)


def test_the_tools_parameters_say_what_the_models_say(client: MusicClient) -> None:
    listed = tools(client)
    for tool, models in (
        ("generate_song", tuple(schema.V1_SHAPES.values())),
        ("generate_song_v2", (schema.V2Request,)),
        ("write_lyrics", (schema.LyricsRequest,)),
    ):
        properties = listed[tool].input_schema["properties"]
        for name, description in schema.field_descriptions(*models).items():
            assert properties[name]["description"] == description, (tool, name)


def test_a_new_model_field_is_a_described_tool_parameter(client: MusicClient, moody: None) -> None:
    mood = tools(client)["generate_song"].input_schema["properties"]["mood"]
    assert mood["description"] == MOOD and mood["anyOf"][0]["maxLength"] == 40  # the model's bound too


def test_a_new_model_field_is_a_described_studio_field(client: MusicClient, moody: None) -> None:
    made = Studio(client, confirm=False)
    try:
        made.song.set_values(action="custom")
        fields = {item["name"]: item for item in made.view.panes["song"]["fields"]}
        assert fields["mood"]["description"] == MOOD and fields["mood"]["shown"]
        assert fields["style"]["description"] == schema.CustomRequest.model_fields["style"].description
        made.song.set_values(action="auto")  # not part of the auto shape: hidden there
        assert not {item["name"]: item for item in made.view.panes["song"]["fields"]}["mood"]["shown"]
    finally:
        made.close()


def test_the_magics_help_says_what_the_models_say() -> None:
    from ipymusicgen.notebook.args import MUSICGEN_OPTIONS

    words = schema.field_descriptions(*schema.V1_SHAPES.values(), schema.V2Request)
    helped = {o.names[-1].removeprefix("--").replace("-", "_"): o.kwargs["help"] for o in MUSICGEN_OPTIONS}
    for name, description in words.items():
        assert helped[name].replace("%%", "%").startswith(description), name


class TempoV2Request(schema.V2Request):
    """A v2 request with a field the spec might add tomorrow."""

    bpm: Annotated[int | None, Field(ge=40, le=240, description="beats per minute to aim for")] = None


def test_a_new_v2_field_is_a_described_tool_parameter_and_studio_field(
    client: MusicClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ipymusicgen.mcp.tools", "ipymusicgen.widgets.studio"):
        module = importlib.import_module(name)
        monkeypatch.setattr(module, "V2Request", TempoV2Request)  # where each reads the v2 model
    bpm = tools(client)["generate_song_v2"].input_schema["properties"]["bpm"]
    assert bpm["description"] == "beats per minute to aim for" and bpm["anyOf"][0]["maximum"] == 240
    made = Studio(client, confirm=False)
    try:
        made.v2.set_values(is_auto=0)
        field = {item["name"]: item for item in made.view.panes["v2"]["fields"]}["bpm"]
        assert field["description"] == "beats per minute to aim for" and field["kind"] == "number" and field["shown"]
    finally:
        made.close()
