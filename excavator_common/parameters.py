"""One parameter spec per node: the single source of every parameter's name, type, default,
range, unit, description and whether it may change at run time.

Pure Python (no rclpy). From a node's :class:`ParameterTable`:

- the node declares every parameter with a descriptor ``ros2 param describe`` shows
  (description with unit, ``FloatingPointRange`` / ``IntegerRange``, ``read_only``), validates
  run-time changes and applies them (:mod:`excavator_common.parameter_node`, the rclpy side);
- the pure cores validate the same values without ROS (:meth:`ParameterTable.validate`): an
  unknown key is an error naming it and the closest known name, a missing key takes the
  documented default, NaN/inf are refused, every error names the parameter, the value, the
  range or type and the fix;
- a ROS 2 parameter file is read by the one reader
  (:func:`excavator_common.parameter_files.read_parameter_file`) and checked by
  :func:`load_parameters`;
- the reference tables of docs/configuration.md are rendered by :func:`markdown_table`.

Names carry their unit (``timestep_s``, ``publish_rate_hz``); a renamed parameter keeps its old
name in ``deprecated_names`` for one release: a value given under the old name is used, with a
warning naming the new one. The pattern is ros2_controllers' generate_parameter_library YAML
(``diff_drive_controller_parameter.yaml``: type, default, description, ``read_only``,
validators), written as Python dataclasses.
"""

from __future__ import annotations

import builtins
import difflib
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from excavator_common.errors import ConfigurationError, ParameterError

# A parameter value; validated mappings are dict[str, Any] (each value has its spec's type,
# checked at run time as ROS itself does).
Value = bool | int | float | str | list[bool] | list[int] | list[float] | list[str]
Warn = Callable[[str], object]

_LOG = logging.getLogger("excavator_common.parameters")


class ParamType(Enum):
    """The ROS 2 parameter types a spec can have (``rcl_interfaces/msg/ParameterType``)."""

    BOOL = "bool"
    INTEGER = "integer"
    DOUBLE = "double"
    STRING = "string"
    BOOL_ARRAY = "bool_array"
    INTEGER_ARRAY = "integer_array"
    DOUBLE_ARRAY = "double_array"
    STRING_ARRAY = "string_array"

    @property
    def is_array(self) -> bool:
        return self.value.endswith("_array")

    @property
    def element(self) -> ParamType:
        """The type of one element (the type itself for a scalar)."""
        return ParamType(self.value.removesuffix("_array"))

    @property
    def is_number(self) -> bool:
        return self.element in (ParamType.INTEGER, ParamType.DOUBLE)


def type_of(value: object) -> ParamType:
    """The parameter type of a Python value (a list's from its first element; an empty list
    is a string array, give ``type=`` for another)."""
    if isinstance(value, list | tuple):
        inner = type_of(value[0]) if value else ParamType.STRING
        if inner.is_array:
            raise TypeError(f"nested list {value!r} is not a parameter value")
        return ParamType(inner.value + "_array")
    if isinstance(value, bool):
        return ParamType.BOOL
    if isinstance(value, int):
        return ParamType.INTEGER
    if isinstance(value, float):
        return ParamType.DOUBLE
    if isinstance(value, str):
        return ParamType.STRING
    raise TypeError(f"{value!r} ({type(value).__name__}) is not a parameter value")


def fmt(value: object) -> str:
    """A value for a message: numbers with ``:.6g`` (never 309 digits), the rest repr'd."""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(fmt(v) for v in value) + "]"
    return repr(value)


