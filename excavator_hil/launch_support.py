"""What the launch files in launch/ share: required nodes, the RViz default.

Imported by the launch files under ``ros2 launch`` (``launch`` is imported inside the functions,
so this module imports without ROS launch installed).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

RVIZ_HINT = ("rviz2 is not installed here (on a ROS 2 install: sudo apt install "
             "ros-kilted-rviz2); start with rviz:=false, or open RViz elsewhere with "
             "rviz/excavator.rviz")


def rviz_installed() -> bool:
    """Whether ``ros2 run rviz2 rviz2`` would find an executable (ament index on
    ``AMENT_PREFIX_PATH``)."""
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_prefix
    except ImportError:
        return False
    try:
        prefix = get_package_prefix("rviz2")
    except (PackageNotFoundError, ValueError, OSError):  # OSError: no AMENT_PREFIX_PATH
        return False
    return os.access(Path(prefix) / "lib" / "rviz2" / "rviz2", os.X_OK)


def rviz_default() -> str:
    """``rviz``'s default: "true" where rviz2 is installed, else "false"."""
    return "true" if rviz_installed() else "false"


def exit_reason(name: str, returncode: int | None) -> str:
    """Why a node's exit ends the launch, in one line."""
    if returncode == 0:
        why = "exited (code 0) although nothing asked it to"
    elif returncode == 2:
        why = "refused its configuration (code 2; its [FATAL] message above names the value)"
    elif returncode is not None and returncode < 0:
        why = f"was killed by signal {-returncode}"
    else:
        why = f"failed with exit code {returncode} (its messages above say why)"
    return f"required node {name} {why}"


def required(name: str) -> Callable[[Any, Any], list[Any] | None]:
    """``on_exit`` for a node the system cannot run without: when it ends while the launch is
    not shutting down, log why (as an error) and shut the whole launch down, so no node is left
    running without it."""

    def on_exit(event: Any, context: Any) -> list[Any] | None:
        from launch.actions import Shutdown
        from launch.logging import get_logger

        if context.is_shutdown:
            return None
        reason = exit_reason(name, event.returncode)
        get_logger("excavator_hil").error(f"{reason}: stopping the other nodes of this launch")
        return [Shutdown(reason=reason)]

    return on_exit
