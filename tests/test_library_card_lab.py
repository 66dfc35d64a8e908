"""Issue 41 on the library card: a song's paid WAV gets the lossy-source verdict (with its cutoff), and the tempo
and key its request named are shown asked against measured, as `analyze()` gives them; a second `analyze()` of
the same song reads its kept measures. Through a real InteractiveShell and the view's widget state, then the
card drawn by the view's own front end in Chromium (server text as text: a style with markup stays text)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from browser_utils import BLANK
from IPython.core.interactiveshell import InteractiveShell
from playwright.sync_api import Browser, Page
from signals import write_wav
from test_lab_lossy import noise, through_mp3

from ipymusicgen.lab import analysis_worker
from ipymusicgen.lab.analysis import analyze_file
from ipymusicgen.lab.lossy import lossy_source
from ipymusicgen.widgets._static import css, esm

pytestmark = pytest.mark.slow  # librosa per song, and Chromium
STYLE = 'house <img src=x onerror="window.owned=1">, 128 bpm in D minor'


@pytest.fixture
def measured(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The worker's measures, made in process and counted (the worker gives the same `analyze_file`'s)."""
    calls: list[str] = []
    monkeypatch.setenv("MUSICGEN_ANALYZE", "off")  # no background analysis racing the test's own
    monkeypatch.setattr(analysis_worker, "measure", lambda path, **_: calls.append(str(path)) or analyze_file(path))
    monkeypatch.setattr(
        analysis_worker, "measure_lossy", lambda path: calls.append(f"lossy {path}") or lossy_source(path)
    )
    return calls


def _state(shell: InteractiveShell, code: str) -> object:
    result = shell.run_cell(code)
    assert result.success, result.error_in_exec or result.error_before_exec
    return result.result


def test_the_card_shows_the_wavs_verdict_and_asked_against_measured(
    sandbox_shell: InteractiveShell, measured: list[str], tmp_path: Path, browser: Browser
) -> None:
    shell = sandbox_shell
    shell.user_ns["STYLE"] = STYLE
    _state(shell, "import ipymusicgen\nclient = ipymusicgen.get_client()\nids = client.generate(action='auto', "
                  "style=STYLE).ids\nrecords = client.wait(ids, archived=True)")  # fmt: skip
    ids = shell.user_ns["ids"]
    wav = write_wav(tmp_path / "paid.wav", through_mp3(noise(), 128))  # the paid WAV: an MP3 decoded
    _state(shell, f"ipymusicgen.library().store.wav_archived({ids[0]!r}, __import__('pathlib').Path({str(wav)!r}))")

    first = _state(shell, f"ipymusicgen.analyze({ids[0]!r})")
    assert first.lossy_checked == "wav" and 15_500 <= (first.lossy_cutoff_hz or 0) <= 17_500
    assert first.asked == {"bpm": 128.0, "key": "D minor"}
    assert set(first.adherence) == {"bpm", "key"}
    assert len(measured) == 2  # the song's MP3, then the WAV's verdict
    again = _state(shell, f"ipymusicgen.analyze({ids[0]!r})")
    assert again.as_dict() == first.as_dict() and len(measured) == 2  # kept: nothing measured again

    _state(shell, "from ipymusicgen.widgets.library import LibraryView\nview = LibraryView()")
    state = shell.user_ns["view"].get_state()
    cards = {card["id"]: card for card in state["cards"]}
    lines = cards[ids[0]]["lab_lines"]
    lossy = [line for line in lines if line["kind"] == "lossy"]
    assert len(lossy) == 1 and lossy[0]["met"] is False
    assert lossy[0]["text"].startswith(f"lossy source (the WAV cut at {first.lossy_cutoff_hz / 1000:.1f} kHz")
    asked = [line["text"] for line in lines if line["kind"] == "adherence"]
    assert len(asked) == 2 and asked[0].startswith("asked 128 BPM, measured ") and "asked D minor" in asked[1]
    assert cards[ids[1]]["lab_lines"] == []  # not measured yet: nothing claimed
    json.dumps(state["cards"])  # what goes to the page is plain data

    with _page(browser) as page:
        page.evaluate(HARNESS, [esm("library"), css("library"), {k: state[k] for k in TRAITS}])
        card = page.locator(f'.ipymusicgen-song[data-id="{ids[0]}"]')
        lab = card.locator(".ims-library-lab")
        assert lab.locator(".ims-lab-lossy").inner_text() == lossy[0]["text"]
        assert lab.locator(".ims-lab-lossy.ims-lab-missed").count() == 1
        assert lab.locator(".ims-lab-adherence").all_inner_texts() == asked
        assert page.locator(f'.ipymusicgen-song[data-id="{ids[1]}"] .ims-library-lab').count() == 0
        assert page.locator("img[src=x]").count() == 0 and page.evaluate("window.owned") is None
        assert "<img" in card.inner_text()  # the style's markup shown as the text it is


TRAITS = ("cards", "text", "filters", "page", "page_size", "total", "models", "batches", "lineage", "spend_days",
          "spend_total", "status")  # fmt: skip
HARNESS = """([source, styles, traits]) => new Promise(async (resolve) => {
  window.sent = [];
  const listeners = new Set();
  const model = {
    get(name) { return traits[name]; },
    on(event, callback) { listeners.add(callback); },
    off(event, callback) { listeners.delete(callback); },
    send(message) { window.sent.push(message); },
  };
  const style = document.createElement("style");
  style.textContent = styles;
  document.head.appendChild(style);
  const module = await import(URL.createObjectURL(new Blob([source], { type: "text/javascript" })));
  const el = document.createElement("div");
  document.body.appendChild(el);
  module.default.render({ model, el });
  resolve();
})"""
"""The library view's traits as the widget's state has them, on a stand-in for anywidget's model."""


@contextmanager
def _page(browser: Browser) -> Iterator[Page]:
    """A blank page for the view's module; no exception may escape in it."""
    context = browser.new_context()
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.set_content(BLANK)
    yield page
    context.close()
    assert errors == []
