"""Parameters of the bridge and the virtual PLC, from ``config/plc.yaml`` (ROS 2 parameter form).

Pure: no rclpy. ``load_config(path, overrides)`` reads the file, applies overrides (CLI or ROS
parameters) and validates every value; an invalid one raises ``BridgeConfigError`` naming the
parameter, the value, the allowed range and the fix.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from excavator_common.parameter_files import flatten
from excavator_common.paths import config_file
from excavator_kinematics.errors import KinematicsError
from excavator_kinematics.vehicle import LATERAL_CONVENTIONS, make_vehicle_model
from plc_bridge.db_layout import DbLayout, parse_field_spec
from plc_bridge.errors import BridgeConfigError, LayoutError

MODELS: tuple[str, ...] = ("skid_steer", "ackermann", "4wd4ws")

# name -> (type, min, max, unit/description). Ranges are inclusive.
_SCALARS: dict[str, tuple[type[int] | type[float], float, float, str]] = {
    "redis_timeout": (float, 0.001, 5.0, "s"),
    "redis_connect_timeout": (float, 0.01, 30.0, "s"),
    "monitor_ttl": (float, 0.05, 10.0, "s"),
    "plc_port": (int, 1, 65535, "TCP port"),
    "rack": (int, 0, 7, "rack number"),
    "slot": (int, 0, 31, "slot number"),
    "pdu_size": (int, 240, 960, "B"),
    "plc_timeout": (float, 0.001, 2.0, "s"),
    "reconnect_min": (float, 0.001, 10.0, "s"),
    "reconnect_max": (float, 0.001, 60.0, "s"),
    "reconnect_jitter": (float, 0.0, 1.0, "fraction"),
    "cycle_hz": (float, 1.0, 1000.0, "Hz"),
    "heartbeat_timeout": (float, 0.05, 10.0, "s"),
    "plc_alive_timeout": (float, 0.05, 10.0, "s"),
    "max_longitudinal": (float, 1e-6, 100.0, "m/s"),
    "max_lateral": (float, 0.0, 100.0, "m/s"),
    "max_angular": (float, 1e-6, 100.0, "rad/s"),
    "control_db": (int, 1, 65535, "DB number"),
    "rt_priority": (int, 0, 99, "SCHED_FIFO priority, 0 = normal scheduling"),
    "monitor_db": (int, 1, 65535, "DB number"),
}

SCALAR_PARAMETERS = _SCALARS   # for the ROS shell's parameter declarations

_VIRTUAL_PLC: dict[str, tuple[float, float, str]] = {
    "plant_hz": (10.0, 2000.0, "Hz"),
    "speed_time_constant_s": (1e-4, 10.0, "s"),
    "steer_rate_rad_s": (1e-3, 100.0, "rad/s"),
    "watchdog_timeout_s": (0.005, 10.0, "s"),
}


@dataclass(frozen=True)
class VirtualPlcParams:
    """The simulated plant and watchdog of the virtual PLC."""

    plant_hz: float = 200.0
    speed_time_constant_s: float = 0.05
    steer_rate_rad_s: float = 2.0
    watchdog_timeout_s: float = 0.25


_TYPE_NAMES = {int: "an integer", float: "a number"}
_HOSTNAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?")


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages and logs)."""
    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


def check_host(name: str, raw: Any) -> str:
    """An IPv4/IPv6 address or an RFC 1123 host name; anything else names the parameter."""
    if isinstance(raw, str):
        try:
            ipaddress.ip_address(raw)
            return raw
        except ValueError:
            if _HOSTNAME.fullmatch(raw) and not raw.replace(".", "").isdigit():
                return raw
    raise BridgeConfigError(f"parameter {name!r} = {raw!r} is not an IP address or host name; "
                            f"write e.g. '192.168.0.1' (the PLC's address, as TIA Portal shows it)")


