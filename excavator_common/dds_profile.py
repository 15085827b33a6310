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
# UDPv4 only: a reader paused on Fast DDS's shared memory (SIGSTOP, Ctrl-Z, a debugger) could
# stay deaf for good after it resumed (the port watchdog takes the paused reader's port for a
# dead one; the writers regenerate it while the reader waits on the old one). Measured: a
# subscriber of 1600 samples/s paused 4 s in 8-10 cycles went deaf in 2 of 4 runs on shared
# memory, in 0 of 3 on UDPv4. The bag recorder takes it: it must lose nothing but the pause.
# Not the default for every process: on UDP a 0.8 MB terrain grid overflows the receiver's
# socket buffer and the small samples beside it wait for repairs (tried for every process:
# the fleet demo's soil wrenches then arrived 200 ms old at p50, one core busy, and 18 of
# ~2000 periods got a fresh one).
PAUSE_SAFE_PROFILE = "fastdds_udp.xml"


def use_project_profile(environ: MutableMapping[str, str] | None = None,
                        profile: str = PROFILE_NAME) -> str | None:
    """Point Fast DDS at the project's profile unless a profile is chosen already.

    Args:
        environ: the environment to read and set (default: this process's, ``os.environ``,
            which Fast DDS reads and the processes started later inherit).
        profile: the project's profile file in ``config/`` (``PAUSE_SAFE_PROFILE`` for a
            process that must hear again after it was paused). The project's default one,
            inherited from the process that started this one, is not a user's choice: it
            gives way to ``profile``.

    Returns:
        The profile file Fast DDS will load (the user's or the project's), None when
        ``SKIP_DEFAULT_XML=1`` asks for none.
    """
    env = os.environ if environ is None else environ
    if env.get(SKIP_ENV, "") == "1":
        return None
    chosen = env.get(PROFILE_ENV) or env.get(LEGACY_PROFILE_ENV)
    if chosen and chosen != str(config_file(PROFILE_NAME)):
        return chosen
    path = str(config_file(profile))
    env[PROFILE_ENV] = path
    return path
