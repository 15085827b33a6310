"""The project's Fast DDS profile (``config/fastdds_default.xml``), for every process of the
package that starts rclpy.

Fast DDS reads ``FASTDDS_DEFAULT_PROFILES_FILE`` once, when a process creates its first
participant. Each entry point (``ros_runtime.run_node``, ``NodeThread``, the demo, the bag
tools, the soak) calls :func:`use_project_profile` before ``rclpy.init``; the processes it
starts inherit the variable. A profile the user chose (a multi-host one,
``config/fastdds_udp.xml``, ``config/fastdds_interface.xml``, which carry the same writer
settings, or their own) is left alone, as is ``SKIP_DEFAULT_XML=1`` (Fast DDS's switch to load
no profile at all). Another RMW (Cyclone DDS) ignores the variable.

rclpy-free: the tests check the rule without ROS.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from excavator_common.paths import config_file

PROFILE_ENV = "FASTDDS_DEFAULT_PROFILES_FILE"
# Fast DDS 2's name of the same variable, and Fast DDS's switch to skip every default profile
LEGACY_PROFILE_ENV = "FASTRTPS_DEFAULT_PROFILES_FILE"
SKIP_ENV = "SKIP_DEFAULT_XML"
PROFILE_NAME = "fastdds_default.xml"


def use_project_profile(environ: MutableMapping[str, str] | None = None) -> str | None:
    """Point Fast DDS at the project's profile unless a profile is chosen already.

    Args:
        environ: the environment to read and set (default: this process's, ``os.environ``,
            which Fast DDS reads and the processes started later inherit).

    Returns:
        The profile file Fast DDS will load (the user's or the project's), None when
        ``SKIP_DEFAULT_XML=1`` asks for none.
    """
    env = os.environ if environ is None else environ
    if env.get(SKIP_ENV, "") == "1":
        return None
    chosen = env.get(PROFILE_ENV) or env.get(LEGACY_PROFILE_ENV)
    if chosen:
        return chosen
    path = str(config_file(PROFILE_NAME))
    env[PROFILE_ENV] = path
    return path
