"""The ARTOF Redis velocity triple <-> the REP-103 body twist.

ARTOF's ``plc.*.navigation.velocity.{longitudinal, lateral, angular}`` are forward [m/s],
lateral [m/s] and yaw rate [rad/s, + CCW]. The sign of ``lateral`` is not consistent inside
ARTOF: its documentation uses + left (as REP-103), its simulator + right. The convention is a
parameter, ``lateral_positive`` = ``"left"`` (default, REP-103) or ``"right"``; everything inside
the models is REP-103.
"""

from __future__ import annotations

from excavator_kinematics.errors import ConfigError
from excavator_kinematics.vehicle.base import BodyTwist

LATERAL_CONVENTIONS = ("left", "right")


def lateral_sign(lateral_positive: str = "left") -> float:
    """+1 when ARTOF's + lateral is left (REP-103), -1 when it is right."""
    if lateral_positive not in LATERAL_CONVENTIONS:
        raise ConfigError(
            f"lateral_positive = {lateral_positive!r} must be one of {LATERAL_CONVENTIONS} "
            "('left' = REP-103 and ARTOF's docs, 'right' = ARTOF's simulator)")
    return 1.0 if lateral_positive == "left" else -1.0


def twist_from_artof(longitudinal_m_s: float, lateral_m_s: float, angular_rad_s: float,
                     lateral_positive: str = "left") -> BodyTwist:
    """REP-103 twist from ARTOF's control values."""
    return BodyTwist(longitudinal_m_s, lateral_sign(lateral_positive) * lateral_m_s,
                     angular_rad_s)


def artof_from_twist(twist: BodyTwist, lateral_positive: str = "left"
                     ) -> tuple[float, float, float]:
    """ARTOF's ``(longitudinal, lateral, angular)`` monitor values from a REP-103 twist."""
    return (twist.vx, lateral_sign(lateral_positive) * twist.vy, twist.wz)
