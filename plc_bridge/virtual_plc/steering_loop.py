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

from collections.abc import Sequence

import numpy as np

from plc_bridge.virtual_plc.pi_core import ClampedPi, channel_count, positive

ALIGNED_RAD = 0.035   # 2 deg: within it a wheel counts as aligned (full speed)
STOP_RAD = 0.26       # 15 deg: a wheel this far off stops the drive


class SteeringLoop(ClampedPi):
    """``n`` steering actuators, each a P(I) angle loop with clamping anti-windup and a rate
    limit (module docstring; the controller is
    :class:`~plc_bridge.virtual_plc.pi_core.ClampedPi`).

    Args:
        n: number of steering actuators.
        kp_1_s: proportional gain [rad/s per rad].
        max_rate_rad_s: the rate command's limit [rad/s], symmetric.
        ki_1_s2: integral gain [rad/s per rad s]; 0 = P only (default).
        deadband_rad: angle error taken as 0 [rad] (default 0).
        names: actuator names for messages (default ``0``, ``1``...).
    """

    CHANNELS = "steering actuators"
    SETPOINTS = "angle set-points"
    MEASUREMENTS = "measured angles [rad]"
    MEASURED_NAME = "measured steering angle"
    SETPOINT_NAME = "steering angle set-point"
    CHANNEL_PREFIX = ""
    ON_FAULT = "every steering valve closed (rates 0)"

    def __init__(self, n: int, kp_1_s: float, max_rate_rad_s: float, ki_1_s2: float = 0.0,
                 deadband_rad: float = 0.0, names: Sequence[str] | None = None) -> None:
        channel_count(n, self.CHANNELS)
        self.kp = positive("kp_1_s", kp_1_s, "1/s")
        self.limit = positive("max_rate_rad_s", max_rate_rad_s, "rad/s")
        self.ki = positive("ki_1_s2", ki_1_s2, "1/s^2", zero_ok=True)
        self.deadband = positive("deadband_rad", deadband_rad, "rad", zero_ok=True)
        if self.deadband > 0.1:
            raise ValueError(f"deadband_rad = {deadband_rad!r} rad is more than 0.1 rad "
                             "(5.7 deg): the wheels would stop far from their angles; give a "
                             "few thousandths of a radian at most")
        super().__init__(n, names)

    @property
    def rates(self) -> np.ndarray:
        """The last rate commands [rad/s] (copies)."""
        return self._output.copy()

    def step(self, dt_s: float, setpoint_rad: np.ndarray | Sequence[float],
             measured_rad: np.ndarray | Sequence[float], enabled: bool) -> np.ndarray:
        """One PLC scan of ``dt_s`` [s]; returns the steering rate commands [rad/s] (a copy)."""
        return self._scan(dt_s, setpoint_rad, measured_rad, enabled)

    def _terms(self, setpoint: np.ndarray, measured: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
        """Error ``w - y`` [rad], 0 within the deadband; proportional term ``kp e`` [rad/s]."""
        error = setpoint - measured
        error = np.where(np.abs(error) <= self.deadband, 0.0, error)
        return error, self.kp * error


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
