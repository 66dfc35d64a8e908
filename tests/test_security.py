"""Security: a canary key never shows up anywhere, and hostile server text never becomes live HTML.

(a) A unique canary key drives the widgets, the magics in a real InteractiveShell, the clients' error
paths and every demo notebook (nbclient, widget state stored); then every output, widget state, log
record, exception text (with its request and response) and the journal file are searched: zero hits.
(b) Titles, lyrics, fail reasons, 422 messages and error text full of `<script>`, `<img onerror>`,
quotes and `javascript:`/`data:`/`file:`/`//` URLs go through the magics' HTML and the widgets:
always escaped, never a link, player or image.
Insecure http is covered in test_client.py (test_insecure_transport_*), download names and atomic
writes in test_downloads.py.
"""

from __future__ import annotations

import json
import logging
import secrets
import traceback
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import ipywidgets
import nbformat
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from jupyter_utils import NOTEBOOK_NAMES
from notebook_runs import CANARY as NOTEBOOK_CANARY
from notebook_runs import NotebookRuns

from ipymusicgen.client.faces import MusicClient
from ipymusicgen.errors import MusicGenError
from ipymusicgen.models.schema import KeyInfo, TaskRecord, V2Song
from ipymusicgen.models.tasks import TaskState
from ipymusicgen.notebook.magics import KeyReport, Lyrics, Table, mask_key, record_row
from ipymusicgen.sandbox import Sandbox
from ipymusicgen.widgets import Studio, TaskCard, TaskWatcher, studio
from ipymusicgen.workspace import session

CANARY = NOTEBOOK_CANARY
NEEDLES = (CANARY, CANARY[7:19], CANARY[-12:])
"""The key, and pieces of it long enough to prove a partial leak (a masked key shows only 4 characters)."""
WAIT = 60.0
SLOW = "slow:seconds=3"
"""Longer than the 1 s timeout of the error-path client."""
LOGGERS = ("httpx", "httpcore", "ipymusicgen", "asyncio", "")
RESET = dict.fromkeys(("api_key", "base_url", "v2_base_url", "journal_path", "poll_interval", "allow_unknown_models"))


# ---------------------------------------------------------------------------------------------------
# Collecting evidence.


def as_text(value: Any) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("latin-1")
    if isinstance(value, dict):
        return "{" + ", ".join(f"{as_text(k)}: {as_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple | set):
        return "[" + ", ".join(as_text(v) for v in value) + "]"
    return f"{value!s} {value!r}"


def request_text(request: httpx.Request | None) -> str:
    if request is None:
        return ""
    headers = " ".join(f"{k}: {v}" for k, v in request.headers.multi_items())
    try:
        content = request.content
    except httpx.RequestNotRead:
        content = b"(streamed)"
    return f"{request.method} {request.url} {headers} {as_text(content)}"


def response_text(response: httpx.Response | None) -> str:
    if response is None:
        return ""
    headers = " ".join(f"{k}: {v}" for k, v in response.headers.multi_items())
    try:
        body = response.content
    except httpx.ResponseNotRead:
        body = b"(streamed)"
    return f"{response.status_code} {headers} {as_text(body)} {request_text(getattr(response, '_request', None))}"


def exception_text(exc: BaseException) -> str:
    """Everything an exception could show: message, repr, args, body, request, response, the whole chain."""
    parts = ["".join(traceback.format_exception(exc))]
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts += [str(current), repr(current), as_text(current.args), as_text(vars(current))]
        parts.append(request_text(getattr(current, "request", None)))
        parts.append(response_text(getattr(current, "response", None)))
        current = current.__cause__ or current.__context__
    return "\n".join(parts)


class Evidence:
    """Texts to search for the canary, each with where it came from."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, where: str, value: Any) -> None:
        self.items.append((where, value if isinstance(value, str) else as_text(value)))

    def error(self, where: str, exc: BaseException) -> None:
        self.items.append((where, exception_text(exc)))

    def widgets(self) -> None:
        """Every live widget's state and repr (ipywidgets' instance registry)."""
        for model_id, widget in list(ipywidgets.widgets.widget._instances.items()):
            self.add(f"widget {type(widget).__name__} {model_id}", self._state(widget))
            self.add(f"widget repr {type(widget).__name__}", repr(widget))

    @staticmethod
    def _state(widget: Any) -> dict[str, Any]:
        """Its whole state; trait by trait where one names a child widget already closed (an earlier test's view
        in the same worker: ipywidgets cannot serialize it), so every other trait is still searched."""
        try:
            return widget.get_state()
        except AttributeError:
            state: dict[str, Any] = {}
            for key in widget.keys:
                try:
                    state.update(widget.get_state(key))
                except AttributeError:
                    state[key] = "<a closed child widget>"
            return state

    def hits(self) -> list[str]:
        return [where for where, text in self.items if any(needle in text for needle in NEEDLES)]


class LogCapture(logging.Handler):
    """Every record at DEBUG of the loggers that could see a request, formatted as a handler would."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.texts: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(f"{self.format(record)} {as_text(record.args)} {record.exc_text or ''}")


