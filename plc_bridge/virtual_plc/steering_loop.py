"""The PLC's steering-angle loops in HIL: one angle controller per steering actuator, angle
set-point [rad] and measured angle [rad] in, steering rate command [rad/s] (the proportional valve's
command, hil_contract.md) out. Pure (numpy only); the twin of
:mod:`plc_bridge.virtual_plc.speed_loop` for the steered wheels of the Ackermann and 4WD4WS
machines.

The actuator integrates the valve's flow into angle, so a proportional controller alone has no
steady-state error on a constant set-point (the plant has the integrator): ``u = kp * e + I``, ``e =
w - y`` (set-point minus measured angle), ``I += ki * e * dt``, ``u`` limited to
+-``max_rate_rad_s`` (the valve's full opening, and the rate the machine's steering is rated for).
The integral term (``ki`` > 0) is for what a P loop leaves: a leaking cylinder, a valve with an
offset, a steering load that needs a standing valve opening. It is 0 by default.

- ``deadband_rad``: inside it the error counts as 0: the valve closes on a wheel that is close
  enough instead of hunting around its set-point with a dithering valve (a sensor's quantisation
  would do that). 0 by default.
- Anti-windup: **clamping**, as the speed loop: the integrator follows the error only until the
  output reaches the limit the error pushes towards, holds there, and never moves against the
  error. ``saturated`` says a valve is fully open (the wheel turns as fast as it can).
- ``enabled`` False (stop, watchdog, plant lost, parked): every rate 0 and the integrators
  reset: the valves close and the wheels hold their angles (hil_program's "steering held").
- A non-finite measured angle or set-point: every rate 0, integrators reset, ``fault`` set
  naming the actuator and value; held while enabled, cleared by a stop with finite
  measurements (the acknowledge of the speed loop).
- A scan longer than ``MAX_DT_S`` (a paused PLC) integrates as ``MAX_DT_S``.

:func:`alignment` gives what a mechatronic-layer program does with the drives while the wheels
are still turning to their angles ("steer, then drive"): one factor on every wheel's speed
set-point, 0 while a wheel is 15 deg or more off its angle, 1 within 2 deg, linear between. A wheel
pointing well off its direction would drive the machine the wrong way: a crab command from straight
ahead waits for the wheels, then drives along the crab direction."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from plc_bridge.virtual_plc.speed_loop import MAX_DT_S

ALIGNED_RAD = 0.035   # 2 deg: within it a wheel counts as aligned (full speed)
STOP_RAD = 0.26       # 15 deg: a wheel this far off stops the drive


def _non_negative(name: str, value: float, unit: str, *, zero_ok: bool) -> float:
    v = float(value)
    if not math.isfinite(v) or v < 0.0 or (v == 0.0 and not zero_ok):
        raise ValueError(f"{name} = {value!r} {unit} must be finite and "
                         f"{'>= 0' if zero_ok else '> 0'}")
    return v


class SteeringLoop:
    """``n`` steering actuators, each a P(I) angle loop with clamping anti-windup and a rate
    limit (module docstring).

    Args:
        n: number of steering actuators.
        kp_1_s: proportional gain [rad/s per rad].
        max_rate_rad_s: the rate command's limit [rad/s], symmetric.
        ki_1_s2: integral gain [rad/s per rad s]; 0 = P only (default).
        deadband_rad: angle error taken as 0 [rad] (default 0).
        names: actuator names for messages (default ``0``, ``1``...).
    """

    def __init__(self, n: int, kp_1_s: float, max_rate_rad_s: float, ki_1_s2: float = 0.0,
                 deadband_rad: float = 0.0, names: Sequence[str] | None = None) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 16:
            raise ValueError(f"n = {n!r} steering actuators must be an integer in 1..16")
        self.n = n
        self.kp = _non_negative("kp_1_s", kp_1_s, "1/s", zero_ok=False)
        self.limit = _non_negative("max_rate_rad_s", max_rate_rad_s, "rad/s", zero_ok=False)
        self.ki = _non_negative("ki_1_s2", ki_1_s2, "1/s^2", zero_ok=True)
        self.deadband = _non_negative("deadband_rad", deadband_rad, "rad", zero_ok=True)
        if self.deadband > 0.1:
            raise ValueError(f"deadband_rad = {deadband_rad!r} rad is more than 0.1 rad "
                             "(5.7 deg): the wheels would stop far from their angles; give a "
                             "few thousandths of a radian at most")
        self.names = tuple(names) if names is not None else tuple(str(i) for i in range(n))
        if len(self.names) != n:
            raise ValueError(f"names {list(self.names)} must name the {n} steering actuators")
        self._integral = np.zeros(n)
        self._rates = np.zeros(n)
        self._saturated = np.zeros(n, dtype=bool)
        self.fault = ""

    @property
    def integral(self) -> np.ndarray:
        """The integral terms [rad/s] (copies)."""
        return self._integral.copy()

    @property
    def rates(self) -> np.ndarray:
        """The last rate commands [rad/s] (copies)."""
        return self._rates.copy()

    @property
    def saturated(self) -> np.ndarray:
        """Per actuator: the rate command is at its limit (valve fully open)."""
        return self._saturated.copy()

    def reset(self) -> None:
        """Integrators and outputs to 0 (the fault is not cleared: see ``step``)."""
        self._integral[:] = 0.0
        self._rates[:] = 0.0
        self._saturated[:] = False

    def step(self, dt_s: float, setpoint_rad: np.ndarray | Sequence[float],
             measured_rad: np.ndarray | Sequence[float], enabled: bool) -> np.ndarray:
        """One PLC scan of ``dt_s`` [s]; returns the steering rate commands [rad/s] (a copy)."""
        dt = float(dt_s)
        if not math.isfinite(dt) or dt < 0.0:
            raise ValueError(f"dt_s = {dt_s!r} s must be finite and >= 0")
        dt = min(dt, MAX_DT_S)
        sp = np.asarray(setpoint_rad, dtype=float).reshape(-1)
        meas = np.asarray(measured_rad, dtype=float).reshape(-1)
        if sp.shape != (self.n,) or meas.shape != (self.n,):
            raise ValueError(f"expected {self.n} angle set-points and {self.n} measured "
                             f"angles [rad], got {sp.shape[0]} and {meas.shape[0]}")
        bad = self._non_finite(meas, "measured steering angle") or \
            (self._non_finite(sp, "steering angle set-point") if enabled else "")
        if bad:
            self.fault = bad
            self.reset()
            return self.rates
        if not enabled:
            self.fault = ""   # a stop with finite measurements acknowledges a fault
            self.reset()
            return self.rates
        if self.fault:
            self.reset()
            return self.rates
        error = sp - meas
        error = np.where(np.abs(error) <= self.deadband, 0.0, error)
        p = self.kp * error
        i = self._integral
        candidate = np.clip(i + self.ki * error * dt, -self.limit, self.limit)
        up = np.minimum(candidate, np.maximum(i, self.limit - p))
        down = np.maximum(candidate, np.minimum(i, -self.limit - p))
        self._integral = np.where(error > 0.0, up, np.where(error < 0.0, down, i))
        raw = p + self._integral
        self._rates = np.clip(raw, -self.limit, self.limit)
        self._saturated = np.abs(raw) >= self.limit * (1.0 - 1e-9)
        return self.rates

    def _non_finite(self, values: np.ndarray, what: str) -> str:
        for name, v in zip(self.names, values, strict=True):
            if not math.isfinite(v):
                return (f"{what} of {name} is {v}: every steering valve closed (rates 0), "
                        "integrators reset; a stop with finite measurements clears it")
        return ""


def alignment(setpoint_rad: np.ndarray | Sequence[float],
              measured_rad: np.ndarray | Sequence[float],
              aligned_rad: float = ALIGNED_RAD, stop_rad: float = STOP_RAD) -> float:
    """The share [0, 1] of their speed set-points the wheels should drive with while the
    steering still turns: 1 when every wheel is within ``aligned_rad`` of its angle, 0 when
    any is ``stop_rad`` or more off, linear between. One factor for all wheels (the worst
    wheel's), so the speeds keep their ratios and with them the turning centre: scaling the
    wheels one by one would make them fight each other."""
    if not 0.0 <= aligned_rad < stop_rad:
        raise ValueError(f"alignment window {aligned_rad!r}..{stop_rad!r} rad must satisfy "
                         "0 <= aligned_rad < stop_rad")
    error = np.abs(np.asarray(setpoint_rad, dtype=float) - np.asarray(measured_rad, dtype=float))
    worst = float(np.max(error, initial=0.0))
    return min(1.0, max(0.0, (stop_rad - worst) / (stop_rad - aligned_rad)))
