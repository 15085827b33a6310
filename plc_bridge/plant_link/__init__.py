"""The plant link: hardware in the loop between the simulation (ROS topics) and the PLC's plant
blocks (S7). ``core`` is the pure exchange logic, ``link`` the exchange thread over
``plc_bridge.transport.plc_link``, ``node`` the rclpy shell; ``config`` reads
config/plant_link.yaml."""