@pytest.fixture
def evidence() -> Iterator[Evidence]:
    """Evidence with DEBUG logs of httpx/httpcore/ipymusicgen (and the root) captured for the test."""
    handler = LogCapture()
    loggers = [logging.getLogger(name) for name in LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    found = Evidence()
    try:
        yield found
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)
    assert handler.texts, "no log records were captured: the capture is broken"
    assert [t for t in handler.texts if any(n in t for n in NEEDLES)] == []


def assert_clean(evidence: Evidence, journal: Path | None = None, *, minimum: int = 11) -> None:
    if journal is not None:
        assert journal.exists(), f"no journal at {journal}: nothing of it was checked"
        for path in journal.parent.glob(journal.name + "*"):  # the database, and -wal/-shm while open
            evidence.add(f"journal file {path.name}", path.read_bytes())
    assert len(evidence.items) >= minimum, "too little evidence gathered to mean anything"
    assert evidence.hits() == []


def test_the_search_finds_a_planted_canary(tmp_path: Path) -> None:
    """The collectors are not blind: a canary planted in each kind of evidence is found there."""
    from ipymusicgen.storage.journal import Journal

    found = Evidence()
    planted = ipywidgets.HTML(value=f"<b>{CANARY}</b>")
    found.widgets()
    assert any(where.startswith("widget HTML") for where in found.hits())
    planted.close()
    request = httpx.Request("GET", "http://127.0.0.1:9/x", headers={"x-api-key": CANARY})
    error = MusicGenError("no key here")
    error.__cause__ = httpx.ConnectError("refused", request=request)
    found.error("chained error", error)
    journal = Journal(tmp_path / "planted.sqlite3")
    journal.begin("generate", "http://127.0.0.1:9", {"style": CANARY[-12:]})
    journal.close()
    journal_only = Evidence()
    for index in range(11):
        journal_only.add(f"clean {index}", "nothing to see")
    with pytest.raises(AssertionError, match=r"journal file planted\.sqlite3"):
        assert_clean(journal_only, tmp_path / "planted.sqlite3")
    assert "chained error" in found.hits()
    capture = LogCapture()
    logging.getLogger("ipymusicgen.test").addHandler(capture)
    try:
        logging.getLogger("ipymusicgen.test").warning("sent %s", {"x-api-key": CANARY})
    finally:
        logging.getLogger("ipymusicgen.test").removeHandler(capture)
    assert any(CANARY in text for text in capture.texts)


# ---------------------------------------------------------------------------------------------------
# Sandboxes and the session.


@pytest.fixture(scope="module")
def canary_sandbox() -> Iterator[Sandbox]:
    """The canary is this sandbox's only key."""
    with Sandbox(stage_seconds=0.2, song_seconds=4, keys={CANARY: 10_000}, faults="") as server:
        assert server.api_key == CANARY
        yield server


@pytest.fixture(scope="module")
def stranger_sandbox() -> Iterator[Sandbox]:
    """A sandbox that does not know the canary: sending it is a wrong key."""
    with Sandbox(stage_seconds=0.2, song_seconds=4, faults="") as server:
        yield server


@pytest.fixture
def canary(canary_sandbox: Sandbox) -> Iterator[Sandbox]:
    canary_sandbox.reset()
    yield canary_sandbox
    canary_sandbox.reset()


