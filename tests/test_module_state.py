"""The package-wide guard (issue 38): no module of `ipymusicgen` keeps mutable state of its own or does anything when
it is imported, except the three whose job it is: `lifecycle.py` (the one exit path), the shared-connection
registry (`storage/shared_connection.py`: one connection per journal file per process) and the session module
(`workspace/session.py`: the current workspace, and the one hook that installs the client's default wiring).
Everything else that lives longer than a call is owned by an object a caller builds (a `Workspace`, its
`Database`, its wiring) and passes down.

What counts as state: a `global` statement; a name bound at a module's top level to a dict, list or set (a
literal, a comprehension, or a call of dict/list/set/a lock/a weak collection/a thread-local...); a call made as a
statement at a module's top level. A constant is written as one: a tuple, a frozenset, a `MappingProxyType`."""

from __future__ import annotations

import ast
from pathlib import Path
from types import MappingProxyType

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "ipymusicgen"
OWNERS_OF_STATE = ("lifecycle.py", "storage/shared_connection.py", "workspace/session.py")
"""The modules whose job is process state (the issue names them)."""
HOOK_SLOT = ("client/wiring.py", "_installed")
"""The slot the session's one hook fills (`wiring.install`): the client layer cannot import its default from the
layers above, so the session module puts it here when it is imported."""
NOT_YET = MappingProxyType(
    {
        "lab/analysis_worker.py": "the process's pool of analysis worker processes per cache folder (`_shared`), in "
        "the lab's modules being reworked beside this change (issue 38's analyst per workspace)",
        "storage/ledger_migrations.py": "the gateway ledger's migration list (`MIGRATIONS`), in the gateway's files "
        "being changed beside this one; the journal's own (storage/migrations.py) is a tuple built from its steps",
    }
)
"""Modules that still hold state, each with what and why: the test names them so they cannot grow unseen."""
MUTABLE_CALLS = frozenset(
    {
        "dict", "list", "set", "bytearray", "defaultdict", "OrderedDict", "Counter", "deque", "WeakSet",
        "WeakValueDictionary", "WeakKeyDictionary", "Lock", "RLock", "Event", "Condition", "Semaphore",
        "BoundedSemaphore", "local", "Queue", "SimpleQueue", "fromkeys",
    }
)  # fmt: skip
MUTABLE_NODES = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)


def _called(node: ast.expr) -> str:
    func = node.func if isinstance(node, ast.Call) else None
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def state_in(source: str, where: str) -> list[str]:
    """What of `source` is module state or an import-time call, one line each."""
    tree = ast.parse(source)
    found = [f"{where}:{n.lineno} global {', '.join(n.names)}" for n in ast.walk(tree) if isinstance(n, ast.Global)]
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call | ast.Await):
            found.append(f"{where}:{node.lineno} call at import: {ast.unparse(node)[:70]}")
        targets: list[ast.expr] = []
        value = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        names = [ast.unparse(t) for t in targets]
        if value is None or names == ["__all__"] or (where, names[0]) == HOOK_SLOT:
            continue
        if isinstance(value, MUTABLE_NODES) or (isinstance(value, ast.Call) and _called(value) in MUTABLE_CALLS):
            found.append(f"{where}:{node.lineno} mutable {', '.join(names)} = {ast.unparse(value)[:50]}")
    return found


def test_the_check_finds_state_where_it_is() -> None:
    hostile = """
import threading
_cache = {}
_seen: set[str] = set()
_lock = threading.Lock()
ROWS = [1, 2]
SQUARES = {n: n * n for n in range(3)}
_local = threading.local()
KEYS = dict.fromkeys("ab")
register(lambda: None)
def f():
    global _cache
__all__ = ["f"]
FROZEN = frozenset({"a"})
TABLE = MappingProxyType({"a": 1})
PAIRS = (("a", 1),)
"""
    found = state_in(hostile, "x.py")
    assert len(found) == 9, found
    for name in ("_cache", "_seen", "_lock", "ROWS", "SQUARES", "_local", "KEYS", "register(", "global _cache"):
        assert any(name in line for line in found), name
    assert not any(name in " ".join(found) for name in ("__all__", "FROZEN", "TABLE", "PAIRS"))


