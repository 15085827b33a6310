"""The plant link's rules, pure (no sockets, no rclpy): what goes into ``plant_in`` from the
simulation's sensors, what of ``plant_out`` goes to the simulation, and when.

Simulation -> PLC (``plant_in``, one write per exchange):
- the measured speeds, torques and steering angles of the last ``plant/sensors``, the IMU's
  yaw rate, pitch and roll, the ground speed, the drive status bits, the simulated time [ms];
- ``alive`` +1 only when the sensors' stamp (simulated time) is newer than the one last
  written: a frozen simulation stops the counter, and the PLC's plant watchdog trips, however
  regularly the plant link itself keeps writing. A stamp more than ``NEW_RUN_BACK_NS`` behind
  the last one is a **new run** of the simulation (restarted, its time from 0 again), not a
  message out of order: it is followed at once (``sim_restarts``), or the counter would stand
  until the new run's time passed the old run's;
- ``actuation_seq``: the seq of the last ``plant_out`` forwarded (the PLC sees its outputs
  arrive);
- a non-finite measurement is passed on as it is (NaN bytes): the PLC program judges its
  sensors (the virtual PLC: a fault, torque 0).

PLC -> simulation (``plant/actuation``):
- only a **whole** block: its ``crc`` matches its other bytes (:mod:`plc_bridge.command_crc`,
  the rule of the bridge's commands, the other way round). Over OPC UA a Read of the block is
  one request of several variables, and a CPU may scan between any two of them: such a read
  finds one scan's CRC over values of two scans and is not looked at further (``torn``; not
  a baseline, not a refusal: the next read finds the block whole);
- forwarded only when ``plant_out.seq`` is newer than the last one forwarded (RFC 1982 order
  on 32 bits, the control DB's rule): each PLC scan's actuation once, never an older one;
- after a link fault (and at the first connect) the first read is a **baseline**, not
  forwarded: it may hold what the PLC wrote before the fault (a paused CPU resumes with its old
  memory); only a seq newer than the baseline, written after the link came back, is forwarded.
  So nothing read before a fault acts after it, and a PLC restarted with a lower seq is
  followed again;
- a non-finite torque or steering rate (a corrupted block, a rogue PUT, a PLC program bug) is
  never forwarded as a number: the actuation becomes a brake (drives off, brakes on, torque 0),
  counted, with the reason. It is a **drive fault**, as a real drive controller reports one for
  a command it cannot take: ``drive_fault`` in ``plant_in`` is set (with the simulation's own
  ``drive_fault``) from the refused block until a valid one is forwarded, so the PLC program
  sees its drives in fault instead of driving against braked tracks.

Each ``plant/actuation`` names the block it carries in the pseudo-joint ``plant_out_seq`` (its
seq, a DINT as in the block; NaN for a brake of the plant link's own: a refused block, the link
lost), so the simulation clears a drive fault only on a valid block of the PLC's and tells its
diagnostics which scan acts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from plc_bridge.command_crc import is_whole
from plc_bridge.command_seq import seq_newer
from plc_bridge.command_seq import to_dint as dint
from plc_bridge.config import BridgeConfig
from plc_bridge.errors import BridgeError

ENABLE, BRAKE = "drive_enable", "brake"   # pseudo-joints of plant/actuation
SEQ = "plant_out_seq"                     # pseudo-joint of plant/actuation: whose block
GROUND_SPEED = "ground_speed"             # pseudo-joint of plant/sensors
FLAGS = ("drive_ready", "drive_fault", "brake")   # pseudo-joints of plant/sensors: position
# A stamp this far behind the last one written is a new run of the simulation (one publisher,
# in order: DDS delivers one writer's messages in order, so only a restart goes back this far)
NEW_RUN_BACK_NS = 1_000_000_000


class SensorError(BridgeError, ValueError):
    """A plant/sensors message the plant link cannot use (a joint missing)."""


@dataclass(frozen=True)
class Sensors:
    """One ``plant/sensors`` message: ``stamp_ns`` the simulated time [ns]; per drive the speed
    [m/s] and torque [N m], per steered wheel the angle [rad], in the config's order."""

    stamp_ns: int
    speeds: tuple[float, ...]
    torques: tuple[float, ...]
    angles: tuple[float, ...] = ()
    ground_speed: float = 0.0
    drive_ready: bool = False
    drive_fault: bool = False
    brake: bool = False


@dataclass(frozen=True)
class ImuReading:
    """What ``plant_in`` takes of an ``imu`` message [rad/s, rad, rad]."""

    yaw_rate: float
    pitch: float
    roll: float


