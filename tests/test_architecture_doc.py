"""docs/architecture.md says what is true of the code: it names every subpackage, each arrow of its import picture is
an import the code makes, and each arrow of its ownership picture is an attribute the class it starts from holds."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest
from test_layers import PACKAGE, graph

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
NODE = re.compile(r'^\s*(\w+)\["([^"]+)"\]\s*$')
EDGE = re.compile(r"^\s*(\w+)\s*-->\s*(?:\|(\w+)\|\s*)?(\w+)\s*$")


def pictures(text: str) -> list[str]:
    return re.findall(r"```mermaid\n(.*?)```", text, flags=re.S)


def parse(picture: str) -> tuple[dict[str, str], list[tuple[str, str | None, str]]]:
    """The picture's nodes (id -> label) and arrows (from, attribute or None, to); any other line is refused, so a
    line the checks would not read cannot slip in."""
    nodes: dict[str, str] = {}
    edges: list[tuple[str, str | None, str]] = []
    for line in picture.strip().splitlines()[1:]:  # the first line is the kind of chart
        if found := NODE.match(line):
            nodes[found[1]] = found[2]
        elif found := EDGE.match(line):
            edges.append((found[1], found[2], found[3]))
        else:
            raise AssertionError(f"a line the doc's checks cannot read: {line!r}")
    return nodes, edges


def subpackages() -> set[str]:
    return {p.parent.name for p in PACKAGE.glob("*/__init__.py")}


def part_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


@functools.cache
def part_edges() -> frozenset[tuple[str, str]]:
    """(a, b) for every part (subpackage or top module) a whose modules import a module of part b."""
    return frozenset((part_of(s), part_of(t)) for s, targets in graph().items() for t in targets)


def false_import_arrows(nodes: dict[str, str], edges: list[tuple[str, str | None, str]]) -> list[str]:
    """The arrows of an import picture that no import of the code makes (a node stands for the parts it lists)."""
    members = {node: [m.strip() for m in label.split("·")] for node, label in nodes.items()}
    return [
        f"{a} --> {b}"
        for a, _, b in edges
        if not any((x, y) in part_edges() for x in members[a] for y in members[b] if x != y)
    ]


def _source(dotted: str) -> tuple[ast.Module, str | None, str]:
    """The module a dotted name lives in, the class it names (None when it names a module), and its package."""
    parts = dotted.split(".")
    for cut in (len(parts), len(parts) - 1):
        base = PACKAGE.joinpath(*parts[:cut])
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                package = ".".join(parts[:cut] if path.name == "__init__.py" else parts[: cut - 1])
                return ast.parse(path.read_text()), (None if cut == len(parts) else parts[-1]), package
    raise AssertionError(f"{dotted} is no module of the package")


def _base_names(tree: ast.Module, package: str, dotted: str, cls: ast.ClassDef) -> list[str]:
    """The package's dotted names of a class's bases (a base in the same module, or imported relatively)."""
    above = package.split(".") if package else []
    imported = {
        alias.asname or alias.name: ".".join(above[: len(above) - node.level + 1]
                                            + ([node.module] if node.module else []) + [alias.name])
        for node in tree.body if isinstance(node, ast.ImportFrom) and node.level
        for alias in node.names
    }  # fmt: skip
    names = [b.id for b in cls.bases if isinstance(b, ast.Name)]
    here = dotted.rpartition(".")[0]
    return [imported.get(n, f"{here}.{n}") for n in names if n in imported or _has_class(tree, n)]


def _has_class(tree: ast.Module, name: str) -> bool:
    return any(isinstance(n, ast.ClassDef) and n.name == name for n in tree.body)


def attributes(dotted: str) -> set[str]:
    """What a class holds (self.x assignments, annotated class fields, properties and methods, its bases' too) or a
    module defines at its top level (assigned names)."""
    tree, name, package = _source(dotted)
    if name is None:
        targets = [t for n in tree.body if isinstance(n, ast.Assign) for t in n.targets]
        targets += [n.target for n in tree.body if isinstance(n, ast.AnnAssign)]
        return {t.id for t in targets if isinstance(t, ast.Name)}
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    assert classes, f"{dotted}: no class {name} there"
    held: set[str] = set()
    for node in ast.walk(classes[0]):
        if isinstance(node, ast.FunctionDef):
            held.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            held.add(node.target.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _is_self(node.value):
            held.add(node.attr)
    for base in _base_names(tree, package, dotted, classes[0]):
        held |= attributes(base)
    return held


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def false_ownership_arrows(nodes: dict[str, str], edges: list[tuple[str, str | None, str]]) -> list[str]:
    wrong = []
    for a, attribute, b in edges:
        if attribute is None or b not in nodes or attribute not in attributes(nodes[a]):
            wrong.append(f"{a} --{attribute}--> {b}")
    return wrong


def test_the_doc_names_every_subpackage_in_its_text_and_in_its_import_picture() -> None:
    text = DOC.read_text()
    nodes, _ = parse(pictures(text)[0])
    drawn = {m.strip() for label in nodes.values() for m in label.split("·")}
    assert subpackages() >= {"archive", "workspace", "gateway", "engines"}  # the walk finds the package
    assert sorted(name for name in subpackages() if f"`{name}/`" not in text) == []
    assert sorted(subpackages() - drawn) == []


def test_every_arrow_of_the_import_picture_is_an_import_of_the_code() -> None:
    nodes, edges = parse(pictures(DOC.read_text())[0])
    assert len(edges) > 20
    assert false_import_arrows(nodes, edges) == []


def test_the_import_check_refuses_an_arrow_the_code_does_not_make() -> None:
    """The check above could not pass by finding nothing: the old doc's `storage --> client` (storage imports no
    client module) and an upward arrow are both refused, while a true one passes."""
    nodes = {"storage": "storage", "client": "client", "models": "models", "widgets": "widgets"}
    edges = [("storage", None, "client"), ("models", None, "widgets"), ("client", None, "models")]
    assert false_import_arrows(nodes, edges) == ["storage --> client", "models --> widgets"]


def test_every_arrow_of_the_ownership_picture_is_an_attribute_its_class_holds() -> None:
    nodes, edges = parse(pictures(DOC.read_text())[1])
    assert {"workspace.workspace.Workspace", "archive.events.ArchiveEvents", "lab.analyst.Analysts"} <= set(
        nodes.values()
    )
    assert false_ownership_arrows(nodes, edges) == []


@pytest.mark.parametrize(
    ("label", "attribute"),
    [
        ("workspace.workspace.Workspace", "listeners"),  # a class that holds no such thing
        ("archive.archiver.Archiver", "_listeners"),  # the registry that is gone
        ("workspace.session", "places"),  # a module that defines no such name
    ],
)
def test_the_ownership_check_refuses_an_attribute_the_class_does_not_hold(label: str, attribute: str) -> None:
    nodes = {"A": label, "B": "storage.database.Database"}
    assert false_ownership_arrows(nodes, [("A", attribute, "B")]) == [f"A --{attribute}--> B"]


def test_the_ownership_check_refuses_a_class_that_is_not_there() -> None:
    with pytest.raises(AssertionError, match="no class"):
        attributes("archive.archiver.ArchivePlaces")
