"""The bridge: Redis control keys -> vehicle model -> the PLC's control DB, and back.

``core`` is the ROS-free loop (its own thread), ``node`` the rclpy lifecycle shell, ``cli`` the
bridge without ROS; ``command_gate``, ``input_validation``, ``odometry`` are its pure rules and
``redis_link`` its Redis side. It reaches the PLC through ``plc_bridge.transport`` only.
"""
