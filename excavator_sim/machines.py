"""Machine presets: other machine classes on the same linkage, as parameter files, not edits.

The default machine is what ``config/excavator.yaml`` (geometry, masses) and ``config/sim.yaml``
(hydraulics, swing, tracks) say: the class the seed geometry is, a 7-9 t midi excavator
(docs/simulation.md, "Machine class"). A preset is a YAML file that sets, over those two::

    description: one line
    geometry: {points: ..., links: ..., cylinders: ..., bucket: ..., swing: ...}
                                   # optional: a linkage of its own (config/excavator.yaml layout),
                                   # or another preset's name: its linkage
    published: {source: ..., reach_at_ground_m: ...}   # optional: the spec sheet it matches
    masses_kg: {caterpillar: ..., chassis: ..., boom: ...}   # over excavator.yaml's masses
    parameters: {hydraulics: {...}, tracks: {...}}   # sim_node parameters (sim.yaml layout)
    undercarriage: {type: wheeled, vehicle_model: ackermann, ...}  # a wheeled machine

Keys a preset leaves out keep the files' values. Without ``undercarriage`` the machine runs on
config/sim.yaml's tracks; with it, on wheels (:mod:`excavator_sim.undercarriage`, issue 28).
``config/machines/<name>.yaml`` is selected by its name (``heavy_36t``: the 36 t masses and
30-36 t hydraulics the simulator had before issue 14; ``wheeled_ackermann_11t`` and
``wheeled_4ws_11t``: the wheeled machines), any other file by its path: sim_node's
``machine`` parameter, or in Python::

    preset = load_machine("heavy_36t")
    sim = ExcavatorSimulation(load_sim_config(machine=preset), preset.geometry())
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from excavator_common.parameter_files import flatten
from excavator_common.paths import config_file
from excavator_kinematics.errors import ConfigError
from excavator_kinematics.geometry import ExcavatorGeometry, default_geometry
from excavator_sim.errors import SimConfigError
from excavator_sim.undercarriage import WheeledUndercarriage, parse_undercarriage

MACHINES_DIR = "machines"
# The parts that carry a mass (model_builder's bodies).
MASS_PARTS = ("caterpillar", "chassis", "boom", "arm", "bucket", "boom_cylinder", "boom_rod",
              "arm_cylinder", "arm_rod", "bucket_cylinder", "bucket_rod", "h_link", "side_link")


@dataclass(frozen=True)
class MachinePreset:
    """A machine class: masses [kg] per part and dotted sim_node parameters over the defaults."""

    name: str
    source: str
    description: str
    masses_kg: Mapping[str, float]
    parameters: Mapping[str, Any]
    undercarriage: WheeledUndercarriage | None = None   # None: tracked (config/sim.yaml)
    geometry_data: Mapping[str, Any] | None = None
    # The spec sheet's working ranges [m] the geometry was fitted to, with their ``source``.
    published: Mapping[str, Any] | None = None

    def geometry(self, base: ExcavatorGeometry | None = None) -> ExcavatorGeometry:
        """This preset's linkage (if it has one, else ``base``'s; default: config/excavator.yaml)
        with ``base``'s masses and the preset's over them."""
        base = base if base is not None else default_geometry()
        masses = {**dict(base.masses_kg), **self.masses_kg}
        if self.geometry_data is not None:
            try:
                own = ExcavatorGeometry.from_dict({**self.geometry_data, "masses_kg": masses},
                                                  source=f"{self.source}: geometry")
            except ConfigError as exc:
                raise SimConfigError(str(exc)) from None
            return own
        return dataclasses.replace(base, masses_kg=masses)


def available_machines() -> list[str]:
    """Names of the presets shipped in ``config/machines/``."""
    return sorted(p.stem for p in config_file(MACHINES_DIR).glob("*.yaml"))


def machine_path(name_or_path: str | Path) -> Path:
    """``config/machines/<name>.yaml`` for a bare name, else the path as given."""
    text = str(name_or_path)
    if "/" not in text and not text.endswith((".yaml", ".yml")):
        return config_file(MACHINES_DIR) / f"{text}.yaml"
    return Path(text)


def load_machine(name_or_path: str | Path) -> MachinePreset:
    """Load and check a preset; a bad one raises :class:`SimConfigError` naming the key."""
    path = machine_path(name_or_path)
    if not path.is_file():
        raise SimConfigError(f"machine preset {str(name_or_path)!r}: no file {path}; shipped "
                             f"presets: {available_machines()} (or give a preset file's path)")
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SimConfigError(f"machine preset {path} cannot be read: {exc}") from None
    if not isinstance(data, Mapping):
        raise SimConfigError(f"machine preset {path}: expected a mapping with masses_kg and/or "
                             "parameters")
    unknown = sorted(set(data) - {"description", "geometry", "published", "masses_kg",
                                   "parameters", "undercarriage"})
    if unknown:
        raise SimConfigError(f"machine preset {path}: unknown key(s) {unknown}; known: "
                             "description, geometry, published, masses_kg, parameters, "
                             "undercarriage")
    geometry = data.get("geometry")
    if isinstance(geometry, str):  # another preset's linkage, by name or path
        if geometry == name_or_path or machine_path(geometry) == path:
            raise SimConfigError(f"machine preset {path}: geometry names the preset itself")
        other = load_machine(geometry)
        if other.geometry_data is None:
            raise SimConfigError(f"machine preset {path}: geometry {geometry!r} names a preset "
                                 "without a geometry of its own")
        geometry = other.geometry_data
    if geometry is not None:
        if not isinstance(geometry, Mapping):
            raise SimConfigError(f"machine preset {path}: geometry must be a mapping "
                                 "(config/excavator.yaml layout: points, links, cylinders, "
                                 "bucket, swing)")
        try:
            ExcavatorGeometry.from_dict(geometry, source=f"{path}: geometry")
        except ConfigError as exc:
            raise SimConfigError(str(exc)) from None
    masses: dict[str, float] = {}
    for part, value in (data.get("masses_kg") or {}).items():
        if part not in MASS_PARTS:
            raise SimConfigError(f"machine preset {path}: masses_kg.{part} is not a part; "
                                 f"parts: {list(MASS_PARTS)}")
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or not math.isfinite(value) or value <= 0.0):
            raise SimConfigError(f"machine preset {path}: masses_kg.{part} = {value!r} must be "
                                 "a positive number of kg")
        masses[str(part)] = float(value)
    params = data.get("parameters") or {}
    if not isinstance(params, Mapping):
        raise SimConfigError(f"machine preset {path}: parameters must be a mapping "
                             "(config/sim.yaml layout)")
    under = (parse_undercarriage(data["undercarriage"], str(path))
             if data.get("undercarriage") is not None else None)
    return MachinePreset(name=path.stem, source=str(path),
                         description=str(data.get("description", "")).strip(),
                         masses_kg=masses, parameters=flatten(params), undercarriage=under,
                         geometry_data=dict(geometry) if geometry is not None else None,
                         published=dict(data["published"]) if data.get("published") else None)
