"""The configuration-error marker every package's configuration error derives from.

Each package has one root error (``excavator_kinematics.errors.KinematicsError``,
``excavator_sim.errors.SimulationError``, ``plc_bridge.errors.BridgeError``,
``excavator_hil.errors.HilError``) and wraps the errors of the packages it calls at its boundary.
A bad setting of any package also derives from :class:`ConfigurationError`, on which a node's
start-up ends with one ``[FATAL]`` message and exit code 2
(:func:`excavator_common.ros_runtime.run_node`).
"""

from __future__ import annotations


class ConfigurationError(ValueError):
    """Marker base of every package's configuration error (a bad file, parameter or setting).
    ``run_node`` turns it into one ``[FATAL]`` line and exit code 2."""


class ParameterError(ConfigurationError):
    """A ROS parameter, parameter override or parameter file that is not what the node or ROS
    expects: the message names the parameter (or file), the value, the limit and the fix."""
