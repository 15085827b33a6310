"""The PLC's drive speed loops in HIL: one PI controller per drive, speed set-point [m/s] and
measured speed [m/s] in, torque set-point [N m at the sprocket/wheel] out. Pure (numpy only).

What a mechatronic-layer PLC program does with a hydrostatic track drive whose electronic
control takes a torque (displacement) command: ``u = kp * (b * w - y) + I``,
``I += ki * (w - y) * dt``, ``u`` limited to +-``torque_limit_nm`` (``w`` set-point, ``y``
measured speed). ``b`` is the proportional set-point weight of PID_Compact and CONT_C (0..1):
a drive with a torque input integrates torque into speed, and a plain PI (``b`` = 1) on such
a plant overshoots every set-point step by 20-40 %; ``b`` = 0.5 takes the zero out of the
set-point path (no overshoot) and leaves the answer to a load (a slope, the bucket) as it is.

Anti-windup: **clamping** (conditional integration). The integrator follows the error only
until the output reaches the limit the error pushes towards; there it holds its value, and it
integrates again as soon as the error turns back (or the output leaves the limit); its own
value is kept within the torque limit too. ``saturated`` says the output is at its limit.
Chosen over back-calculation because it has no tracking gain to tune (one parameter fewer for
the commissioning engineer), recovers at once when the load drops (the
integrator never ran away, so there is nothing to unwind), and is what the PLC programmer
knows from Siemens' own blocks (CONT_C's ``INT_HOLD`` at the limits, PID_Compact's integral
stop at the output limits), so the virtual PLC behaves like the program it stands for.

Safe behaviour:
- ``enabled`` False (a stop, the watchdog, plant lost...): outputs 0 and the integrator reset,
  so a restart begins from rest and no torque from an earlier run is left over ("reset on
  stop");
- a non-finite measured speed or set-point (a broken sensor, a corrupted DB): every drive's
  output 0 (one track pulling alone would turn the machine), the integrators reset and
  ``fault`` set, naming the drive and the value. The fault holds while the loop stays enabled;
  a stop with finite measurements clears it (the acknowledge a PLC program asks for).
- a scan longer than ``MAX_DT_S`` (a PLC paused and resumed) integrates as ``MAX_DT_S``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

MAX_DT_S = 0.1   # longest scan the integrator takes at face value [s]


def _positive(name: str, value: float, unit: str, *, zero_ok: bool = False) -> float:
    v = float(value)
    if not math.isfinite(v) or v < 0.0 or (v == 0.0 and not zero_ok):
        raise ValueError(f"{name} = {value!r} {unit} must be finite and "
                         f"{'>= 0' if zero_ok else '> 0'}")
    return v


class PiSpeedLoop:
    """``n`` drives, each a PI speed loop with clamping anti-windup (module docstring).

    Args:
        n: number of drives (tracks or driven wheels).
        kp_nm_s_per_m: proportional gain [N m per m/s].
        ki_nm_per_m: integral gain [N m per (m/s * s)]; 0 = P only.
        torque_limit_nm: the drive's torque limit [N m], symmetric.
        sp_weight: proportional set-point weight ``b``, 0..1 (1 = plain PI).
        names: drive names for messages (default ``0``, ``1``...).
    """

    def __init__(self, n: int, kp_nm_s_per_m: float, ki_nm_per_m: float,
                 torque_limit_nm: float, sp_weight: float = 1.0,
                 names: Sequence[str] | None = None) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 16:
            raise ValueError(f"n = {n!r} drives must be an integer in 1..16")
        self.n = n
        self.kp = _positive("kp_nm_s_per_m", kp_nm_s_per_m, "N m s/m")
        self.ki = _positive("ki_nm_per_m", ki_nm_per_m, "N m/m", zero_ok=True)
        self.limit = _positive("torque_limit_nm", torque_limit_nm, "N m")
        self.sp_weight = _positive("sp_weight", sp_weight, "", zero_ok=True)
        if self.sp_weight > 1.0:
            raise ValueError(f"sp_weight = {sp_weight!r} must be within 0..1")
        self.names = tuple(names) if names is not None else tuple(str(i) for i in range(n))
        if len(self.names) != n:
            raise ValueError(f"names {list(self.names)} must name the {n} drives")
        self._integral = np.zeros(n)
        self._torque = np.zeros(n)
        self._saturated = np.zeros(n, dtype=bool)
        self.fault = ""

    @property
    def integral(self) -> np.ndarray:
        """The integral terms [N m] (copies)."""
        return self._integral.copy()

    @property
    def torque(self) -> np.ndarray:
        """The last outputs [N m] (copies)."""
        return self._torque.copy()

    @property
    def saturated(self) -> np.ndarray:
        """Per drive: the output is at its torque limit (the set-point is not held)."""
        return self._saturated.copy()

    def reset(self) -> None:
        """Integrators and outputs to 0 (the fault is not cleared: see ``step``)."""
        self._integral[:] = 0.0
        self._torque[:] = 0.0
        self._saturated[:] = False

    def step(self, dt_s: float, setpoint_m_s: np.ndarray | Sequence[float],
             measured_m_s: np.ndarray | Sequence[float], enabled: bool) -> np.ndarray:
        """One PLC scan of ``dt_s`` [s]; returns the torque set-points [N m] (a copy)."""
        dt = float(dt_s)
        if not math.isfinite(dt) or dt < 0.0:
            raise ValueError(f"dt_s = {dt_s!r} s must be finite and >= 0")
        dt = min(dt, MAX_DT_S)
        sp = np.asarray(setpoint_m_s, dtype=float).reshape(-1)
        meas = np.asarray(measured_m_s, dtype=float).reshape(-1)
        if sp.shape != (self.n,) or meas.shape != (self.n,):
            raise ValueError(f"expected {self.n} set-points and {self.n} measured speeds "
                             f"[m/s], got {sp.shape[0]} and {meas.shape[0]}")
        bad = self._non_finite(meas, "measured speed") or \
            (self._non_finite(sp, "speed set-point") if enabled else "")
        if bad:
            self.fault = bad
            self.reset()
            return self.torque
        if not enabled:
            self.fault = ""   # a stop with finite measurements acknowledges a fault
            self.reset()
            return self.torque
        if self.fault:        # held while enabled: outputs stay at 0
            self.reset()
            return self.torque
        error = sp - meas
        p = self.kp * (self.sp_weight * sp - meas)
        i = self._integral
        candidate = np.clip(i + self.ki * error * dt, -self.limit, self.limit)
        # clamping: the integrator follows the error only until the output reaches the limit
        # the error pushes towards (it fills up to exactly the limit, so the output gets
        # there); beyond it, it holds. It never moves against the error (no unwinding).
        up = np.minimum(candidate, np.maximum(i, self.limit - p))
        down = np.maximum(candidate, np.minimum(i, -self.limit - p))
        self._integral = np.where(error > 0.0, up, np.where(error < 0.0, down, i))
        raw = p + self._integral
        self._torque = np.clip(raw, -self.limit, self.limit)
        self._saturated = np.abs(raw) >= self.limit * (1.0 - 1e-9)
        return self.torque

    def _non_finite(self, values: np.ndarray, what: str) -> str:
        for name, v in zip(self.names, values, strict=True):
            if not math.isfinite(v):
                return (f"{what} of drive {name} is {v}: every drive's torque set to 0, "
                        f"integrators reset; a stop with finite measurements clears it")
        return ""
