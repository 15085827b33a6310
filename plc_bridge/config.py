"""The bridge's and the virtual PLC's configuration, validated from their parameter spec.

Pure: no rclpy. ``load_config(path, overrides)`` reads a ROS 2 parameter file (default
``config/plc.yaml``), applies overrides (CLI options, ROS parameters) and checks every value
against ``plc_bridge.parameters.BRIDGE``: a missing key takes its documented default, an unknown
key is an error naming it and the closest known name, a deprecated name is used with a warning
naming the new one, an invalid value raises ``BridgeConfigError`` naming the parameter, the
value, the allowed range and the fix. ``build_config(values)`` adds the rules between parameters
(back-off bounds, TTL against the cycle, data blocks, layouts, vehicle geometry).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from excavator_common.parameters import ParameterTable, Value, load_parameters
from excavator_common.paths import config_file
from excavator_kinematics.errors import KinematicsError
from excavator_kinematics.vehicle import make_vehicle_model
from plc_bridge.db_layout import DbLayout, parse_field_spec
from plc_bridge.errors import BridgeConfigError, LayoutError
from plc_bridge.parameters import BRIDGE_PARAMETERS, MODELS, VIRTUAL_PLC, WHEELED_DRIVES

__all__ = ["BRIDGE", "MODELS", "BridgeConfig", "DriveTuning", "VirtualPlcParams", "build_config",
           "check_host", "default_config_path", "default_virtual_plc_path", "load_config",
           "redact_url"]


def _vp(name: str) -> float:
    return float(VIRTUAL_PLC[name].default)  # type: ignore[arg-type]  # a number spec's default


@dataclass(frozen=True)
class DriveTuning:
    """One machine's loop settings in the virtual PLC's external mode."""

    speed_kp_nm_s_per_m: float
    speed_ki_nm_per_m: float
    torque_limit_nm: float     # each drive's [N m]
    steer_rate_rad_s: float    # the steering loops' rate limit [rad/s]


DRIVE_TUNING_KEYS = ("speed_kp_nm_s_per_m", "speed_ki_nm_per_m", "torque_limit_nm",
                     "steer_rate_rad_s")


@dataclass(frozen=True)
class VirtualPlcParams:
    """The simulated plant, watchdog and (``plant_mode`` external) speed loops of the virtual
    PLC (``plc_bridge.parameters.VIRTUAL_PLC``: units and ranges there)."""

    plant_hz: float = _vp("plant_hz")
    speed_time_constant_s: float = _vp("speed_time_constant_s")
    steer_rate_rad_s: float = _vp("steer_rate_rad_s")
    watchdog_timeout_s: float = _vp("watchdog_timeout_s")
    plant_mode: str = str(VIRTUAL_PLC["plant_mode"].default)
    plant_watchdog_timeout_s: float = _vp("plant_watchdog_timeout_s")
    speed_kp_nm_s_per_m: float = _vp("speed_kp_nm_s_per_m")
    speed_ki_nm_per_m: float = _vp("speed_ki_nm_per_m")
    speed_sp_weight: float = _vp("speed_sp_weight")
    torque_limit_nm: float = _vp("torque_limit_nm")
    steer_kp_1_s: float = _vp("steer_kp_1_s")
    # external mode, per wheeled model: wheeled.<model>.<key> (WHEELED_DRIVES' keys)
    wheeled: Mapping[str, Mapping[str, float]] = field(default_factory=lambda: {
        model: {key: _vp(f"wheeled.{model}.{key}") for key in DRIVE_TUNING_KEYS}
        for model in WHEELED_DRIVES})

    def drive_tuning(self, model: str) -> DriveTuning:
        """The speed and steering loops' gains and limits for the machine of ``model``: a
        wheeled model's ``wheeled.<model>.*``, skid_steer the top-level ones (its steering
        rate is unused)."""
        w = self.wheeled.get(model)
        if w is None:
            return DriveTuning(self.speed_kp_nm_s_per_m, self.speed_ki_nm_per_m,
                               self.torque_limit_nm, self.steer_rate_rad_s)
        return DriveTuning(w["speed_kp_nm_s_per_m"], w["speed_ki_nm_per_m"],
                           w["torque_limit_nm"], w["steer_rate_rad_s"])


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
    """Every parameter of the bridge's cores, validated (``plc_bridge.parameters.BRIDGE``:
    descriptions, units, ranges), with the data-block layouts built."""

    redis_url: str
    redis_timeout_s: float
    redis_connect_timeout_s: float
    monitor_ttl_s: float
    plc_host: str
    plc_port: int
    rack: int
    slot: int
    pdu_size_bytes: int
    plc_timeout_s: float
    reconnect_min_s: float
    reconnect_max_s: float
    reconnect_jitter: float
    model: str
    cycle_hz: float
    heartbeat_timeout_s: float
    plc_alive_timeout_s: float
    lateral_positive: str
    wake_on_change: bool
    configure_keyspace_events: bool
    notify_channel: str
    max_longitudinal_m_s: float
    max_lateral_m_s: float
    max_angular_rad_s: float
    control_db: int
    monitor_db: int
    rt_priority: int
    write_allow_list: tuple[int, ...]
    control: DbLayout
    monitor: DbLayout
    wheels: tuple[str, ...]
    steering: tuple[str, ...]
    # HIL plant blocks (docs/plc_setup.md): the bridge never touches them; the plant link and
    # a PLC in HIL mode (the virtual PLC's plant_mode external) do
    plant_in_db: int
    plant_out_db: int
    plant_in: DbLayout
    plant_out: DbLayout
    vehicle_params: dict[str, Any] = field(default_factory=dict)
    virtual_plc: VirtualPlcParams = field(default_factory=VirtualPlcParams)
    source: str = ""
    # every validated parameter (dotted names, the node's own included): what the node declares
    parameters: dict[str, Value] = field(default_factory=dict, compare=False, repr=False)
    # the PLC transport (plc_bridge.transport): S7 PUT/GET or the CPU's OPC UA server
    plc_transport: str = "s7"
    opcua_port: int = 4840
    opcua_addressing: str = "s7_1500"
    opcua_namespace_uri: str = "http://www.siemens.com/simatic-s7-opcua"
    opcua_node_ids: tuple[str, ...] = ()
    opcua_security_policy: str = "Basic256Sha256"
    opcua_security_mode: str = "SignAndEncrypt"
    opcua_allow_insecure: bool = False
    opcua_user: str = ""
    opcua_password_file: str = ""
    opcua_user_certificate: str = ""
    opcua_user_key: str = ""
    opcua_pki_dir: str = ""

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

    def torque_fields(self) -> tuple[str, ...]:
        """plant_in: measured drive torques [N m]."""
        return tuple(f"torque_{w}" for w in self.wheels)

    def torque_sp_fields(self) -> tuple[str, ...]:
        """plant_out: drive torque set-points [N m]."""
        return tuple(f"torque_sp_{w}" for w in self.wheels)

    def steer_rate_sp_fields(self) -> tuple[str, ...]:
        """plant_out: steering rate commands [rad/s]."""
        return tuple(f"steer_rate_sp_{s}" for s in self.steering)


def default_config_path() -> Path:
    return config_file("plc.yaml")


def default_virtual_plc_path() -> Path:
    return config_file("virtual_plc.yaml")


Warn = Callable[[str], None]


def load_bridge_parameters(path: str | Path | None = None,
                           overrides: Mapping[str, Any] | None = None,
                           warn: Warn | None = None) -> dict[str, Value]:
    """The bridge's parameters from a parameter file (default config/plc.yaml) and dotted-name
    ``overrides`` (``None`` values ignored), every one checked, the rules between them too."""
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    # an override under a deprecated name beats the file's value under the new one
    given = BRIDGE.rename_deprecated(given, "overrides", warn)
    return load_parameters(BRIDGE, path or default_config_path(), given, warn=warn)


def load_virtual_plc(path: str | Path | None = None, warn: Warn | None = None
                     ) -> VirtualPlcParams:
    """The virtual PLC's plant and watchdog (default config/virtual_plc.yaml)."""
    values = load_parameters(VIRTUAL_PLC, path or default_virtual_plc_path(), warn=warn)
    numbers = {k: float(v) for k, v in values.items()
               if k not in ("use_sim_time", "plant_mode") and "." not in k}
    wheeled = {model: {key: float(values[f"wheeled.{model}.{key}"]) for key in DRIVE_TUNING_KEYS}
               for model in WHEELED_DRIVES}
    return VirtualPlcParams(plant_mode=str(values["plant_mode"]), wheeled=wheeled, **numbers)


