"""Operating the machine: joysticks (ISO 10968 patterns), coordinated bucket control and
DiMaio-style impedance teleoperation. Pure cores (numpy/scipy, no rclpy); the ROS shell is
:mod:`excavator_kinematics.teleop_node`. See docs/teleoperation.md."""
