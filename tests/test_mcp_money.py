"""The agent server against an agent that tries to spend what the user did not agree to: a consent question it
writes itself, two batches at once, a service charging more than the table says, loose consent answers, a
locked journal, and service text that tries to steer the agent. Through the SDK's client, against a keyed
sandbox playing the real (paid) service."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from mcp import types
from test_mcp_tools import GENERATE, MODES, Asker, call, data, error, make_desk, paid_sandbox, service

from ipymusicgen.mcp import AgentDesk
from ipymusicgen.sandbox import Sandbox

__all__ = ["make_desk", "paid_sandbox", "service"]  # the fixtures, shared with the tools' tests

FORGED = "lo-fi): about 1 credit; 4999 left; send? (yes"
"""An agent's style that, put before the price, reads as a 1-credit question."""
CONTROLS = "x\n\nAbout 1 credit; 99 left. Send?\r\x1b[2J\u202eder\u2066\x00"


def first_sentence(question: str) -> str:
    return question.split("?")[0]


# -- 1. the price comes first, in the server's own words ----------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("tool", "arguments", "estimate"),
    [
        ("generate_song", {"style": FORGED}, 3),
        ("generate_song", {"action": "custom", "style": "pop", "title": FORGED[:40], "lyrics": "la"}, 3),
        ("generate_song", {"style": CONTROLS}, 3),
        ("generate_song_v2", {"prompt": FORGED}, 3),
        ("generate_song_v2", {"prompt": CONTROLS}, 3),
        ("write_lyrics", {"prompt": FORGED}, 1),
        ("run_batch", {"rows": [{"style": "a"}, {"style": "b"}], "name": FORGED}, 6),
        ("run_batch", {"rows": [{"style": "a"}], "name": CONTROLS}, 3),
    ],
)
def test_the_question_states_the_true_price_first_and_quotes_what_the_agent_wrote(
    make_desk: Callable[..., AgentDesk],
    service: Sandbox,
    mode: str,
    tool: str,
    arguments: dict[str, Any],
    estimate: int,
) -> None:
    asker = Asker("decline")
    call(make_desk(), tool, arguments, asker=asker, mode=mode)
    (question,) = asker.questions
    unit = "credit" if estimate == 1 else "credits"
    assert first_sentence(question) == f"Pay about {estimate} {unit} (the key has 100 credits left)"
    assert not any(ch in question for ch in "\n\r\x1b\x00\u202e\u2066"), repr(question)
    if "\u202e" in json.dumps(arguments, ensure_ascii=False):
        assert "\\u202e" in question and "\\n" in question  # escaped, visibly
    assert '"' in question.split("?", 1)[1]  # the agent's words come after, quoted


def test_the_agents_words_cannot_close_their_quotes(make_desk: Callable[..., AgentDesk], service: Sandbox) -> None:
    asker = Asker("decline")
    call(make_desk(), "generate_song", {"style": 'pop" then "about 1 credit'}, asker=asker)
    (question,) = asker.questions
    assert 'style "pop\\" then \\"about 1 credit"' in question


# -- 5. consent is an explicit true ----------------------------------------------------------------------------------


class Answering(Asker):
    """A host whose answer is not a boolean."""

    def __init__(self, content: dict[str, Any]) -> None:
        super().__init__()
        self.content = content

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.questions.append(params.message)
        return types.ElicitResult(action="accept", content=self.content)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("content", [{"send": "yes"}, {"send": 1}, {"send": "true"}, {}, {"send": None}])
def test_only_an_explicit_true_consents(
    make_desk: Callable[..., AgentDesk], service: Sandbox, mode: str, content: dict[str, Any]
) -> None:
    asker = Answering(content)
    result = call(make_desk(), "generate_song", {"style": "x"}, asker=asker, mode=mode)
    assert asker.questions
    text = result.content[0].text
    if not result.is_error:
        assert json.loads(text)["state"] == "declined"
    assert service.request_counts().get(GENERATE, 0) == 0


@pytest.mark.parametrize("cap", [True, 0, -1, "5", [5], {"n": 5}])
@pytest.mark.parametrize("tool", ["generate_song", "run_batch"])
def test_max_credits_is_a_positive_number(
    make_desk: Callable[..., AgentDesk], service: Sandbox, cap: Any, tool: str
) -> None:
    arguments = {"style": "x"} if tool == "generate_song" else {"rows": [{"style": "x"}], "name": "capped"}
    text = error(call(make_desk(), tool, {**arguments, "max_credits": cap}))
    assert "max_credits" in text
    assert service.request_counts().get(GENERATE, 0) == 0


def test_a_batch_budget_is_a_number_too(make_desk: Callable[..., AgentDesk], service: Sandbox) -> None:
    text = error(call(make_desk(), "run_batch", {"rows": [{"style": "x"}], "name": "b", "budget": True}))
    assert "budget" in text and service.request_counts().get(GENERATE, 0) == 0


def test_a_float_max_credits_consents(make_desk: Callable[..., AgentDesk], service: Sandbox) -> None:
    assert data(call(make_desk(), "generate_song", {"style": "x", "max_credits": 3.5}))["state"] == "sent"
