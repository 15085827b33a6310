"""The rclpy side of :mod:`excavator_common.parameters`: a node's table declared, run-time
changes validated then applied.

:class:`NodeParameters` does, for one node and its :class:`ParameterTable`:

1. declares every parameter with a ``ParameterDescriptor`` (``ros2 param describe``: the
   description with its unit, a ``FloatingPointRange`` / ``IntegerRange``, the choices and
   rules in ``additional_constraints``, ``read_only`` unless the spec is ``dynamic``);
   overrides are checked against the specs first, so a bad one is one message naming the
   parameter, the value, the range and the fix (``run_node``: exit 2);
2. accepts a deprecated name for one release: an override under it at start-up is used, with
   a warning naming the new name; the old name stays a declared parameter (its descriptor says
   DEPRECATED), and a ``ros2 param set`` on it sets the new name too (and the reverse), with
   the warning;
3. warns about overrides the node does not know, with the closest name (one ``/**`` file may
   serve several nodes, so not an error);
4. on a run-time set, validates in the on-set callback (rclpy has already refused read-only
   parameters, wrong types and out-of-range numbers, with its reason): finite, choices, the
   table's cross-parameter check; the reason is returned in ``SetParametersResult``;
5. then applies in the post-set callback: ``values`` is updated and the node's ``apply`` hook
   gets the changed values (the split of ros2/demos' ``set_parameters_callback.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    SetParametersResult,
)
from rclpy.node import Node
from rclpy.parameter import Parameter

from excavator_common.errors import ConfigurationError
from excavator_common.parameters import ParameterSpec, ParameterTable, ParamType, Value

Apply = Callable[[dict[str, Any]], None]
# Declared by rclpy itself, never unknown.
RCLPY_PARAMETERS = frozenset({"use_sim_time", "start_type_description_service"})

_ROS_TYPES = {
    ParamType.BOOL: Parameter.Type.BOOL, ParamType.INTEGER: Parameter.Type.INTEGER,
    ParamType.DOUBLE: Parameter.Type.DOUBLE, ParamType.STRING: Parameter.Type.STRING,
    ParamType.BOOL_ARRAY: Parameter.Type.BOOL_ARRAY,
    ParamType.INTEGER_ARRAY: Parameter.Type.INTEGER_ARRAY,
    ParamType.DOUBLE_ARRAY: Parameter.Type.DOUBLE_ARRAY,
    ParamType.STRING_ARRAY: Parameter.Type.STRING_ARRAY,
}


def descriptor(spec: ParameterSpec, node_name: str = "the node") -> ParameterDescriptor:
    """The ``ParameterDescriptor`` of a spec: what ``ros2 param describe`` shows."""
    unit = f" [{spec.unit}]" if spec.unit and spec.unit not in ("-", "path", "index",
                                                                 "count") else ""
    constraints = []
    if spec.choices:
        constraints.append("one of " + ", ".join(spec.choices))
    if spec.constraint:
        constraints.append(spec.constraint)
    if spec.deprecated_names:
        constraints.append("formerly " + ", ".join(spec.deprecated_names) + " (deprecated)")
    constraints.append("changeable at run time" if spec.dynamic else
                       f"read at start-up: restart {node_name} to change it")
    d = ParameterDescriptor(name=spec.name, type=_ROS_TYPES[spec.ros_type].value,
                            description=spec.description + unit,
                            additional_constraints="; ".join(constraints),
                            read_only=not spec.dynamic)
    if spec.ros_type is ParamType.DOUBLE and (spec.low is not None or spec.high is not None):
        d.floating_point_range = [FloatingPointRange(
            from_value=float(spec.low) if spec.low is not None else -sys.float_info.max,
            to_value=float(spec.high) if spec.high is not None else sys.float_info.max,
            step=0.0)]
    elif spec.ros_type is ParamType.INTEGER and spec.low is not None and spec.high is not None:
        d.integer_range = [IntegerRange(from_value=int(spec.low), to_value=int(spec.high),
                                        step=0)]
    return d


def parameter_overrides(node: Node) -> dict[str, Parameter[Any]]:
    """The parameters the node's parameter files and ``-p`` give it, before any is declared."""
    # rclpy keeps them in this attribute (no public accessor before a parameter is declared).
    return dict(getattr(node, "_parameter_overrides", {}))


