"""The MuJoCo excavator: the model built from the one geometry, hydraulics, the simulation core
and its node; ``soil/`` holds the terrain, the bucket-soil forces and the soil node.

Imports ``excavator_kinematics`` only; meets ``plc_bridge`` over ROS topics, never in code.
"""
