"""Several of the package's nodes in one process: ROS 2 composition for these rclpy nodes.

    python -m excavator_hil.node_container sim_node --ros-args -p use_sim_time:=true -- \
        ik_node --ros-args -r __ns:=/exc1

Each node is named by its executable (:data:`COMPONENTS`) and followed by its own ``--ros-args
... [--]``: its remaps, parameters, parameter files and namespace apply to it alone
(``cli_args`` with ``use_global_arguments=False``), as if it ran alone. The nodes share one rclpy
context (one DDS participant), one single-threaded executor and the run-time set-up of
:func:`excavator_common.ros_runtime.run_nodes` (signals, start-up errors, supervisor watch).
``--log-level`` is process-wide in rcl: every node's is passed on to the process.

Why: each Python process with rclpy costs ~30-40 MiB PSS before it does anything (its
interpreter, the libraries' private pages, the participant; docs/benchmarks.md, "Memory of the
whole demo"), so the demo puts ``ik_node`` in ``sim_node``'s process. What that costs is the
GIL and one executor: a composed node's callbacks run between the others', so put together only
nodes whose work is short beside the others' periods (the IK solves a target in 0.13 ms against
sim_node's 10 ms period), and never two real-time loops.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from excavator_hil.errors import HilError

# executable -> (module, node class); each class takes rclpy Node's keyword options
COMPONENTS: dict[str, tuple[str, str]] = {
    "sim_node": ("excavator_sim.sim_node", "SimNode"),
    "ik_node": ("excavator_kinematics.ik_node", "IKNode"),
}

USAGE_TEXT = (
    "usage: python -m excavator_hil.node_container NODE [--ros-args ... --] "
    "[NODE [--ros-args ... --]] ...\n\n"
    "Runs several nodes in one process (one rclpy context, one executor), each with its own "
    "ROS arguments.\nNODE: one of " + ", ".join(sorted(COMPONENTS)) + ". docs/deployment.md, "
    "'Nodes in one process'.")


class ContainerArgumentError(HilError, ValueError):
    """A container command line that names no node, an unknown one, or arguments outside a
    node's ``--ros-args``."""


@dataclass(frozen=True)
class ComposedNode:
    """One node of the container's command line: its executable name and its own arguments
    (``["--ros-args", ...]``, or none)."""

    name: str
    ros_args: list[str]


def parse_container_args(args: Sequence[str]) -> list[ComposedNode]:
    """Split the command line (without the program name) into its nodes."""
    nodes: list[ComposedNode] = []
    i = 0
    while i < len(args):
        name = args[i]
        if name not in COMPONENTS:
            where = f"after {nodes[-1].name}'s arguments" if nodes else "first"
            raise ContainerArgumentError(
                f"'{name}' ({where}) is not a node of the container: one of "
                f"{', '.join(sorted(COMPONENTS))}, each followed by its own "
                "'--ros-args ... --'")
        i += 1
        ros: list[str] = []
        if i < len(args) and args[i] == "--ros-args":
            ros.append(args[i])
            i += 1
            while i < len(args) and args[i] != "--":
                ros.append(args[i])
                i += 1
            i += 1  # the closing "--" (or the end)
        elif i < len(args) and args[i] == "--":
            i += 1  # a node without arguments, closed all the same
        nodes.append(ComposedNode(name, ros))
    if not nodes:
        raise ContainerArgumentError("no node given: name one or more of "
                                     f"{', '.join(sorted(COMPONENTS))}")
    return nodes


def process_log_levels(nodes: Sequence[ComposedNode]) -> list[str]:
    """Every ``--log-level`` of the nodes' arguments, for the process (rcl's logging is
    process-wide)."""
    levels: list[str] = []
    for node in nodes:
        it = iter(node.ros_args)
        for arg in it:
            if arg == "--log-level":
                value = next(it, None)
                if value is not None and value not in levels:
                    levels.append(value)
    return [a for level in levels for a in ("--log-level", level)]


def _factory(node: ComposedNode) -> Callable[[], Any]:
    module, cls = COMPONENTS[node.name]

    def build() -> Any:
        node_class = getattr(importlib.import_module(module), cls)
        return node_class(cli_args=node.ros_args, use_global_arguments=False)
    return build


def main(args: list[str] | None = None) -> int:
    from excavator_common.ros_runtime import NodePart, fatal, run_nodes

    argv = list(sys.argv if args is None else args)
    if any(a in ("-h", "--help") for a in argv[1:2]):
        print(USAGE_TEXT)
        return 0
    try:
        nodes = parse_container_args(argv[1:])
    except ContainerArgumentError as exc:
        return fatal(f"{exc}\n{USAGE_TEXT}")
    program = argv[0] if argv else "node_container"
    levels = process_log_levels(nodes)
    process_args = [program, *(["--ros-args", *levels] if levels else [])]
    parts = [NodePart(_factory(n)) for n in nodes]
    return run_nodes(parts, process_args, [n.ros_args for n in nodes])


if __name__ == "__main__":
    from excavator_common.process_exit import exit_without_teardown

    exit_without_teardown(main())