class NodeParameters:
    """Declares a table's parameters on ``node`` and keeps their current values.

    Args:
        node: the node (declare before creating anything that uses the values).
        table: its parameters.
        apply: called with the changed values after a successful run-time set (post-set);
            may be set later (``parameters.apply = self.apply_parameters``).
        instances: template prefix -> instance -> defaults (the shipped soil presets).
        warn_unknown: log overrides the node does not know (with the closest name).
        replace: values that take the place of the overrides' (a machine preset over the
            parameter files and ``-p``); declared as the values that act.
    """

    def __init__(self, node: Node, table: ParameterTable, apply: Apply | None = None, *,
                 instances: Mapping[str, Mapping[str, Mapping[str, Value]]] | None = None,
                 warn_unknown: bool = True, replace: Mapping[str, Any] | None = None) -> None:
        self.node = node
        self.table = table
        self.apply = apply
        logger = node.get_logger()
        source = f"{node.get_name()} parameters"
        overrides = {name: p.value for name, p in self._overrides().items()
                     if name not in RCLPY_PARAMETERS}
        overrides.update(replace or {})
        self.unknown = table.unknown(overrides)
        if warn_unknown:  # first: a misspelt key is the usual cause of a missing one
            for name in self.unknown:
                close = table.closest(name)
                logger.warning(f"parameter '{name}' is not a parameter of {node.get_name()} "
                               "and is ignored" + (f"; did you mean '{close}'?" if close else ""))
        known = {n: v for n, v in overrides.items() if n not in self.unknown}
        # deprecated names: warned here, their values used for the new names
        self.values: dict[str, Any] = table.validate(known, source, exact=True,
                                                       warn=logger.warning, instances=instances)
        self.values.pop("use_sim_time", None)
        for name, value in self.values.items():
            spec = table.spec(name)
            assert spec is not None
            # The validated value is the declared default: an override under the new name
            # equals it; one under a deprecated name has no override of the new name.
            node.declare_parameter(name, value, descriptor(spec, node.get_name()))
            # The former names stay parameters for one release (as generate_parameter_library
            # keeps a deprecated one): `ros2 param set` on one sets the new name, with a warning.
            for old in spec.deprecated_names:
                alias = descriptor(spec, node.get_name())
                alias.name = old
                alias.description = (f"DEPRECATED, removed in the next release: use {name}. "
                                     + alias.description)
                node.declare_parameter(old, value, alias)
        self._syncing = False
        self.deprecated_used = sorted(set(overrides) & set(table.deprecated))
        node.add_on_set_parameters_callback(self._on_set)
        node.add_post_set_parameters_callback(self._post_set)

    def _overrides(self) -> dict[str, Parameter[Any]]:
        return parameter_overrides(self.node)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def _ours(self, params: list[Parameter[Any]]) -> dict[str, Any]:
        """The changes by current name (a deprecated name's under its new one)."""
        renamed = self.table.deprecated
        return {renamed.get(p.name, p.name): p.value for p in params
                if self.table.spec(renamed.get(p.name, p.name)) is not None}

    def _on_set(self, params: list[Parameter[Any]]) -> SetParametersResult:
        """Validate only (rclpy checked read_only, type and range before this)."""
        changes = self._ours(params)
        if not changes:
            return SetParametersResult(successful=True)
        try:
            self.table.validate_change(self.values, changes,
                                       f"{self.node.get_name()} parameter change")
        except ConfigurationError as exc:
            return SetParametersResult(successful=False, reason=str(exc))
        return SetParametersResult(successful=True)

    def _post_set(self, params: list[Parameter[Any]]) -> None:
        """Apply: store the new values, then the node's hook. A value set under a deprecated
        name is set under its new name too (a warning names it), and the reverse, so that both
        read the same."""
        changes = self._ours(params)
        if not changes or self._syncing:
            return
        renamed = self.table.deprecated
        for p in params:
            if p.name in renamed:
                self.node.get_logger().warning(
                    f"parameter '{p.name}' is deprecated (removed in the next release): set "
                    f"'{renamed[p.name]}' instead")
        mirror: list[Parameter[Any]] = []
        for p in params:
            new = renamed.get(p.name)
            spec = self.table.spec(p.name)
            if new is not None:
                mirror.append(Parameter(new, value=p.value))
            elif spec is not None:
                mirror += [Parameter(old, value=p.value) for old in spec.deprecated_names]
        if mirror:
            self._syncing = True
            try:
                self.node.set_parameters(mirror)
            finally:
                self._syncing = False
        checked = {n: self.table[n].check(v, exact=False) for n, v in changes.items()}
        self.values.update(checked)
        self.node.get_logger().info("parameters changed: " + ", ".join(
            f"{n}={v}" for n, v in checked.items()))
        if self.apply is not None:
            self.apply(checked)
