"""ROS 2 parameter files read without ROS: the nested YAML seen as ROS's dotted names, and
the check that a ``--params-file`` is one before rcl parses it (rcl's own errors name a C source
line, not the problem)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from excavator_common.errors import ParameterError


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> dotted keys (``{"a": {"b": 1}}`` -> ``{"a.b": 1}``), as ROS 2 names
    nested parameters."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


_BOOLS = {"true", "false", "yes", "no", "on", "off"}  # YAML 1.1 bools, as rcl reads them


def check_ros_arguments(args: Sequence[str]) -> None:
    """Raise :class:`ParameterError` for the ROS arguments a user most often gets wrong, before
    rcl parses them (its messages name C source lines): every ``--params-file`` must be a
    parameter file (:func:`check_params_file`), every ``-p``/``--param`` a ``name:=value``."""
    in_ros = False
    it = iter(args)
    for arg in it:
        if arg == "--ros-args":
            in_ros = True
        elif arg == "--":
            in_ros = False
        elif in_ros and arg == "--params-file":
            check_params_file(next(it, ""))
        elif in_ros and arg in ("-p", "--param"):
            rule = next(it, "")
            name, sep, _ = rule.partition(":=")
            if not (sep and name):
                raise ParameterError(f"parameter override {arg} {rule!r} is not 'name:=value': "
                                     f"write e.g. {arg} use_sim_time:=true")
            value = rule.partition(":=")[2]
            if name.rpartition(":")[2] == "use_sim_time" and value.lower() not in _BOOLS:
                raise ParameterError(f"parameter override {arg} {rule!r}: use_sim_time is true or "
                                     "false")


def check_params_file(path: str | Path) -> None:
    """Raise :class:`ParameterError` (naming the file, what is wrong and the expected shape) unless
    ``path`` is a readable ROS 2 parameter file: YAML whose top level maps node names (``/**``,
    ``node``, or namespaces holding those) to ``ros__parameters:`` mappings. An empty file is
    valid (no parameters), as for ROS."""
    shape = ("expected '/**:' (or a node name) -> 'ros__parameters:' -> name: value, as in "
             "config/sim.yaml")
    p = Path(path)
    if not str(path):
        raise ParameterError("--params-file needs a file name: --ros-args --params-file FILE.yaml")
    try:
        text = p.read_text()
    except OSError as exc:
        raise ParameterError(f"cannot read parameter file {p}: {exc.strerror or exc}; give the "
                             "path of an existing YAML file") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        context, start = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if context and start is not None:  # "while parsing a flow sequence" at its start
            problem += f" ({context.removeprefix('while ')} from line {start.line + 1})"
        raise ParameterError(f"parameter file {p} is not valid YAML{where}: {problem}") from None
    if data is None:
        return
    if not isinstance(data, Mapping):
        raise ParameterError(f"parameter file {p} holds {_kind(data)} at the top; {shape}")
    _check_node_sections(data, p, (), shape)


def _check_node_sections(tree: Mapping[Any, Any], path: Path, keys: tuple[str, ...],
                         shape: str) -> None:
    for key, value in tree.items():
        where = "/".join((*keys, str(key)))
        if key == "ros__parameters":
            if value is not None and not isinstance(value, Mapping):
                raise ParameterError(f"parameter file {path}: '{where}' holds {_kind(value)}, "
                                     f"not a mapping of parameters; {shape}")
            continue
        if not isinstance(value, Mapping):
            raise ParameterError(f"parameter file {path}: '{where}' is not a node section (it "
                                 f"holds {value!r:.60} instead of 'ros__parameters:'); {shape}")
        _check_node_sections(value, path, (*keys, str(key)), shape)


def _kind(value: object) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number",
            bool: "a bool"}.get(type(value), f"a {type(value).__name__}")


def read_parameter_file(path: str | Path, node: str | None = None, *,
                        error: type[ParameterError] | type[Exception] = ParameterError,
                        ) -> dict[str, Any]:
    """The parameters a node named ``node`` gets from a ROS 2 parameter file, as dotted names:
    the ``ros__parameters`` of every section that applies to it, merged in file order (a later
    section wins, as in rcl). The one reader of parameter files of the project.

    A section applies when its name is ``/**`` or matches the node: ``sim_node``,
    ``/sim_node``, ``/ns/sim_node``, a nested ``ns: {sim_node: ...}``, or rcl's wildcards
    (``*`` one name, ``**`` any number). ``node`` may be fully qualified (``/exc1/sim_node``)
    to match one namespace only. With ``node`` None: the ``/**`` sections, or the only
    section of the file.

    Raises ``error`` (the caller's configuration error) for a file that cannot be read, is not
    YAML or not shaped as a parameter file (:func:`check_params_file`).
    """
    try:
        check_params_file(path)
    except ParameterError as exc:
        if isinstance(exc, error):
            raise
        raise error(str(exc)) from None
    data = yaml.safe_load(Path(path).read_text()) or {}
    sections = list(_sections(data, ()))
    if node is None:
        chosen = [params for name, params in sections if name == "**"]
        if not chosen and len(sections) == 1:
            chosen = [sections[0][1]]
        elif not chosen and sections:
            names = ", ".join(f"'{n}'" for n, _ in sections)
            raise error(f"parameter file {path} has node sections {names} and no '/**': name "
                        "the node to read")
    else:
        chosen = [params for name, params in sections if _applies(name, node)]
    out: dict[str, Any] = {}
    for params in chosen:
        out.update(flatten(params or {}))
    return out


def _sections(tree: Mapping[str, Any], keys: tuple[str, ...],
              ) -> Iterator[tuple[str, Mapping[str, Any] | None]]:
    for key, value in tree.items():
        if key == "ros__parameters":
            yield "/".join(k.strip("/") for k in keys).strip("/"), value
        elif isinstance(value, Mapping):
            yield from _sections(value, (*keys, str(key)))


def _applies(section: str, node: str) -> bool:
    """rcl's node-name match of a section name (without the leading '/')."""
    pattern = "".join(".*" if part == "**" else "[^/]*" if part == "*" else re.escape(part)
                      for part in re.split(r"(\*\*|\*)", section))
    pattern = pattern.replace("/.*", "(/.*)?").replace(".*/", "(.*/)?")
    target = node.strip("/")
    if "/" in target:
        return re.fullmatch(pattern, target) is not None
    # a node name without its namespace: the section's last name must match it
    last = section.rsplit("/", 1)[-1]
    return section == "**" or re.fullmatch(
        "".join("[^/]*" if p in ("*", "**") else re.escape(p)
                for p in re.split(r"(\*\*|\*)", last)), target) is not None
