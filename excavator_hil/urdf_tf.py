"""Frame transforms of a URDF at given joint positions (pure: no ROS): what
robot_state_publisher computes for /tf. The Foxglove live view sends them from joint_states
(excavator_hil.foxglove_view), and ``bag record --tf`` writes them into a bag, so the machine
shows in Foxglove (or RViz) from a bag or a live stack without a robot_state_publisher.
Conventions: URDF/REP-103 (origin = translation, then fixed-axis roll-pitch-yaw; a joint's
motion about/along its axis in the child frame at position 0); quaternions (x, y, z, w).
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Vec3 = tuple[float, float, float]
Quat = tuple[float, float, float, float]   # x, y, z, w


def rpy_quaternion(roll: float, pitch: float, yaw: float) -> Quat:
    """URDF/REP-103 fixed-axis roll-pitch-yaw [rad] (R = Rz(yaw) Ry(pitch) Rx(roll)) as a unit
    quaternion (x, y, z, w)."""
    cr, sr = math.cos(roll / 2), math.sin(roll / 2)
    cp, sp = math.cos(pitch / 2), math.sin(pitch / 2)
    cy, sy = math.cos(yaw / 2), math.sin(yaw / 2)
    return (sr * cp * cy - cr * sp * sy, cr * sp * cy + sr * cp * sy,
            cr * cp * sy - sr * sp * cy, cr * cp * cy + sr * sp * sy)


def quat_multiply(a: Quat, b: Quat) -> Quat:
    """Hamilton product a * b (rotation b first, then a)."""
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return (aw * bx + ax * bw + ay * bz - az * by, aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw, aw * bw - ax * bx - ay * by - az * bz)


def quat_rotate(q: Quat, v: Vec3) -> Vec3:
    """The vector ``v`` rotated by the unit quaternion ``q``."""
    x, y, z, w = q
    # v + 2 w (u x v) + 2 u x (u x v), u = (x, y, z)
    tx, ty, tz = 2 * (y * v[2] - z * v[1]), 2 * (z * v[0] - x * v[2]), 2 * (x * v[1] - y * v[0])
    return (v[0] + w * tx + y * tz - z * ty, v[1] + w * ty + z * tx - x * tz,
            v[2] + w * tz + x * ty - y * tx)


def axis_angle_quaternion(axis: Vec3, angle: float) -> Quat:
    """Rotation by ``angle`` [rad] about the unit vector ``axis``."""
    s = math.sin(angle / 2)
    return (axis[0] * s, axis[1] * s, axis[2] * s, math.cos(angle / 2))


@dataclass(frozen=True)
class UrdfJoint:
    """One joint of a URDF: ``origin`` (xyz [m], rpy [rad]) places the child's frame in the
    parent's at position 0; the motion is about/along ``axis`` (a unit vector in that frame)."""

    name: str
    type: str            # revolute, continuous, prismatic, fixed (others: treated as fixed)
    parent: str
    child: str
    xyz: Vec3
    rotation: Quat       # of the origin's rpy
    axis: Vec3


@dataclass(frozen=True)
class Transform:
    """``child``'s frame in ``parent``'s: translation [m] and rotation (x, y, z, w)."""

    parent: str
    child: str
    translation: Vec3
    rotation: Quat


def _floats(text: str | None, default: Vec3, what: str) -> Vec3:
    if not text:
        return default
    parts = text.split()
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        raise ValueError(f"URDF {what} = {text!r}: three numbers expected") from None
    if len(values) != 3 or not all(math.isfinite(v) for v in values):
        raise ValueError(f"URDF {what} = {text!r}: three finite numbers expected")
    return values[0], values[1], values[2]


@dataclass(frozen=True)
class UrdfTree:
    """The joints of a URDF (its kinematic tree), parsed once per ``robot_description``."""

    name: str
    joints: tuple[UrdfJoint, ...]
    links: tuple[str, ...]

    @classmethod
    def parse(cls, xml: str) -> UrdfTree:
        """ValueError names what is wrong (not XML, no <robot>, a joint without parent/child,
        a malformed number)."""
        try:
            root = ET.fromstring(xml)
        except ET.ParseError as exc:
            raise ValueError(f"robot_description is not XML: {exc}") from None
        if root.tag != "robot":
            raise ValueError(f"robot_description: root element <{root.tag}>, expected <robot>")
        joints = []
        for j in root.iter("joint"):
            name = j.get("name", "")
            parent, child = j.find("parent"), j.find("child")
            if parent is None or child is None or not parent.get("link") or not child.get("link"):
                raise ValueError(f"URDF joint {name!r}: needs <parent link=...> and "
                                 "<child link=...>")
            origin = j.find("origin")
            xyz = _floats(origin.get("xyz") if origin is not None else None, (0.0, 0.0, 0.0),
                          f"joint {name!r} origin xyz")
            rpy = _floats(origin.get("rpy") if origin is not None else None, (0.0, 0.0, 0.0),
                          f"joint {name!r} origin rpy")
            ax = j.find("axis")
            axis = _floats(ax.get("xyz") if ax is not None else None, (1.0, 0.0, 0.0),
                           f"joint {name!r} axis")
            norm = math.sqrt(sum(a * a for a in axis))
            if norm == 0.0:
                raise ValueError(f"URDF joint {name!r}: axis is zero")
            joints.append(UrdfJoint(name, j.get("type", "fixed"), str(parent.get("link")),
                                    str(child.get("link")), xyz, rpy_quaternion(*rpy),
                                    (axis[0] / norm, axis[1] / norm, axis[2] / norm)))
        links = tuple(str(link.get("name")) for link in root.iter("link"))
        return cls(root.get("name", ""), tuple(joints), links)

    def transforms(self, positions: Mapping[str, float]) -> list[Transform]:
        """Every joint's transform at ``positions`` (joint name -> [rad] or [m]); a joint not in
        ``positions`` (or NaN there) stands at 0, as robot_state_publisher does."""
        return joint_transforms(self.joints, positions)


def joint_transforms(joints: Sequence[UrdfJoint], positions: Mapping[str, float]
                     ) -> list[Transform]:
    """Parent -> child transform of each joint at its position: origin, then the motion."""
    out = []
    for j in joints:
        q = float(positions.get(j.name, 0.0))
        if not math.isfinite(q):
            q = 0.0
        t, r = j.xyz, j.rotation
        if j.type in ("revolute", "continuous"):
            r = quat_multiply(r, axis_angle_quaternion(j.axis, q))
        elif j.type == "prismatic":
            dx, dy, dz = quat_rotate(r, (j.axis[0] * q, j.axis[1] * q, j.axis[2] * q))
            t = (t[0] + dx, t[1] + dy, t[2] + dz)
        out.append(Transform(j.parent, j.child, t, r))
    return out


def compose(transforms: Sequence[Transform], root: str, frame: str) -> Transform:
    """``frame`` in ``root`` along the tree of ``transforms`` (KeyError: not connected)."""
    by_child = {t.child: t for t in transforms}
    chain = []
    f = frame
    while f != root:
        t = by_child[f]
        chain.append(t)
        f = t.parent
    p: Vec3 = (0.0, 0.0, 0.0)
    r: Quat = (0.0, 0.0, 0.0, 1.0)
    for t in reversed(chain):
        d = quat_rotate(r, t.translation)
        p = (p[0] + d[0], p[1] + d[1], p[2] + d[2])
        r = quat_multiply(r, t.rotation)
    return Transform(root, frame, p, r)
