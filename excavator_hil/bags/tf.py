"""/tf for a bag, derived from what it records (``excavator-hil bag record --tf``): the frame
transforms of each machine's URDF (``robot_description``) at its ``joint_states``, as
robot_state_publisher would publish them. With them a bag of the stack opens in Foxglove (or
plays into RViz) with the machine drawn, although the stack itself has no /tf publisher.

One /tf topic for every machine (absolute, as ROS has it): a fleet's URDFs carry their frame
prefixes (``exc2/base_link``), all hanging from the shared ``world``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from excavator_hil.bags.io import TYPESTORE
from excavator_hil.urdf_tf import UrdfTree

TF_TOPIC = "/tf"
TF_TYPE = "tf2_msgs/msg/TFMessage"


def namespace_of(topic: str, name: str) -> str | None:
    """``"/exc2/joint_states"``, ``"joint_states"`` -> ``"/exc2"``; None when ``topic`` is not
    ``name`` in some namespace."""
    if topic == f"/{name}":
        return ""
    if topic.endswith(f"/{name}"):
        return topic[: -len(name) - 1]
    return None


class TfDeriver:
    """Per namespace: the URDF last recorded, and the stamp of the last /tf written (at most one
    every ``period_ns`` of the joint states' header stamps: Foxglove and RViz interpolate)."""

    def __init__(self, period_ns: int) -> None:
        self.period_ns = period_ns
        self.trees: dict[str, UrdfTree] = {}
        self._last: dict[str, int] = {}
        self.errors: list[str] = []

    def description(self, ns: str, cdr: bytes) -> None:
        try:
            msg: Any = TYPESTORE.deserialize_cdr(cdr, "std_msgs/msg/String")
            self.trees[ns] = UrdfTree.parse(str(msg.data))
        except Exception as exc:  # noqa: BLE001 - not a URDF (ValueError) or not a String
            self.errors.append(f"{ns or '/'}robot_description: {exc}")

    def transforms(self, ns: str, cdr: bytes) -> bytes | None:
        """The CDR of a tf2_msgs/TFMessage for the joint states ``cdr`` of namespace ``ns``,
        stamped with their header stamp; None when no URDF of ``ns`` is known yet or the last
        /tf of ``ns`` is less than the period older (by the header stamps: the machine's own
        time, simulated or not; a stamp going back, a restarted simulation, starts afresh)."""
        if ns not in self.trees:
            return None
        # the stamp read from the bytes first: most messages are throttled away, and a whole
        # deserialization for each cost the recorder more than writing it
        stamp_ns = header_stamp_ns(cdr)
        last = self._last.get(ns)
        if stamp_ns is not None and last is not None and 0 <= stamp_ns - last < self.period_ns:
            return None
        try:
            js: Any = TYPESTORE.deserialize_cdr(cdr, "sensor_msgs/msg/JointState")
        except Exception as exc:  # noqa: BLE001 - rosbags' SerdeError & co: this one is skipped
            self.errors.append(f"{ns or '/'}joint_states not read: {exc}")
            return None
        stamp_ns = js.header.stamp.sec * 1_000_000_000 + js.header.stamp.nanosec
        if last is not None and 0 <= stamp_ns - last < self.period_ns:
            return None
        self._last[ns] = stamp_ns
        return tf_message(self.trees[ns], js.name, js.position, js.header.stamp.sec,
                          js.header.stamp.nanosec)


def header_stamp_ns(cdr: bytes) -> int | None:
    """The header stamp [ns] of a message whose first field is a std_msgs/Header, read from its
    CDR bytes: after the 4-byte encapsulation header (its second byte 0 big-, 1 little-endian
    plain CDR; OMG DDS-XTypes 1.3, 7.6.3.1.2) come ``stamp.sec`` (int32) and ``stamp.nanosec``
    (uint32). None for any other encapsulation or a message too short."""
    if len(cdr) < 12 or cdr[0] != 0 or cdr[1] not in (0, 1):
        return None
    sec, nanosec = struct.unpack_from("<iI" if cdr[1] else ">iI", cdr, 4)
    return int(sec) * 1_000_000_000 + int(nanosec)


def tf_message(tree: UrdfTree, names: Sequence[str], positions: Sequence[float], sec: int,
               nanosec: int) -> bytes:
    """CDR of the tf2_msgs/TFMessage of ``tree`` at the named joint positions."""
    t = TYPESTORE.types
    header = t["std_msgs/msg/Header"]
    time_cls = t["builtin_interfaces/msg/Time"]
    stamped = t["geometry_msgs/msg/TransformStamped"]
    transform = t["geometry_msgs/msg/Transform"]
    vector = t["geometry_msgs/msg/Vector3"]
    quaternion = t["geometry_msgs/msg/Quaternion"]
    stamp = time_cls(sec=int(sec), nanosec=int(nanosec))
    out = [stamped(header=header(stamp=stamp, frame_id=x.parent), child_frame_id=x.child,
                   transform=transform(translation=vector(x=x.translation[0],
                                                          y=x.translation[1],
                                                          z=x.translation[2]),
                                       rotation=quaternion(x=x.rotation[0], y=x.rotation[1],
                                                           z=x.rotation[2], w=x.rotation[3])))
           for x in tree.transforms(dict(zip(names, (float(p) for p in positions),
                                              strict=False)))]
    data: bytes = bytes(TYPESTORE.serialize_cdr(t[TF_TYPE](transforms=out), TF_TYPE))
    return data
