"""The virtual PLC's program in hardware-in-the-loop mode (``plant_mode: external``): what a
mechatronic-layer PLC program does when the simulated machine is its plant. Pure (numpy only):
the S7 server and the clock are ``virtual_plc.VirtualPlc``'s.

Each scan it takes what the command guard accepted from the bridge (``plant.CommandGuard``:
seq, watchdog, stop bit, setpoint ranges stay there, unchanged) and the sensors of the last
``plant_in`` write, and returns the ``plant_out`` block and the measured values for the
monitor DB:

- plant watchdog: the simulation's alive counter in ``plant_in`` must change within
  ``plant_watchdog_timeout_s`` (``plant.AliveWatchdog``: a counter that never moved proves
  nothing, so the PLC starts with the plant lost). Lost -> ``plant_lost``, latched until the
  counter runs again (``RECOVER_CHANGES`` changes since it stopped, none further apart than
  the watchdog time) *and* no drive command is in force (the bridge stops on the fault, so the
  latch clears on that stop, never by itself under a running command). One change is not
  enough: a ``plant_in`` write held up on a cut link (a store-and-forward hop, a TCP
  retransmission; the plant link has one request in flight) arrives after the fault with a
  newer counter and measurements seconds old, and must not bring the plant back;
- drive: per-drive PI speed loops (``speed_loop.PiSpeedLoop``: clamping anti-windup) from the
  bridge's speed set-points [m/s] and ``plant_in``'s measured speeds to torque set-points
  [N m]; per steered wheel an angle loop (``steering_loop.SteeringLoop``: P, rate-limited) to a
  steering-rate command [rad/s]; gains and limits the model's machine's
  (``VirtualPlcParams.drive_tuning``: ``wheeled.<model>.*`` for a wheeled machine, whose
  steering is 0.35 rad/s and wheel drives 7.8 kN m, not the tracks' figures); a machine that
  steers every driven wheel (4WD4WS) drives only as far as its wheels point where they should
  (``steering_loop.alignment``: "steer, then drive", a crab command from straight ahead waits
  for the wheels); ``enable`` on, ``brake`` off; a zero speed set-point on every drive
  with every measured speed below ``STANDSTILL_M_S`` holds the machine on its brakes (torque
  0, the PI reset), as a travel lever in neutral closes the counterbalance valve and the
  spring-applied brake engages (../shared/research/drives_traction_wheeled.md, section 2.1):
  the bucket's drag while digging must not pull a halted machine along (it pulled it 0.17 m
  when the speed loop alone held zero); the steering loops keep working;
- controlled stop (a stop from the bridge, its watchdog, not ready, not automatic): the speed
  loops bring the drives to 0 (the hydrostat brakes), steering held; once every measured speed
  is below ``STANDSTILL_M_S`` the holding brakes go on and the drives off (``parked``);
- safe state (plant lost, a non-finite measurement, the simulation's ``drive_fault``, a PLC
  fault or e-stop): torque 0, ``enable`` off, ``brake`` on, at once;
- ``plant_out.seq``: a counter, no clock (:class:`ActuationSequence`, the reasoning of the
  bridge's ``command_seq``): +1 every scan, a new run starting ``SEQ_MARGIN`` beyond the
  plant link's ``actuation_seq`` in ``plant_in``, so the plant link forwards each scan's
  actuation once, never an older one, and a restarted program's at once;
- ``plant_out.crc``: the block sealed each scan (:mod:`plc_bridge.command_crc`, as the bridge
  seals its commands): a read that spans two scans (OPC UA reads each variable on its own)
  finds a CRC that does not match, and the plant link forwards nothing from it. The virtual
  PLC writes the whole block at once anyway; a CPU serving OPC UA does not promise that.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from plc_bridge.command_crc import CRC_FIELD, block_crc
from plc_bridge.command_seq import HALF, SEQ_MARGIN, SEQ_MODULUS, from_dint, seq_newer
from plc_bridge.config import BridgeConfig
from plc_bridge.virtual_plc.plant import AliveWatchdog
from plc_bridge.virtual_plc.speed_loop import PiSpeedLoop
from plc_bridge.virtual_plc.steering_loop import SteeringLoop, alignment

STANDSTILL_M_S = 0.02   # below this on every drive a controlled stop applies the brakes [m/s]
RECOVER_CHANGES = 3     # alive changes after a loss before plant_lost may clear (one may be late)
MODES = ("parked", "drive", "stopping", "safe")


def dint(value: int) -> int:
    """An unbounded counter as the DINT a data block holds (mod 2^32, two's complement)."""
    v = int(value) % (1 << 32)
    return v - (1 << 32) if v >= (1 << 31) else v


class ActuationSequence:
    """``plant_out.seq`` of each scan: a counter (no wall clock, no Unix time), restart-safe
    by the reasoning of the bridge's ``command_seq.CommandSequence``.

    The plant link forwards a ``plant_out`` only when its seq is newer (RFC 1982 order on 32
    bits) than the last one it forwarded, which it reports back in ``plant_in.actuation_seq``
    (0: none). So:

    - a run of the program starts ``margin`` beyond that ``actuation_seq`` (0 + ``margin``
      when there is none yet): newer than every seq the link forwarded, and than what an
      earlier run wrote and the link has not read yet (at most a few scans beyond it);
    - each scan +1, an unbounded integer in this process (the wire value is it modulo 2^32
      as a DINT; 0, the link's "none", is skipped);
    - ``actuation_seq`` newer than the last seq this run wrote means the link forwarded what
      this run never wrote: an earlier run's (a PLC restarted with its counter lost while the
      link stayed connected, a CPU's STOP -> RUN), or this run started before the link's first
      ``plant_in`` arrived. A new session then starts ``margin`` beyond it, else this run's
      actuations would look old to the link and never be forwarded (the drives stay braked).

    What an earlier run wrote never acts after the restart: the link forwards nothing older
    than its last forwarded seq, and after a link fault its first read is only a baseline
    (``plant_link.core``)."""

    def __init__(self, start: int | None = None, margin: int = SEQ_MARGIN) -> None:
        """``start``: the first seq (unbounded; tests), else decided at the first scan."""
        if not 0 < margin < HALF:
            raise ValueError(f"margin = {margin} must be within 1 .. 2^31 - 1")
        self.margin = int(margin)
        self.last: int | None = None if start is None else int(start) - 1
        self.sessions = 0

    def next(self, actuation_seq: int) -> int:
        """The seq of this scan's ``plant_out`` (unbounded), given ``plant_in.actuation_seq``
        as read (DINT; 0 = nothing forwarded)."""
        fwd = from_dint(actuation_seq) if actuation_seq else None
        if self.last is None:
            seq = (fwd if fwd is not None else 0) + self.margin
            self.sessions += 1
        elif fwd is not None and seq_newer(fwd, self.last % SEQ_MODULUS):
            seq = self.last + 1
            ahead = (fwd + self.margin - seq) % SEQ_MODULUS
            if ahead < HALF:               # beyond what the link holds, by the margin
                seq += ahead
            self.sessions += 1
        else:
            seq = self.last + 1
        if seq % SEQ_MODULUS == 0:         # 0 is the link's "none"
            seq += 1
        self.last = seq
        return seq


@dataclass
class HilScan:
    """One scan's outcome: ``plant_out`` (every field of the block), what the monitor DB shows
    (``speeds`` [m/s] and ``angles`` [rad] as measured, possibly NaN), and the state."""

    plant_out: dict[str, Any]
    speeds: list[float]
    angles: list[float]
    mode: str
    plant_lost: bool
    saturated: bool
    fault: str                       # '' = none; else why the drives are in the safe state
    torques: list[float] = field(default_factory=list)       # [N m]
    steer_rates: list[float] = field(default_factory=list)   # [rad/s]


class HilProgram:
    """The drive and steering loops of one vehicle model over ``plant_in`` / ``plant_out``."""

    def __init__(self, config: BridgeConfig, seq_start: int | None = None) -> None:
        """``seq_start``: the first ``plant_out.seq`` (tests), else :class:`ActuationSequence`
        decides at the first scan."""
        vp = config.virtual_plc
        self.config = config
        self.tuning = vp.drive_tuning(config.model)
        t = self.tuning
        self.loop = PiSpeedLoop(len(config.wheels), t.speed_kp_nm_s_per_m,
                                t.speed_ki_nm_per_m, t.torque_limit_nm, vp.speed_sp_weight,
                                names=config.wheels)
        self.steer = (SteeringLoop(len(config.steering), vp.steer_kp_1_s, t.steer_rate_rad_s,
                                   names=config.steering) if config.steering else None)
        # steer, then drive: where every driven wheel is steered (4WD4WS)
        self.align = bool(config.steering) and tuple(config.steering) == tuple(config.wheels)
        self.watchdog = AliveWatchdog(vp.plant_watchdog_timeout_s)
        self.plant_lost = True
        self._changes = 0                           # alive changes since the last loss
        self._last_alive: int | None = None
        self.mode = "parked"
        self.alive = 0
        self.seq = ActuationSequence(seq_start)
        self._speed_names = config.speed_fields()
        self._angle_names = config.angle_fields()
        self._torque_names = config.torque_sp_fields()
        self._rate_names = config.steer_rate_sp_fields()
        self.last: HilScan | None = None

    def scan(self, now_s: float, dt_s: float, drive: bool, safe: bool,
             speed_sp: np.ndarray, angle_sp: np.ndarray, plant_in: Mapping[str, Any],
             drive_requested: bool) -> HilScan:
        """One PLC scan at monotonic ``now_s`` [s], ``dt_s`` [s] after the last one.

        ``drive``: the guard has a drive command in force and the PLC may drive (ready, auto,
        no fault); ``safe``: a PLC fault or e-stop (safe state regardless); ``speed_sp`` [m/s]
        and ``angle_sp`` [rad]: the guard's set-points; ``plant_in``: the decoded block;
        ``drive_requested``: the guard's last taken command is a drive (not a stop) - the
        plant_lost latch clears only without one."""
        alive = int(plant_in["alive"])
        if self.watchdog.update(alive, now_s):
            if self._last_alive is not None and alive != self._last_alive:
                self._changes = min(self._changes + 1, RECOVER_CHANGES)
            if self.plant_lost and not drive_requested and self._changes >= RECOVER_CHANGES:
                self.plant_lost = False
        else:
            self.plant_lost = True
            self._changes = 0
        self._last_alive = alive
        speeds = [float(plant_in[n]) for n in self._speed_names]
        angles = [float(plant_in[n]) for n in self._angle_names]
        fault = ""
        if self.plant_lost:
            fault = (f"plant lost: the simulation's alive counter in plant_in unchanged for "
                     f"more than {self.watchdog.timeout_s:g} s (plant_watchdog_timeout_s)")
        elif plant_in.get("drive_fault"):
            fault = "the simulation reports drive_fault (it refused an actuation)"
        for name, a in zip(self.config.steering, angles, strict=True):
            if not fault and not math.isfinite(a):
                fault = f"measured steering angle of {name} is {a}"

        if safe or fault:
            self.mode = "safe"
        elif drive:
            self.mode = "drive"
        elif self.mode in ("drive", "stopping"):
            self.mode = "stopping"
        else:
            self.mode = "parked"
        running = self.mode in ("drive", "stopping")
        sp = np.asarray(speed_sp, dtype=float) if self.mode == "drive" else \
            np.zeros(len(speeds))
        commanded = bool(np.any(sp))   # the bridge asks for motion (before the alignment)
        if self.align and self.mode == "drive":
            sp = sp * alignment(angle_sp, angles)
        torques = self.loop.step(dt_s, sp, speeds, running)
        if self.loop.fault:                 # a non-finite measured speed: safe state
            fault = fault or self.loop.fault
            self.mode, running = "safe", False
            torques = np.zeros(len(speeds))
        at_rest = all(abs(v) < STANDSTILL_M_S for v in speeds)
        if self.mode == "stopping" and at_rest:
            self.mode, running = "parked", False   # at standstill: brakes on, drives off
            torques = self.loop.step(dt_s, sp, speeds, False)
        # halted under a zero command: held on the brakes, not by the speed loop (not while
        # the wheels steer first to a command that moves: a braked machine's steering valves
        # stay closed, it would never get there)
        held = self.mode == "drive" and at_rest and not commanded
        if held:
            torques = self.loop.step(dt_s, sp, speeds, False)
        # the steering loops work in drive mode only; else the valves close: steering held
        rates = (self.steer.step(dt_s, angle_sp, angles, self.mode == "drive")
                 if self.steer is not None else np.zeros(0))
        self.alive = (self.alive + 1) & 0xFFFF
        seq = self.seq.next(int(plant_in.get("actuation_seq", 0)))
        out: dict[str, Any] = {"alive": self.alive, "enable": running,
                               "brake": not running or held,
                               "seq": dint(seq)}
        out.update(zip(self._torque_names, (float(t) for t in torques), strict=True))
        out.update(zip(self._rate_names, (float(r) for r in rates), strict=True))
        for f in self.config.plant_out.fields:   # any extra field a site added: zero
            out.setdefault(f.name, False if f.s7_type == "BOOL" else 0)
        layout = self.config.plant_out
        out[CRC_FIELD] = dint(block_crc(layout, layout.encode(out)))   # sealed: taken whole
        self.last = HilScan(out, speeds, angles, self.mode, self.plant_lost,
                            bool(running and self.loop.saturated.any()), fault,
                            [float(t) for t in torques], [float(r) for r in rates])
        return self.last
