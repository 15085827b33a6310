"""ik_node's parameters (``config/ik.yaml``): its one spec, read with or without ROS.

``bucket_pitch_rad``, ``orientation_tolerance_rad`` and ``max_command_age_s`` change at run
time (``ros2 param set``); ``geometry_file`` is read at start-up. The former names
``bucket_pitch`` and ``orientation_tolerance`` are accepted for one release, with a warning.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from excavator_common.parameters import ParameterSpec, ParameterTable, load_parameters
from excavator_common.paths import config_file
from excavator_kinematics.errors import ConfigError

IK_PARAMETERS = ParameterTable("ik_node", (
    ParameterSpec("geometry_file", "", "geometry to solve for (excavator geometry YAML); "
                  "empty = the package's config/excavator.yaml", "path"),
    ParameterSpec("bucket_pitch_rad", 0.5, "bucket pitch used for `target` points: the "
                  "absolute bucket angle (M->L against the horizontal; the bottom plate is "
                  "0.51 rad steeper)", "rad", -math.pi, math.pi, dynamic=True,
                  deprecated_names=("bucket_pitch",)),
    ParameterSpec("orientation_tolerance_rad", 0.02, "largest roll/yaw of a `target_pose` "
                  "orientation out of the boom plane; beyond it the target is rejected", "rad",
                  0.0, 0.5, dynamic=True, deprecated_names=("orientation_tolerance",)),
    ParameterSpec("max_command_age_s", 0.5, "a target or target_pose older than this on "
                  "arrival (by its stamp) is dropped, counted and reported; stamp 0 is not "
                  "judged (docs/teleoperation.md, Late commands)", "s", 0.01, 3600.0,
                  dynamic=True),
    ParameterSpec("frame_prefix", "", "TF prefix of this machine's frames: targets are taken "
                  "in '<prefix>base_link', e.g. 'exc1/' in a fleet (letters, digits, _, /; ends "
                  "in /)"),
), error=ConfigError)


def load_ik_parameters(path: str | Path | None = None) -> dict[str, Any]:
    """The values ik_node runs with from a parameter file (default ``config/ik.yaml``)."""
    return load_parameters(IK_PARAMETERS, path if path is not None else config_file("ik.yaml"))
