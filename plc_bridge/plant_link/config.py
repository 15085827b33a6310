"""The plant link's configuration: its own parameters (``plc_bridge.parameters.PLANT_LINK``,
config/plant_link.yaml) and, from the bridge's parameter file, the PLC connection, the model
and the plant blocks. Pure: no rclpy."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from excavator_common.parameters import Value, load_parameters
from excavator_common.paths import config_file
from plc_bridge.config import BridgeConfig, check_host, default_config_path, load_config
from plc_bridge.errors import BridgeConfigError
from plc_bridge.parameters import PLANT_LINK


def default_plant_link_path() -> Path:
    return config_file("plant_link.yaml")


@dataclass(frozen=True)
class PlantLinkConfig:
    """What the plant link runs on. ``plc``: the bridge's configuration with ``plc_host`` /
    ``plc_port`` / ``model`` as overridden here (connection, reconnect back-off, blocks)."""

    plc: BridgeConfig
    exchange_hz: float
    write_allow_list: tuple[int, ...]
    rt_priority: int
    source: str = ""
    parameters: dict[str, Value] = field(default_factory=dict, compare=False, repr=False)

    @property
    def period_s(self) -> float:
        return 1.0 / self.exchange_hz


def build_plant_link_config(values: Mapping[str, Any], source: str = "") -> PlantLinkConfig:
    """The config of validated ``PLANT_LINK`` values; the bridge's file is read and checked
    too. Raises ``BridgeConfigError`` naming the parameter."""
    overrides: dict[str, Any] = {}
    if values["plc_host"]:
        overrides["plc_host"] = check_host("plc_host", values["plc_host"])
    if values["plc_port"]:
        overrides["plc_port"] = int(values["plc_port"])
    if values["model"]:
        overrides["model"] = str(values["model"])
    if values["plc_transport"]:
        overrides["plc_transport"] = str(values["plc_transport"])
    if values["opcua_port"]:
        overrides["opcua_port"] = int(values["opcua_port"])
    overrides["opcua_pki_dir"] = str(values["opcua_pki_dir"])   # its own, never the bridge's
    plc_path = str(values["plc_config_file"]) or str(default_config_path())
    plc = load_config(plc_path, overrides)
    allow = tuple(int(v) for v in values["write_allow_list"])
    if plc.plant_in_db not in allow:
        raise BridgeConfigError(f"parameter 'write_allow_list' = {list(allow)} lacks plant_in_db "
                                f"= {plc.plant_in_db} ({plc_path}): the plant link writes only "
                                f"there; add it")
    for name in ("control_db", "monitor_db", "plant_out_db"):
        db = getattr(plc, name)
        if db in allow:
            raise BridgeConfigError(
                f"parameter 'write_allow_list' = {list(allow)} holds {name} = {db} ({plc_path}): "
                f"the plant link writes plant_in only (DB{plc.plant_in_db}); remove it")
    return PlantLinkConfig(plc=plc, exchange_hz=float(values["exchange_hz"]),
                           write_allow_list=allow, rt_priority=int(values["rt_priority"]),
                           source=source, parameters=dict(values))


def load_plant_link_config(path: str | Path | None = None,
                           overrides: Mapping[str, Any] | None = None) -> PlantLinkConfig:
    """Read config/plant_link.yaml (or ``path``), apply ``overrides`` (``None`` values
    ignored), validate, and read the bridge's file it names."""
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    source = str(path or default_plant_link_path())
    values = load_parameters(PLANT_LINK, source, given)
    values.pop("use_sim_time", None)
    return build_plant_link_config(values, source)
