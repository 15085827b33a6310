"""Redis key names of the bridge (ARTOF convention: plain string values).

Control (operational layer -> bridge), read with one MGET per cycle:
``plc.control.navigation.velocity.{longitudinal,lateral,angular}`` [m/s, m/s, rad/s] and
``plc.control.navigation.heartbeat`` (bool, toggles every 500 ms).

Monitor (bridge -> Redis), written with one MSET per cycle:
``plc.monitor.navigation.velocity.*`` (direct model), ``plc.monitor.wheel_<name>.speed`` [m/s]
and ``.angle`` [rad], ``plc.monitor.state.*`` (PLC status bits, ``valid``, the PLC's refusals
and last accepted seq), the bridge's ``plc.bridge.status`` / ``plc.bridge.detail`` /
``plc.bridge.seq`` and ``plc.bridge.counters.*``.
"""

from __future__ import annotations

CONTROL_PREFIX = "plc.control."
LONGITUDINAL = "plc.control.navigation.velocity.longitudinal"
LATERAL = "plc.control.navigation.velocity.lateral"
ANGULAR = "plc.control.navigation.velocity.angular"
HEARTBEAT = "plc.control.navigation.heartbeat"
CONTROL_KEYS: tuple[str, str, str, str] = (LONGITUDINAL, LATERAL, ANGULAR, HEARTBEAT)

MON_LONGITUDINAL = "plc.monitor.navigation.velocity.longitudinal"
MON_LATERAL = "plc.monitor.navigation.velocity.lateral"
MON_ANGULAR = "plc.monitor.navigation.velocity.angular"
STATE_PREFIX = "plc.monitor.state."
STATE_VALID = "plc.monitor.state.valid"          # "true" while the monitor values are live
# PLC status bits, published when the monitor DB has them (plant_lost, drive_saturated,
# drive_fault: HIL)
STATE_BITS: tuple[str, ...] = ("ready", "fault", "estop", "auto", "watchdog", "setpoint_fault",
                               "plant_lost", "drive_saturated", "drive_fault")
STATE_PLC_ALIVE = "plc.monitor.state.plc_alive"  # the PLC's u16 alive counter
# the PLC's verdicts on the bridge's writes (monitor DB): its count of refused writes, the cause
# of the last one (none, stale_seq, watchdog_tripped, setpoint_fault, bad_setpoint) and the last
# seq it accepted (unsigned 32 bit)
STATE_REFUSED = "plc.monitor.state.refused"
STATE_REFUSED_REASON = "plc.monitor.state.refused_reason"
STATE_SEQ_ACCEPTED = "plc.monitor.state.seq_accepted"

BRIDGE_STATUS = "plc.bridge.status"              # "running" or "stopped:<reason>"
BRIDGE_DETAIL = "plc.bridge.detail"              # human-readable cause of the last stop
BRIDGE_ALIVE = "plc.bridge.alive"                # the bridge's u16 alive counter sent to the PLC
BRIDGE_SEQ = "plc.bridge.seq"                    # the seq of its last write (unsigned 32 bit)
# present only while a bridge runs: written every cycle with a TTL of monitor_ttl_s (as are
# BRIDGE_STATUS and STATE_VALID); missing = no bridge, every plc.monitor.* value is stale
BRIDGE_LIVE = "plc.bridge.live"
COUNTER_PREFIX = "plc.bridge.counters."
COUNTERS: tuple[str, ...] = ("cycles", "overruns", "rejected_inputs", "plc_reconnects",
                             "redis_reconnects", "stops", "plc_refusals", "seq_resyncs")

INVALID = "nan"   # value of every measured key while the PLC link is down (never left frozen)


def wheel_speed_key(name: str) -> str:
    return f"plc.monitor.wheel_{name}.speed"


def wheel_angle_key(name: str) -> str:
    return f"plc.monitor.wheel_{name}.angle"


def counter_key(name: str) -> str:
    return COUNTER_PREFIX + name


def state_key(bit: str) -> str:
    return STATE_PREFIX + bit


def measured_keys(wheels: tuple[str, ...], steering: tuple[str, ...]) -> list[str]:
    """Every key that carries a PLC measurement (set to ``INVALID`` on link loss)."""
    return [MON_LONGITUDINAL, MON_LATERAL, MON_ANGULAR,
            *(wheel_speed_key(w) for w in wheels), *(wheel_angle_key(s) for s in steering)]
