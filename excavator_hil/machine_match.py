"""The simulated machine and the bridge's vehicle model are chosen together (issue 28): a
start-up check for whatever launches both (launch files, the demo), so a mismatch is a clear
error before anything moves, never a silently wrong drive.

- A tracked machine (a preset without ``undercarriage:``, or the default) needs the bridge's
  ``skid_steer`` model.
- A wheeled machine needs its own model (``ackermann`` or ``4wd4ws``) with its geometry, a
  steering limit within its end stops and wheel speeds its drives reach
  (:meth:`excavator_sim.undercarriage.WheeledUndercarriage.check_bridge_model`).

The error names the preset, the model, each mismatch and what to set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from excavator_hil.errors import HilConfigError
from excavator_sim.errors import SimConfigError
from excavator_sim.machines import available_machines, load_machine
from plc_bridge.config import BridgeConfig, load_config
from plc_bridge.errors import BridgeConfigError


def check_machine_and_bridge(machine: str | Path, bridge: BridgeConfig) -> None:
    """Raise :class:`HilConfigError` when ``machine`` (a preset name or path; "" = the default
    tracked machine) cannot be driven by the bridge configured as ``bridge``."""
    try:
        preset = load_machine(machine) if str(machine) else None
    except SimConfigError as exc:
        raise HilConfigError(str(exc)) from exc
    under = preset.undercarriage if preset is not None else None
    name = preset.name if preset is not None else "the default machine"
    if under is None:
        if bridge.model != "skid_steer":
            wheeled = []
            for other in available_machines():
                u = load_machine(other).undercarriage
                if u is not None and u.vehicle_model == bridge.model:
                    wheeled.append(other)
            raise HilConfigError(
                f"{name} runs on tracks (the skid_steer model) but the bridge's model is "
                f"{bridge.model!r}: set the bridge's model: skid_steer, or choose a machine of "
                f"the {bridge.model} model ({', '.join(wheeled) or 'none shipped'})")
        return
    try:
        under.check_bridge_model(bridge.model, bridge.vehicle_params)
    except SimConfigError as exc:
        raise HilConfigError(str(exc)) from exc


def bridge_overrides_for_machine(machine: str | Path, model: str) -> dict[str, Any]:
    """The bridge parameters a launch sets for ``machine`` (a preset name or path; "" = the
    default tracked machine): a wheeled machine's model and its ``vehicle.<model>.*``
    (:meth:`~excavator_sim.undercarriage.WheeledUndercarriage.model_parameters`), so the
    bridge, the virtual PLC and the plant link drive it with its own geometry; nothing for a
    tracked machine. ``model`` is the launch's ``model`` argument: left at ``skid_steer`` (its
    default) the wheeled machine's model is taken; another model than the machine's is an
    error naming both (the check of :func:`check_machine_and_bridge` would refuse it too)."""
    try:
        preset = load_machine(machine) if str(machine) else None
    except SimConfigError as exc:
        raise HilConfigError(str(exc)) from exc
    under = preset.undercarriage if preset is not None else None
    if under is None:
        return {}
    if model not in ("skid_steer", under.vehicle_model):
        raise HilConfigError(
            f"machine {preset.name if preset else machine} is a {under.vehicle_model} machine "
            f"but the launch's model is {model!r}: leave model out (or model:="
            f"{under.vehicle_model}), or choose a machine of the {model} model")
    return {"model": under.vehicle_model,
            **{f"vehicle.{under.vehicle_model}.{k}": v
               for k, v in under.model_parameters().items()}}


def check_launch_machine(machine: str | Path, plc_params: str | Path, model: str
                         ) -> dict[str, Any]:
    """A launch's start-up check of its ``machine`` argument (bridge.launch.py, fleet.launch.py,
    the demo): the bridge configured from ``plc_params`` with
    :func:`bridge_overrides_for_machine` must be able to drive it
    (:func:`check_machine_and_bridge`). Returns the overrides. Either arrangement drives a
    wheeled machine: closed, the PLC's loops through sim_node's drive train; standalone,
    sim_node's ``wheel_command`` remapped to the bridge's ``plc/wheel_states``."""
    overrides = bridge_overrides_for_machine(machine, model)
    try:
        bridge = load_config(str(plc_params) or None, {"model": model, **overrides})
    except BridgeConfigError as exc:
        raise HilConfigError(str(exc)) from exc
    check_machine_and_bridge(machine, bridge)
    return overrides
