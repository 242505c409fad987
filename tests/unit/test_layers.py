"""The shape of the code holds: dependencies point one way. Walks every module's imports with `ast`
(every `import` and `from ... import`, also those inside functions) and fails on each violation.

    schemas  <-  services/core  <-  services/ports  <-  services/app  <-  services/bootstrap
                 (pure)                                 (use cases)      (the only wiring)
    services/adapters implement the ports; only bootstrap imports them (and they one another).
    services/api, services/mcp, services/cli and workers/ are entry points; bench/ and tests/ sit outside.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUR_ROOTS = ("schemas", "services", "workers", "bench", "tests", "orgmem")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Absolute names a module imports (relative imports resolved against its package)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else module_name(path)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                found.add(".".join(base + ([node.module] if node.module else [])))
            elif node.module:
                found.add(node.module)
                # `from services import bootstrap` imports the module services.bootstrap
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def graph() -> dict[str, set[str]]:
    modules = {}
    for root in ("schemas", "services", "workers", "bench", "orgmem"):
        for path in sorted((ROOT / root).rglob("*.py")):
            modules[module_name(path)] = imports_of(path)
    return modules


GRAPH = graph()


def within(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def third_party(name: str) -> bool:
    top = name.split(".")[0]
    return top not in OUR_ROOTS and top not in sys.stdlib_module_names and top != "__future__"


def violations(sources: tuple[str, ...], allowed) -> list[str]:
    return sorted(f"{module} imports {target}" for module, targets in GRAPH.items() if within(module, *sources)
                  for target in targets if not allowed(module, target))


def test_the_graph_is_read():
    assert len(GRAPH) > 80
    assert "services.core.fusion" in GRAPH["services.app.retrieval"] or any(
        t.startswith("services.core") for t in GRAPH["services.app.retrieval"])


def test_nothing_in_services_or_schemas_imports_workers_bench_or_tests():
    assert violations(("services", "schemas"), lambda _m, t: not within(t, "workers", "bench", "tests")) == []


def test_the_core_is_pure():
    def allowed(_module: str, target: str) -> bool:
        if within(target, "services.core", "services.errors", "schemas"):
            return True
        top = target.split(".")[0]
        return top in sys.stdlib_module_names or top in ("__future__", "numpy")

    assert violations(("services.core",), allowed) == []


def test_schemas_depend_on_nothing_of_ours_but_schemas():
    assert violations(("schemas",), lambda _m, t: third_party(t) or not within(t, *OUR_ROOTS) or within(t, "schemas")) == []


def test_only_the_composition_root_and_entry_points_import_adapters():
    def allowed(module: str, target: str) -> bool:
        if not within(target, "services.adapters"):
            return True
        return within(module, "services.adapters", "services.bootstrap")

    assert violations(("services", "workers"), allowed) == []


def test_use_cases_and_ports_point_inwards():
    outer = ("services.api", "services.mcp", "services.cli", "services.bootstrap", "services.adapters", "services.demo")
    assert violations(("services.app", "services.ports", "services.errors", "services.settings",
                       "services.connectors"), lambda _m, t: not within(t, *outer)) == []


def test_the_api_reaches_the_wiring_only_through_bootstrap():
    assert violations(("services.api",), lambda _m, t: not within(t, "services.cli", "services.adapters")) == []


def test_the_mcp_server_is_an_entry_point_like_the_api():
    """services.mcp reaches the wiring only through bootstrap (its tools run the API's routes, so
    it may import services.api), and nothing below the entry points imports it."""
    assert any(within(module, "services.mcp") for module in GRAPH)
    assert violations(("services.mcp",), lambda _m, t: not within(t, "services.cli", "services.adapters")) == []
    inner = ("schemas", "services.core", "services.ports", "services.app", "services.bootstrap", "services.adapters",
             "services.connectors", "services.errors", "services.settings", "workers")
    assert violations(inner, lambda _m, t: not within(t, "services.mcp")) == []


def test_the_client_stays_light():
    """orgmem.client imports schemas, httpx and pydantic, never the server; nothing imports it back."""
    def allowed(_module: str, target: str) -> bool:
        top = target.split(".")[0]
        return within(target, "orgmem", "schemas") or top in sys.stdlib_module_names or \
            top in ("__future__", "httpx", "pydantic")

    assert any(within(module, "orgmem.client") for module in GRAPH)
    assert violations(("orgmem",), allowed) == []
    assert violations(("schemas", "services", "workers"), lambda _m, t: not within(t, "orgmem")) == []


def test_a_planted_violation_is_caught(tmp_path, monkeypatch):
    """The walk sees imports inside functions and relative ones, so the rules above can fail."""
    planted = tmp_path / "services" / "core" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text("def f():\n    from services.adapters.lexical import tantivy\n    from ..app import memory\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert imports_of(planted) >= {"services.adapters.lexical", "services.adapters.lexical.tantivy", "services.app"}


MAX_LINES = 400


def long_modules(root: Path = ROOT, limit: int = MAX_LINES) -> list[str]:
    """Modules over `limit` lines under the project's code roots (tests/ may hold longer files)."""
    found = []
    for top in ("schemas", "services", "workers", "orgmem", "bench"):
        for path in sorted((root / top).rglob("*.py")):
            lines = path.read_text(encoding="utf-8").count("\n")
            if lines > limit:
                found.append(f"{path.relative_to(root)}: {lines} lines")
    return found


def test_no_module_is_over_400_lines():
    """A module that grows past this holds more than one thing: split it by what it holds."""
    assert long_modules() == []


def test_a_long_module_is_caught(tmp_path):
    planted = tmp_path / "services" / "app" / "long.py"
    planted.parent.mkdir(parents=True)
    planted.write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "services" / "app" / "short.py").write_text("x = 1\n" * MAX_LINES)
    assert long_modules(tmp_path) == [f"{Path('services/app/long.py')}: {MAX_LINES + 1} lines"]
