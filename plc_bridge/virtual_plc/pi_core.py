"""The PI core the virtual PLC's loops share (:mod:`~plc_bridge.virtual_plc.speed_loop`,
:mod:`~plc_bridge.virtual_plc.steering_loop`): ``n`` channels of ``u = p + I``,
``I += ki * e * dt``, ``u`` limited to +-``limit``, with clamping anti-windup, reset on stop and
a held fault on a non-finite input. Pure (numpy only). Each loop keeps its own meaning (units,
the proportional term: set-point weight or deadband, the wording of its errors) and supplies it
through :meth:`ClampedPi._terms` and the class's wording attributes.

Anti-windup: **clamping** (conditional integration). The integrator follows the error only
until the output reaches the limit the error pushes towards; there it holds its value, and it
integrates again as soon as the error turns back (or the output leaves the limit); its own
value is kept within the limit too, and it never moves against the error (nothing to unwind).

Safe behaviour:
- ``enabled`` False: outputs 0 and the integrators reset ("reset on stop");
- a non-finite measurement (or set-point, while enabled): every output 0, the integrators
  reset and ``fault`` set, naming the channel and the value; held while enabled, cleared by a
  stop with finite measurements (the acknowledge a PLC program asks for);
- a scan longer than ``MAX_DT_S`` (a PLC paused and resumed) integrates as ``MAX_DT_S``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

MAX_DT_S = 0.1   # longest scan the integrator takes at face value [s]


def positive(name: str, value: float, unit: str, *, zero_ok: bool = False) -> float:
    """``value`` as a float, finite and > 0 (>= 0 with ``zero_ok``), else a ValueError naming
    it."""
    v = float(value)
    if not math.isfinite(v) or v < 0.0 or (v == 0.0 and not zero_ok):
        raise ValueError(f"{name} = {value!r} {unit} must be finite and "
                         f"{'>= 0' if zero_ok else '> 0'}")
    return v


def channel_count(n: int, what: str) -> int:
    """``n`` when it is an integer in 1..16, else a ValueError naming ``what`` it counts."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 16:
        raise ValueError(f"n = {n!r} {what} must be an integer in 1..16")
    return n


class ClampedPi:
    """``n`` PI channels with clamping anti-windup (module docstring). A subclass sets ``kp``,
    ``ki``, ``limit`` (and ``n`` via :func:`channel_count`) before calling this constructor,
    and defines :meth:`_terms` and the wording attributes below.

    Args:
        n: number of channels.
        names: channel names for messages (default ``0``, ``1``...).
    """

    kp: float
    ki: float
    limit: float
    # wording of the errors: what the channels are, what the inputs are called, what a fault
    # does to the outputs
    CHANNELS = "channels"
    SETPOINTS = "set-points"
    MEASUREMENTS = "measurements"
    MEASURED_NAME = "measurement"
    SETPOINT_NAME = "set-point"
    CHANNEL_PREFIX = ""
    ON_FAULT = "every output set to 0"

    def __init__(self, n: int, names: Sequence[str] | None = None) -> None:
        self.n = n
        self.names = tuple(names) if names is not None else tuple(str(i) for i in range(n))
        if len(self.names) != n:
            raise ValueError(f"names {list(self.names)} must name the {n} {self.CHANNELS}")
        self._integral = np.zeros(n)
        self._output = np.zeros(n)
        self._saturated = np.zeros(n, dtype=bool)
        self.fault = ""

    @property
    def integral(self) -> np.ndarray:
        """The integral terms, in the output's unit: N m for the speed loop, rad/s for the
        steering loop (copies)."""
        return self._integral.copy()

    @property
    def output(self) -> np.ndarray:
        """The last outputs (copies)."""
        return self._output.copy()

    @property
    def saturated(self) -> np.ndarray:
        """Per channel: the output is at its limit (a drive at its torque limit, a steering
        valve fully open)."""
        return self._saturated.copy()

    def reset(self) -> None:
        """Integrators and outputs to 0 (the fault is not cleared: see :meth:`_scan`)."""
        self._integral[:] = 0.0
        self._output[:] = 0.0
        self._saturated[:] = False

    def _terms(self, setpoint: np.ndarray, measured: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
        """The error the integrator takes and the proportional term, per channel."""
        raise NotImplementedError

    def _scan(self, dt_s: float, setpoint: np.ndarray | Sequence[float],
              measured: np.ndarray | Sequence[float], enabled: bool) -> np.ndarray:
        """One PLC scan of ``dt_s`` [s]; returns the outputs (a copy)."""
        dt = float(dt_s)
        if not math.isfinite(dt) or dt < 0.0:
            raise ValueError(f"dt_s = {dt_s!r} s must be finite and >= 0")
        dt = min(dt, MAX_DT_S)
        sp = np.asarray(setpoint, dtype=float).reshape(-1)
        meas = np.asarray(measured, dtype=float).reshape(-1)
        if sp.shape != (self.n,) or meas.shape != (self.n,):
            raise ValueError(f"expected {self.n} {self.SETPOINTS} and {self.n} "
                             f"{self.MEASUREMENTS}, got {sp.shape[0]} and {meas.shape[0]}")
        bad = self._non_finite(meas, self.MEASURED_NAME) or \
            (self._non_finite(sp, self.SETPOINT_NAME) if enabled else "")
        if bad:
            self.fault = bad
            self.reset()
            return self.output
        if not enabled:
            self.fault = ""   # a stop with finite measurements acknowledges a fault
            self.reset()
            return self.output
        if self.fault:        # held while enabled: outputs stay at 0
            self.reset()
            return self.output
        error, p = self._terms(sp, meas)
        i = self._integral
        candidate = np.clip(i + self.ki * error * dt, -self.limit, self.limit)
        # clamping: the integrator follows the error only until the output reaches the limit
        # the error pushes towards (it fills up to exactly the limit, so the output gets
        # there); beyond it, it holds. It never moves against the error (no unwinding).
        up = np.minimum(candidate, np.maximum(i, self.limit - p))
        down = np.maximum(candidate, np.minimum(i, -self.limit - p))
        self._integral = np.where(error > 0.0, up, np.where(error < 0.0, down, i))
        raw = p + self._integral
        self._output = np.clip(raw, -self.limit, self.limit)
        self._saturated = np.abs(raw) >= self.limit * (1.0 - 1e-9)
        return self.output

    def _non_finite(self, values: np.ndarray, what: str) -> str:
        for name, v in zip(self.names, values, strict=True):
            if not math.isfinite(v):
                return (f"{what} of {self.CHANNEL_PREFIX}{name} is {v}: {self.ON_FAULT}, "
                        "integrators reset; a stop with finite measurements clears it")
        return ""
