"""The package's structure: layers import only downward, no import circles (lazy imports included), and a
plain script that generates, waits and archives loads nothing of the notebook, the widgets or the sandbox."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ipymusicgen.sandbox import Sandbox

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "ipymusicgen"

LAYERS: list[tuple[str, ...]] = [
    ("_version", "config", "errors", "safe_html", "lifecycle"),
    ("models",),
    ("client", "engines"),  # engines: each engine's wire rules, for the client, the gateway and the sandbox
    ("storage",),
    ("batch", "archive", "song_library", "lab", "sandbox"),
    ("workspace",),
    ("notebook", "widgets"),
    ("__init__", "__main__", "mcp", "gateway"),
]
"""Bottom to top: a module may import its own layer or those below, never one above."""
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_package(name: str) -> bool:
    return (PACKAGE.parent / name.replace(".", "/") / "__init__.py").exists()


def exists(name: str) -> bool:
    base = PACKAGE.parent / name.replace(".", "/")
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports_of(path: Path) -> set[str]:
    """Every ipymusicgen module a file imports, at the top or inside functions, except under TYPE_CHECKING."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    skip = _type_checking_lines(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("ipymusicgen"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if not source.startswith("ipymusicgen"):
                continue
            for alias in node.names:  # `from . import session` imports the module session
                found.add(f"{source}.{alias.name}" if exists(f"{source}.{alias.name}") else source)
    found.discard(name)
    return {m for m in found if m != "ipymusicgen" or name == "ipymusicgen"}


@functools.cache  # the source does not change during a run: parsed once for the tests that read it
def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in PACKAGE.rglob("*.py")}


def layer_of(name: str) -> int:
    parts = name.split(".")
    key = parts[1] if len(parts) > 1 else "__init__"
    return RANK[key]


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


@pytest.mark.slow
def test_every_module_has_a_layer() -> None:
    for name in graph():
        layer_of(name)  # a KeyError names a module that sits in no layer


def test_the_import_graph_has_no_circles_lazy_imports_included() -> None:
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    """The check above could not pass by finding nothing: a planted circle is found."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_imports_only_go_down_the_layers() -> None:
    upward = [
        f"{source} -> {target}"
        for source, targets in graph().items()
        for target in targets
        if layer_of(target) > layer_of(source)
    ]
    assert upward == []


@pytest.mark.slow
def test_the_client_layer_imports_nothing_above_itself() -> None:
    """Named on its own because it is the rule the design hangs on (no archive, session, sandbox or UI)."""
    edges = graph()
    for name, targets in edges.items():
        if name.startswith("ipymusicgen.client"):
            own = ("ipymusicgen.client", "ipymusicgen.engines")  # the engines' wire rules share the client's layer
            outside = {t for t in targets if layer_of(t) >= RANK["client"] and not t.startswith(own)}
            assert outside == set(), name


def test_lazy_imports_are_seen() -> None:
    """A function-level import counts: the session starts the sandbox lazily, and the graph knows it."""
    assert "ipymusicgen.sandbox" in graph()["ipymusicgen.workspace.session"]


SCRIPT = textwrap.dedent(
    """
    import json, sys
    from ipymusicgen import MusicClient
    from ipymusicgen.archive.archiver import archiver_of

    base, v2, key, journal, archive = sys.argv[1:6]
    with MusicClient(key, base_url=base, v2_base_url=v2, settings=None, archive=archive) as client:
        client.settings = client.settings.with_changes(journal_path=journal, poll_interval=0.05)
        songs = client.wait(client.generate(action="auto", style="lo-fi").ids, interval=0.05)
        assert archiver_of(client).join(60)
        archived = sorted(p.name for p in __import__("pathlib").Path(archive).glob("*.mp3"))
    print(json.dumps({"archived": archived, "modules": sorted(sys.modules)}))
    """
)


@pytest.mark.slow
def test_a_script_that_generates_waits_and_archives_loads_no_notebook_widget_or_sandbox_server(tmp_path: Path) -> None:
    with Sandbox(stage_seconds=0.05, song_seconds=2, faults="", keys={"script-key": 100}) as service:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, service.base_url, service.v2_base_url, "script-key",
             str(tmp_path / "journal.sqlite3"), str(tmp_path / "songs")],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(result["archived"]) == 2
    loaded = set(result["modules"])
    forbidden = {"IPython", "ipywidgets", "anywidget", "ipykernel", "fastapi", "uvicorn", "traitlets"}
    assert not forbidden & loaded
    ours = {m for m in loaded if m.startswith("ipymusicgen.")}
    assert not {m for m in ours if m.split(".")[1] in ("notebook", "widgets")}
    assert "ipymusicgen.sandbox.sandbox" not in ours
    assert {"ipymusicgen.workspace.workspace", "ipymusicgen.archive.archiver", "ipymusicgen.storage.journal"} <= ours


@pytest.mark.parametrize("module", ["ipymusicgen.journal", "ipymusicgen.costs", "ipymusicgen.tasks"])
def test_the_replaced_paths_of_the_unreleased_version_are_gone_with_their_tombstones(module: str) -> None:
    """The package was never released: its replaced names left no shims and no import hook behind."""
    import importlib
    import sys

    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(module)
    assert "ipymusicgen._removed" not in sys.modules


def test_the_current_paths_still_import() -> None:
    from ipymusicgen import Journal, MusicClient, library
    from ipymusicgen.client.faces import chunk_ids
    from ipymusicgen.models import costs, tasks
    from ipymusicgen.song_library import Library
    from ipymusicgen.widgets import TaskWatcher, studio, watch_unfinished

    assert callable(library) and Library and Journal and MusicClient and chunk_ids and costs and tasks
    assert TaskWatcher and studio and watch_unfinished