@pytest.fixture
def canary_session(canary: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The shared session (magics, forms) on the canary sandbox; yields the journal path."""
    for name in ("MUSICGEN_API_KEY", "MUSICGEN_BASE_URL", "MUSICGEN_V2_BASE_URL", "MUSICGEN_JOURNAL"):
        monkeypatch.delenv(name, raising=False)
    journal = tmp_path / "journal.sqlite3"
    point_session(canary, journal)
    yield journal
    session.shutdown()
    session.configure(**RESET)


def point_session(sandbox: Sandbox, journal: Path) -> None:
    session.shutdown()
    session.configure(
        api_key=CANARY,
        base_url=sandbox.base_url,
        v2_base_url=sandbox.v2_base_url,
        journal_path=str(journal),
        poll_interval=0.05,
    )


# ---------------------------------------------------------------------------------------------------
# (a) The canary.


@pytest.mark.slow
def test_widgets_never_show_the_canary(
    canary: Sandbox, stranger_sandbox: Sandbox, canary_session: Path, evidence: Evidence, tmp_path: Path
) -> None:
    board = studio()
    board.generate.set_values(action="auto", style="canary widgets")
    assert board.generate.submit()
    board.v2.set_values(is_auto=1, prompt="canary v2 song")
    assert board.v2.submit()
    board.lyrics.set_values(prompt="a canary in a coal mine")
    assert board.lyrics.submit() is not None
    board.lyrics.use_in_song()
    board.generate.set_values(style="ballad")
    assert board.generate.submit()
    board.select("key")  # the key tab reads the key's credits
    assert board.key_info.info is not None
    records = board.watcher.wait(timeout=WAIT)
    assert len(records) == 6 and all(r.state is TaskState.COMPLETE for r in records)
    board.watcher.download_dir = tmp_path / "downloads"
    first = board.watcher.card(board.watcher.ids[0])
    assert board.watcher.run_action("download", first.task_id) is not None
    board.watcher.run_action("extend", first.task_id)

    canary.set_faults("envelope_error:path=/v1/music/generate,server_error:count=5:path=/v1/get_api_key_info")
    assert board.generate.submit() is None and board.generate.error  # shown in the form
    assert board.key_info.refresh() is None and board.key_info.error
    evidence.add("generate form error", board.generate.error)
    evidence.add("key info error", board.key_info.error)

    with stranger_sandbox.client(api_key=CANARY) as wrong:  # a wrong key: the 401 paths
        stranger_form = Studio(wrong).song
        stranger_form.set_values(style="x")
        assert stranger_form.submit() is None and "API key" in stranger_form.error_title
        stranger_v2 = Studio(wrong).v2
        stranger_v2.set_values(is_auto=1, prompt="x")
        assert stranger_v2.submit() is None
        stranger_panel = Studio(wrong).key_info
        stranger_panel.refresh()
        assert stranger_panel.info is None and stranger_panel.error
        stranger_watch = TaskWatcher(board.watcher.ids[:2], client=wrong, autostart=False)
        stranger_watch.poll_once()
        assert stranger_watch.last_error
        for widget in (stranger_form, stranger_v2, stranger_panel, stranger_watch):
            evidence.add(f"repr {type(widget).__name__}", repr(widget))
        evidence.add("watcher error", stranger_watch.last_error)
        evidence.add("stranger card", stranger_watch.card(board.watcher.ids[0]).html)

    for card in board.watcher.cards.values():
        evidence.add(f"card {card.task_id}", card.html)
        evidence.add(f"card repr {card.task_id}", repr(card))
    evidence.add("studio repr", repr(board))
    evidence.add("key panel", json.dumps(board.key_info.state()))
    evidence.widgets()
    board.close()
    stranger_watch.close()
    for pane in (stranger_form, stranger_v2, stranger_panel):
        pane.studio.close()
    assert_clean(evidence, canary_session)


MAGIC_CELLS = (
    "%musicgen_key",
    "songs = %musicgen --wait --timeout 60 canary lo-fi",
    "words = %lyrics a canary that sings at night",
    "%%musicgen --wait --timeout 60 --v2 --prompt folk --title Canary\n{words}",
    "%musicgen_tasks",
    "%musicgen_tasks --state complete --since 1h --text canary",
    "%musicgen_tasks {songs[0].id} {songs[1].id}",
    "%musicgen_resume",
    "%config MusicGen.allow_unknown_models = True",
    "%musicgen --mv MFV9.9 --no-watch a 422 from the service",
    "%musicgen --no-watch --title " + "x" * 100 + " --style pop la",
)


@pytest.mark.slow
def test_magics_never_show_the_canary(
    canary: Sandbox, stranger_sandbox: Sandbox, canary_session: Path, evidence: Evidence
) -> None:
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "ipymusicgen")
    try:
        for cell in MAGIC_CELLS:
            run_and_collect(shell, cell, evidence)
        assert [r.state for r in shell.user_ns["songs"]] == [TaskState.COMPLETE] * 2
        for name in ("songs", "words"):
            value = shell.user_ns[name]
            evidence.add(f"user_ns {name}", repr(value))
            evidence.add(f"user_ns {name} html", getattr(value, "_repr_html_", lambda: "")())
        for magic, line in (("musicgen_key", ""), ("musicgen_tasks", "")):
            value = shell.run_line_magic(magic, line)
            evidence.add(f"%{magic} html", value._repr_html_())
            evidence.add(f"%{magic} repr", repr(value))
        canary.set_faults("drop:after:path=/v1/music/generate")  # an unknown outcome, then resume explains
        run_and_collect(shell, "%musicgen --no-watch a lost answer", evidence)
        run_and_collect(shell, "%musicgen_resume", evidence)

        point_session(stranger_sandbox, canary_session)  # the canary is a wrong key there
        for magic, line in (("musicgen", "--no-watch wrong key"), ("musicgen_key", ""), ("lyrics", "rain")):
            with pytest.raises(UsageError, match="MUSICGEN_API_KEY") as caught:
                shell.run_line_magic(magic, line)
            evidence.error(f"%{magic} wrong key", caught.value)
            run_and_collect(shell, f"%{magic} {line}", evidence)
    finally:
        shell.run_line_magic("config", "MusicGen.allow_unknown_models = False")
        shell.run_line_magic("unload_ext", "ipymusicgen")
        for name in ("songs", "words"):
            shell.user_ns.pop(name, None)
    evidence.widgets()
    assert_clean(evidence, canary_session)


def run_and_collect(shell: InteractiveShell, cell: str, evidence: Evidence) -> None:
    """Run a cell as a user would; keep its printed text, rich outputs, result and error."""
    with capture_output() as captured:
        result = shell.run_cell(cell)
    evidence.add(f"{cell!r} stdout", captured.stdout)
    evidence.add(f"{cell!r} stderr", captured.stderr)
    for output in captured.outputs:
        evidence.add(f"{cell!r} display", output.data)
    evidence.add(f"{cell!r} result", repr(result.result))
    html = getattr(result.result, "_repr_html_", None)
    if html is not None:
        evidence.add(f"{cell!r} html", html())
    error = result.error_in_exec or result.error_before_exec
    if error is not None:
        evidence.error(f"{cell!r} error", error)


@pytest.mark.slow
def test_client_errors_never_carry_the_canary(
    canary: Sandbox, stranger_sandbox: Sandbox, evidence: Evidence, tmp_path: Path
) -> None:
    from ipymusicgen.storage.journal import Journal

    journal_path = tmp_path / "errors.sqlite3"
    journal = Journal(journal_path)
    errors: list[MusicGenError] = []

    def expect_error(call: Callable[[], Any]) -> None:
        try:
            call()
        except MusicGenError as exc:
            errors.append(exc)
        else:
            raise AssertionError("expected an error")

    with canary.client(journal=journal, timeout=1.0, max_retries=0) as client:
        ids = client.generate(action="auto", style="canary errors").ids
        for kind in (
            "rate_limit",
            "server_error",
            "malformed",
            "envelope_error",
            "drop",
            "drop:after",
            "slow:seconds=3",
        ):
            for path in ("/v1/music/generate", "/v1/music/tasks", "/v2/submit", "/v1/lyrics"):
                canary.set_faults(f"{kind}:path={path}")
                expect_error(
                    {
                        "/v1/music/generate": lambda: client.generate(action="auto", style="x"),
                        "/v1/music/tasks": lambda: client.tasks(ids),
                        "/v2/submit": lambda: client.submit_v2(is_auto=1, model_version="v4.5", prompt="x"),
                        "/v1/lyrics": lambda: client.lyrics("x"),
                    }[path]
                )
        canary.clear_faults()
        expect_error(lambda: client.generate_vibe("no-such-song"))
        expect_error(lambda: client.query_v2("no-such-song"))
        expect_error(lambda: client.generate_mp4(ids[0]))
        expect_error(lambda: client.download("http://127.0.0.1:9/nothing.mp3", tmp_path))
        expect_error(lambda: client.wait(["x"], timeout=0.01, interval=0.01))
    with canary.client(journal=journal, allow_unknown_models=True) as client:
        expect_error(lambda: client.generate(action="custom", mv="MFV9.9", lyrics="la", title="t", style="s"))
    with stranger_sandbox.client(api_key=CANARY, journal=journal) as wrong:
        for call in (wrong.key_info, lambda: wrong.generate(action="auto"), lambda: wrong.tasks(["a"])):
            expect_error(call)
    with MusicClient(CANARY, base_url="http://127.0.0.1:9", v2_base_url="http://127.0.0.1:9", max_retries=0) as dead:
        expect_error(dead.key_info)
    expect_error(lambda: MusicClient(CANARY, base_url="http://music.example.com"))  # insecure http refused

    assert len(errors) >= 30
    kinds = {type(e).__name__ for e in errors}
    assert {"RateLimitError", "InternalServerError", "CreateOutcomeUnknownError", "AuthenticationError"} <= kinds
    assert {"UnprocessableEntityError", "APIResponseValidationError", "EnvelopeError"} <= kinds
    for exc in errors:
        evidence.error(type(exc).__name__, exc)
    journal.close()
    assert_clean(evidence, journal_path)


def test_notebooks_never_show_the_canary(notebook_runs: NotebookRuns) -> None:
    """Every demo notebook, run with the canary as the key (once per test run, shared with test_notebooks);
    the executed JSON, its widget state and the notebook's journal are searched."""
    assert notebook_runs.key == CANARY
    evidence = Evidence()
    journals = []
    for name in NOTEBOOK_NAMES:
        run = notebook_runs[name]
        text = nbformat.writes(run.notebook)
        assert any(cell.get("outputs") for cell in run.notebook.cells if cell.cell_type == "code"), name
        evidence.add(f"notebook {name}", text)
        evidence.add(f"notebook {name} widgets", json.dumps(run.notebook.metadata.get("widgets", {})))
        journals.append(run.journal)
    counts = notebook_runs.service.request_counts()  # the notebooks really used the canary key
    assert counts.get("/v1/get_api_key_info", 0) >= 1 and counts.get("/v1/music/generate", 0) >= len(journals)
    for journal in journals[:-1]:
        assert journal.exists(), f"no journal at {journal}: nothing of it was checked"
        for file in journal.parent.glob(journal.name + "*"):
            evidence.add(f"journal {journal.parent.name}/{file.name}", file.read_bytes())
    assert_clean(evidence, journals[-1], minimum=3 * len(journals))  # each notebook's JSON, widgets and journal


# ---------------------------------------------------------------------------------------------------
# (b) Hostile server text and URLs.

HOSTILE_TITLE = "<script>alert(1)</script><img src=x onerror=alert(2)>\"'&"
HOSTILE_TEXT = (
    '<script>alert("lyrics")</script>\n<img src=x onerror=alert(3)>\n"quoted" \'single\' & '
    '</pre></td><a href="javascript:alert(4)">click</a>'
)
HOSTILE_URLS = (
    "javascript:alert(1)",
    "JaVaScRiPt:alert(1)",
    " javascript:alert(1)",
    "data:text/html,<script>alert(1)</script>",
    "data:audio/mpeg;base64,AAAA",
    "file:///etc/passwd",
    "//evil.example/a.mp3",
    "vbscript:msgbox(1)",
    "http://",
    'https://ok.example/a.mp3" onerror="alert(1)',
)
BANNED_TAGS = {"script", "img", "iframe", "object", "embed", "svg", "math", "style", "link", "meta", "base"}
BANNED_TAGS |= {"form", "audio", "video", "source", "input", "button", "frame"}
URL_ATTRIBUTES = {"href", "src", "action", "formaction", "srcset", "poster", "data", "xlink:href", "background"}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def audit(html: str) -> list[tuple[str, dict[str, str | None]]]:
    """Fail on live markup from server text: banned tags, event handlers, links that are not http(s)."""
    parser = _Tags()
    parser.feed(html)
    parser.close()
    for tag, attrs in parser.tags:
        assert tag not in BANNED_TAGS, (tag, html)
        for name, value in attrs.items():
            assert not name.startswith("on"), (name, html)
            if name in URL_ATTRIBUTES:
                parts = urlsplit(value or "")
                assert parts.scheme in ("http", "https") and parts.netloc, (name, value, html)
                assert '"' not in (value or "") and " " not in (value or ""), (name, value, html)
    assert "<script" not in html.lower() and "<img" not in html.lower()
    return parser.tags


def links(html: str) -> list[str]:
    return [attrs.get("href") or "" for tag, attrs in audit(html) if tag == "a"]


@pytest.mark.slow
def test_hostile_titles_lyrics_and_fail_reasons_through_the_magics(
    canary: Sandbox, canary_session: Path, evidence: Evidence
) -> None:
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "ipymusicgen")
    shell.run_line_magic("config", "MusicGen.auto_watch = False")
    shell.user_ns.update(bad_title=HOSTILE_TITLE, bad_style=HOSTILE_TITLE[:40], bad_text=HOSTILE_TEXT)
    try:
        made = shell.run_line_magic(
            "musicgen", "--wait --timeout 60 --title {bad_title} --style {bad_style} {bad_text}"
        )
        assert {r.title for r in made} == {HOSTILE_TITLE} and made[0].lyrics == HOSTILE_TEXT
        canary.set_faults([{"kind": "task_fail", "path": "/v1/music/generate", "fail_reason": HOSTILE_TEXT}])
        failed = shell.run_line_magic("musicgen", "--wait --timeout 60 --title {bad_title} --style pop la la")
        assert {r.state for r in failed} == {TaskState.FAILED} and failed[0].fail_reason == HOSTILE_TEXT
        extended = shell.run_line_magic(
            "musicgen", "--wait --timeout 60 --continue-song-id {bad_title} --continue-at 1 la"
        )  # the sandbox's own fail_reason quotes the hostile id
        assert "<script>alert(1)</script>" in (extended[0].fail_reason or "")
        ids = " ".join(r.id for r in [*made, *failed, *extended])
        tables = [
            shell.run_line_magic("musicgen_tasks", ids),
            shell.run_line_magic("musicgen_tasks", ""),
            shell.run_line_magic("musicgen_tasks", "--text script"),
        ]
        lyrics = shell.run_line_magic("lyrics", "{bad_text}")
    finally:
        shell.run_line_magic("config", "MusicGen.auto_watch = True")
        shell.run_line_magic("unload_ext", "ipymusicgen")
        for name in ("bad_title", "bad_style", "bad_text"):
            shell.user_ns.pop(name, None)
    assert len(tables[0]) == 6 and len(tables[2]) >= 4
    for table in tables:
        html = table._repr_html_()
        assert "&lt;script&gt;" in html
        assert all(urlsplit(h).scheme == "http" for h in links(html))  # only the sandbox's own audio URLs
    assert "&lt;img src=x onerror=alert(3)&gt;" in tables[0]._repr_html_()  # the fail reason, escaped
    audit(lyrics._repr_html_())
    audit(Lyrics(HOSTILE_TEXT, title=HOSTILE_TITLE)._repr_html_())
    assert "&lt;/pre&gt;" in Lyrics(HOSTILE_TEXT, title=HOSTILE_TITLE)._repr_html_()


