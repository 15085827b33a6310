"""The virtual PLC's plant, without any snap7: wheel/track drives and steering actuators, and the
watchdog on the bridge's alive counter.

- Drive speed [m/s]: first-order lag with time constant ``tau``, discretised exactly
  (``v += (v_set - v) * (1 - exp(-dt/tau))``), so the response does not depend on how the
  server slices time.
- Steering angle [rad]: moves towards its setpoint at no more than ``steer_rate_rad_s``.
- Setpoints beyond an actuator's range (``speed_limit_m_s``, ``steer_limit_rad``) are what a real
  drive does with them: the actuator stops at its limit. That is physics, not input handling,
  so it is counted in ``limit_events`` and flagged in ``limited`` for the PLC's status bits.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from plc_bridge.command_seq import REFUSAL_REASONS, SEQ_MODULUS, refusal_code, seq_newer

__all__ = ["SEQ_MODULUS", "AliveWatchdog", "CommandGuard", "VehiclePlant", "seq_newer"]

U16_MODULUS = 1 << 16


def _check(name: str, value: object, low: float, high: float = math.inf, *,
           low_open: bool = True, unit: str = "") -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} = {value!r} is not a number")
    value = float(value)
    below = value <= low if low_open else value < low
    if not math.isfinite(value) or below or value > high:
        lo = "(" if low_open else "["
        raise ValueError(f"{name} = {value} {unit} is outside {lo}{low:g}, {high:g}] {unit}")
    return value


def _count(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or \
            not low <= int(value) <= high:
        raise ValueError(f"{name} = {value!r} must be an integer in [{low}, {high}]")
    return int(value)


class VehiclePlant:
    """``n_wheels`` driven wheels/tracks and ``n_steer`` steering actuators.

    State: ``speeds`` [m/s] and ``angles`` [rad] (copies), starting at rest and straight.
    ``step(dt, speed_setpoints, angle_setpoints)`` advances by ``dt`` [s]; omitted setpoints
    keep the previous ones. ``stop()`` sets the speed setpoints to 0 and the angle setpoints to
    the current angles (steering held); it does not latch: a later ``step`` with explicit
    setpoints drives again, so the caller decides every cycle.
    """

    def __init__(self, n_wheels: int, n_steer: int, speed_time_constant_s: float,
                 steer_rate_rad_s: float, steer_limit_rad: float, speed_limit_m_s: float
                 ) -> None:
        self.n_wheels = _count("n_wheels", n_wheels, 1, 16)
        self.n_steer = _count("n_steer", n_steer, 0, 16)
        # tau = 0 is an ideal drive (setpoint reached within the step).
        self.speed_time_constant_s = _check("speed_time_constant_s", speed_time_constant_s,
                                            0.0, 60.0, low_open=False, unit="s")
        self.steer_rate_rad_s = _check("steer_rate_rad_s", steer_rate_rad_s, 0.0, 100.0,
                                       unit="rad/s")
        self.steer_limit_rad = _check("steer_limit_rad", steer_limit_rad, 0.0, math.pi,
                                      unit="rad")
        self.speed_limit_m_s = _check("speed_limit_m_s", speed_limit_m_s, 0.0, 50.0,
                                      unit="m/s")
        self._speeds = np.zeros(self.n_wheels)
        self._angles = np.zeros(self.n_steer)
        self._speed_sp = np.zeros(self.n_wheels)
        self._angle_sp = np.zeros(self.n_steer)
        self.limited = False
        self.limit_events = 0

    @property
    def speeds(self) -> np.ndarray:
        """Wheel/track ground speeds [m/s]."""
        return self._speeds.copy()

    @property
    def angles(self) -> np.ndarray:
        """Steering angles [rad, + left]."""
        return self._angles.copy()

    @property
    def speed_setpoints(self) -> np.ndarray:
        return self._speed_sp.copy()

    @property
    def angle_setpoints(self) -> np.ndarray:
        return self._angle_sp.copy()

    def _setpoints(self, values: np.ndarray | list[float], count: int, what: str, unit: str
                   ) -> np.ndarray:
        arr = np.asarray(values, dtype=float)
        if arr.shape != (count,):
            raise ValueError(f"{what}: expected {count} values [{unit}], got shape {arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{what} = {arr.tolist()} [{unit}] contains NaN/inf")
        return arr

    def step(self, dt: float, speed_setpoints: np.ndarray | list[float] | None = None,
             angle_setpoints: np.ndarray | list[float] | None = None) -> None:
        """Advance ``dt`` [s] (>= 0) towards the setpoints [m/s], [rad]."""
        dt = _check("dt", dt, 0.0, 3600.0, low_open=False, unit="s")
        if speed_setpoints is not None:
            self._speed_sp = self._setpoints(speed_setpoints, self.n_wheels,
                                             "speed setpoints", "m/s")
        if angle_setpoints is not None:
            self._angle_sp = self._setpoints(angle_setpoints, self.n_steer,
                                             "angle setpoints", "rad")
        v_max, a_max = self.speed_limit_m_s, self.steer_limit_rad
        speed_target = np.clip(self._speed_sp, -v_max, v_max)
        angle_target = np.clip(self._angle_sp, -a_max, a_max)
        self.limited = bool(np.any(speed_target != self._speed_sp)
                            or np.any(angle_target != self._angle_sp))
        self.limit_events += int(self.limited)

        tau = self.speed_time_constant_s
        decay = math.exp(-dt / tau) if tau > 0.0 else 0.0
        self._speeds = speed_target + (self._speeds - speed_target) * decay

        max_move = self.steer_rate_rad_s * dt
        self._angles = self._angles + np.clip(angle_target - self._angles, -max_move, max_move)

    def stop(self) -> None:
        """Speeds ramp to 0 (same first-order response), steering held where it is now."""
        self._speed_sp = np.zeros(self.n_wheels)
        self._angle_sp = self._angles.copy()


class AliveWatchdog:
    """Trips when the bridge's u16 alive counter stops changing for longer than ``timeout_s``.

    ``update(counter, now_s)`` returns True while the counter has changed within the last
    ``timeout_s`` seconds. Any new value counts as a change, the wrap 65535 -> 0 included. Until
    the first change is seen it returns False: a counter that merely exists (e.g. left in the DB
    from before a restart) proves nothing.
    """

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = _check("timeout_s", timeout_s, 0.0, 3600.0, unit="s")
        self._last_counter: int | None = None
        self._last_change_s: float | None = None
        self._last_now_s: float | None = None

    def update(self, counter: int, now_s: float) -> bool:
        counter = _count("alive counter", counter, 0, U16_MODULUS - 1)
        now_s = _check("now_s", now_s, -math.inf, low_open=False, unit="s")
        if self._last_now_s is not None and now_s < self._last_now_s:
            raise ValueError(f"now_s = {now_s} s is earlier than the previous {self._last_now_s}"
                             " s; use a monotonic clock")
        self._last_now_s = now_s
        if self._last_counter is not None and counter != self._last_counter:
            self._last_change_s = now_s
        self._last_counter = counter
        return self.alive(now_s)

    @property
    def last_change_s(self) -> float | None:
        """When the last change was seen [s, the caller's clock]; None before the first."""
        return self._last_change_s

    def alive(self, now_s: float) -> bool:
        """True when the last change is at most ``timeout_s`` before ``now_s``."""
        return self._last_change_s is not None and now_s - self._last_change_s <= self.timeout_s

    def reset(self) -> None:
        """Forget the history: a fresh change is needed again."""
        self._last_counter = self._last_change_s = self._last_now_s = None


class CommandGuard:
    """What the PLC program does with each write of the control DB (docs/plc_setup.md section 4,
    and the generated SCL ``PlcBridge_Guard``); pure, time passed in.

    ``on_write(now_s, alive, enable, stop, seq, speeds, angles)`` runs when a write is received,
    ``scan(now_s)`` every PLC cycle. Rules:

    - watchdog: trips when the bridge's alive counter has not changed for ``watchdog_timeout_s``
      (checked at every scan and *before* a received write is taken, so a write delivered late
      after an outage trips it rather than feeding it). A trip latches: it clears only on an
      explicit stop (``stop`` set or ``enable`` clear) that is newer than the last accepted
      command and carries a changed alive counter. The PLC starts tripped.
    - sequence: a drive command is taken only when its ``seq`` is newer than the last accepted
      one (``seq_newer``: serial-number order on 32 bits); an older or repeated write is refused
      (a stop is still obeyed, it is always safe, but an old stop neither re-synchronises
      ``seq`` nor clears a latch). The last accepted one is reported (``seq_accepted``, 0: none
      since start): a bridge continues from it when it connects (``command_seq``).
    - setpoints: a drive command with a NaN/inf setpoint, a speed beyond ``speed_limit_m_s`` or an
      angle beyond ``steer_limit_rad`` (plus ``tolerance`` for REAL rounding) is a setpoint
      fault: outputs to 0, latched until an explicit stop.

    ``command()`` is what the outputs do this scan: ``(drive, speeds, angles)``; ``drive``
    False means speeds to 0 and steering held. ``refused`` counts refused writes per reason,
    ``last_refusal`` is the reason of the last one ('' before any; ``refused_reason`` its code
    for the monitor DB).
    """

    REASONS = REFUSAL_REASONS

    def __init__(self, n_wheels: int, n_steer: int, watchdog_timeout_s: float,
                 speed_limit_m_s: float, steer_limit_rad: float, tolerance: float = 1e-4
                 ) -> None:
        self.n_wheels = _count("n_wheels", n_wheels, 1, 16)
        self.n_steer = _count("n_steer", n_steer, 0, 16)
        self.timeout_s = _check("watchdog_timeout_s", watchdog_timeout_s, 0.0, 3600.0, unit="s")
        self.speed_limit_m_s = _check("speed_limit_m_s", speed_limit_m_s, 0.0, 50.0, unit="m/s")
        self.steer_limit_rad = _check("steer_limit_rad", steer_limit_rad, 0.0, math.pi,
                                      unit="rad")
        self.tolerance = _check("tolerance", tolerance, 0.0, 1.0, low_open=False)
        self.tripped = True
        self.setpoint_fault = False
        self.fault_text = ""
        self._last_alive: int | None = None
        self._last_change_s: float | None = None
        self.last_seq: int | None = None
        self._drive = False
        self._speeds = np.zeros(self.n_wheels)
        self._angles = np.zeros(self.n_steer)
        self.refused: dict[str, int] = dict.fromkeys(self.REASONS, 0)
        self.last_refusal = ""

    @property
    def refused_total(self) -> int:
        return sum(self.refused.values())

    @property
    def refused_reason(self) -> int:
        """The monitor DB's ``refused_reason``: the code of the last refusal (0: none yet)."""
        return refusal_code(self.last_refusal)

    @property
    def seq_accepted(self) -> int:
        """The monitor DB's ``seq_accepted`` (unsigned): the last accepted seq, 0 for none."""
        return 0 if self.last_seq is None else self.last_seq % SEQ_MODULUS

    def _refuse(self, reason: str) -> str:
        self.refused[reason] += 1
        self.last_refusal = reason
        return reason

    @property
    def drive_command(self) -> bool:
        """The last command taken is a drive command (not a stop), whatever the watchdog says:
        a latch elsewhere (HIL's plant_lost) clears only once a stop was taken."""
        return self._drive

    def scan(self, now_s: float) -> None:
        """Trip (and latch) the watchdog when the alive counter is stale."""
        if not self.tripped and (self._last_change_s is None
                                 or now_s - self._last_change_s > self.timeout_s):
            self.tripped = True
        if self.tripped:
            self._drive = False

    def setpoint_error(self, speeds: np.ndarray, angles: np.ndarray) -> str:
        """'' when every setpoint is finite and within the actuator's range, else why not."""
        for what, values, limit, unit in (("speed", speeds, self.speed_limit_m_s, "m/s"),
                                          ("angle", angles, self.steer_limit_rad, "rad")):
            for i, v in enumerate(values):
                if not math.isfinite(v) or abs(v) > limit + self.tolerance:
                    return (f"{what} setpoint {i} = {v:.6g} {unit} is not finite within "
                            f"+-{limit:.6g} {unit}")
        return ""

    def on_write(self, now_s: float, alive: int, enable: bool, stop: bool, seq: int,
                 speeds: np.ndarray | list[float], angles: np.ndarray | list[float]
                 ) -> str | None:
        """Take a received write; returns the refusal reason or None when taken."""
        self.scan(now_s)   # a write arriving after the timeout finds the watchdog tripped
        changed = self._last_alive is not None and int(alive) != self._last_alive
        self._last_alive = int(alive)
        if changed:
            self._last_change_s = now_s
        newer = seq_newer(seq, self.last_seq)
        if stop or not enable:
            self._drive = False   # a stop is always obeyed
            if not newer:
                return self._refuse("stale_seq")
            self.last_seq = int(seq)
            if changed:
                self.tripped = False
            self.setpoint_fault = False
            self.fault_text = ""
            return None
        if not newer:
            return self._refuse("stale_seq")   # the command in force stays as it is
        if self.tripped:
            self._drive = False
            return self._refuse("watchdog_tripped")
        if self.setpoint_fault:
            self._drive = False
            return self._refuse("setpoint_fault")
        sp = np.asarray(speeds, dtype=float).reshape(-1)
        an = np.asarray(angles, dtype=float).reshape(-1)
        if sp.shape != (self.n_wheels,) or an.shape != (self.n_steer,):
            raise ValueError(f"expected {self.n_wheels} speeds and {self.n_steer} angles, got "
                             f"{sp.shape} and {an.shape}")
        error = self.setpoint_error(sp, an)
        if error:
            self._drive = False
            self.setpoint_fault = True
            self.fault_text = error
            return self._refuse("bad_setpoint")
        self.last_seq = int(seq)
        self._drive = True
        self._speeds, self._angles = sp, an
        return None

    def command(self, now_s: float) -> tuple[bool, np.ndarray, np.ndarray]:
        """``(drive, speed setpoints [m/s], angle setpoints [rad])`` for this scan."""
        self.scan(now_s)
        drive = self._drive and not self.tripped and not self.setpoint_fault
        return drive, self._speeds.copy(), self._angles.copy()
