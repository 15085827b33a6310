"""The package layers of the architecture, read from the code's own imports (ast, nothing runs).

- ``excavator_common`` (shared plumbing: ROS runtime, parameter files, paths, the
  configuration-error marker) is the bottom layer: it imports none of the others, all may
  import it;
- ``excavator_kinematics`` imports none of the other packages but ``excavator_common``;
- ``excavator_sim`` (with ``soil/``) and ``plc_bridge`` import ``excavator_kinematics`` only,
  never each other (they meet over ROS topics and Redis at run time);
- ``excavator_hil`` (the system) is imported by none of them;
- no import cycle between modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("excavator_common", "excavator_kinematics", "excavator_sim", "plc_bridge",
            "excavator_hil")
ALLOWED = {
    "excavator_common": {"excavator_common"},
    "excavator_kinematics": {"excavator_kinematics", "excavator_common"},
    "excavator_sim": {"excavator_sim", "excavator_kinematics", "excavator_common"},
    "plc_bridge": {"plc_bridge", "excavator_kinematics", "excavator_common"},
    "excavator_hil": set(PACKAGES),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _project_modules() -> dict[str, Path]:
    return {_module_name(f): f for pkg in PACKAGES for f in sorted((ROOT / pkg).rglob("*.py"))}


def _imported(name: str, path: Path, known: set[str]) -> set[str]:
    """Project modules that ``path`` imports (absolute and relative, ``from x import module``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    return {t for t in targets if t in known}


def _graph() -> dict[str, set[str]]:
    modules = _project_modules()
    known = set(modules)
    return {name: _imported(name, path, known) for name, path in modules.items()}


def test_every_package_is_present() -> None:
    top = {name.split(".")[0] for name in _project_modules()}
    assert top == set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_point_down_only(package: str) -> None:
    broken = sorted(
        f"{module} imports {target}"
        for module, targets in _graph().items() if module.split(".")[0] == package
        for target in targets if target.split(".")[0] not in ALLOWED[package])
    assert not broken, "layer broken (README: the packages and their layers):\n" + "\n".join(broken)


def test_no_import_cycle_between_modules() -> None:
    """Depth-first search for a back edge; a package's __init__ importing its children is fine."""
    graph = _graph()
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []
    cycles: list[list[str]] = []

    def related(a: str, b: str) -> bool:
        return a.startswith(b + ".") or b.startswith(a + ".")

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if related(module, target):
                continue
            if state.get(target) == 1:
                cycles.append([*path[path.index(target):], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_check_detects_a_forbidden_import(tmp_path: Path) -> None:
    """The parser sees ``from plc_bridge import x`` inside excavator_sim (the check can fail)."""
    probe = tmp_path / "probe.py"
    probe.write_text("from plc_bridge import redis_keys\nimport excavator_kinematics.linkage\n")
    found = _imported("excavator_sim.probe", probe,
                      {"plc_bridge", "plc_bridge.redis_keys", "excavator_kinematics.linkage"})
    assert found == {"plc_bridge", "plc_bridge.redis_keys", "excavator_kinematics.linkage"}


# plc_bridge's rooms (docs/plc_bridge.md, "Code layout"): the bottom modules import no room; the
# transport only the bottom; the bridge and the plant link the bottom and the transport; the
# virtual PLC (a PLC: it never uses the bridge's PLC link) only the bottom.
PLC_BRIDGE_ROOMS = {
    "": set(),
    "transport": {""},
    "bridge": {"", "transport"},
    "plant_link": {"", "transport"},
    "virtual_plc": {""},
}


def _room(module: str) -> str | None:
    """The room of a plc_bridge module ('' = the bottom modules), None outside plc_bridge."""
    parts = module.split(".")
    if parts[0] != "plc_bridge":
        return None
    if len(parts) > 2 or (len(parts) == 2 and parts[1] in PLC_BRIDGE_ROOMS):
        return parts[1]
    return ""


def test_plc_bridge_rooms_import_one_way() -> None:
    graph = _graph()
    rooms = {_room(m) for m in graph} - {None}
    assert rooms == set(PLC_BRIDGE_ROOMS), f"a plc_bridge room without its rule: {rooms}"
    broken = sorted(
        f"{module} ({_room(module) or 'bottom'}) imports {target} ({_room(target) or 'bottom'})"
        for module, targets in graph.items() if _room(module) is not None
        for target in targets
        if (room := _room(target)) is not None and room != _room(module)
        and room not in PLC_BRIDGE_ROOMS[_room(module) or ""])
    assert not broken, "plc_bridge room imported against its layers:\n" + "\n".join(broken)
