"""``soil/bucket_soil``: the soil in the bucket as a visualization_msgs/Marker TRIANGLE_LIST in
``world`` (RViz, Foxglove), built from triangles (``BucketBody.cell_triangles`` for the
per-cell bucket soil, ``bucket_soil.columns_to_triangles`` for the closed form); one marker per
machine (its index the marker id), DELETE for an empty bucket."""

from __future__ import annotations

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Point
from visualization_msgs.msg import Marker

WORLD = "world"
SOIL_RGBA = (0.45, 0.27, 0.13, 1.0)  # the bucket's soil in RViz


def bucket_soil_marker(triangles: np.ndarray, stamp: Time, marker_id: int = 0) -> Marker:
    """The marker of ``triangles`` ``(k * 3, 3)`` [m, world]; DELETE when there are none."""
    marker = Marker()
    marker.header.frame_id = WORLD
    marker.header.stamp = stamp
    marker.ns, marker.id = "bucket_soil", marker_id
    if len(triangles) == 0:
        marker.action = Marker.DELETE
        return marker
    marker.type, marker.action = Marker.TRIANGLE_LIST, Marker.ADD
    marker.pose.orientation.w = 1.0
    marker.scale.x = marker.scale.y = marker.scale.z = 1.0
    marker.color.r, marker.color.g, marker.color.b, marker.color.a = SOIL_RGBA
    marker.points = [Point(x=float(x), y=float(y), z=float(z)) for x, y, z in triangles]
    return marker
