"""The command line of the package's executables: ``--help`` answers with the usage, an option
the executable does not define is refused naming it (exit 2), ROS arguments go through to rcl.

ROS arguments are what rcl takes: everything from ``--ros-args`` up to a ``--`` or the end,
as often as it occurs (``rclpy.utilities.remove_ros_args`` splits the same way; this module
does it without rclpy, so the virtual PLC, not a ROS node, shares it). Every node runs this
before ``rclpy.init`` (``ros_runtime.run_node``): ``ik_node --help`` prints and exits without
starting ROS, and ``ik_node --bogus`` or ``ik_node -p x:=1`` (``-p`` outside ``--ros-args``)
ends with exit code 2 instead of starting a node that ignores them.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

ROS_ARGS = "--ros-args"
ROS_ARGS_END = "--"


def split_ros_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(own, ros)``: the arguments of ``argv`` (program name excluded) outside every
    ``--ros-args ... [--]`` block, and those inside (without the markers), each in order."""
    own: list[str] = []
    ros: list[str] = []
    inside = False
    for arg in argv:
        if arg == ROS_ARGS:
            inside = True
        elif inside and arg == ROS_ARGS_END:
            inside = False
        else:
            (ros if inside else own).append(arg)
    return own, ros


def ros_args_help(prog: str, params_file: str | None = None) -> str:
    """How ROS arguments are given to ``prog`` (the help text's closing paragraph)."""
    params = params_file or "params.yaml"
    return (f"ROS arguments follow {ROS_ARGS} (up to an optional {ROS_ARGS_END}), as for every "
            "ROS 2 node:\n"
            f"  {prog} {ROS_ARGS} --params-file {params}\n"
            f"  {prog} {ROS_ARGS} -p name:=value -r __ns:=/exc1 -r __node:=other_name "
            "--log-level debug\n"
            f"  ros2 run excavator_hil {prog} {ROS_ARGS} ...\n"
            "every parameter, its unit and range: docs/configuration.md")


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose error message also says where ROS arguments go (the likely mix-up:
    ``ik_node -p x:=1`` for ``ik_node --ros-args -p x:=1``)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message} (ROS arguments go after {ROS_ARGS}, "
                     f"e.g. {self.prog} {ROS_ARGS} -p name:=value; see {self.prog} --help)\n")


@dataclass(frozen=True)
class NodeUsage:
    """What ``<node> --help`` says: what it does, its topics, its parameter file and docs."""

    name: str                       # the executable (``ros2 run excavator_hil <name>``)
    summary: str                    # what the node does, one sentence
    subscribes: tuple[str, ...] = ()   # "topic (pkg/Type)"
    publishes: tuple[str, ...] = ()
    params_file: str | None = None  # config/<name>, from the package's share directory
    docs: str = ""                  # docs/<page>.md: topics and behaviour in full

    def parser(self) -> ArgumentParser:
        lines = [*textwrap.wrap(self.summary, 79), ""]
        for title, topics in (("subscribes: ", self.subscribes), ("publishes:  ", self.publishes)):
            if topics:
                lines += textwrap.wrap(", ".join(topics), 79, initial_indent=title,
                                       subsequent_indent=" " * len(title),
                                       break_long_words=False, break_on_hyphens=False)
        params = None
        if self.params_file:
            from excavator_common.paths import config_file

            params = str(config_file(self.params_file))
            lines.append(f"parameters: {params} (the shipped file; yours with --params-file)")
        if self.docs:
            lines.append(f"docs:       {self.docs} (topics, parameters, behaviour in full)")
        return ArgumentParser(prog=self.name, description="\n".join(lines),
                              usage=f"%(prog)s [-h] [{ROS_ARGS} ROS_ARGUMENT ... [--]]",
                              epilog=ros_args_help(self.name, params),
                              formatter_class=argparse.RawDescriptionHelpFormatter)


def check_command_line(usage: NodeUsage, argv: Sequence[str]) -> int | None:
    """Parse a node's command line (``argv`` with the program name): the exit code when the
    process must end now (0 after printing ``--help``, 2 for an argument the node does not
    define, named on stderr), None to start the node."""
    own, _ros = split_ros_args(argv[1:])
    try:
        usage.parser().parse_args(own)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else 2
    return None