def load_config(path: str | Path | None = None, overrides: Mapping[str, Any] | None = None,
                virtual_plc_path: str | Path | None = None, warn: Warn | None = None
                ) -> BridgeConfig:
    """Read, override and validate. ``overrides`` keys are parameter names, dotted for nested
    ones (``vehicle.skid_steer.track_width_m``); ``None`` values are ignored.
    ``virtual_plc_path``: the virtual PLC's plant parameters (default config/virtual_plc.yaml).
    ``warn``: where deprecation warnings go (default: the ``logging`` module)."""
    try:
        values = load_bridge_parameters(path, overrides, warn)
    except BridgeConfigError as exc:
        # ParameterTable.validate re-raises a rule's error with the file named but without
        # its chain: keep the wrapped package's error (a kinematics one) as the cause
        inner = exc.__context__
        if isinstance(inner, BridgeConfigError) and inner.__cause__ is not None:
            raise BridgeConfigError(str(exc)) from inner.__cause__
        raise
    return build_config(values, load_virtual_plc(virtual_plc_path, warn),
                        source=str(path or default_config_path()))


def build_config(values: Mapping[str, Any], virtual_plc: VirtualPlcParams | None = None,
                 source: str = "") -> BridgeConfig:
    """The ``BridgeConfig`` of validated parameter values (``BRIDGE.validate``: each within its
    range), checking the rules between parameters; raises ``BridgeConfigError`` naming them."""
    v = dict(values)
    model = str(v["model"])
    redis_url = str(v["redis_url"])
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
    if not v["notify_channel"]:
        raise BridgeConfigError("parameter 'notify_channel' = '' must be a non-empty channel "
                                "name, e.g. 'plc.control.changed'")
    if v["reconnect_max_s"] < v["reconnect_min_s"]:
        raise BridgeConfigError(f"parameter 'reconnect_max_s' = {v['reconnect_max_s']:.6g} s is "
                                f"below 'reconnect_min_s' = {v['reconnect_min_s']:.6g} s; "
                                f"raise it")
    check_monitor_ttl(v["monitor_ttl_s"], v["cycle_hz"])
    allow = list(v["write_allow_list"])
    if v["control_db"] not in allow:
        raise BridgeConfigError(f"parameter 'control_db' = {v['control_db']} is not in "
                                f"'write_allow_list' = {allow}; add it, the bridge writes only "
                                f"there")
    dbs = ("control_db", "monitor_db", "plant_in_db", "plant_out_db")
    for i, a in enumerate(dbs):
        for b in dbs[i + 1:]:
            if v[a] == v[b]:
                raise BridgeConfigError(f"parameters {a!r} and {b!r} are both {v[a]}; each "
                                        f"block needs its own data block number")
    for name in ("plant_in_db", "plant_out_db"):
        if v[name] in allow:
            raise BridgeConfigError(
                f"parameter {name!r} = {v[name]} is in 'write_allow_list' = {allow}: the bridge "
                f"never writes the plant blocks (the plant link writes plant_in, the PLC "
                f"plant_out); remove it")
    control, monitor, plant_in, plant_out, wheels, steering = _layouts(v, model)
    try:
        control.check_pdu(int(v["pdu_size_bytes"]), "write")
        monitor.check_pdu(int(v["pdu_size_bytes"]), "read")
        plant_in.check_pdu(int(v["pdu_size_bytes"]), "write")
        plant_out.check_pdu(int(v["pdu_size_bytes"]), "read")
    except LayoutError as e:
        raise BridgeConfigError(f"parameter 'pdu_size_bytes': {e}") from e
    prefix = f"vehicle.{model}."
    vehicle = {k.removeprefix(prefix): val for k, val in v.items() if k.startswith(prefix)}
    try:
        make_vehicle_model(model, vehicle)
    except KinematicsError as exc:   # a bad geometry parameter: the message names it
        raise BridgeConfigError(f"{exc} (parameter {prefix}*)") from exc
    _check_opcua(v)
    fields = {name: v[name] for name in BridgeConfig.__dataclass_fields__
              if name in v and name not in ("write_allow_list", "plc_host", "opcua_node_ids")}
    node_ids = tuple(str(e) for e in v.get("opcua_node_ids", ()) if str(e).strip() != "-")
    return BridgeConfig(
        **fields, plc_host=check_host("plc_host", v["plc_host"]), opcua_node_ids=node_ids,
        write_allow_list=tuple(allow), control=control, monitor=monitor, plant_in=plant_in,
        plant_out=plant_out, wheels=wheels, steering=steering, vehicle_params=vehicle,
        virtual_plc=virtual_plc or VirtualPlcParams(), source=source,
        parameters={k: val for k, val in v.items() if k in BRIDGE.names})


