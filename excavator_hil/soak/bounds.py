"""The bounds the soak judges by, each derived from the stack's own configured timeouts.

Nothing here is tuned to a host: every bound is a sum of the timeouts and periods the stack is
configured with (config/plc.yaml, config/virtual_plc.yaml, config/sim.yaml, the bridge's
reconnect constants), so a slow host either meets them or shows a real fault. Start-up times of
restarted processes (imports, model builds) depend on the host: they are measured and
reported, judged only against the demo's own start-up timeout, and every "resumes within" bound
counts from the moment the restarted process shows its first sign of life in the stack's own
records, not from the soak's restart.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

# Fast DDS's participant announcement period (its default; the stack's profiles do not change
# it): a restarted or thawed node is found by its peers within it at the latest [s].
FASTDDS_ANNOUNCEMENT_PERIOD_S = 3.0
# |measured track speed| at or below this counts as stopped [m/s] (1/40 of the soak's slowest
# drive command)
STOPPED_M_S = 0.005


@dataclass(frozen=True)
class SoakBounds:
    """What the soak's checks allow [s unless named otherwise]."""

    # a drive write the PLC takes carries a command Redis held at most this long before: the
    # PLC takes a write only within its watchdog time of the bridge's previous alive change,
    # which came before the bridge read the command (virtual_plc watchdog_timeout_s)
    stale_command_s: float
    # Redis's TIME mapped to CLOCK_MONOTONIC (the PLC's log clock): the mapping's error
    clock_margin_s: float
    # after a fault cut the drive path (bridge, Redis, the link), the PLC's measured track
    # speeds are at rest within this: Redis timeout + watchdog + the plant's decay to
    # STOPPED_M_S + two PLC scans (counted in the PLC's scans: drive_stop_scans)
    drive_stop_s: float
    # driving resumes (a fresh command taken by the PLC) within this of the drive path's
    # return: the bridge's longest reconnect wait (refused connect retry + flap back-off cap),
    # Redis connect timeout, heartbeat timeout (a fresh edge re-arms), PLC alive timeout, PLC
    # reply timeout and two cycles
    drive_rearm_s: float
    # digging resumes (a joint command for a fresh target, a soil wrench for a fresh pose)
    # within this of the dig path's return: DDS announcement period + two target periods +
    # two simulation periods
    dig_rearm_s: float
    # a restarted process shows its first sign of life within this (the demo's start-up
    # timeout)
    startup_s: float
    # the supervisor restarts a process that ended this long after it noticed
    respawn_delay_s: float
    # a recorded stream (joint_states, soil/wrench) silent longer than this [s of simulated
    # time] outside a fault window is a gap (sim_node's track_command_timeout_s: the silence
    # after which the stack itself calls a 50-100 Hz stream dead)
    bag_gap_s: float
    # a killed recorder loses what it had taken but not yet put in its file: its messages of
    # at most this long before the kill (the recorder's FLUSH_PERIOD_S and a poll,
    # bags/recorder.py); the window of its kill starts that much before the kill
    bag_unwritten_s: float
    # the PLC's stop ramp: tracks slower than this are stopped [m/s]
    stopped_m_s: float
    # PLC scans in drive_stop_s (virtual_plc plant_hz): the PLC's own count of that time
    drive_stop_scans: int
    # PSS growth after warm-up that counts as a leak [fraction] ...
    memory_growth: float
    # ... when it is also more than this [KiB]: a process's heap rises to high-water marks
    # (glibc arenas, DDS history pools) in steps of ~1.6 MiB as a busy host hands it ever
    # larger bursts; seen up to 5.4 MiB in two minutes (sim_node, load 10 on 2 cores) and
    # not at all in another run. A leak that matters over a night (0.4 MiB/min) crosses it
    # in a 20-minute soak.
    memory_growth_min_kib: int = 8192

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def plant_decay_s(time_constant_s: float, from_m_s: float, to_m_s: float) -> float:
    """Time for a first-order plant to decay from ``from_m_s`` to ``to_m_s`` [s]."""
    if from_m_s <= to_m_s:
        return 0.0
    return time_constant_s * math.log(from_m_s / to_m_s)


def load_bounds(respawn_delay_s: float, startup_timeout_s: float, max_drive_m_s: float,
                target_period_s: float, memory_growth: float = 0.05) -> SoakBounds:
    """The bounds from the shipped configuration (config/*.yaml) and the soak's own settings:
    the supervisor's respawn delay, the start-up timeout, the fastest drive command it writes
    [m/s], its target period [s]."""
    from excavator_common.parameters import load_parameters
    from excavator_common.paths import config_file
    from excavator_hil.bags.recorder import FLUSH_PERIOD_S, POLL_PERIOD_S
    from excavator_sim.sim_config import SIM_PARAMETERS
    from plc_bridge.config import load_config
    from plc_bridge.reconnect import FLAP_MAX_S, REFUSED_RETRY_S

    plc = load_config()
    vp = plc.virtual_plc
    sim = load_parameters(SIM_PARAMETERS, config_file("sim.yaml"))
    publish_period_s = 1.0 / float(sim["publish_rate_hz"])
    drive_stop_s = (plc.redis_timeout_s + vp.watchdog_timeout_s
                    + plant_decay_s(vp.speed_time_constant_s, max_drive_m_s, STOPPED_M_S)
                    + 2.0 / vp.plant_hz)
    return SoakBounds(
        stale_command_s=vp.watchdog_timeout_s,
        clock_margin_s=0.001,
        drive_stop_s=drive_stop_s,
        drive_stop_scans=math.ceil(drive_stop_s * vp.plant_hz),
        drive_rearm_s=(REFUSED_RETRY_S + FLAP_MAX_S + plc.redis_connect_timeout_s
                       + plc.heartbeat_timeout_s + plc.plc_alive_timeout_s + plc.plc_timeout_s
                       + 2.0 / plc.cycle_hz),
        dig_rearm_s=(FASTDDS_ANNOUNCEMENT_PERIOD_S + 2.0 * target_period_s
                     + 2.0 * publish_period_s),
        startup_s=startup_timeout_s,
        respawn_delay_s=respawn_delay_s,
        bag_gap_s=float(sim["track_command_timeout_s"]),
        bag_unwritten_s=FLUSH_PERIOD_S + POLL_PERIOD_S,
        stopped_m_s=STOPPED_M_S,
        memory_growth=memory_growth,
    )
