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

U16_MODULUS = 1 << 16


def _check(name: str, value: float, low: float, high: float = math.inf, *,
           low_open: bool = True, unit: str = "") -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} = {value!r} is not a number")
    value = float(value)
    below = value <= low if low_open else value < low
    if not math.isfinite(value) or below or value > high:
        lo = "(" if low_open else "["
        raise ValueError(f"{name} = {value} {unit} is outside {lo}{low:g}, {high:g}] {unit}")
    return value


def _count(name: str, value: int, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or not low <= value <= high:
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

    def alive(self, now_s: float) -> bool:
        """True when the last change is at most ``timeout_s`` before ``now_s``."""
        return self._last_change_s is not None and now_s - self._last_change_s <= self.timeout_s

    def reset(self) -> None:
        """Forget the history: a fresh change is needed again."""
        self._last_counter = self._last_change_s = self._last_now_s = None