@dataclass(frozen=True)
class BridgeConfig:
    """Every parameter of config/plc.yaml, validated. Units in the names' comments there."""

    redis_url: str
    redis_timeout: float
    redis_connect_timeout: float
    monitor_ttl: float
    plc_host: str
    plc_port: int
    rack: int
    slot: int
    pdu_size: int
    plc_timeout: float
    reconnect_min: float
    reconnect_max: float
    reconnect_jitter: float
    model: str
    cycle_hz: float
    heartbeat_timeout: float
    plc_alive_timeout: float
    lateral_positive: str
    wake_on_change: bool
    configure_keyspace_events: bool
    notify_channel: str
    max_longitudinal: float
    max_lateral: float
    max_angular: float
    control_db: int
    monitor_db: int
    rt_priority: int
    write_allow_list: tuple[int, ...]
    control: DbLayout
    monitor: DbLayout
    wheels: tuple[str, ...]
    steering: tuple[str, ...]
    vehicle_params: dict[str, Any] = field(default_factory=dict)
    virtual_plc: VirtualPlcParams = field(default_factory=VirtualPlcParams)
    source: str = ""

    @property
    def period_s(self) -> float:
        return 1.0 / self.cycle_hz

    def speed_sp_fields(self) -> tuple[str, ...]:
        return tuple(f"speed_sp_{w}" for w in self.wheels)

    def angle_sp_fields(self) -> tuple[str, ...]:
        return tuple(f"angle_sp_{s}" for s in self.steering)

    def speed_fields(self) -> tuple[str, ...]:
        return tuple(f"speed_{w}" for w in self.wheels)

    def angle_fields(self) -> tuple[str, ...]:
        return tuple(f"angle_{s}" for s in self.steering)


def default_config_path() -> Path:
    return config_file("plc.yaml")


BRIDGE_NODE = "plc_bridge"
VIRTUAL_PLC_NODE = "virtual_plc"


def _node_sections(doc: Mapping[str, Any], node: str) -> list[dict[str, Any]]:
    """The ``ros__parameters`` of every section that applies to ``node``, in file order:
    ``/**``, ``node``, ``/node``, ``/**/node`` or ``/<ns>/node`` (as rcl matches them)."""
    out = []
    for key, section in doc.items():
        if not (isinstance(section, dict) and isinstance(section.get("ros__parameters"), dict)):
            continue
        k = str(key)
        if k == "/**" or k.rstrip("/").split("/")[-1] == node:
            out.append(dict(section["ros__parameters"]))
    return out