def hostile_record(url: str, status: int = 0, **extra: Any) -> TaskRecord:
    return TaskRecord(
        id="t-" + secrets.token_hex(3),
        status=status,
        title=HOSTILE_TITLE,
        style=HOSTILE_TITLE,
        audio_url=url,
        cover_url=url,
        lyric=HOSTILE_TEXT,
        duration=4000,
        **extra,
    )


@pytest.mark.parametrize("url", HOSTILE_URLS)
def test_hostile_urls_never_become_links_in_magic_tables(url: str) -> None:
    records = [hostile_record(url), hostile_record(url, status=3, fail_reason=url)]
    html = Table([record_row(r) for r in records], records)._repr_html_()
    assert links(html) == []
    info = KeyInfo.model_validate({"key_name": url, "email": HOSTILE_TITLE, "member_id": url, "key_music_counts": 3})
    report = KeyReport(info, mask_key("sk-abcdefghijklmnop"), "http://127.0.0.1")._repr_html_()
    assert links(report) == [] and "http://127.0.0.1" in report  # only URL columns link; the host stays text


@pytest.mark.parametrize("url", HOSTILE_URLS)
def test_hostile_urls_never_become_players_images_or_links_in_cards(url: str) -> None:
    card = TaskCard("t1")
    for state, status in ((TaskState.PREVIEW, 2), (TaskState.COMPLETE, 0)):
        record = hostile_record(url, status=status)
        card.update(record)
        assert card.state is state
        data = card.data()  # what the browser gets: the URL is dropped, the title is plain text
        assert card.audio_url is None and data["audio_url"] is None and data["cover_url"] is None
        assert data["title"] == HOSTILE_TITLE
        assert links(card.html) == []
        assert "&lt;script&gt;" in card.html
    v2_card = TaskCard("s1", v2=True)
    v2_card.update(V2Song(song_id="s1", status="FINISHED", audio=url, image=url, title=HOSTILE_TITLE))
    assert v2_card.audio_url is None and v2_card.data()["cover_url"] is None and links(v2_card.html) == []


