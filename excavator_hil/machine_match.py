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

from excavator_hil.errors import HilConfigError
from excavator_sim.errors import SimConfigError
from excavator_sim.machines import available_machines, load_machine
from plc_bridge.config import BridgeConfig


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
