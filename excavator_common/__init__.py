"""The bottom layer: what every package of excavator_hil shares and no package owns.

- :mod:`excavator_common.errors`: :class:`ConfigurationError`, the marker of every package's
  configuration error (a node's start-up ends on it with one message and exit code 2);
- :mod:`excavator_common.paths`: where ``config/``, ``launch/``, ``rviz/`` are installed;
- :mod:`excavator_common.parameter_files`: ROS 2 parameter files read (the one reader,
  ``read_parameter_file``) and checked without ROS;
- :mod:`excavator_common.parameters`: one parameter spec per node (``ParameterSpec``,
  ``ParameterTable``): validation without ROS, the docs' tables;
- :mod:`excavator_common.parameter_node`: a table declared on an rclpy node (descriptors,
  read_only, deprecated names, on-set validation, post-set apply);
- :mod:`excavator_common.ros_runtime`: running a node, declaring parameters, diagnostics (rclpy);
- :mod:`excavator_common.command_age`: the age rule for stamped commands (a command too old on
  arrival is dropped), and :mod:`excavator_common.command_age_node`, its rclpy side.

It imports none of the four packages (``excavator_kinematics``, ``excavator_sim``,
``plc_bridge``, ``excavator_hil``); each of them may import it. Only ``ros_runtime``,
``parameter_node`` and ``command_age_node`` import rclpy: the pure cores use the rest without ROS.
"""
