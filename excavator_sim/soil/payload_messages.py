"""The bucket's payload (the carried soil as a rigid body, ``BucketPayload``) on the wire:
``soil/bucket_payload`` (geometry_msgs/InertiaStamped, frame ``bucket``: the bucket link,
origin M). soil_node and the in-process soil publish it with the per-cell bucket soil before
the wrench of the same update (which then leaves the load's weight out); sim_node puts it on
its bucket body. The closed form publishes none (its weight stays in the wrench)."""

from __future__ import annotations

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import InertiaStamped

from excavator_sim.soil.payload import BucketPayload

BUCKET_FRAME = "bucket"


def payload_message(payload: BucketPayload, stamp: Time, frame_id: str = BUCKET_FRAME
                    ) -> InertiaStamped:
    """The payload as InertiaStamped: m [kg], com [m], the tensor about com [kg m^2]."""
    msg = InertiaStamped()
    msg.header.stamp = stamp
    msg.header.frame_id = frame_id
    i = msg.inertia
    i.m = float(payload.mass_kg)
    i.com.x, i.com.y, i.com.z = (float(v) for v in payload.centre_m)
    t = payload.inertia_kg_m2
    i.ixx, i.ixy, i.ixz = float(t[0, 0]), float(t[0, 1]), float(t[0, 2])
    i.iyy, i.iyz, i.izz = float(t[1, 1]), float(t[1, 2]), float(t[2, 2])
    return msg


def payload_from_message(msg: InertiaStamped) -> BucketPayload:
    """The payload an InertiaStamped carries (unchecked: the simulator checks it)."""
    i = msg.inertia
    tensor = np.array([[i.ixx, i.ixy, i.ixz], [i.ixy, i.iyy, i.iyz], [i.ixz, i.iyz, i.izz]],
                      dtype=float)
    return BucketPayload(float(i.m), np.array([i.com.x, i.com.y, i.com.z], dtype=float), tensor)


def is_bucket_frame(frame_id: str) -> bool:
    """The bucket link, with or without a fleet's frame prefix (``exc1/bucket``), or empty."""
    return frame_id in ("", BUCKET_FRAME) or frame_id.endswith("/" + BUCKET_FRAME)
