"""The bottom layer: what every package of excavator_hil shares and no package owns.

- :mod:`excavator_common.errors`: :class:`ConfigurationError`, the marker of every package's
  configuration error (a node's start-up ends on it with one message and exit code 2);
- :mod:`excavator_common.paths`: where ``config/``, ``launch/``, ``rviz/`` are installed;
- :mod:`excavator_common.parameter_files`: ROS 2 parameter files read and checked without ROS;
- :mod:`excavator_common.ros_runtime`: running a node, declaring parameters, diagnostics (rclpy).

It imports none of the four packages (``excavator_kinematics``, ``excavator_sim``,
``plc_bridge``, ``excavator_hil``); each of them may import it. Only ``ros_runtime`` imports
rclpy: the pure cores use the rest without ROS.
"""
