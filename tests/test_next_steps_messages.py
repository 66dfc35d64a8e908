"""Messages that say the right next step (issue 42): a team gateway's user out of budget is told their admin raises
it, with their budget and spent (the gateway's answer and the client's words); a refused key is named by where it
came from, MUSICGEN_API_KEY (masked) or api_key= / %musicgen_login, never shown whole."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_helpers import CANARY_KEY, GatewayThread, add_user, cli, post

from ipymusicgen import AuthenticationError, InsufficientCreditsError, MusicClient
from ipymusicgen.sandbox import Sandbox

GOOD_KEY = "sk-good-0123456789abcdef"
WRONG_KEY = "sk-wrong-key-from-an-old-account-7QzX"


@pytest.fixture(scope="module")
def upstream() -> Iterator[Sandbox]:
    with Sandbox(stage_seconds=0.05, song_seconds=4, faults="", keys={CANARY_KEY: 1000, GOOD_KEY: 100}) as sandbox:
        yield sandbox


@pytest.fixture
def gateway(tmp_path: Path, upstream: Sandbox, clean_env: None) -> Iterator[tuple[GatewayThread, str]]:
    database = str(tmp_path / "ledger.sqlite3")
    with GatewayThread(database, upstream.base_url, upstream.v2_base_url) as running:
        yield running, database


def _made_by(url: str, token: str) -> MusicClient:
    return MusicClient(token, base_url=url, v2_base_url=url, max_retries=0)


def test_a_gateway_user_at_budget_0_is_told_their_admin_raises_it_with_budget_and_spent(
    gateway: tuple[GatewayThread, str],
) -> None:
    running, database = gateway
    token = add_user(database, "ada", budget=0)
    with _made_by(running.url, token) as client, pytest.raises(InsufficientCreditsError) as caught:
        client.generate(action="auto", style="rain", mv="MFV3.0")
    said = str(caught.value)
    assert "no credits left in ada's budget (budget 0, spent 0; this call needs about 3)" in said, said
    assert "gateway's admin" in said and "gateway user budget ada N" in said
    assert "top up" not in said and token not in said and CANARY_KEY not in said


def test_a_team_budget_spent_names_the_team_its_budget_and_what_was_spent(gateway: tuple[GatewayThread, str]) -> None:
    running, database = gateway
    assert cli("team", "budget", "5", "--database", database)[0] == 0
    token = add_user(database, "bo")
    with _made_by(running.url, token) as client:
        client.generate(action="auto", style="first", mv="MFV3.0")  # 3 of the team's 5
        with pytest.raises(InsufficientCreditsError) as caught:
            client.generate(action="auto", style="second", mv="MFV3.0")
    said = str(caught.value)
    assert "no credits left in the team budget (budget 5, spent 3; this call needs about 3)" in said, said
    assert "gateway team budget N" in said and "top up" not in said
    raw = post(running.url, "/v1/music/generate", token, {"action": "auto", "style": "x", "mv": "MFV3.0"}).json()
    assert raw["status"] == 400 and "Only the gateway's admin can raise it" in raw["message"]


def test_the_service_out_of_credits_still_says_top_up_the_key(clean_env: None) -> None:
    empty = "sk-empty-0123456789abcdef"
    with (
        Sandbox(stage_seconds=0.05, faults="", keys={empty: 0}) as service,
        service.client() as client,
        pytest.raises(InsufficientCreditsError) as caught,
    ):
        client.generate(action="auto", style="rain", mv="MFV3.0")
    said = str(caught.value)
    assert "top up the key" in said and "admin" not in said, said


def test_a_wrong_key_in_the_environment_is_named_there_masked(
    upstream: Sandbox, monkeypatch: pytest.MonkeyPatch, clean_env: None
) -> None:
    monkeypatch.setenv("MUSICGEN_API_KEY", f"  {WRONG_KEY}\n")  # pasted with spaces and a newline
    with (
        MusicClient(base_url=upstream.base_url, v2_base_url=upstream.v2_base_url, max_retries=0) as client,
        pytest.raises(AuthenticationError) as caught,
    ):
        client.generate(action="auto", style="rain", mv="MFV3.0")
    said = str(caught.value)
    assert "The key in MUSICGEN_API_KEY (****7QzX) was refused" in said, said
    assert "pass api_key=" not in said and WRONG_KEY not in said and "old-account" not in said


def test_a_wrong_key_given_to_the_client_is_named_as_given_not_as_the_environments(
    upstream: Sandbox, monkeypatch: pytest.MonkeyPatch, clean_env: None
) -> None:
    monkeypatch.setenv("MUSICGEN_API_KEY", GOOD_KEY)  # a good one in the environment, overridden by api_key=
    with (
        MusicClient(WRONG_KEY, base_url=upstream.base_url, v2_base_url=upstream.v2_base_url, max_retries=0) as client,
        pytest.raises(AuthenticationError) as caught,
    ):
        client.key_info()
    said = str(caught.value)
    assert "The key given to the client (api_key= or %musicgen_login; ****7QzX) was refused" in said, said
    assert "in MUSICGEN_API_KEY" not in said and WRONG_KEY not in said


def test_musicgen_login_with_a_wrong_key_says_so_in_a_real_shell(
    sandbox_shell: Any, upstream: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    from IPython.utils.capture import capture_output

    from ipymusicgen.workspace import session

    session.configure(base_url=upstream.base_url, v2_base_url=upstream.v2_base_url, max_retries=0)
    monkeypatch.setattr("getpass.getpass", lambda prompt="": WRONG_KEY)
    with capture_output() as shown:
        sandbox_shell.run_line_magic("musicgen_login", "")
        sandbox_shell.run_cell("%musicgen --wait --style rain a song")
    said = shown.stdout + shown.stderr
    assert "(api_key= or %musicgen_login; ****7QzX) was refused" in said, said
    assert WRONG_KEY not in said
