"""The soil model: terrain height grid, the bucket as a prism, bucket-soil forces, the soil node.

Pure numpy/numba cores (no MuJoCo, no rclpy) except ``soil_node`` (the ROS shell).
"""