def _read_doc(path: str | Path | None) -> tuple[Path, dict[str, Any]]:
    p = Path(path) if path else default_config_path()
    try:
        doc = yaml.safe_load(p.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise BridgeConfigError(f"cannot read the PLC bridge config {p}: {e}") from e
    if not isinstance(doc, dict):
        raise BridgeConfigError(f"{p}: expected 'plc_bridge: ros__parameters: ...' at the top "
                                f"level")
    return p, doc


def _merge(sections: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for sec in sections:
        out.update(sec)
    return out


def read_parameters(path: str | Path | None = None, node: str = BRIDGE_NODE) -> dict[str, Any]:
    """The ``ros__parameters`` of ``node`` in a ROS 2 parameter file (its own section and
    ``/**``, merged in file order)."""
    p, doc = _read_doc(path)
    sections = _node_sections(doc, node)
    if not sections:
        raise BridgeConfigError(f"{p}: no '{node}: ros__parameters:' section; write "
                                f"'/**/{node}:\\n  ros__parameters:'")
    return _merge(sections)


# Parameters only the ROS node declares (bridge_node.py); the cores ignore them.
NODE_ONLY_PARAMETERS = frozenset({"config_file", "autostart", "publish_rate", "cmd_vel_to_redis",
                                  "cmd_vel_timeout", "use_sim_time"})


# Accepted but not in the shipped file (dotted name -> default).
OPTIONAL_PARAMETERS: dict[str, Any] = {"vehicle.ackermann.steer_feedback": "mean"}


def known_parameter_names() -> frozenset[str]:
    """Every dotted parameter name of the bridge: those of the package's config/plc.yaml,
    the optional ones and the node's own."""
    return (frozenset(flatten(read_parameters(default_config_path()))) | NODE_ONLY_PARAMETERS
            | frozenset(OPTIONAL_PARAMETERS))


def _check_known(names: set[str], known: set[str] | frozenset[str], source: str, what: str
                 ) -> None:
    import difflib

    for name in sorted(names - set(known)):
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise BridgeConfigError(f"{source}: unknown parameter '{name}'{hint} ({what}; see "
                                f"docs/configuration.md)")


def check_known_keys(params: Mapping[str, Any], source: str) -> None:
    """A key the package's config/plc.yaml does not have is a typo: name it and the closest
    known key (otherwise the default would silently apply). Nested keys are compared dotted,
    as ROS names them (``vehicle.skid_steer.track_width_m``)."""
    _check_known(set(flatten(params)), known_parameter_names(), source,
                 "the parameters of plc_bridge are those of config/plc.yaml")


def default_virtual_plc_path() -> Path:
    return config_file("virtual_plc.yaml")


def _set_dotted(params: dict[str, Any], dotted: str, value: Any) -> None:
    """``params["a"]["b"] = value`` for ``dotted = "a.b"`` (ROS's name of a nested key)."""
    parts = dotted.split(".")
    node = params
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value


def read_virtual_plc_parameters(path: str | Path | None = None) -> dict[str, Any]:
    """The virtual PLC's ``ros__parameters`` (default config/virtual_plc.yaml)."""
    return read_parameters(path or default_virtual_plc_path(), VIRTUAL_PLC_NODE)


def load_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None,
                virtual_plc_path: str | Path | None = None) -> BridgeConfig:
    """Read, override and validate. ``overrides`` keys are parameter names, dotted for nested
    ones (``vehicle.skid_steer.track_width_m``); ``None`` values are ignored.
    ``virtual_plc_path``: the virtual PLC's plant parameters (default config/virtual_plc.yaml)."""
    source = str(path or default_config_path())
    params = read_parameters(path)
    check_known_keys(params, source)
    for k, v in (overrides or {}).items():
        if v is not None:
            _set_dotted(params, k, v)
    vp_source = str(virtual_plc_path or default_virtual_plc_path())
    return config_from_parameters(params, source=source,
                                  virtual_plc=read_virtual_plc_parameters(virtual_plc_path),
                                  virtual_plc_source=vp_source)


def _scalar(params: Mapping[str, Any], name: str) -> float | int:
    kind, lo, hi, unit = _SCALARS[name]
    if name not in params:
        raise BridgeConfigError(f"parameter {name!r} is missing; add it to config/plc.yaml "
                                f"({unit}, {lo}..{hi})")
    raw = params[name]
    try:
        if isinstance(raw, bool):
            raise TypeError
        value = kind(raw)
        if kind is int and float(raw) != value:
            raise TypeError
    except (TypeError, ValueError):
        raise BridgeConfigError(f"parameter {name!r} = {raw!r:.60} is not {_TYPE_NAMES[kind]}; "
                                f"give a number in {lo:g}..{hi:g} {unit}") from None
    if not (math.isfinite(value) and lo <= value <= hi):
        raise BridgeConfigError(f"parameter {name!r} = {value:.6g} is outside {lo:g}..{hi:g} "
                                f"{unit}; set it inside the range")
    return value


def _string(params: Mapping[str, Any], name: str, default: str | None = None) -> str:
    raw = params.get(name, default)
    if not isinstance(raw, str) or not raw:
        raise BridgeConfigError(f"parameter {name!r} = {raw!r} must be a non-empty string")
    return raw


def _bool(params: Mapping[str, Any], name: str, default: bool) -> bool:
    raw = params.get(name, default)
    if not isinstance(raw, bool):
        raise BridgeConfigError(f"parameter {name!r} = {raw!r} must be true or false")
    return raw


def config_from_parameters(params: Mapping[str, Any], source: str = "",
                           virtual_plc: Mapping[str, Any] | None = None,
                           virtual_plc_source: str = "config/virtual_plc.yaml") -> BridgeConfig:
    """Validate a ``ros__parameters`` mapping into a ``BridgeConfig``; ``virtual_plc``: the
    ``virtual_plc`` node's parameters (plant and watchdog of the simulated PLC)."""
    s = {name: _scalar(params, name) for name in _SCALARS}
    model = _string(params, "model")
    if model not in MODELS:
        raise BridgeConfigError(f"parameter 'model' = {model!r}; choose one of {', '.join(MODELS)}")
    redis_url = _string(params, "redis_url")
    if not redis_url.startswith(("redis://", "rediss://", "unix://")):
        raise BridgeConfigError(f"parameter 'redis_url' = {redact_url(redis_url)!r} must start "
                                f"with redis://, rediss:// (TLS) or unix://")
    try:
        import redis.connection

        parsed = redis.connection.parse_url(redis_url)
        port = parsed.get("port")
        if port is not None and not 1 <= int(port) <= 65535:
            raise ValueError(f"port {port} is outside 1..65535")
    except (ValueError, TypeError) as e:
        raise BridgeConfigError(f"parameter 'redis_url' = {redact_url(redis_url)!r} is not a valid "
                                f"Redis URL ({e}); write e.g. redis://user:password@host:6379/0"
                          ) from None
    lateral_positive = params.get("lateral_positive", "left")
    if lateral_positive not in LATERAL_CONVENTIONS:
        raise BridgeConfigError(f"parameter 'lateral_positive' = {lateral_positive!r} must be "
                                f"'left' (REP-103, ARTOF docs) or 'right' (ARTOF simulator)")
    if s["reconnect_max"] < s["reconnect_min"]:
        raise BridgeConfigError(f"parameter 'reconnect_max' = {s['reconnect_max']} s is below "
                                f"'reconnect_min' = {s['reconnect_min']} s; raise it")
    if s["monitor_ttl"] < 2.0 / s["cycle_hz"]:
        raise BridgeConfigError(f"parameter 'monitor_ttl' = {s['monitor_ttl']:g} s is shorter "
                                f"than two "
                                f"cycles at cycle_hz = {s['cycle_hz']:g} Hz: the liveness keys "
                                f"would "
                                f"expire between cycles; set it >= {2.0 / s['cycle_hz']:.3g} s")
    allow = params.get("write_allow_list")
    if not isinstance(allow, list) or not all(isinstance(x, int) and not isinstance(x, bool)
                                               for x in allow):
        raise BridgeConfigError(f"parameter 'write_allow_list' = {allow!r} must be a list of DB "
                                f"numbers, e.g. [100]")
    if s["control_db"] not in allow:
        raise BridgeConfigError(f"parameter 'control_db' = {s['control_db']} is not in "
                                f"'write_allow_list' = {allow}; add it, the bridge writes only "
                                f"there")
    if s["monitor_db"] == s["control_db"]:
        raise BridgeConfigError(f"parameters 'control_db' and 'monitor_db' are both "
                                f"{s['control_db']}; use two data blocks")

    control, monitor, wheels, steering = _layouts(params, model, int(s["control_db"]),
                                                  int(s["monitor_db"]))
    try:
        control.check_pdu(int(s["pdu_size"]), "write")
        monitor.check_pdu(int(s["pdu_size"]), "read")
    except LayoutError as e:
        raise BridgeConfigError(f"parameter 'pdu_size': {e}") from e

    vehicle_all = params.get("vehicle", {})
    vehicle = vehicle_all.get(model) if isinstance(vehicle_all, dict) else None
    if not isinstance(vehicle, dict):
        raise BridgeConfigError(f"parameter 'vehicle.{model}' is missing; add the geometry of the "
                                f"{model} vehicle to config/plc.yaml")

    try:
        make_vehicle_model(model, vehicle)
    except KinematicsError as exc:   # a bad geometry parameter: the message names it
        raise BridgeConfigError(str(exc)) from exc

    vp_raw = dict(virtual_plc or {})
    _check_known(set(vp_raw), set(_VIRTUAL_PLC), virtual_plc_source,
                 f"the virtual PLC's parameters are {', '.join(_VIRTUAL_PLC)}")
    vp: dict[str, float] = {}
    for name, (lo, hi, unit) in _VIRTUAL_PLC.items():
        raw = vp_raw.get(name, getattr(VirtualPlcParams, name))
        try:
            value = math.nan if isinstance(raw, bool) else float(raw)
        except (TypeError, ValueError):
            value = math.nan
        if not (math.isfinite(value) and lo <= value <= hi):
            raise BridgeConfigError(f"{virtual_plc_source}: parameter {name!r} = {raw!r:.60} is "
                                    f"outside {lo:g}..{hi:g} {unit}; set it inside the range")
        vp[name] = value

    # each value has the type of its field (_SCALARS' kind, checked by _scalar)
    scalars: dict[str, Any] = {k: (int(v) if _SCALARS[k][0] is int else float(v))
                               for k, v in s.items()}
    return BridgeConfig(
        redis_url=redis_url, plc_host=check_host("plc_host", params.get("plc_host")),
        model=model,
        lateral_positive=lateral_positive,
        wake_on_change=_bool(params, "wake_on_change", True),
        configure_keyspace_events=_bool(params, "configure_keyspace_events", True),
        notify_channel=_string(params, "notify_channel", "plc.control.changed"),
        write_allow_list=tuple(allow), control=control, monitor=monitor, wheels=wheels,
        steering=steering, vehicle_params=dict(vehicle), virtual_plc=VirtualPlcParams(**vp),
        source=source,
        **scalars,
    )


def _layouts(params: Mapping[str, Any], model: str, control_db: int, monitor_db: int
             ) -> tuple[DbLayout, DbLayout, tuple[str, ...], tuple[str, ...]]:
    layout = params.get("layout")
    if not isinstance(layout, dict):
        raise BridgeConfigError("parameter 'layout' is missing; declare the data-block fields")
    per_model = layout.get(model)
    if not isinstance(per_model, dict):
        raise BridgeConfigError(f"parameter 'layout.{model}' is missing; declare its control and "
                                f"monitor fields")
    actuators = (params.get("actuators") or {}).get(model)
    if not isinstance(actuators, dict) or not actuators.get("wheels"):
        raise BridgeConfigError(f"parameter 'actuators.{model}.wheels' is missing; list the wheel "
                                f"or track names in the vehicle model's order")
    wheels = tuple(str(w) for w in actuators["wheels"])
    steering = tuple(str(w) for w in actuators.get("steering") or ())

    def build(block: str, header_key: str, db: int) -> DbLayout:
        lines = list(layout.get(header_key) or []) + list(per_model.get(block) or [])
        where = f"layout.{header_key} + layout.{model}.{block}"
        try:
            specs = [parse_field_spec(line, where) for line in lines]
            return DbLayout(f"{block}_{model}", db, specs)
        except LayoutError as e:
            raise BridgeConfigError(f"parameter {where!r}: {e}") from e

    control = build("control", "control_header", control_db)
    monitor = build("monitor", "monitor_header", monitor_db)
    required = {
        control: ["alive", "enable", "stop", "seq", *(f"speed_sp_{w}" for w in wheels),
                  *(f"angle_sp_{a}" for a in steering)],
        monitor: ["alive", "ready", "fault", "estop", "auto",
                  *(f"speed_{w}" for w in wheels), *(f"angle_{a}" for a in steering)],
    }
    for block, names in required.items():
        for name in names:
            if not block.has(name):
                raise BridgeConfigError(f"parameter 'layout': data block {block.name!r} lacks "
                                        f"field {name!r} required by model {model!r}; declare it")
    for block, name, s7_type in ((control, "seq", "DINT"), (monitor, "refused", "DINT")):
        if block.has(name) and block.field(name).s7_type != s7_type:
            raise BridgeConfigError(f"parameter 'layout': field {name!r} of {block.name!r} is "
                                    f"{block.field(name).s7_type}; it must be {s7_type}")
    return control, monitor, wheels, steering
