"""The bridge between the Redis velocity keys and an S7-1200/1500 PLC (python-snap7), through the
vehicle kinematic model, failing safe; and the virtual PLC (a real S7 server) for HIL runs.

Imports ``excavator_kinematics`` only; meets ``excavator_sim`` over ROS topics, never in code.
"""