@dataclass(frozen=True)
class Actuation:
    """What goes on ``plant/actuation``: per drive a torque [N m], per steered wheel a rate
    [rad/s], drive enable, brakes. ``seq``: the plant_out seq forwarded, or None when the
    plant link brakes on its own (``reason`` says why: a refused block, the link lost)."""

    seq: int | None
    torques: tuple[float, ...]
    steer_rates: tuple[float, ...]
    enable: bool
    brake: bool
    reason: str = ""

    @property
    def from_plc(self) -> bool:
        """A block of the PLC's forwarded as it is (not a brake of the plant link's own)."""
        return self.seq is not None and not self.reason

    @classmethod
    def braking(cls, n_drives: int, n_steer: int, reason: str, seq: int | None = None
                ) -> Actuation:
        return cls(seq, (0.0,) * n_drives, (0.0,) * n_steer, False, True, reason)


def drive_joints(config: BridgeConfig) -> tuple[str, ...]:
    """``track_left``/``track_right`` (skid_steer) or ``wheel_<name>``."""
    prefix = "track_" if config.model == "skid_steer" else "wheel_"
    return tuple(prefix + w for w in config.wheels)


def steer_joints(config: BridgeConfig) -> tuple[str, ...]:
    return tuple("steer_" + s for s in config.steering)


def roll_pitch(x: float, y: float, z: float, w: float) -> tuple[float, float]:
    """Roll and pitch [rad] of an orientation quaternion (REP-103 fixed axes x-y-z, i.e. yaw
    then pitch then roll about the body axes): what an IMU reports as attitude."""
    n = math.sqrt(x * x + y * y + z * z + w * w)
    if not math.isfinite(n) or n == 0.0:
        return math.nan, math.nan
    x, y, z, w = x / n, y / n, z / n, w / n
    roll = math.atan2(2.0 * (w * x + y * z), 1.0 - 2.0 * (x * x + y * y))
    pitch = math.asin(max(-1.0, min(1.0, 2.0 * (w * y - z * x))))
    return roll, pitch


def sensors_from_joints(config: BridgeConfig, stamp_ns: int, names: Sequence[str],
                        position: Sequence[float], velocity: Sequence[float],
                        effort: Sequence[float]) -> Sensors:
    """A ``plant/sensors`` JointState's arrays as ``Sensors``; a joint the model needs that is
    missing (or an array too short for it) raises ``SensorError`` naming it."""
    index = {n: i for i, n in enumerate(names)}

    def pick(joint: str, values: Sequence[float], what: str) -> float:
        i = index.get(joint)
        if i is None:
            raise SensorError(f"plant/sensors lacks joint {joint!r} (has {list(names)}); the "
                              f"{config.model} model needs {list(drive_joints(config))}"
                              f"{list(steer_joints(config)) or ''}")
        if i >= len(values):
            raise SensorError(f"plant/sensors: no {what} for joint {joint!r} ({len(values)} "
                              f"values for {len(names)} names)")
        return float(values[i])

    def flag(joint: str) -> bool:
        i = index.get(joint)
        return i is not None and i < len(position) and position[i] >= 0.5

    drives = drive_joints(config)
    ground = velocity[index[GROUND_SPEED]] if GROUND_SPEED in index and \
        index[GROUND_SPEED] < len(velocity) else math.nan
    return Sensors(
        stamp_ns=int(stamp_ns),
        speeds=tuple(pick(j, velocity, "velocity") for j in drives),
        torques=tuple(pick(j, effort, "effort") for j in drives),
        angles=tuple(pick(j, position, "position") for j in steer_joints(config)),
        ground_speed=float(ground), drive_ready=flag("drive_ready"),
        drive_fault=flag("drive_fault"), brake=flag("brake"))


def actuation_arrays(config: BridgeConfig, act: Actuation
                     ) -> tuple[list[str], list[float], list[float], list[float]]:
    """``(name, position, velocity, effort)`` of the ``plant/actuation`` JointState: drive
    joints carry effort [N m], steering joints velocity [rad/s], the pseudo-joints
    ``drive_enable`` and ``brake`` position 1.0 / 0.0, ``plant_out_seq`` the block's seq
    as the PLC's DINT (NaN: a brake of the plant link's own); every entry that does not apply is
    NaN."""
    nan = math.nan
    names = [*drive_joints(config), *steer_joints(config), ENABLE, BRAKE, SEQ]
    n, m = len(config.wheels), len(config.steering)
    seq = float(dint(act.seq)) if act.from_plc and act.seq is not None else nan
    position = [nan] * (n + m) + [1.0 if act.enable else 0.0, 1.0 if act.brake else 0.0, seq]
    velocity = [nan] * n + list(act.steer_rates) + [nan, nan, nan]
    effort = list(act.torques) + [nan] * (m + 3)
    return names, position, velocity, effort


