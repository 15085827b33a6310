"""Pure math of the excavator: linkage (joint angles <-> cylinder lengths), forward and inverse
kinematics, bucket orientation, the vehicle models (``vehicle/``), and the IK node.

Imports none of the other packages of this project.
"""
