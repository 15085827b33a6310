"""What a soak records, as plain dataclasses (no processes, no ROS): the input of the checks.

Times named ``t`` are CLOCK_MONOTONIC [s] (``time.monotonic()``, system-wide on Linux: the
virtual PLC's logs, Redis's TIME mapped to it, the observer's receipts all share it); times
named ``stamp_s`` are simulated time [s] (sim_node's header stamps).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from excavator_hil.soak.schedule import (
    DDS_PEER_FROZEN,
    PLC_LINK_CUT,
    PLC_PAUSED,
    REDIS_RESTART,
    SIGKILL,
    SIGSTOP,
    Fault,
)

# The processes the soak runs (the demo's, the dashboard beside them) and which path each is on.
DRIVE_PATH = ("redis-server", "virtual_plc", "plc_bridge")
DIG_PATH = ("sim_node", "soil_node", "ik_node")
PROCESSES = (*DRIVE_PATH, *DIG_PATH, "bag_record", "dashboard")
DDS_NODES = ("plc_bridge", "sim_node", "soil_node", "ik_node", "bag_record", "dashboard")
# A recorded stream may fall silent while one of these is down (its source, what it answers,
# the recorder).
STREAM_SOURCES: dict[str, tuple[str, ...]] = {
    "joint_states": ("sim_node", "bag_record"),
    "soil/wrench": ("sim_node", "soil_node", "bag_record"),
}


@dataclass(frozen=True)
class Command:
    """A drive command the soak wrote to Redis: ``k``-th, its speed, when Redis set it."""

    k: int
    value_m_s: float
    t: float


@dataclass(frozen=True)
class PlcWrite:
    """A control-DB write in the PLC's own log, with the PLC's verdict (None = taken)."""

    t: float
    enable: bool
    stop: bool
    seq: int
    speeds: tuple[float, ...]
    refused: str | None

    @property
    def drives(self) -> bool:
        """A drive command (not a stop) the PLC took: it acted."""
        return (self.refused is None and self.enable and not self.stop
                and any(v != 0.0 for v in self.speeds))


@dataclass(frozen=True)
class PlcSample:
    """The observer's own snap7 read of the PLC's monitor DB, started at ``t0``, answered at
    ``t1``: measured track speeds [m/s], the watchdog bit, the PLC's alive counter (+1 per
    scan, mod 2^16: the PLC's own clock)."""

    t0: float
    t1: float
    speeds: tuple[float, ...]
    watchdog: bool
    alive: int = 0


@dataclass(frozen=True)
class Target:
    """An IK target the soak published (stamp on CLOCK_MONOTONIC) and the joint angles
    [rad] the IK gives for it (swing, boom, arm, bucket)."""

    k: int
    t: float
    q: tuple[float, ...]


@dataclass(frozen=True)
class JointCommand:
    """A joint_command on the wire to sim_node: ik_node's stamp, the observer's receipt
    (CLOCK_MONOTONIC both), the joint angles [rad]."""

    t_stamp: float
    t_recv: float
    q: tuple[float, ...]


@dataclass(frozen=True)
class StreamSample:
    """A message of a periodic stream seen by the observer: its stamp [s simulated], its
    receipt [s monotonic]."""

    stamp_s: float
    t_recv: float


@dataclass(frozen=True)
class ResourceSample:
    """One process's footprint: PSS [KiB] (/proc/<pid>/smaps_rollup) and its anonymous part
    (``Pss_Anon``: the heap, where a leak grows; the rest is mostly the libraries' pages, shared
    with every process on the host that maps them, so it moves when others come and go), open
    file descriptors, threads; ``life`` counts its restarts (0 = as first started), ``phase``
    the recorder's moves to a new DDS participant within a life (after a stop: docs/bags.md),
    each a new footprint, judged on its own."""

    process: str
    life: int
    t: float
    pss_kib: int
    fds: int
    threads: int
    anon_kib: int = 0
    phase: int = 0


@dataclass
class FaultRecord:
    """A fault as injected: when it took hold (``started``, after the injection returned),
    when it was lifted (``lifted``, before the lifting began; for a kill: the restart), when
    the stack showed the affected process alive again (``ready``: its first sign of life in
    the stack's records, the lift itself when nothing restarted)."""

    fault: Fault
    started: float
    lifted: float
    ready: float | None = None
    restarted: bool = False
    note: str = ""

    @property
    def window(self) -> tuple[float, float]:
        return self.started, self.lifted

    def cuts_drive_with_plc_readable(self) -> bool:
        """The fault cuts the bridge's commands off the PLC while the PLC itself runs (its
        outputs must come to rest)."""
        k, target = self.fault.kind, self.fault.target
        if k in (REDIS_RESTART, PLC_LINK_CUT):
            return True
        return k in (SIGKILL, SIGSTOP, DDS_PEER_FROZEN) and target in ("plc_bridge",
                                                                         "redis-server")

    def hits(self, processes: tuple[str, ...]) -> bool:
        k, target = self.fault.kind, self.fault.target
        if k in (SIGKILL, SIGSTOP, DDS_PEER_FROZEN):
            return target in processes
        return {REDIS_RESTART: "redis-server", PLC_LINK_CUT: "plc_bridge",
                PLC_PAUSED: "virtual_plc"}.get(k) in processes


@dataclass
class SoakRecords:
    """Everything the checks read."""

    commands: list[Command] = field(default_factory=list)
    redis_losses: list[float] = field(default_factory=list)   # Redis lost its keys (restart)
    plc_writes: list[PlcWrite] = field(default_factory=list)
    plc_samples: list[PlcSample] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    joint_commands: list[JointCommand] = field(default_factory=list)
    joint_states: list[StreamSample] = field(default_factory=list)
    wrenches: list[StreamSample] = field(default_factory=list)
    soil_mass: list[tuple[float, int]] = field(default_factory=list)   # (t, mass drift units)
    resources: list[ResourceSample] = field(default_factory=list)
    faults: list[FaultRecord] = field(default_factory=list)
    # per stream, the stamps in the bag [s simulated], in recording order
    bag_stamps: dict[str, list[float]] = field(default_factory=dict)
    # processes that ended without being killed by the soak: (t, process, exit code, log tail)
    unexpected_exits: list[tuple[float, str, int, str]] = field(default_factory=list)
    start: float = 0.0   # when the fault phase began
    end: float = 0.0     # when it ended