@dataclass(frozen=True)
class ParameterSpec:
    """One parameter of a node.

    Args:
        name: dotted ROS name with its unit as suffix (``hydraulics.pressure_pa``); counts,
            ratios, flags, strings and paths have none.
        default: the value a missing key takes; ``None`` = required (no default: every
            parameter file must give it), then ``type`` is required.
        description: what it does, for ``ros2 param describe`` and the docs (no unit: ``unit``).
        unit: SI unit (``s``, ``Hz``, ``N m/rad``), ``-`` for a ratio, ``count``, ``index``,
            ``path``, or ``""`` (flags, names).
        low, high: inclusive range of a number (or of every element of a number array);
            ``None`` = unbounded on that side.
        dynamic: may change at run time (validated in the node's on-set callback, applied in
            its post-set callback); otherwise read only after start-up.
        deprecated_names: former names, still accepted for one release with a warning.
        choices: the strings a string parameter may take (aliases included).
        type: the ROS type; inferred from ``default`` when None.
        constraint: extra rule for the docs and the descriptor (``>= timestep_s``), checked
            elsewhere (the table's ``check``).
    """

    name: str
    default: Value | None
    description: str
    unit: str = ""
    low: float | None = None
    high: float | None = None
    dynamic: bool = False
    deprecated_names: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    type: ParamType | None = None
    constraint: str = ""

    def __post_init__(self) -> None:
        if self.type is None:
            if self.default is None:
                raise TypeError(f"parameter {self.name}: a required parameter needs type=")
            object.__setattr__(self, "type", type_of(self.default))
        if self.default is not None:  # the spec's own default must pass its own check
            object.__setattr__(self, "default", self.check(self.default, "the spec",
                                                           error=TypeError))

    @property
    def ros_type(self) -> ParamType:
        assert self.type is not None
        return self.type

    @property
    def required(self) -> bool:
        return self.default is None

    def range_text(self) -> str:
        """``0.0001 .. 0.01``, ``>= 0``, the choices, or ``-``."""
        if self.choices:
            return ", ".join(self.choices)
        lo, hi = self.low, self.high
        if lo is not None and hi is not None:
            text = f"{_num(lo)} .. {_num(hi)}"
        elif lo is not None:
            text = f">= {_num(lo)}"
        elif hi is not None:
            text = f"<= {_num(hi)}"
        else:
            text = ""
        return ", ".join(t for t in (text, self.constraint) if t) or "-"

    def describe(self) -> str:
        """The expected type and range, for messages: ``double in the range 1 .. 1000 Hz``."""
        kind = self.ros_type.value.replace("_", " ")
        rng = self.range_text()
        if self.choices:
            return f"{kind}, one of {rng}"
        unit = f" {self.unit}" if self.unit and self.unit not in ("-", "path") else ""
        return f"{kind}" + (f" in the range {rng}{unit}" if rng != "-" else "")

    def check(self, value: Any, source: str = "parameters", *, exact: bool = False,
              error: builtins.type[Exception] = ParameterError) -> Value:
        """``value`` if it fits this spec (an integral number for a double becomes a float,
        unless ``exact``: a ROS 2 parameter file or ``-p`` types ``1`` as an integer, which a
        double parameter refuses); else ``error`` naming the parameter, the value, the type or
        range and the fix."""
        where = f"{source}: parameter {self.name} = {fmt(value)}"
        t = self.ros_type
        if t.is_array:
            if not isinstance(value, list | tuple):
                raise error(f"{where} is not a list: give a list of {t.element.value} "
                            f"({self.description})")
            out = [self._scalar(v, t.element, where, exact, error) for v in value]
            if isinstance(self.default, list) and len(out) != len(self.default):
                raise error(f"{where} has {len(out)} entries: give "
                            f"{len(self.default)} ({self.description})")
            return out  # type: ignore[return-value]  # one element type, checked above
        return self._scalar(value, t, where, exact, error)

    def _scalar(self, value: Any, t: ParamType, where: str, exact: bool,
                error: builtins.type[Exception]) -> bool | int | float | str:
        if t is ParamType.BOOL:
            if not isinstance(value, bool):
                raise error(f"{where} must be true or false ({self.description})")
            return value
        if t is ParamType.STRING:
            if not isinstance(value, str):
                raise error(f"{where} must be a string ({self.description}); quote it")
            if self.choices and value not in self.choices:
                close = difflib.get_close_matches(value, self.choices, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise error(f"{where} is not one of {', '.join(self.choices)}{hint}")
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise error(f"{where} is not a number: give a {t.value} "
                        f"({self.description})")
        if t is ParamType.INTEGER:
            if isinstance(value, float):
                if exact or not value.is_integer():
                    raise error(f"{where} must be an integer (no decimal point) "
                                f"({self.description})")
                value = int(value)
        else:
            if isinstance(value, int):
                if exact:
                    raise error(f"{where} is an integer but the parameter is a double: write "
                                f"{value}.0 (ROS 2 parameters are typed)")
                value = float(value)
            if not math.isfinite(value):
                raise error(f"{where} must be finite ({self.description}): give a number in "
                            f"{self.range_text()}")
        lo = -math.inf if self.low is None else self.low
        hi = math.inf if self.high is None else self.high
        if not lo <= value <= hi:
            unit = f" {self.unit}" if self.unit and self.unit not in ("-", "count",
                                                                         "index") else ""
            raise error(f"{where}{unit} is outside {self.range_text()}{unit} "
                        f"({self.description}): set it within the range")
        return int(value) if t is ParamType.INTEGER else float(value)


def _num(x: float) -> str:
    if x == math.pi:
        return "pi"
    if x == -math.pi:
        return "-pi"
    return f"{x:.6g}"


@dataclass(frozen=True)
class ParameterTemplate:
    """A family of parameter groups named by the user: ``<prefix>.<instance>.<key>`` for any
    instance name (soil presets: ``presets.<preset>.density_kg_m3``). Every key of an instance
    is required unless the instance has defaults (:meth:`instance`)."""

    prefix: str
    placeholder: str
    parameters: tuple[ParameterSpec, ...]  # relative names, no defaults

    def split(self, name: str) -> tuple[str, ParameterSpec] | None:
        """(instance, relative spec) of a dotted name of this family, else None."""
        parts = name.split(".")
        if len(parts) != 3 or parts[0] != self.prefix or not parts[1]:
            return None
        spec = next((s for s in self.parameters if s.name == parts[2]), None)
        return (parts[1], spec) if spec is not None else None

    def instance(self, instance: str, defaults: Mapping[str, Value] | None = None,
                 ) -> tuple[ParameterSpec, ...]:
        """The concrete specs of one instance, with ``defaults`` by relative name (a shipped
        preset) or none (a user's preset: every key required)."""
        d = defaults or {}
        unknown = sorted(set(d) - {s.name for s in self.parameters})
        if unknown:
            raise TypeError(f"{self.prefix}.{instance}: unknown keys {unknown}")
        return tuple(_renamed(s, f"{self.prefix}.{instance}.{s.name}", d.get(s.name))
                     for s in self.parameters)


def _renamed(spec: ParameterSpec, name: str, default: Value | None) -> ParameterSpec:
    return ParameterSpec(name, default, spec.description, spec.unit, spec.low, spec.high,
                         spec.dynamic, (), spec.choices, spec.ros_type, spec.constraint)


@dataclass(frozen=True)
class ParameterTable:
    """Every parameter of one node.

    Args:
        node: the node's name (the parameter file section it reads, the docs' heading).
        parameters: the specs, in the order of the docs.
        error: the owning package's configuration error (a :class:`ConfigurationError`).
        templates: user-named groups (``presets.<preset>.*``).
        check: cross-parameter rules over the complete values (``control_period_s >=
            timestep_s``); raises ``error`` (or any ConfigurationError) with the reason.
        extra_names: names the node accepts beyond its own (the ROS standard
            ``use_sim_time``); neither validated nor reported unknown.
    """

    node: str
    parameters: tuple[ParameterSpec, ...]
    error: type[ConfigurationError] = ParameterError
    templates: tuple[ParameterTemplate, ...] = ()
    check: Callable[[Mapping[str, Any]], None] | None = None
    extra_names: frozenset[str] = frozenset({"use_sim_time"})
    _by_name: dict[str, ParameterSpec] = field(default_factory=dict, init=False, repr=False,
                                               compare=False)

    def __post_init__(self) -> None:
        by_name: dict[str, ParameterSpec] = {}
        for spec in self.parameters:
            for name in (spec.name, *spec.deprecated_names):
                if name in by_name:
                    raise TypeError(f"{self.node}: parameter name {name!r} used twice")
                by_name[name] = spec
        self._by_name.update(by_name)

    # --- lookup ------------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [s.name for s in self.parameters]

    @property
    def deprecated(self) -> dict[str, str]:
        """Old name -> new name."""
        return {old: s.name for s in self.parameters for old in s.deprecated_names}

    def spec(self, name: str) -> ParameterSpec | None:
        """The spec of a current name (or, for a template, of ``prefix.<any>.key``)."""
        spec = self._by_name.get(name)
        if spec is not None:
            return spec if spec.name == name else None
        for template in self.templates:
            hit = template.split(name)
            if hit is not None:
                return _renamed(hit[1], name, None)
        return None

    def __getitem__(self, name: str) -> ParameterSpec:
        spec = self.spec(name)
        if spec is None:
            raise KeyError(name)
        return spec

    def defaults(self) -> dict[str, Value]:
        return {s.name: s.default for s in self.parameters if s.default is not None}

    def closest(self, name: str) -> str | None:
        """The known name closest to ``name`` (for "did you mean"); within a template instance
        (``presets.gravel.densty_kg_m3``) the instance's own key."""
        parts = name.split(".")
        for t in self.templates:
            if len(parts) == 3 and parts[0] == t.prefix:
                keys = difflib.get_close_matches(parts[2], [s.name for s in t.parameters], n=1)
                if keys:
                    return f"{t.prefix}.{parts[1]}.{keys[0]}"
        known = [*self.names, *(f"{t.prefix}.<{t.placeholder}>.{s.name}" for t in self.templates
                                for s in t.parameters)]
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        return close[0] if close else None

    # --- validation --------------------------------------------------------------------------
    def rename_deprecated(self, values: Mapping[str, Any], source: str = "parameters",
                          warn: Warn | None = None) -> dict[str, Any]:
        """``values`` with every deprecated name replaced by its new one (a warning each, naming
        the new name); when both are given the new one wins."""
        warn = warn or _LOG.warning
        out = dict(values)
        for old, new in self.deprecated.items():
            if old not in out:
                continue
            value = out.pop(old)
            if new in out:
                warn(f"{source}: parameter '{old}' is deprecated and ignored: '{new}' is set too "
                     f"({fmt(out[new])}); remove '{old}'")
            else:
                out[new] = value
                warn(f"{source}: parameter '{old}' is deprecated (removed in the next release): "
                     f"rename it '{new}'; its value {fmt(value)} is used")
        return out

    def unknown(self, names: Iterable[str]) -> list[str]:
        """The names that are neither parameters, deprecated names, template keys nor extras."""
        return sorted(n for n in names if n not in self._by_name and n not in self.extra_names
                      and self.spec(n) is None)

    def unknown_message(self, unknown: Sequence[str], source: str) -> str:
        parts = []
        for name in unknown:
            close = self.closest(name)
            parts.append(f"'{name}'" + (f" (did you mean '{close}'?)" if close else ""))
        return (f"{source}: unknown parameter{'s' if len(parts) > 1 else ''} "
                f"{', '.join(parts)} of {self.node}: check the spelling against "
                "docs/configuration.md")

    def validate(self, values: Mapping[str, Any], source: str = "parameters", *,
                 exact: bool = False, warn: Warn | None = None,
                 instances: Mapping[str, Mapping[str, Mapping[str, Value]]] | None = None,
                 ) -> dict[str, Any]:
        """Every parameter's value from ``values`` (dotted names), checked; a missing key takes
        its default. Raises the table's error naming the parameter, the value, the range or
        type and the fix; an unknown key names itself and the closest known name.

        Args:
            values: dotted name -> value (deprecated names accepted, with a warning).
            source: where the values come from (a file path, ``sim_node parameters``).
            exact: ROS typing (a file or ``-p``): an integer is not a double.
            warn: where deprecation warnings go (default: the ``logging`` module).
            instances: template prefix -> instance -> defaults (the shipped presets), whose
                keys may be left out; the keys of any other instance are required.
        """
        values = self.rename_deprecated(values, source, warn)
        unknown = self.unknown(values)
        if unknown:
            raise self.error(self.unknown_message(unknown, source))
        out: dict[str, Any] = {}
        for spec in self.parameters:
            if spec.name in values:
                out[spec.name] = spec.check(values[spec.name], source, exact=exact,
                                            error=self.error)
            elif spec.required:
                raise self.error(f"{source}: parameter {spec.name} is missing; add it "
                                 f"({spec.description}, {spec.describe()})")
            else:
                out[spec.name] = spec.default
        for template in self.templates:
            out.update(self._validate_template(template, values, source, exact,
                                               (instances or {}).get(template.prefix, {})))
        for name in self.extra_names & set(values):
            out[name] = values[name]
        if self.check is not None:
            try:
                self.check(out)
            except ConfigurationError as exc:
                raise self.error(f"{source}: {exc}") from None
        return out

    def _validate_template(self, template: ParameterTemplate, values: Mapping[str, Any],
                           source: str, exact: bool,
                           shipped: Mapping[str, Mapping[str, Value]]) -> dict[str, Value]:
        found = sorted({hit[0] for name in values
                        if (hit := template.split(name)) is not None} | set(shipped))
        out: dict[str, Value] = {}
        for instance in found:
            for spec in template.instance(instance, shipped.get(instance)):
                if spec.name in values:
                    out[spec.name] = spec.check(values[spec.name], source, exact=exact,
                                                error=self.error)
                elif spec.default is not None:
                    out[spec.name] = spec.default
                else:
                    others = [i for i in found if i != instance]
                    close = difflib.get_close_matches(instance, others, n=1)
                    hint = (f"; or, if you meant the {template.placeholder} {close[0]!r}, "
                            "correct the name" if close else "")
                    raise self.error(
                        f"{source}: parameter {spec.name} is missing; add it "
                        f"({spec.description}, {spec.describe()}): a {template.placeholder} "
                        f"needs all {len(template.parameters)} keys "
                        f"{template.prefix}.<{template.placeholder}>.*{hint}")
        return out

    def validate_change(self, current: Mapping[str, Any], changes: Mapping[str, Any],
                        source: str = "parameter change") -> dict[str, Any]:
        """``changes`` (a run-time set) checked against the specs and, merged into
        ``current``, against the cross-parameter check; returns the checked changes. A read-only
        parameter is refused with the reason."""
        out: dict[str, Any] = {}
        for name, value in changes.items():
            spec = self.spec(name)
            if spec is None:
                if name in self.extra_names:
                    continue
                raise self.error(self.unknown_message([name], source))
            if not spec.dynamic:
                raise self.error(f"{source}: {name} is read at start-up only: restart "
                                 f"{self.node} with the new value (changeable at run time: "
                                 f"{', '.join(self.dynamic_names) or 'none'})")
            out[name] = spec.check(value, source, exact=True, error=self.error)
        if self.check is not None:
            try:
                self.check({**current, **out})
            except ConfigurationError as exc:
                raise self.error(f"{source}: {exc}") from None
        return out

    @property
    def dynamic_names(self) -> list[str]:
        return [s.name for s in self.parameters if s.dynamic]


def load_parameters(table: ParameterTable, path: str | Path,
                    overrides: Mapping[str, Any] | None = None, *,
                    warn: Warn | None = None,
                    instances: Mapping[str, Mapping[str, Mapping[str, Value]]] | None = None,
                    ) -> dict[str, Any]:
    """Read a ROS 2 parameter file (its ``/**`` and ``<table.node>`` sections), apply
    dotted-name ``overrides`` (Python values, an integral float is fine) and validate: the
    values the node would run with. The file's values are typed as ROS types them (``1`` is
    not a double)."""
    from excavator_common.parameter_files import read_parameter_file

    source = str(path)
    from_file = read_parameter_file(path, table.node, error=table.error)
    from_file = table.rename_deprecated(from_file, source, warn)
    unknown = table.unknown(from_file)
    if unknown:
        raise table.error(table.unknown_message(unknown, source))
    for name, value in from_file.items():
        spec = table.spec(name)
        if spec is not None:
            spec.check(value, source, exact=True, error=table.error)
    return table.validate({**from_file, **(overrides or {})}, source, warn=warn,
                          instances=instances)


# --- docs ------------------------------------------------------------------------------------
def _cell(value: Value | None) -> str:
    if value is None:
        return "required"
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = f'"{value}"' if value == "" or value != value.strip() else value
    elif isinstance(value, list):
        text = "[" + ", ".join(_cell(v).strip("`") for v in value) + "]"
    elif isinstance(value, float) and value != 0.0 and not 1e-3 <= abs(value) < 1e5:
        mantissa, exponent = f"{value:.6e}".split("e")
        mantissa = mantissa.rstrip("0")
        text = f"{mantissa}{'0' if mantissa.endswith('.') else ''}e{int(exponent):+d}"
    else:
        text = repr(value)
    return f"`{text}`"


def markdown_table(specs: Iterable[ParameterSpec], key_header: str = "key") -> str:
    """A markdown reference table of ``specs``: key, unit, default, range, run time (``yes``
    = dynamic), meaning (with the deprecated names)."""
    lines = [f"| {key_header} | unit | default | range | run time | meaning |",
             "|---|---|---|---|---|---|"]
    for s in specs:
        meaning = s.description
        if s.deprecated_names:
            meaning += " (formerly " + ", ".join(f"`{n}`" for n in s.deprecated_names) + \
                ", deprecated)"
        lines.append(f"| `{s.name}` | {s.unit or '-'} | {_cell(s.default)} | "
                     f"{s.range_text().replace('|', '/')} | {'yes' if s.dynamic else 'no'} | "
                     f"{meaning.replace('|', '/')} |")
    return "\n".join(lines)


def markdown_template_table(template: ParameterTemplate,
                            instances: Mapping[str, Mapping[str, Value]]) -> str:
    """A table of a template's keys with one default column per named instance."""
    names = list(instances)
    head = ["key", "unit", "range", *(f"`{n}`" for n in names), "run time", "meaning"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in template.parameters:
        cells = [f"`{template.prefix}.<{template.placeholder}>.{s.name}`", s.unit or "-",
                 s.range_text(), *(_cell(instances[n].get(s.name)) for n in names),
                 "yes" if s.dynamic else "no", s.description]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