def _check_opcua(v: Mapping[str, Any]) -> None:
    """The OPC UA settings that would weaken security are refused at start-up, naming the fix."""
    if v.get("plc_transport", "s7") != "opcua":
        return
    if v["opcua_security_policy"] == "None":
        if not v["opcua_allow_insecure"]:
            raise BridgeConfigError(
                "parameter 'opcua_security_policy' = None: the channel would be neither signed "
                "nor encrypted and the PLC's certificate not checked; use Basic256Sha256 (or "
                "Aes256Sha256RsaPss), or for a lab set opcua_allow_insecure: true")
        if v["opcua_user"]:
            raise BridgeConfigError(
                f"parameter 'opcua_user' = {v['opcua_user']!r} with opcua_security_policy None: "
                f"a password never travels on an unsecured channel; use Basic256Sha256 with "
                f"SignAndEncrypt, or log in anonymously (opcua_user: '') in the lab")
    if v["opcua_user"] and v["opcua_user_certificate"]:
        raise BridgeConfigError(
            "parameters 'opcua_user' and 'opcua_user_certificate' are both set: log in with a "
            "user name and password or with an X.509 user certificate; clear one")
    if bool(v["opcua_user_certificate"]) != bool(v["opcua_user_key"]):
        raise BridgeConfigError(
            "parameter 'opcua_user_certificate' needs 'opcua_user_key' (and the other way "
            "round): the certificate and its private key (mode 0600)")
    if v["opcua_user"] and not v["opcua_password_file"]:
        raise BridgeConfigError(
            f"parameter 'opcua_user' = {v['opcua_user']!r} needs 'opcua_password_file': the "
            f"file (mode 0600) that holds its password")
    if v["opcua_addressing"] == "numeric" and \
            [e for e in v["opcua_node_ids"] if str(e).strip() != "-"] == []:
        raise BridgeConfigError(
            "parameter 'opcua_addressing' = numeric needs 'opcua_node_ids': one "
            "'<block>.<field> = <id>' per variable of the server interface (TIA Portal: OPC UA "
            "> Server interfaces > the interface > each node's NodeId)")