@pytest.mark.slow
def test_a_hostile_service_through_the_widgets() -> None:
    """A service that answers every call with hostile text: forms, key panel and watcher show it inert."""
    bad_url = "javascript:alert(1)"

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/music/tasks":
            data = [
                hostile_record(bad_url, status=0).model_dump(),
                hostile_record(bad_url, 3, fail_reason=HOSTILE_TEXT).model_dump(),
            ]
            return httpx.Response(200, json=[{**d, "id": i} for d, i in zip(data, ("a", "b"), strict=True)])
        if path == "/v1/get_api_key_info":
            return httpx.Response(200, json={"status": 200, "data": {"key_name": HOSTILE_TITLE, "member_id": bad_url}})
        if path == "/v1/music/generate":
            detail = [{"loc": ["body", "style"], "msg": HOSTILE_TEXT, "type": "value_error", "input": HOSTILE_TITLE}]
            return httpx.Response(422, json={"detail": detail})
        if path == "/v2/submit":
            return httpx.Response(200, json={"status": 400, "message": HOSTILE_TEXT, "data": None})
        return httpx.Response(500, text=HOSTILE_TEXT)

    client = MusicClient(
        "k-hostile-test",
        base_url="http://127.0.0.1:9",
        v2_base_url="http://127.0.0.1:9",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )
    form = Studio(client).song
    form.set_values(action="auto", style="calm")
    assert form.submit() is None
    v2 = Studio(client).v2
    v2.set_values(is_auto=1, prompt="calm")
    assert v2.submit() is None
    panel = Studio(client).key_info
    panel.refresh()
    watcher = TaskWatcher(["a", "b"], client=client, autostart=False)
    watcher.poll_once()
    failing = TaskWatcher(["c"], v2_ids=["d"], client=client, autostart=False)
    with pytest.raises(MusicGenError):
        client.query_v2("d")
    failing.poll_once()  # the v2 query answers HTTP 500 with hostile text: shown as a polling error
    assert watcher.done and watcher.card("b").state is TaskState.FAILED
    assert "HTTP 500" in str(failing.header()["error"])  # plain text: the browser sets it with textContent
    for html in [failing.card("c").html] + [card.html for card in watcher.cards.values()]:
        assert links(html) == []
    # the panes hold server text as data (the studio's front end sets it with textContent, tested in a browser)
    assert HOSTILE_TEXT in form.fields["style"]["problem"] or HOSTILE_TEXT in form.error
    assert HOSTILE_TEXT in v2.error and "&lt;script&gt;" in watcher.card("b").html
    assert panel.state()["rows"][0][1] == HOSTILE_TITLE and panel.state()["ok"]
    assert all(card.audio_url is None for card in watcher.cards.values())
    for widget in (form.studio, v2.studio, panel.studio, watcher, failing):
        widget.close()