def test_no_module_of_the_package_keeps_state_or_acts_when_imported() -> None:
    """Every module but the three owners of process state: no mutable module-level value, no `global`, no call
    made at import (a registration, a thread, an import hook)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where in OWNERS_OF_STATE or where in NOT_YET:
            continue
        found += state_in(path.read_text(encoding="utf-8"), where)
    assert found == []


def test_the_modules_not_yet_cleared_still_exist_and_still_hold_state() -> None:
    """A module leaves `NOT_YET` as soon as it holds no state (this fails then, so the list only shrinks)."""
    for where in NOT_YET:
        assert state_in((PACKAGE / where).read_text(encoding="utf-8"), where), f"{where} is clear: drop it from NOT_YET"


MEMOS = MappingProxyType(
    {
        "client/responses.py:key_pattern": "a key's echo pattern (the pattern holding the key sits in `re`'s own "
        "compile cache anyway); 8 at most",
        "client/responses.py:_key_bytes_pattern": "the same pattern as bytes",
        "client/transport.py:_trust_store": "the TLS trust store httpx would load for every client, one per "
        "SSL_CERT_FILE / SSL_CERT_DIR setting (its key): a pure function of its arguments",
        "mcp/text.py:_shown": "one character as kept: a pure function of the character",
        "mcp/tool_params.py:_schema_text": "a request model's JSON schema: a pure function of a class of the package",
        "notebook/args.py:_default_parser": "%musicgen's argument parser, built once from constant options",
        "storage/owner.py:_boot_id": "the machine's boot id (constant while the process runs)",
        "widgets/_static.py:_read": "a file shipped in the package (constant)",
        "widgets/_static.py:esm": "a view's ES module, read from the package (constant)",
        "widgets/_static.py:css": "a view's CSS, read from the package (constant)",
    }
)
"""Module-level caches (functools.cache/lru_cache), each with why it holds nothing of a caller's world (no client,
no workspace, no file but the package's own): a new one keyed by a path, a client or a workspace fails."""
CLASS_TABLES = frozenset({"storage/ledger.py:GatewayLedger.types", "storage/ledger_postgres.py:PostgresLedger.types",
                          "storage/ledger_sqlite.py:SqliteLedger.types"})  # fmt: skip
"""Class-level dicts that are constant tables (an engine's column types, only read)."""


def hidden_state_in(source: str, where: str) -> list[str]:
    """What the module-level check cannot see: caches on functions, mutable class attributes and mutable defaults."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for decorator in node.decorator_list:
                name = ast.unparse(decorator.func if isinstance(decorator, ast.Call) else decorator)
                if name.rsplit(".", 1)[-1] in ("cache", "lru_cache"):  # a cached_property is its object's
                    found.append(f"{where}:{node.name}")
            defaults = [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
            found += [f"{where}:{node.name} default {ast.unparse(d)}" for d in defaults if isinstance(d, MUTABLE_NODES)]
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                value = item.value if isinstance(item, ast.Assign | ast.AnnAssign) else None
                if isinstance(value, MUTABLE_NODES):
                    target = item.targets[0] if isinstance(item, ast.Assign) else item.target
                    found.append(f"{where}:{node.name}.{ast.unparse(target)}")
    return found


def test_the_hidden_check_finds_caches_class_tables_and_mutable_defaults() -> None:
    hostile = """
import functools
from functools import cache, lru_cache
@functools.lru_cache(maxsize=None)
def client_for(path): ...
@cache
def store_for(path): ...
class Registry:
    live = {}
    seen: list = []
    FROZEN = frozenset()
def remember(item, into=[]): ...
def keyed(*, by={}): ...
"""
    found = hidden_state_in(hostile, "x.py")
    assert sorted(found) == sorted(["x.py:client_for", "x.py:store_for", "x.py:Registry.live", "x.py:Registry.seen",
                                    "x.py:remember default []", "x.py:keyed default {}"])  # fmt: skip


def test_no_cache_class_registry_or_mutable_default_holds_a_callers_world() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where in OWNERS_OF_STATE:
            continue
        found += [f for f in hidden_state_in(path.read_text(encoding="utf-8"), where) if f not in MEMOS]
    assert [f for f in found if f not in CLASS_TABLES] == []
