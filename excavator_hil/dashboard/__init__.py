"""Browser dashboard: targets with the IK's verdict, the machine (side view, 3D), soil charts,
the PLC bridge (status, keys, stop, twist driving). ``core`` is pure; ``adapter`` talks ROS 2 and
Redis; ``web`` is the NiceGUI page; ``app`` the command line."""
