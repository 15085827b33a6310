"""The system: the ``excavator-hil`` CLI, the demo, bags, local services and the HIL harness.

The only package that imports more than one of the others (``excavator_kinematics``,
``excavator_sim``, ``plc_bridge``); none of them imports it.
"""
