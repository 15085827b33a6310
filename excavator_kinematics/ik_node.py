"""ik_node: bucket tip targets in, joint commands out (a thin rclpy shell over the closed-form IK).

Subscribes ``target`` (geometry_msgs/PointStamped; pitch from the ``bucket_pitch_rad``
parameter) and ``target_pose`` (geometry_msgs/PoseStamped; pitch from the orientation). Publishes
``joint_command`` (sensor_msgs/JointState: swing, boom, arm, bucket [rad] and boom_cylinder,
arm_cylinder, bucket_cylinder extensions [m]). Targets must be in ``<frame_prefix>base_link``
(the only frame known without TF; ``frame_prefix`` e.g. ``exc2/`` in a fleet, empty by default;
an empty frame_id is taken as that frame). A rejected target (other frame,
NaN/inf, out of reach, past a limit, an orientation the bucket cannot take) is logged with the
reason, reported on ``/diagnostics``, and nothing is published. A target older than
``max_command_age_s`` on arrival (by its header stamp: a message delayed on its way) is dropped,
counted and reported (:mod:`excavator_common.command_age`; stamp 0 is not judged). Each call
takes every target waiting on its topic, in order: rclpy's executor serves one message per
subscription per round, so beside a node whose work fills the rounds (sim_node catching up, in
the demo's node container) the queue would age the targets past that limit by itself.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from geometry_msgs.msg import PointStamped, PoseStamped
from rclpy.node import Node
from sensor_msgs.msg import JointState

from excavator_common.command_age_node import CommandAgeCheck, take_waiting
from excavator_common.frames import check_frame_prefix
from excavator_common.node_args import NodeUsage
from excavator_common.parameter_node import NodeParameters
from excavator_common.ros_runtime import (
    OK,
    WARN,
    Diagnostics,
    Rejections,
    run_node,
    steady_timer,
)
from excavator_kinematics.bucket_orientation import bucket_pitch_from_quaternion
from excavator_kinematics.errors import ConfigError, KinematicsError
from excavator_kinematics.geometry import CYLINDER_NAMES, ExcavatorGeometry, default_geometry
from excavator_kinematics.ik_parameters import IK_PARAMETERS
from excavator_kinematics.inverse_kinematics import ACTIVE_JOINTS, IKSolution, InverseKinematics

BASE_FRAME = "base_link"


class IKNode(Node):
    def __init__(self, **node_options: Any) -> None:
        """``node_options``: rclpy Node's keyword options (a composed node's own ``cli_args``
        with ``use_global_arguments=False``: excavator_hil.node_container)."""
        super().__init__("ik_node", **node_options)
        # One spec (excavator_kinematics.ik_parameters): the pitch and the tolerance change at
        # run time (validated on set, applied in apply_parameters), the geometry is fixed.
        self.parameters = NodeParameters(self, IK_PARAMETERS, self.apply_parameters)
        values = self.parameters.values
        geometry_file = str(values["geometry_file"])
        self.bucket_pitch = float(values["bucket_pitch_rad"])
        self.orientation_tolerance = float(values["orientation_tolerance_rad"])
        frame_prefix = str(values["frame_prefix"])
        try:
            check_frame_prefix(frame_prefix)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.base_frame = frame_prefix + BASE_FRAME
        geometry = (ExcavatorGeometry.from_yaml(geometry_file) if geometry_file
                    else default_geometry())
        self.ik = InverseKinematics(geometry)
        self.solved = 0
        self.command_age = CommandAgeCheck(self, float(values["max_command_age_s"]))
        self.publisher = self.create_publisher(JointState, "joint_command", 10)
        self.target_sub = self.create_subscription(PointStamped, "target", self.on_target, 10)
        self.target_pose_sub = self.create_subscription(PoseStamped, "target_pose",
                                                        self.on_target_pose, 10)
        ns = self.get_namespace().strip("/")  # in a fleet the status names its machine
        self.diagnostics = Diagnostics(self, f"{ns + '/' if ns else ''}{self.get_name()}: "
                                       "inverse kinematics")
        self.rejections = Rejections(self, self.diagnostics, "target")
        steady_timer(self, 1.0, self.publish_status)
        lo, hi = self.ik.reach_range_m
        self.get_logger().info(f"ready: wrist reach {lo:.2f}..{hi:.2f} m from the boom foot, "
                               f"bucket_pitch_rad {self.bucket_pitch:.3f}")

    # --- inputs --------------------------------------------------------------------------
    def on_target(self, msg: PointStamped) -> None:
        for waiting, _ in [(msg, None), *take_waiting(self.target_sub)]:   # (module docstring)
            self._take_target(waiting)

    def on_target_pose(self, msg: PoseStamped) -> None:
        for waiting, _ in [(msg, None), *take_waiting(self.target_pose_sub)]:
            self._take_target_pose(waiting)

    def _take_target(self, msg: PointStamped) -> None:
        if not self.command_age.admit("target", msg.header.stamp):
            return
        if not self._frame_ok(msg.header.frame_id):
            return
        p = msg.point
        self._solve_and_publish(np.array([p.x, p.y, p.z]), self.bucket_pitch)

    def _take_target_pose(self, msg: PoseStamped) -> None:
        if not self.command_age.admit("target_pose", msg.header.stamp):
            return
        if not self._frame_ok(msg.header.frame_id):
            return
        p, o = msg.pose.position, msg.pose.orientation
        target = np.array([p.x, p.y, p.z])
        try:
            pitch, misalignment = bucket_pitch_from_quaternion((o.x, o.y, o.z, o.w),
                                                               math.atan2(p.y, p.x))
        except ValueError as exc:
            self._reject(str(exc))
            return
        if misalignment > self.orientation_tolerance:
            self._reject(f"target_pose orientation is {math.degrees(misalignment):.1f} deg out "
                         f"of the boom plane (limit orientation_tolerance_rad = "
                         f"{math.degrees(self.orientation_tolerance):.1f} deg): the bucket only "
                         "pitches about the boom's axis")
            return
        self._solve_and_publish(target, pitch)

    def apply_parameters(self, changed: dict[str, Any]) -> None:
        """Post-set: the validated pitch / tolerance / age limit apply to the next target."""
        if "max_command_age_s" in changed:
            self.command_age.set_max_age(float(changed["max_command_age_s"]))
        self.bucket_pitch = float(changed.get("bucket_pitch_rad", self.bucket_pitch))
        self.orientation_tolerance = float(changed.get("orientation_tolerance_rad",
                                                       self.orientation_tolerance))

    # --- core call -----------------------------------------------------------------------
    def _frame_ok(self, frame_id: str) -> bool:
        if frame_id in ("", self.base_frame):
            return True
        self._reject(f"target in frame '{frame_id}': ik_node only takes targets in "
                     f"'{self.base_frame}' (transform it first)")
        return False

    def _solve_and_publish(self, target: np.ndarray, pitch: float) -> None:
        try:
            solution = self.ik.solve(target, pitch)
        except KinematicsError as exc:
            self._reject(str(exc))
            return
        self.solved += 1
        self.publisher.publish(self._joint_command(solution))

    def _joint_command(self, solution: IKSolution) -> JointState:
        msg = JointState()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id = self.base_frame
        msg.name = [*ACTIVE_JOINTS, *CYLINDER_NAMES]
        msg.position = [*map(float, solution.q), *map(float, solution.extensions)]
        return msg

    def _reject(self, reason: str) -> None:
        self.rejections.reject(reason, self._counters())

    def _counters(self) -> dict[str, object]:
        return {"solved": self.solved, "rejected": self.rejections.count,
                "last_error": self.rejections.last, **self.command_age.counters()}

    def publish_status(self) -> None:
        dropped = self.command_age.refused_since_status()
        if dropped:
            rule = self.command_age.rule
            self.diagnostics.publish(WARN, f"{dropped} target(s) dropped as too old or stamped "
                                     f"ahead since the last status (max_command_age_s "
                                     f"{rule.max_age_s:g} s)", self._counters())
            return
        self.diagnostics.publish(OK, "running", self._counters())


USAGE = NodeUsage(
    "ik_node", "Bucket-tip targets in, joint commands out (the closed-form IK); a target it "
    "cannot reach, or in another frame, is refused with the reason on /diagnostics.",
    subscribes=("target (geometry_msgs/PointStamped)", "target_pose (geometry_msgs/PoseStamped)"),
    publishes=("joint_command (sensor_msgs/JointState)", "/diagnostics"),
    params_file="ik.yaml", docs="docs/kinematics.md")


def main(args: list[str] | None = None) -> int:
    return run_node(IKNode, args, usage=USAGE)


if __name__ == "__main__":
    from excavator_common.process_exit import exit_without_teardown

    exit_without_teardown(main())
