"""Each subpackage's ``__all__`` holds what other code or users call, nothing more.

A name exported by ``perception/<pkg>/__init__.py`` must be used from outside ``perception/<pkg>/``:
imported (``from perception.<pkg> import name``) or reached as ``perception.<pkg>.name`` by the package,
``bench/``, ``models/`` or ``launch/``, or named in code in a README (root ``README.md``, with its
"Embedding the runtime (API)" section, ``bench/README.md``, ``models/README.md``...). Tests do not count:
a test of an internal imports it from its ``_module``.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "perception"
SOURCES = ("perception", "bench", "models", "launch")

#: Unused exports of subpackages this change could not touch (other work in flight): ``(namespace, name)``.
#: The list can only shrink -- an entry that is used, or no longer exported, fails
#: :func:`test_allow_list_only_shrinks`.
ALLOWED: frozenset[tuple[str, str]] = frozenset(
    {
        ("perception.fleet", "BaselineComparison"),
        ("perception.fleet", "FLEET_JSON"),
        ("perception.fleet", "FLEET_MD"),
        ("perception.fleet", "FleetDrive"),
        ("perception.fleet", "FleetOutcome"),
        ("perception.fleet", "compare_runs"),
        ("perception.modelkit", "COCO_CLASSES"),
        ("perception.modelkit", "COCO_TO_LABEL"),
        ("perception.modelkit", "CameraDetectorParams"),
        ("perception.modelkit", "Checkpoint"),
        ("perception.modelkit", "ImageDetector"),
        ("perception.modelkit", "Letterbox"),
        ("perception.modelkit", "LidarDetections"),
        ("perception.modelkit", "RadarDetections"),
        ("perception.modelkit", "RequestCancelled"),
        ("perception.modelkit", "SizePrior"),
        ("perception.modelkit", "YoloxParams"),
        ("perception.modelkit", "box_iou"),
        ("perception.modelkit", "check_model_config"),
        ("perception.modelkit", "cluster_radar"),
        ("perception.modelkit", "config_parameter"),
        ("perception.modelkit", "decode_centernet"),
        ("perception.modelkit", "decode_yolox"),
        ("perception.modelkit", "fit_velocity"),
        ("perception.modelkit", "merge_fragments"),
        ("perception.modelkit", "nms"),
        ("perception.modelkit", "params_from_config"),
        ("perception.modelkit", "preprocess_images"),
        ("perception.modelkit", "sanitize_radar"),
        ("perception.modelkit", "split_by_motion"),
        ("perception.modelkit", "validate_image_batch"),
        ("perception.modelkit", "yolox_preprocess"),
        ("perception.server", "TritonInstall"),
        ("perception.server", "locate_triton"),
        ("perception.server", "prepare_backend_dir"),
        ("perception.server", "wait_for_server"),
        ("perception.triton", "InferResult"),
        ("perception.triton", "ParameterValue"),
        ("perception.triton", "SharedMemoryPool"),
        ("perception.triton", "ShmMode"),
        ("perception.triton", "ShmRegionInfo"),
        ("perception.triton", "ShmRegistrar"),
        ("perception.triton", "ShmSlot"),
        ("perception.triton", "translate"),
    }
)


def _exports(init: Path) -> list[str]:
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "__all__":
            return list(ast.literal_eval(node.value)) if node.value is not None else []
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return []


def _namespaces() -> dict[str, list[str]]:
    return {
        f"perception.{p.name}": _exports(p / "__init__.py")
        for p in sorted(PACKAGE.iterdir())
        if (p / "__init__.py").is_file()
    }


def _uses(path: Path) -> Iterator[tuple[str, str]]:
    """``(module, name)`` for ``from module import name`` and ``module.name`` (through an import alias)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                yield node.module, a.name
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    aliases[a.asname] = a.name
                else:
                    aliases[a.name.split(".")[0]] = a.name.split(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain: list[str] = []
            inner: ast.expr = node
            while isinstance(inner, ast.Attribute):
                chain.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id in aliases:
                module, _, name = ".".join([aliases[inner.id], *reversed(chain)]).rpartition(".")
                yield module, name


def _code_in_readmes() -> dict[Path, str]:
    """Each README's code: inline code spans and fenced blocks."""
    out = {}
    for readme in ROOT.rglob("README.md"):
        rel = readme.relative_to(ROOT)
        if rel.parts[0] in (".venv", "tests") or any(part.startswith(".") for part in rel.parts):
            continue
        text = readme.read_text(encoding="utf-8")
        out[readme] = "\n".join(re.findall(r"```.*?```|`[^`\n]+`", text, re.S))
    return out


@functools.cache
def _unused() -> frozenset[tuple[str, str]]:
    """The exports used nowhere outside their subpackage. Computed once: two tests ask (parsing every
    source took ~15 s each in the suite's pytest process)."""
    used: dict[tuple[str, str], set[Path]] = {}
    for top in SOURCES:
        for path in (ROOT / top).rglob("*.py"):
            for use in _uses(path):
                used.setdefault(use, set()).add(path)
    # shell scripts import too (launch/_bootstrap.sh: `python -c "from perception.fusion import warm_up"`)
    for script in [*(ROOT / "launch").rglob("*.sh"), *(ROOT / ".ci").rglob("*")]:
        if not script.is_file():
            continue
        for namespace, names in re.findall(r"from (perception[\w.]*) import ([\w, ]+)", script.read_text()):
            for name in names.replace(" ", "").split(","):
                used.setdefault((namespace, name), set()).add(script)
    readmes = _code_in_readmes()
    unused = set()
    for namespace, names in _namespaces().items():
        home = PACKAGE / namespace.split(".")[1]
        for name in names:
            if any(not p.is_relative_to(home) for p in used.get((namespace, name), ())):
                continue
            word = re.compile(rf"\b{re.escape(name)}\b")
            if any(word.search(code) for readme, code in readmes.items() if not readme.is_relative_to(home)):
                continue
            unused.add((namespace, name))
    return frozenset(unused)


def test_every_export_is_used_outside_its_subpackage() -> None:
    unused = sorted(_unused() - ALLOWED)
    assert not unused, (
        "exported but used nowhere outside the subpackage (drop them from __all__ and the re-exports; "
        "tests import internals from their _module):\n" + "\n".join(f"{ns}.{name}" for ns, name in unused)
    )


def test_allow_list_only_shrinks() -> None:
    unused = _unused()
    stale = sorted(entry for entry in ALLOWED if entry not in unused)
    assert not stale, f"used or no longer exported now: remove from ALLOWED: {stale}"


def test_the_check_sees_an_unused_export(tmp_path: Path) -> None:
    """The detector itself: an import and an attribute use are both found."""
    user = tmp_path / "user.py"
    user.write_text("import perception.viz as v\nfrom perception.replay import parse_rate\n\nv.render_frame\n")
    assert {("perception.replay", "parse_rate"), ("perception.viz", "render_frame")} <= set(_uses(user))