def _check_rules(values: Mapping[str, Any]) -> None:
    """The rules between parameters (each one's range is its spec's): ``build_config`` raises
    ``BridgeConfigError`` with the reason."""
    build_config(values)


# The plc_bridge node's parameter table: the specs of plc_bridge/parameters.py and the rules
# between them. What the node declares, the loaders check, the core validates changes with.
BRIDGE = ParameterTable("plc_bridge", BRIDGE_PARAMETERS, error=BridgeConfigError,
                        check=_check_rules)


def check_monitor_ttl(monitor_ttl_s: float, cycle_hz: float) -> None:
    """The liveness keys must outlive two cycles, or they would expire between refreshes."""
    if monitor_ttl_s < 2.0 / cycle_hz:
        raise BridgeConfigError(f"parameter 'monitor_ttl_s' = {monitor_ttl_s:g} s is shorter "
                                f"than two cycles at cycle_hz = {cycle_hz:g} Hz: the liveness "
                                f"keys would expire between cycles; set it >= "
                                f"{2.0 / cycle_hz:.3g} s")


def _layouts(params: Mapping[str, Any], model: str
             ) -> tuple[DbLayout, DbLayout, DbLayout, DbLayout, tuple[str, ...], tuple[str, ...]]:
    """The control, monitor, plant_in and plant_out blocks of ``model``, each checked for the
    fields the bridge, the plant link and the PLC program rely on."""
    wheels = tuple(str(w) for w in params[f"actuators.{model}.wheels"])
    steering = tuple(str(w) for w in params.get(f"actuators.{model}.steering") or ())

    def build(block: str) -> DbLayout:
        lines = list(params[f"layout.{block}_header"]) + list(params[f"layout.{model}.{block}"])
        where = f"layout.{block}_header + layout.{model}.{block}"
        try:
            specs = [parse_field_spec(line, where) for line in lines]
            return DbLayout(f"{block}_{model}", int(params[f"{block}_db"]), specs)
        except LayoutError as e:
            raise BridgeConfigError(f"parameter {where!r}: {e}") from e

    control, monitor, plant_in, plant_out = (build(b) for b in ("control", "monitor",
                                                                "plant_in", "plant_out"))
    required = {
        control: ["alive", "enable", "stop", "seq", "crc", *(f"speed_sp_{w}" for w in wheels),
                  *(f"angle_sp_{a}" for a in steering)],
        monitor: ["alive", "ready", "fault", "estop", "auto", "seq_accepted",
                  *(f"speed_{w}" for w in wheels), *(f"angle_{a}" for a in steering)],
        plant_in: ["alive", "sim_time", *(f"speed_{w}" for w in wheels),
                   *(f"angle_{a}" for a in steering)],
        plant_out: ["alive", "enable", "brake", "seq", "crc",
                    *(f"torque_sp_{w}" for w in wheels),
                    *(f"steer_rate_sp_{a}" for a in steering)],
    }
    for block, names in required.items():
        for name in names:
            if not block.has(name):
                why = ("the PLC's last accepted seq: the bridge continues beyond it at each "
                       "connect (docs/plc_setup.md section 4)") if name == "seq_accepted" else \
                    ("the command's CRC: the PLC takes only a whole command (docs/plc_setup.md "
                     "section 4)") if name == "crc" and block is control else \
                    ("the actuation's CRC: the plant link forwards only a whole block "
                     "(docs/plc_setup.md section 7)") if name == "crc" else \
                    f"required by model {model!r}"
                raise BridgeConfigError(f"parameter 'layout': data block {block.name!r} lacks "
                                        f"field {name!r} ({why}); declare it")
    for block, name, s7_type in ((control, "seq", "DINT"), (control, "crc", "DINT"),
                                 (monitor, "refused", "DINT"),
                                 (monitor, "seq_accepted", "DINT"),
                                 (monitor, "refused_reason", "INT"),
                                 (plant_out, "seq", "DINT"), (plant_out, "crc", "DINT"),
                                 (plant_in, "alive", "UINT"),
                                 (plant_in, "sim_time", "DINT"),
                                 (plant_in, "actuation_seq", "DINT")):
        if block.has(name) and block.field(name).s7_type != s7_type:
            raise BridgeConfigError(f"parameter 'layout': field {name!r} of {block.name!r} is "
                                    f"{block.field(name).s7_type}; it must be {s7_type}")
    return control, monitor, plant_in, plant_out, wheels, steering
