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

from collections.abc import Sequence

import numpy as np

from plc_bridge.virtual_plc.pi_core import MAX_DT_S, ClampedPi, channel_count, positive

__all__ = ["MAX_DT_S", "PiSpeedLoop"]


class PiSpeedLoop(ClampedPi):
    """``n`` drives, each a PI speed loop with clamping anti-windup (module docstring; the
    controller is :class:`~plc_bridge.virtual_plc.pi_core.ClampedPi`).

    Args:
        n: number of drives (tracks or driven wheels).
        kp_nm_s_per_m: proportional gain [N m per m/s].
        ki_nm_per_m: integral gain [N m per (m/s * s)]; 0 = P only.
        torque_limit_nm: the drive's torque limit [N m], symmetric.
        sp_weight: proportional set-point weight ``b``, 0..1 (1 = plain PI).
        names: drive names for messages (default ``0``, ``1``...).
    """

    CHANNELS = "drives"
    SETPOINTS = "set-points"
    MEASUREMENTS = "measured speeds [m/s]"
    MEASURED_NAME = "measured speed"
    SETPOINT_NAME = "speed set-point"
    CHANNEL_PREFIX = "drive "
    ON_FAULT = "every drive's torque set to 0"

    def __init__(self, n: int, kp_nm_s_per_m: float, ki_nm_per_m: float,
                 torque_limit_nm: float, sp_weight: float = 1.0,
                 names: Sequence[str] | None = None) -> None:
        channel_count(n, self.CHANNELS)
        self.kp = positive("kp_nm_s_per_m", kp_nm_s_per_m, "N m s/m")
        self.ki = positive("ki_nm_per_m", ki_nm_per_m, "N m/m", zero_ok=True)
        self.limit = positive("torque_limit_nm", torque_limit_nm, "N m")
        self.sp_weight = positive("sp_weight", sp_weight, "", zero_ok=True)
        if self.sp_weight > 1.0:
            raise ValueError(f"sp_weight = {sp_weight!r} must be within 0..1")
        super().__init__(n, names)

    @property
    def torque(self) -> np.ndarray:
        """The last outputs [N m] (copies)."""
        return self._output.copy()

    def step(self, dt_s: float, setpoint_m_s: np.ndarray | Sequence[float],
             measured_m_s: np.ndarray | Sequence[float], enabled: bool) -> np.ndarray:
        """One PLC scan of ``dt_s`` [s]; returns the torque set-points [N m] (a copy)."""
        return self._scan(dt_s, setpoint_m_s, measured_m_s, enabled)

    def _terms(self, setpoint: np.ndarray, measured: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
        """Error ``w - y`` [m/s]; proportional term ``kp (b w - y)`` [N m]."""
        return setpoint - measured, self.kp * (self.sp_weight * setpoint - measured)
