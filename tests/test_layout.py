"""The tree reads as the data flow: record -> analysis -> plan -> pipeline -> route / simulator -> verify.

Checked from the source (every ``import``, lazy ones inside functions included): no module
imports one of a later step, no two modules import each other through any chain, no module
is over 600 lines, and at most 12 modules sit directly in ``loadprobe/``.
"""

from __future__ import annotations

import ast

from .conftest import REPO

# Where each importable package's files live (pyproject.toml maps three folders into loadprobe).
FOLDERS = {"loadprobe": "loadprobe", "loadprobe.instrumentation": "instrumentation",
           "loadprobe.reports": "reports", "loadprobe.samples": "samples"}

# What each part of the package may import, besides itself. The contracts every step shares
# (file formats, the hardware catalog, the Portrait, pipeline.yaml) come first; each later
# step may use the earlier ones, never the reverse. cli, demo, samples and the package's own
# __init__ sit on top and may use anything.
CONTRACTS = {"_errors", "_version", "_files", "_imports", "_table", "formats", "schema", "catalog", "portrait", "pipeline"}
MAY_IMPORT = {
    "contracts": CONTRACTS,
    "record": CONTRACTS,
    "align": CONTRACTS,
    "estimate": CONTRACTS,
    "analysis": CONTRACTS | {"record"},
    "instrumentation": CONTRACTS | {"record", "align"},
    "route": CONTRACTS | {"record"},
    "load": CONTRACTS | {"record", "analysis"},
    "simulator": CONTRACTS | {"route", "load", "analysis", "estimate"},
    "plan": CONTRACTS | {"analysis", "align", "load", "simulator", "estimate"},
    "reports": CONTRACTS | {"analysis", "align", "plan", "simulator", "estimate"},
    "verify": CONTRACTS | {"analysis", "simulator", "estimate"},
    # Writes text for other servers from pipeline.yaml alone (what it generates may import more).
    "export": CONTRACTS,
}


def _modules() -> dict[str, tuple]:
    found = {}
    for package, folder in FOLDERS.items():
        for path in (REPO / folder).rglob("*.py"):
            parts = (package, *path.relative_to(REPO / folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


MODULES = _modules()


def _imports(name: str) -> set[str]:
    """Every loadprobe module ``name`` imports, anywhere in its source."""
    path, is_package = MODULES[name]
    here = name.split(".") if is_package else name.split(".")[:-1]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = ".".join(here[: len(here) - node.level + 1] + [node.module or ""]).strip(".") if node.level \
                else node.module
            for alias in node.names:
                targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
        elif isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
    return {t for t in targets if t in MODULES and t != name}


GRAPH = {name: _imports(name) for name in MODULES}


def _part(name: str) -> str:
    """The step a module belongs to: its subpackage, or "contracts" / "top" for loadprobe/*.py."""
    parts = name.split(".")
    if len(parts) == 1:
        return "top"
    if parts[1] in CONTRACTS:
        return "contracts"
    return parts[1] if parts[1] in MAY_IMPORT else "top"


def test_no_module_imports_a_later_step():
    wrong = []
    for name, targets in GRAPH.items():
        part = _part(name)
        if part == "top":
            continue
        for target in targets:
            step = target.split(".")[1] if target.count(".") else "top"
            if _part(target) != part and step not in MAY_IMPORT[part]:
                wrong.append(f"{name} imports {target}")
    assert not wrong, "\n".join(sorted(wrong))


def test_nothing_imports_the_command_line():
    """The commands sit on top of every step (the demo included): what a command prints of a result
    lives beside the result (``render()``), so no step needs the command line."""
    wrong = [f"{name} imports {target}" for name, targets in GRAPH.items()
             if not name.startswith("loadprobe.cli") and name != "loadprobe.__main__"
             for target in targets if target == "loadprobe.cli" or target.startswith("loadprobe.cli.")]
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_cycles():
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in GRAPH:
        if name not in index:
            visit(name)
    assert not cycles, cycles


def test_no_module_is_over_600_lines():
    long = {str(path.relative_to(REPO)): n for path, _ in MODULES.values()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > 600}
    assert not long, long


def test_at_most_12_modules_directly_in_the_package():
    top = sorted(p.name for p in (REPO / "loadprobe").glob("*.py"))
    assert len(top) <= 12, top


def test_the_checks_see_the_imports_they_judge():
    # A parser that saw no imports would pass every check above.
    assert "loadprobe.record.probe" in GRAPH["loadprobe"]
    assert any(t.startswith("loadprobe.analysis.") for t in GRAPH["loadprobe.analysis.run"])
    assert _part("loadprobe.plan.planner") == "plan" and _part("loadprobe.portrait") == "contracts"
