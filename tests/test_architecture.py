"""The package's structure: subpackages import downward only, and never in a cycle.

Every ``import`` and ``from ... import`` in ``perception/`` counts, at module level and inside functions
(and under ``TYPE_CHECKING``): a deferred import hides a dependency from the import machinery, not from
the reader. A unit is a subpackage (``perception/scheduler/``) or a top-level module
(``perception/types.py``); the root ``perception/__init__.py`` only holds the version and lazy
aliases, so ``from perception import __version__`` is allowed from anywhere.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "perception"

#: The layers, lowest first (README "Layout"). A unit imports units of its own layer or below, never above.
LAYERS: tuple[tuple[str, ...], ...] = (
    # stage data
    ("types", "errors", "kinds", "config", "_imageio", "_paths", "_progress", "_lifetime", "_allocator", "_gc"),
    ("triton", "server", "modelkit"),  # transport, the embedded server, model-side code (runs inside Triton)
    ("scheduler", "fusion", "drives", "sim"),  # the runtime's stages, the drive format, the drive generator
    # what is built on the runtime
    ("replay", "metrics", "viz", "live", "importers", "evaluation", "benchmark", "fleet", "record"),
    ("ros",),  # the runtime as a ROS 2 node (the only unit that imports rclpy), built on live
    ("cli", "camera_training", "__main__"),  # entry points: nothing imports them
)
LAYER: Mapping[str, int] = {unit: i for i, units in enumerate(LAYERS) for unit in units}

#: Known violations in files this change could not touch (other work in flight): ``(file, imported unit)``.
#: The list can only shrink -- an entry that no longer occurs fails :func:`test_allow_list_only_shrinks`.
ALLOWED: frozenset[tuple[str, str]] = frozenset()


def _units() -> set[str]:
    return {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
            if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").is_file()}


def _module_name(path: Path) -> tuple[str, bool]:
    rel = (path.relative_to(ROOT) if path.is_relative_to(ROOT) else Path(path.name)).with_suffix("")
    is_package = rel.name == "__init__"
    parts = rel.parts[:-1] if is_package else rel.parts
    return ".".join(parts), is_package


def _unit_of(module: str, units: set[str]) -> str | None:
    parts = module.split(".")
    if parts[0] != "perception" or len(parts) < 2 or parts[1] not in units:
        return None
    return parts[1]


@functools.cache
def _imports(path: Path) -> tuple[tuple[str, int], ...]:
    """``(imported module, line)`` for every import in ``path``; ``from X import name`` also gives
    ``X.name`` (the name may be a submodule). Parsed once per file: three tests read the whole package
    (parsing it took ~8 s each in the suite's pytest process)."""
    return tuple(_each_import(path))


def _each_import(path: Path) -> Iterator[tuple[str, int]]:
    module, is_package = _module_name(path)
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield target, node.lineno
            for alias in node.names:
                yield f"{target}.{alias.name}", node.lineno


def _edges() -> dict[tuple[str, str], list[str]]:
    """``(importing unit, imported unit) -> ["file:line", ...]`` over the whole package."""
    units = _units()
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        src = _unit_of(_module_name(path)[0], units)
        if src is None:
            continue
        rel = path.relative_to(ROOT).as_posix()
        for target, line in _imports(path):
            dst = _unit_of(target, units)
            if dst is not None and dst != src and (rel, dst) not in ALLOWED:
                where = edges.setdefault((src, dst), [])
                if f"{rel}:{line}" not in where:
                    where.append(f"{rel}:{line}")
    return edges


def _cycles(edges: Mapping[tuple[str, str], list[str]]) -> list[list[str]]:
    """Strongly connected components with more than one unit (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for src, dst in edges:
        graph.setdefault(src, set()).add(dst)
        graph.setdefault(dst, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_unit_has_a_layer() -> None:
    missing = sorted(_units() - set(LAYER))
    assert not missing, f"place these in LAYERS (and the README's layout table): {missing}"
    stale = sorted(set(LAYER) - _units())
    assert not stale, f"LAYERS names units that do not exist: {stale}"


def test_no_upward_imports() -> None:
    upward = [
        f"{src} (layer {LAYER[src]}) imports {dst} (layer {LAYER[dst]}) at {', '.join(where)}"
        for (src, dst), where in sorted(_edges().items())
        if src in LAYER and dst in LAYER and LAYER[dst] > LAYER[src]
    ]
    assert not upward, "imports go downward only:\n" + "\n".join(upward)


def test_no_import_cycles() -> None:
    edges = _edges()
    report = []
    for component in _cycles(edges):
        members = set(component)
        report.append(" <-> ".join(component) + ": " + "; ".join(
            f"{src} -> {dst} at {where[0]}" + (f" (+{len(where) - 1} more)" if len(where) > 1 else "")
            for (src, dst), where in sorted(edges.items())
            if src in members and dst in members
        ))
    assert not report, "import cycles between subpackages:\n" + "\n".join(report)


def test_allow_list_only_shrinks() -> None:
    units = _units()
    for file, unit in sorted(ALLOWED):
        path = ROOT / file
        assert path.is_file(), f"{file} is gone: remove its ALLOWED entry"
        assert any(_unit_of(target, units) == unit for target, _ in _imports(path)), (
            f"{file} no longer imports perception.{unit}: remove its ALLOWED entry"
        )


def test_the_checks_see_a_cycle_and_an_upward_import(tmp_path: Path) -> None:
    """The detector itself: a cycle and a deferred import are found (so an empty result means something)."""
    edges = {("a", "b"): ["x"], ("b", "c"): ["y"], ("c", "a"): ["z"], ("c", "d"): ["w"]}
    assert _cycles(edges) == [["a", "b", "c"]]
    deferred = tmp_path / "deferred.py"
    deferred.write_text("import os\n\n\ndef f() -> None:\n    from perception.triton import translate\n")
    assert ("perception.triton", 5) in set(_imports(deferred))


def _layout_rows() -> list[str]:
    """The first cells of the README's layout table (``perception/viz/`` etc.)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    table = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| `")]


def test_readme_layout_table_matches_the_tree() -> None:
    rows = _layout_rows()
    listed = {cell.strip("`") for row in rows for cell in row.split(", ")}
    subpackages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    missing = [f"perception/{name}/" for name in subpackages if f"perception/{name}/" not in listed]
    assert not missing, f"README.md's layout table has no row for: {missing}"
    first = [row.strip("`").split("`")[0] for row in rows]
    gone = [path for path in first if not (ROOT / path).exists()]
    assert not gone, f"README.md's layout table lists paths that do not exist: {gone}"


#: What comes from a ROS 2 installation (the ``ros`` extra's wheels or a sourced workspace).
ROS_MODULES = (
    "rclpy",
    "builtin_interfaces",
    "std_msgs",
    "sensor_msgs",
    "geometry_msgs",
    "nav_msgs",
    "visualization_msgs",
    "diagnostic_msgs",
    "lifecycle_msgs",
    "vision_msgs",
)


def test_only_the_ros_unit_imports_rclpy() -> None:
    """The core package never imports rclpy or ROS messages; ``perception/ros/`` does (the CLI reaches it
    only when ``perception ros`` runs)."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if not path.is_relative_to(PACKAGE / "ros")
        for module, line in _imports(path)
        if module.split(".")[0] in ROS_MODULES
    ]
    assert not offenders, offenders


def test_importing_the_package_and_its_cli_loads_no_rclpy() -> None:
    import subprocess
    import sys

    code = (
        "import sys, perception.cli._ros, perception.ros, perception.live, perception.scheduler\n"
        "from perception.cli._main import build_parser\n"
        "build_parser(['ros', 'node', '--help'])\n"
        f"loaded = sorted(m for m in sys.modules if m.split('.')[0] in {ROS_MODULES!r})\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)