class PlantLinkCore:
    """The exchange's state: what was last written to ``plant_in`` and forwarded of
    ``plant_out`` (module docstring). ``counters`` counts forwarded, not fresh and refused
    blocks, torn reads (a CRC that did not match), baselines, and plant_in writes with and
    without a new simulated time."""

    COUNTERS = ("forwarded", "not_fresh", "refused", "torn", "baselines", "plant_in_writes",
                "sim_time_repeated", "sim_restarts")

    def __init__(self, config: BridgeConfig) -> None:
        self.config = config
        self._in = config.plant_in
        self._out = config.plant_out
        self._values: dict[str, Any] = config.plant_in.zero_values()
        self._last_stamp_ns: int | None = None
        self.last_forwarded: int | None = None    # seq mod 2^32 of the last forwarded
        self._reference: int | None = None        # what a fresh seq must be newer than
        self._baseline = True                     # the next read is a baseline
        self.counters: dict[str, int] = dict.fromkeys(self.COUNTERS, 0)
        self.torn_run = 0          # torn reads in a row (a PLC program that never seals: all)
        self.last_refusal = ""
        self.drive_fault = ""      # the refusal in force (a drive fault), '' when none
        self._torque_names = config.torque_sp_fields()
        self._rate_names = config.steer_rate_sp_fields()
        self._speed_names = config.speed_fields()
        self._measured_torque_names = config.torque_fields()
        self._angle_names = config.angle_fields()

    @property
    def alive(self) -> int:
        return int(self._values["alive"])

    def plant_in(self, sensors: Sensors, imu: ImuReading | None) -> bytes:
        """The ``plant_in`` block for this exchange (every field; non-finite values as NaN
        bytes). ``alive`` advances only when ``sensors.stamp_ns`` is newer than the last
        written one."""
        v = self._values
        last = self._last_stamp_ns
        new_run = last is not None and last - sensors.stamp_ns > NEW_RUN_BACK_NS
        if new_run:
            self.counters["sim_restarts"] += 1
        if last is None or sensors.stamp_ns > last or new_run:
            v["alive"] = (int(v["alive"]) + 1) & 0xFFFF
            self._last_stamp_ns = last = sensors.stamp_ns
        else:
            self.counters["sim_time_repeated"] += 1
        stamp_ns = last
        v["sim_time"] = dint(stamp_ns // 1_000_000)
        v.update(drive_ready=sensors.drive_ready,
                 drive_fault=sensors.drive_fault or bool(self.drive_fault), brake=sensors.brake)
        if imu is not None:
            v.update(yaw_rate=imu.yaw_rate, pitch=imu.pitch, roll=imu.roll)
        v["ground_speed"] = sensors.ground_speed
        v["actuation_seq"] = dint(self.last_forwarded or 0)
        v.update(zip(self._speed_names, sensors.speeds, strict=True))
        v.update(zip(self._measured_torque_names, sensors.torques, strict=True))
        v.update(zip(self._angle_names, sensors.angles, strict=True))
        self.counters["plant_in_writes"] += 1
        # ``v`` holds every field of the layout (zero_values); the encoder takes those and
        # ignores the optional header fields a site may have left out of its layout
        return self._in.encode(v, nonfinite_ok=True)

    def plant_out(self, raw: bytes | bytearray) -> Actuation | None:
        """A read of ``plant_out``: the actuation to forward, a braking one instead of a
        block with a non-finite value, or None (a baseline, nothing newer, or a read that
        caught the PLC writing the block: ``torn``)."""
        if not is_whole(self._out, raw):
            self.counters["torn"] += 1
            self.torn_run += 1
            return None
        self.torn_run = 0
        out = self._out.decode(raw)
        seq = int(out["seq"]) & 0xFFFFFFFF
        if self._baseline:
            self._baseline = False
            self.counters["baselines"] += 1
            self._reference = seq
            return None
        if not seq_newer(seq, self._reference):
            self.counters["not_fresh"] += 1
            return None
        self._reference = self.last_forwarded = seq
        torques = tuple(float(out[n]) for n in self._torque_names)
        rates = tuple(float(out[n]) for n in self._rate_names)
        for name, value in zip((*self._torque_names, *self._rate_names), (*torques, *rates),
                               strict=True):
            if not math.isfinite(value):
                self.counters["refused"] += 1
                self.last_refusal = (f"plant_out seq {dint(seq)}: {name} = {value}: not "
                                     f"forwarded; drives braked")
                self.drive_fault = self.last_refusal
                return Actuation.braking(len(torques), len(rates), self.last_refusal, seq)
        self.counters["forwarded"] += 1
        self.drive_fault = ""
        return Actuation(seq, torques, rates, bool(out["enable"]), bool(out["brake"]))

    def link_fault(self) -> None:
        """The link was lost (or is new): the next read is a baseline, never forwarded."""
        self._baseline = True
