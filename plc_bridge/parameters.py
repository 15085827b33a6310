"""Every parameter of the PLC bridge and of the virtual PLC: the one spec they are read, declared,
checked and documented from.

Pure (no rclpy). ``BRIDGE_PARAMETERS`` are the specs of the ``plc_bridge`` node (their table,
with the rules between parameters, is ``plc_bridge.config.BRIDGE``), read from
``config/plc.yaml``: connections, loop, command envelope, data blocks, actuators, vehicle
geometry, and the ROS node's own parameters (``config_file``, ``autostart``,
``publish_rate_hz``, ``cmd_vel_to_redis``, ``cmd_vel_timeout_s``, which the pure cores ignore).
``VIRTUAL_PLC`` is the table of the ``virtual_plc`` (``config/virtual_plc.yaml``).

From the tables:

- ``plc_bridge.config.load_config`` validates a parameter file (an unknown key is an error naming
  it and the closest name, a missing key takes the default below, a deprecated name is used with
  a warning naming the new one) and builds the ``BridgeConfig`` the cores run on;
- the ``plc_bridge`` lifecycle node declares every parameter with its descriptor (description,
  unit, range, ``read_only`` unless ``dynamic``); the dynamic ones are validated in the on-set
  callback and applied between two bridge cycles in the post-set callback;
- docs/configuration.md's plc_bridge and virtual_plc tables are rendered from them
  (``excavator-hil params-doc``; test/test_docs_config.py checks they are current).

Run-time changes: the thresholds and limits that the loop reads afresh every cycle are
``dynamic`` (heartbeat and PLC-alive timeouts, the command envelope, the liveness TTL) and the
node's output rate and cmd_vel timeout. The connections, the loop rate (the PLC's watchdog is set
against it), the model, the sign convention, the data blocks and the geometry are read at
start-up only: change them with a restart (a lifecycle cleanup + configure keeps the values
the node started with, and the run-time changes made since).

Names carry their unit (``redis_timeout_s``, ``max_angular_rad_s``); identifiers, counts,
flags and ratios (``plc_port``, ``rack``, ``rt_priority``, ``reconnect_jitter``,
``slip_factor``) have none. The names of release 0.x without a unit (``redis_timeout_s``,
``cycle_hz`` had one already) work for one more release, with a warning naming the new name.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from excavator_common.errors import ParameterError
from excavator_common.parameters import ParameterSpec, ParameterTable, ParamType, Value
from excavator_kinematics.vehicle import ackermann, four_wheel_steer, skid_steer
from excavator_kinematics.vehicle.ackermann import STEER_FEEDBACK
from plc_bridge.errors import BridgeConfigError

MODELS: tuple[str, ...] = ("skid_steer", "ackermann", "4wd4ws")
PLANT_MODES: tuple[str, ...] = ("internal", "external")


@dataclasses.dataclass(frozen=True)
class ListSpec(ParameterSpec):
    """A list parameter of any length (a data-block layout, the write allow-list): the shared
    spec checks an array against the default's length; these lists are as long as the user
    makes them. ``low`` bounds the elements of a number list; an empty list is refused (ROS
    cannot type it)."""

    def check(self, value: Any, source: str = "parameters", *, exact: bool = False,
              error: type[Exception] = ParameterError) -> Value:
        t = self.ros_type
        where = f"{source}: parameter {self.name} = {value!r:.80}"
        if not isinstance(value, list | tuple) or not value:
            raise error(f"{where} is not a non-empty list: give a list of {t.element.value} "
                        f"({self.description})")
        out: list[Any] = [self._scalar(v, t.element, where, exact, error) for v in value]
        return out


def _spec(name: str, default: Value, description: str, unit: str = "", low: float | None = None,
          high: float | None = None, *, dynamic: bool = False, old: str = "",
          choices: tuple[str, ...] = (), constraint: str = "") -> ParameterSpec:
    return ParameterSpec(name, default, description, unit, low, high, dynamic,
                         (old,) if old else (), choices, constraint=constraint)


def _strings(name: str, default: list[str], description: str) -> ParameterSpec:
    return ListSpec(name, default, description, type=ParamType.STRING_ARRAY)


# --- connections -------------------------------------------------------------------------------
_CONNECTIONS = (
    _spec("redis_url", "redis://127.0.0.1:6379/0",
          "Redis server: redis://, rediss:// (TLS) or unix://; AUTH as "
          "redis://user:password@host:port/db", constraint="redis://, rediss:// or unix:// URL"),
    _spec("redis_timeout_s", 0.25, "socket timeout of every Redis round trip (a loaded host or "
          "a TLS terminator needs more than a few ms)", "s", 0.001, 5.0, old="redis_timeout"),
    _spec("redis_connect_timeout_s", 2.0, "TCP + TLS + AUTH handshake and first reply of a "
          "Redis (re)connect", "s", 0.01, 30.0, old="redis_connect_timeout"),
    _spec("monitor_ttl_s", 0.4, "expiry of plc.bridge.live, plc.bridge.status and "
          "plc.monitor.state.valid, refreshed every cycle: they are gone within this time of "
          "the bridge's death", "s", 0.05, 10.0, dynamic=True, old="monitor_ttl",
          constraint=">= 2 / cycle_hz"),
    _spec("plc_host", "127.0.0.1", "PLC address (S7-1200/1500; PUT/GET enabled for "
          "plc_transport s7): IPv4, IPv6 or an RFC 1123 host name",
          constraint="IP address or host name"),
    _spec("plc_port", 102, "ISO-on-TCP port of the PLC: 102 on a real PLC, the virtual PLC's "
          "port otherwise", "", 1, 65535),
    _spec("rack", 0, "rack number of the CPU (S7-1200/1500: 0)", "", 0, 7),
    _spec("slot", 1, "slot number of the CPU (S7-1200/1500: 1)", "", 0, 31),
    _spec("pdu_size_bytes", 240, "PDU size the bridge asks for: 240 on an S7-1200, usually 480 "
          "on an S7-1500; each data block must fit one request", "B", 240, 960,
          old="pdu_size"),
    _spec("plc_timeout_s", 0.1, "socket timeout of each S7 request: a lost link is seen within "
          "plc_timeout_s + one cycle. A PLC whose first reply takes longer is refused with the "
          "measured time; one slower than half a cycle is served at the rate it allows",
          "s", 0.001, 2.0, old="plc_timeout"),
    _spec("reconnect_min_s", 0.01, "first reconnect delay (PLC and Redis)", "s", 0.001, 10.0,
          old="reconnect_min"),
    _spec("reconnect_max_s", 0.05, "cap of the exponential reconnect back-off; a link that "
          "fails within 1 s of connecting backs off up to 2 s, a PLC refused at connect is "
          "retried every 5 s", "s", 0.001, 60.0, old="reconnect_max",
          constraint=">= reconnect_min_s"),
    _spec("reconnect_jitter", 0.2, "random extra reconnect delay, as a fraction of the current "
          "delay", "-", 0.0, 1.0),
)

# --- the PLC transport: S7 (PUT/GET) or OPC UA (docs/plc_bridge.md, "OPC UA") ----------------
TRANSPORTS: tuple[str, ...] = ("s7", "opcua")
OPCUA_ADDRESSING: tuple[str, ...] = ("s7_1500", "numeric")
OPCUA_POLICIES: tuple[str, ...] = ("Basic256Sha256", "Aes256Sha256RsaPss", "Aes128Sha256RsaOaep",
                                   "None")
_TRANSPORT = (
    _spec("plc_transport", "s7", "how the bridge and the plant link reach the PLC: s7 = "
          "PUT/GET on plc_port (python-snap7), opcua = the CPU's OPC UA server on opcua_port "
          "(asyncua; signed and encrypted, user login)", choices=TRANSPORTS),
    _spec("opcua_port", 4840, "TCP port of the PLC's OPC UA server (opc.tcp://plc_host:port; "
          "4840 on a real CPU)", "", 1, 65535),
    _spec("opcua_addressing", "s7_1500", "node ids of the data-block variables: s7_1500 = the "
          "CPU's standard interface, string ids \"<DB name>\".\"<field>\" (DB name as "
          "generated: PlcBridge_<block>); numeric = a server interface (S7-1200), ids from "
          "opcua_node_ids", choices=OPCUA_ADDRESSING),
    _spec("opcua_namespace_uri", "http://www.siemens.com/simatic-s7-opcua", "URI of the "
          "namespace the variables are in; its index is asked of the server at each connect "
          "(never assumed). A S7-1200 server interface: the URI set in TIA Portal",
          constraint="non-empty"),
    ListSpec("opcua_node_ids", ["-"], "numeric addressing only: one '<block>.<field> = <id>' "
             "per variable of every block the link uses (block: control, monitor, plant_in, "
             "plant_out), id = the numeric identifier in opcua_namespace_uri; ['-'] = none",
             type=ParamType.STRING_ARRAY),
    _spec("opcua_security_policy", "Basic256Sha256", "security policy of the secure channel; "
          "None only with opcua_allow_insecure (a lab, with a warning)", choices=OPCUA_POLICIES),
    _spec("opcua_security_mode", "SignAndEncrypt", "message security: SignAndEncrypt, or Sign "
          "(signed, readable on the wire)", choices=("SignAndEncrypt", "Sign")),
    _spec("opcua_allow_insecure", False, "accept opcua_security_policy None (no signature, no "
          "encryption, no certificate check): a lab only, logged as a warning at each connect"),
    _spec("opcua_user", "", "user name to log in with ('' = anonymous, which a secured CPU "
          "refuses); its password is read from opcua_password_file"),
    _spec("opcua_password_file", "", "file holding the password of opcua_user (one line; "
          "readable by its owner only, mode 0600 or 0400: checked)", "path"),
    _spec("opcua_user_certificate", "", "X.509 user certificate (.der) to log in with instead "
          "of a user name and password ('' = none); the PLC maps it to a user", "path"),
    _spec("opcua_user_key", "", "private key (.pem) of opcua_user_certificate, readable by its "
          "owner only (mode 0600: checked)", "path"),
    _spec("opcua_pki_dir", "", "the link's PKI: own/cert.der + own/key.pem (the client "
          "certificate), trusted/ (server certificates trusted), rejected/ (untrusted ones "
          "seen, to inspect and move to trusted/); made by `excavator-hil opcua-certs`. '' = "
          "~/.local/share/excavator_hil/pki/plc_bridge", "path"),
)

# --- loop and command envelope -----------------------------------------------------------------
_LOOP = (
    _spec("model", "skid_steer", "vehicle kinematic model between the Redis keys and the PLC's "
          "wheel setpoints", choices=MODELS),
    _spec("cycle_hz", 100.0, "bridge loop rate (the loop also wakes at once on a Redis "
          "change); the PLC's watchdog time is set against it", "Hz", 1.0, 1000.0),
    _spec("heartbeat_timeout_s", 0.75, "controlled stop when plc.control.navigation.heartbeat "
          "has not toggled for this long", "s", 0.05, 10.0, dynamic=True,
          old="heartbeat_timeout"),
    _spec("plc_alive_timeout_s", 0.5, "controlled stop when the PLC's alive counter has not "
          "changed for this long", "s", 0.05, 10.0, dynamic=True, old="plc_alive_timeout"),
    _spec("rt_priority", 0, "SCHED_FIFO priority of the bridge's loop thread, the node's "
          "executor thread one step below it (Linux, needs CAP_SYS_NICE); 0 = normal "
          "scheduling", "", 0, 99),
    _spec("lateral_positive", "left", "sign of the Redis lateral velocity, for control and "
          "monitor keys alike: left = + left (REP-103, ARTOF docs), right = + right (ARTOF "
          "simulator)", choices=("left", "right")),
    _spec("wake_on_change", True, "wake the loop on Redis keyspace notifications or the notify "
          "channel (false: the fixed tick only)"),
    _spec("configure_keyspace_events", True, "CONFIG SET notify-keyspace-events (adds K$) at "
          "connect; false on a managed Redis that forbids CONFIG"),
    _spec("notify_channel", "plc.control.changed", "channel writers may PUBLISH to instead of "
          "relying on keyspace events (managed Redis)", constraint="non-empty"),
    _spec("max_longitudinal_m_s", 3.0, "command envelope: a longitudinal velocity beyond it is "
          "rejected (stop, counted), never clamped", "m/s", 1e-6, 100.0, dynamic=True,
          old="max_longitudinal"),
    _spec("max_lateral_m_s", 1.5, "command envelope for the lateral velocity (0: none "
          "accepted)", "m/s", 0.0, 100.0, dynamic=True, old="max_lateral"),
    _spec("max_angular_rad_s", 1.5, "command envelope for the yaw rate", "rad/s", 1e-6, 100.0,
          dynamic=True, old="max_angular"),
)

# --- data blocks and actuators -----------------------------------------------------------------
_LAYOUT: dict[str, list[str]] = {
    "control_header": [
        "alive | UINT | 1 | bridge alive counter, +1 each cycle while commands are fresh",
        "enable | BOOL | 1 | drive enable: forward the setpoints",
        "stop | BOOL | 1 | controlled stop requested by the bridge",
        "seq | DINT | 1 | command sequence number, newer with every write (serial order mod "
        "2^32, never 0); starts beyond the PLC's seq_accepted at each connect; the PLC drives "
        "only on a seq newer than the last accepted one",
        "crc | DINT | 1 | CRC-32 (ISO-HDLC, as zlib) of the block's other bytes, the same 32 "
        "bits: the PLC takes a command only when it matches, so a scan between the writes of "
        "one command takes nothing"],
    "monitor_header": [
        "alive | UINT | 1 | PLC alive counter, +1 each PLC cycle",
        "ready | BOOL | 1 | PLC ready to accept commands",
        "fault | BOOL | 1 | drive or PLC fault",
        "estop | BOOL | 1 | emergency stop active",
        "auto | BOOL | 1 | automatic (remote) mode selected",
        "watchdog | BOOL | 1 | bridge watchdog tripped (latched until an explicit stop): "
        "outputs stopped by the PLC",
        "setpoint_fault | BOOL | 1 | a setpoint was NaN/inf/out of range: outputs stopped, "
        "latched until an explicit stop",
        "plant_lost | BOOL | 1 | HIL: the simulation's alive counter in plant_in stopped: drives "
        "in their safe state (torque 0, brakes on), latched until the plant is alive and a stop "
        "was taken",
        "drive_saturated | BOOL | 1 | HIL: a drive speed loop is at its torque limit (the "
        "set-point is not held: slope, soil, obstacle)",
        "drive_fault | BOOL | 1 | HIL: a drive in fault (the simulation refused an actuation, "
        "or a measurement is not finite): drives in their safe state while it lasts",
        "refused | DINT | 1 | count of refused control writes (stale seq, watchdog tripped, bad "
        "setpoint)",
        "seq_accepted | DINT | 1 | the last seq the PLC accepted (0: none since the PLC started); "
        "the bridge continues beyond it when it connects",
        "refused_reason | INT | 1 | cause of the last refused write: 0 none, 1 stale_seq, 2 "
        "watchdog_tripped, 3 setpoint_fault, 4 bad_setpoint"],
    "plant_in_header": [
        "alive | UINT | 1 | simulation alive counter: +1 with each plant_in that carries a newer "
        "simulated time; it stops when the simulation stops",
        "drive_ready | BOOL | 1 | the simulated drives are powered and fault-free (they accept "
        "torque when enabled)",
        "drive_fault | BOOL | 1 | the simulation refused an actuation (NaN/inf/out of range): "
        "drives braked until a valid one",
        "brake | BOOL | 1 | the holding brakes hold (measured)",
        "sim_time | DINT | ms | simulated time of these measurements, ms mod 2^32",
        "yaw_rate | REAL | rad/s | IMU yaw rate of base_link, + counter-clockwise seen from above",
        "pitch | REAL | rad | IMU pitch of base_link (REP-103: + nose down)",
        "roll | REAL | rad | IMU roll of base_link (REP-103: + right side down)",
        "ground_speed | REAL | m/s | speed over ground along base_link x (radar/GNSS sensor): "
        "slip = 1 - ground speed / track speed",
        "actuation_seq | DINT | 1 | seq of the last plant_out the plant link forwarded to the "
        "simulation"],
    "plant_out_header": [
        "alive | UINT | 1 | PLC plant-program alive counter, +1 each PLC scan",
        "enable | BOOL | 1 | drive enable: the drives may produce torque",
        "brake | BOOL | 1 | apply the holding brakes",
        "seq | DINT | 1 | actuation sequence: +1 each scan; the plant link forwards an actuation "
        "only when its seq is newer than the last one forwarded",
        "crc | DINT | 1 | CRC-32 (ISO-HDLC, as zlib) of the block's other bytes, the same 32 "
        "bits, written by the PLC each scan: the plant link forwards only a block whose crc "
        "matches, so a read between the writes of one scan forwards nothing"],
}
ACTUATORS: dict[str, dict[str, list[str]]] = {
    "skid_steer": {"wheels": ["left", "right"]},
    "ackermann": {"wheels": ["rl", "rr"], "steering": ["fl", "fr"]},
    "4wd4ws": {"wheels": ["fl", "fr", "rl", "rr"], "steering": ["fl", "fr", "rl", "rr"]},
}


_MODEL_LAYOUT: dict[str, dict[str, list[str]]] = {
    "skid_steer": {
        "control": [
            "speed_sp_left | REAL | m/s | left track speed setpoint",
            "speed_sp_right | REAL | m/s | right track speed setpoint",
        ],
        "monitor": [
            "speed_left | REAL | m/s | left track measured speed",
            "speed_right | REAL | m/s | right track measured speed",
        ],
        "plant_in": [
            "speed_left | REAL | m/s | left track measured speed, + forward",
            "speed_right | REAL | m/s | right track measured speed, + forward",
            "torque_left | REAL | N m | left track measured drive torque, + forward",
            "torque_right | REAL | N m | right track measured drive torque, + forward",
        ],
        "plant_out": [
            "torque_sp_left | REAL | N m | left track torque set-point (sprocket), + forward",
            "torque_sp_right | REAL | N m | right track torque set-point (sprocket), + forward",
        ],
    },
    "ackermann": {
        "control": [
            "speed_sp_rl | REAL | m/s | rear-left wheel speed setpoint",
            "speed_sp_rr | REAL | m/s | rear-right wheel speed setpoint",
            "angle_sp_fl | REAL | rad | front-left steering angle setpoint, + CCW",
            "angle_sp_fr | REAL | rad | front-right steering angle setpoint, + CCW",
        ],
        "monitor": [
            "speed_rl | REAL | m/s | rear-left wheel measured speed",
            "speed_rr | REAL | m/s | rear-right wheel measured speed",
            "angle_fl | REAL | rad | front-left measured steering angle",
            "angle_fr | REAL | rad | front-right measured steering angle",
        ],
        "plant_in": [
            "speed_rl | REAL | m/s | rear-left wheel measured speed, + forward",
            "speed_rr | REAL | m/s | rear-right wheel measured speed, + forward",
            "torque_rl | REAL | N m | rear-left wheel measured drive torque, + forward",
            "torque_rr | REAL | N m | rear-right wheel measured drive torque, + forward",
            "angle_fl | REAL | rad | front-left measured steering angle, + CCW",
            "angle_fr | REAL | rad | front-right measured steering angle, + CCW",
        ],
        "plant_out": [
            "torque_sp_rl | REAL | N m | rear-left wheel torque set-point, + forward",
            "torque_sp_rr | REAL | N m | rear-right wheel torque set-point, + forward",
            "steer_rate_sp_fl | REAL | rad/s | front-left steering rate command (valve), + CCW",
            "steer_rate_sp_fr | REAL | rad/s | front-right steering rate command (valve), + CCW",
        ],
    },
    "4wd4ws": {
        "control": [
            "speed_sp_fl | REAL | m/s | front-left wheel speed setpoint",
            "speed_sp_fr | REAL | m/s | front-right wheel speed setpoint",
            "speed_sp_rl | REAL | m/s | rear-left wheel speed setpoint",
            "speed_sp_rr | REAL | m/s | rear-right wheel speed setpoint",
            "angle_sp_fl | REAL | rad | front-left steering angle setpoint",
            "angle_sp_fr | REAL | rad | front-right steering angle setpoint",
            "angle_sp_rl | REAL | rad | rear-left steering angle setpoint",
            "angle_sp_rr | REAL | rad | rear-right steering angle setpoint",
        ],
        "monitor": [
            "speed_fl | REAL | m/s | front-left wheel measured speed",
            "speed_fr | REAL | m/s | front-right wheel measured speed",
            "speed_rl | REAL | m/s | rear-left wheel measured speed",
            "speed_rr | REAL | m/s | rear-right wheel measured speed",
            "angle_fl | REAL | rad | front-left measured steering angle",
            "angle_fr | REAL | rad | front-right measured steering angle",
            "angle_rl | REAL | rad | rear-left measured steering angle",
            "angle_rr | REAL | rad | rear-right measured steering angle",
        ],
        "plant_in": [
            "speed_fl | REAL | m/s | front-left wheel measured speed, + forward",
            "speed_fr | REAL | m/s | front-right wheel measured speed, + forward",
            "speed_rl | REAL | m/s | rear-left wheel measured speed, + forward",
            "speed_rr | REAL | m/s | rear-right wheel measured speed, + forward",
            "torque_fl | REAL | N m | front-left wheel measured drive torque, + forward",
            "torque_fr | REAL | N m | front-right wheel measured drive torque, + forward",
            "torque_rl | REAL | N m | rear-left wheel measured drive torque, + forward",
            "torque_rr | REAL | N m | rear-right wheel measured drive torque, + forward",
            "angle_fl | REAL | rad | front-left measured steering angle, + CCW",
            "angle_fr | REAL | rad | front-right measured steering angle, + CCW",
            "angle_rl | REAL | rad | rear-left measured steering angle, + CCW",
            "angle_rr | REAL | rad | rear-right measured steering angle, + CCW",
        ],
        "plant_out": [
            "torque_sp_fl | REAL | N m | front-left wheel torque set-point, + forward",
            "torque_sp_fr | REAL | N m | front-right wheel torque set-point, + forward",
            "torque_sp_rl | REAL | N m | rear-left wheel torque set-point, + forward",
            "torque_sp_rr | REAL | N m | rear-right wheel torque set-point, + forward",
            "steer_rate_sp_fl | REAL | rad/s | front-left steering rate command (valve), + CCW",
            "steer_rate_sp_fr | REAL | rad/s | front-right steering rate command (valve), + CCW",
            "steer_rate_sp_rl | REAL | rad/s | rear-left steering rate command (valve), + CCW",
            "steer_rate_sp_rr | REAL | rad/s | rear-right steering rate command (valve), + CCW",
        ],
    },
}


_BLOCK_TEXT = {
    "control": "setpoints [m/s, rad]: speed_sp_<wheel>, angle_sp_<steer>",
    "monitor": "measurements [m/s, rad]: speed_<wheel>, angle_<steer>",
    "plant_in": "simulated sensors [m/s, N m, rad]: speed_<wheel>, torque_<wheel>, "
                "angle_<steer>",
    "plant_out": "actuator set-points [N m, rad/s]: torque_sp_<wheel>, steer_rate_sp_<steer>",
}

_DATA_BLOCKS = (
    _spec("control_db", 100, "DB number bridge -> PLC, the only block the bridge writes",
          "", 1, 65535, constraint="in write_allow_list"),
    _spec("monitor_db", 101, "DB number PLC -> bridge (read only)", "", 1, 65535,
          constraint="not control_db"),
    ListSpec("write_allow_list", [100], "DB numbers the bridge may write; control_db must be "
             "one of them, the plant blocks must not", low=1, high=65535,
             type=ParamType.INTEGER_ARRAY),
    _spec("plant_in_db", 102, "HIL: DB number simulation -> PLC (measured speeds, torques, "
          "IMU, the simulation's alive counter), written by the plant link only", "", 1, 65535,
          constraint="not in write_allow_list"),
    _spec("plant_out_db", 103, "HIL: DB number PLC -> simulation (torque and steering-rate "
          "set-points, enable, brake, seq), read by the plant link", "", 1, 65535,
          constraint="not in write_allow_list"),
    _strings("layout.control_header", _LAYOUT["control_header"],
             "first fields of the control DB, 'name | TYPE | unit | comment' (TYPE: BOOL INT "
             "UINT WORD DINT REAL): alive counter, enable, stop, seq and crc (DINT, required)"),
    _strings("layout.monitor_header", _LAYOUT["monitor_header"],
             "first fields of the monitor DB: PLC alive counter, status bits, count of refused "
             "writes, last accepted seq (seq_accepted, DINT, required), cause of the last "
             "refusal"),
    _strings("layout.plant_in_header", _LAYOUT["plant_in_header"],
             "first fields of the plant_in DB (HIL, simulation -> PLC): simulation alive "
             "counter, drive status bits, simulated time, IMU, ground speed, last forwarded seq"),
    _strings("layout.plant_out_header", _LAYOUT["plant_out_header"],
             "first fields of the plant_out DB (HIL, PLC -> simulation): PLC alive counter, "
             "enable, brake, seq and crc (DINT, required)"),
    *(_strings(f"layout.{m}.{block}", _MODEL_LAYOUT[m][block],
               f"the {m} model's {_BLOCK_TEXT[block]} after the {block} header")
      for m in MODELS for block in ("control", "monitor", "plant_in", "plant_out")),
    *(_strings(f"actuators.{m}.{kind}", names,
               f"{'driven wheels or tracks' if kind == 'wheels' else 'steered wheels'} of the "
               f"{m} model, in its {'wheel' if kind == 'wheels' else 'steer'}_names order: they "
               f"name the DB fields and the Redis keys plc.monitor.wheel_<name>.*")
      for m in MODELS for kind, names in ACTUATORS[m].items()),
)

# --- vehicle geometry: ranges from the kinematics' own tables, defaults the shipped machine's ----
_VEHICLE_DEFAULTS: dict[str, dict[str, float]] = {
    "skid_steer": {"track_width_m": 2.6, "slip_factor": 1.0, "max_wheel_speed_m_s": 1.5},
    "ackermann": {"wheelbase_m": 2.0, "front_track_m": 1.5, "rear_track_m": 1.5,
                  "max_steer_angle_rad": 0.7, "max_wheel_speed_m_s": 3.0},
    "4wd4ws": {"wheelbase_m": 2.0, "track_m": 1.5, "max_steer_angle_rad": 1.6,
               "max_wheel_speed_m_s": 3.0},
}
_VEHICLE_TEXT = {
    "track_width_m": "track centre distance (the simulated excavator's gauge)",
    "slip_factor": "calibrated skid: b_eff = track_width_m * slip_factor",
    "max_wheel_speed_m_s": "wheel/track speed limit (the whole twist is scaled by one factor "
                           "to respect it)",
    "wheelbase_m": "rear axle to front axle",
    "front_track_m": "front kingpin distance",
    "rear_track_m": "rear wheel distance",
    "track_m": "left to right wheel distance",
    "max_steer_angle_rad": "steering limit: a tighter turn is a stop (ackermann); past it the "
                           "wheel flips, angle -/+ pi and speed negated (4wd4ws)",
}


# name -> (code default, low, high, unit, low excluded): the kinematics' own range tables
_VEHICLE_TABLES = {"skid_steer": skid_steer.PARAMETERS, "ackermann": ackermann.PARAMETERS,
                   "4wd4ws": four_wheel_steer.PARAMETERS}


def _vehicle_specs() -> tuple[ParameterSpec, ...]:
    out: list[ParameterSpec] = []
    for m in MODELS:
        table = _VEHICLE_TABLES[m]
        for key, (_code_default, low, high, unit, low_open) in table.items():
            out.append(ParameterSpec(
                f"vehicle.{m}.{key}", _VEHICLE_DEFAULTS[m][key], _VEHICLE_TEXT[key],
                unit if unit in ("m", "m/s", "rad") else "-", low, high,
                constraint=f"> {low:g}" if low_open else ""))
    out.append(_spec("vehicle.ackermann.steer_feedback", "mean", "which measured front "
                     "steering angle the ackermann direct model uses", choices=STEER_FEEDBACK))
    return tuple(out)


# --- the ROS node's own --------------------------------------------------------------------------
_NODE = (
    _spec("config_file", "", "parameter file whose values every parameter not given to the node "
          "takes ('' = the package's config/plc.yaml); bridge.launch.py sets it to plc_params",
          "path"),
    _spec("autostart", False, "configure and activate at start-up; a configuration that fails "
          "then ends the process with one message and exit code 2"),
    _spec("publish_rate_hz", 50.0, "rate of odom and plc/wheel_states", "Hz", 1.0, 500.0,
          dynamic=True, old="publish_rate"),
    _spec("cmd_vel_to_redis", False, "act as the operational layer: write cmd_vel to the Redis "
          "control keys and toggle the heartbeat while it keeps arriving"),
    _spec("cmd_vel_timeout_s", 0.5, "the heartbeat toggles only while the last cmd_vel is "
          "younger than this", "s", 0.05, 10.0, dynamic=True, old="cmd_vel_timeout"),
    _spec("frame_prefix", "", "TF prefix of this machine's frames (odom -> base_link), e.g. "
          "'exc1/' in a fleet (letters, digits, _, /; ends in /)"),
)
NODE_ONLY: frozenset[str] = frozenset(s.name for s in _NODE)


# Every parameter of the plc_bridge node, in the order of the docs. The table over them
# (``plc_bridge.config.BRIDGE``) adds the rules between parameters, which need the layouts and
# vehicle models built (``config.build_config``).
BRIDGE_PARAMETERS: tuple[ParameterSpec, ...] = (*_CONNECTIONS, *_TRANSPORT, *_LOOP,
                                                *_DATA_BLOCKS, *_vehicle_specs(), *_NODE)
_BY_NAME = {s.name: s for s in BRIDGE_PARAMETERS}

# The tables of docs/configuration.md: block name (``<!-- parameters: NAME -->``) -> names.
SECTIONS: dict[str, tuple[str, ...]] = {
    "plc_bridge connections": tuple(s.name for s in _CONNECTIONS),
    "plc_bridge transport": tuple(s.name for s in _TRANSPORT),
    "plc_bridge loop": tuple(s.name for s in _LOOP),
    "plc_bridge data blocks": tuple(s.name for s in _DATA_BLOCKS),
    "plc_bridge vehicle": tuple(s.name for s in _vehicle_specs()),
    "plc_bridge (node only)": tuple(s.name for s in _NODE),
}


# external mode, per wheeled model: the speed and steering loops of the machine that model
# drives (config/machines/wheeled_*_11t.yaml: 11.1 t, 0.48 m wheels, a 7.80 kN m wheel drive
# (35 MPa x 40 cm^3 x 35 / 2 pi), 0.35 rad/s steering); skid_steer takes the top-level
# speed_kp_nm_s_per_m, speed_ki_nm_per_m and torque_limit_nm (the tracked machine's).
# model: (kp [N m s/m], ki [N m/m], torque limit [N m], steering rate [rad/s], why kp)
WHEELED_DRIVES: dict[str, tuple[float, float, float, float, str]] = {
    "ackermann": (8800.0, 6600.0, 7790.0, 0.35, "3.3 rad/s crossover on 5.56 t per driven "
                  "wheel (11.1 t on the two rear wheels) at 0.48 m"),
    "4wd4ws": (4400.0, 3300.0, 7790.0, 0.35, "3.3 rad/s crossover on 2.78 t per wheel (11.1 t "
               "on four driven wheels) at 0.48 m"),
}


def _wheeled_drive_specs() -> list[ParameterSpec]:
    out = []
    for model, (kp, ki, torque, rate, why) in WHEELED_DRIVES.items():
        k = f"wheeled.{model}."
        out += [
            _spec(k + "speed_kp_nm_s_per_m", kp, f"external, model {model}: proportional gain "
                  f"of each wheel's PI speed loop ({why})", "N m s/m", 1.0, 1.0e6),
            _spec(k + "speed_ki_nm_per_m", ki, f"external, model {model}: integral gain of the "
                  "wheels' speed loops (integral time kp/ki = 1.33 s, as the tracks')", "N m/m",
                  0.0, 1.0e7),
            _spec(k + "torque_limit_nm", torque, f"external, model {model}: torque limit of "
                  "each wheel drive: keep it at or below the machine's relief torque (7.80 kN m "
                  "for the shipped wheeled presets; the simulation refuses more than twice it)",
                  "N m", 1.0, 1.0e6),
            _spec(k + "steer_rate_rad_s", rate, f"external, model {model}: the steering "
                  "loops' rate limit (the valve fully open): the machine's steering rate "
                  "(0.35 rad/s on the shipped presets; the simulation refuses more than twice "
                  "it as a drive fault)", "rad/s", 1e-3, 10.0),
        ]
    return out


VIRTUAL_PLC = ParameterTable("virtual_plc", (
    _spec("plant_hz", 200.0, "PLC cycle of the simulated plant", "Hz", 10.0, 2000.0),
    _spec("speed_time_constant_s", 0.05, "first-order wheel/track speed response", "s", 1e-4,
          10.0),
    _spec("steer_rate_rad_s", 2.0, "steering rate limit", "rad/s", 1e-3, 100.0),
    _spec("watchdog_timeout_s", 0.25, "the watchdog trips when the bridge's alive counter has "
          "not changed for this long; the trip latches until an explicit stop "
          "(docs/plc_setup.md section 4)", "s", 0.005, 10.0),
    _spec("plant_mode", "internal", "internal: the built-in first-order plant (standalone, no "
          "simulation); external: hardware in the loop, the simulated machine is the plant "
          "(plant_in / plant_out blocks, PI speed loops; docs/plc_setup.md section 7)",
          choices=PLANT_MODES),
    _spec("plant_watchdog_timeout_s", 0.25, "external: plant_lost (torque 0, brakes on, drive "
          "enable off, fault) when the simulation's alive counter in plant_in has not changed "
          "for this long; latched until the plant is alive again and a stop was taken", "s",
          0.005, 10.0),
    _spec("speed_kp_nm_s_per_m", 4000.0, "external: proportional gain of each drive's PI speed "
          "loop (torque per speed error; 3.3 rad/s crossover on a 4.1 t track side at 0.30 m "
          "sprocket radius)", "N m s/m", 1.0, 1.0e6),
    _spec("speed_ki_nm_per_m", 3000.0, "external: integral gain of the speed loops (clamping "
          "anti-windup: the integrator holds while the output is at the torque limit)",
          "N m/m", 0.0, 1.0e7),
    _spec("speed_sp_weight", 0.5, "external: proportional set-point weight b of the speed "
          "loops (PID_Compact's b; 1 = plain PI, which overshoots set-point steps on a drive "
          "that integrates torque)", "-", 0.0, 1.0),
    _spec("torque_limit_nm", 8550.0, "external: torque limit of each drive, the speed loops' "
          "output limit: 57 kN drawbar pull of an 8 t excavator (Cat 308C CR spec sheet) / 2 "
          "tracks x 0.30 m sprocket radius (assumed); keep it at or below the simulated "
          "drive's relief torque", "N m", 1.0, 1.0e6),
    _spec("steer_kp_1_s", 5.0, "external: steering angle loops (wheeled models): rate command "
          "= gain x angle error, limited to the model's wheeled.<model>.steer_rate_rad_s",
          "1/s", 0.01, 100.0),
    *_wheeled_drive_specs(),
), error=BridgeConfigError)


# The plant link (plc_bridge.plant_link, config/plant_link.yaml): HIL exchange between the
# simulation's ROS topics and the PLC's plant blocks. The PLC connection, the model and the
# data blocks are the bridge's (plc_config_file); these are its own.
PLANT_LINK = ParameterTable("plant_link", (
    _spec("plc_config_file", "", "the bridge's parameter file the PLC connection (plc_host, "
          "plc_port, rack, slot, pdu_size_bytes, plc_timeout_s, reconnect_*), the model and "
          "the plant_in / plant_out blocks come from ('' = the package's config/plc.yaml)",
          "path"),
    _spec("plc_host", "", "the PLC's address, overriding plc_config_file's ('' = take it from "
          "there): the virtual PLC's or the real one's", constraint="'' or IP address or host "
          "name"),
    _spec("plc_port", 0, "ISO-on-TCP port, overriding plc_config_file's (0 = take it from "
          "there)", "", 0, 65535),
    _spec("plc_transport", "", "s7 or opcua, overriding plc_config_file's ('' = take it from "
          "there): the plant link's transport is chosen apart from the bridge's",
          choices=("", *TRANSPORTS)),
    _spec("opcua_port", 0, "OPC UA port, overriding plc_config_file's (0 = take it from "
          "there)", "", 0, 65535),
    _spec("opcua_pki_dir", "", "the plant link's own OPC UA PKI folder (its certificate is not "
          "the bridge's; '' = ~/.local/share/excavator_hil/pki/plant_link); the other opcua_* "
          "settings come from plc_config_file", "path"),
    _spec("model", "", "vehicle model, overriding plc_config_file's ('' = take it from there); "
          "must be the bridge's", choices=("", *MODELS)),
    _spec("exchange_hz", 100.0, "rate of the exchange: per period one read of plant_out and "
          "one write of plant_in (the simulation's control rate)", "Hz", 1.0, 1000.0),
    ListSpec("write_allow_list", [102], "DB numbers the plant link may write: plant_in_db must "
             "be one of them, the bridge's control and monitor blocks and plant_out must not",
             low=1, high=65535, type=ParamType.INTEGER_ARRAY),
    _spec("rt_priority", 0, "SCHED_FIFO priority of the exchange thread (Linux, needs "
          "CAP_SYS_NICE); 0 = normal scheduling", "", 0, 99),
    _spec("config_file", "", "node only: the parameter file every parameter not given to the "
          "node takes its value from ('' = the package's config/plant_link.yaml)", "path"),
), error=BridgeConfigError)


PLANT_LINK_NODE_ONLY = frozenset({"config_file"})


def markdown_plant_link(node_only: bool = False) -> str:
    """The plant_link tables of docs/configuration.md: the keys of config/plant_link.yaml, or
    (``node_only``) the node's own parameters."""
    from excavator_common.parameters import markdown_table

    specs = [s for s in PLANT_LINK.parameters if (s.name in PLANT_LINK_NODE_ONLY) == node_only]
    return markdown_table(specs, "node parameter" if node_only else "key")


def _row(spec: ParameterSpec, key_header: str) -> str:
    """One row of ``markdown_table``; a field list's default is summarised (its entries hold
    ``|`` and are listed in config/plc.yaml and docs/plc_setup.md)."""
    from excavator_common.parameters import markdown_table

    if isinstance(spec, ListSpec) and spec.ros_type is ParamType.STRING_ARRAY and \
            spec.name.startswith("layout."):
        fields = [str(f).split("|")[0].strip() for f in spec.default]  # type: ignore[union-attr]
        spec = dataclasses.replace(spec, default=["x"])
        row = markdown_table([spec], key_header).splitlines()[2].split(" | ")
        row[2] = f"{len(fields)} fields: {', '.join(fields)}"
        return " | ".join(row)
    return markdown_table([spec], key_header).splitlines()[2]


def markdown(section: str) -> str:
    """One plc_bridge table of docs/configuration.md (``SECTIONS``; rendered into the doc by
    ``excavator-hil params-doc``). The node's own parameters are not keys of config/plc.yaml:
    their table's first column says so (test/test_docs_config.py)."""
    key = "node parameter" if section.endswith("(node only)") else "key"
    head = f"| {key} | unit | default | range | run time | meaning |\n|---|---|---|---|---|---|"
    return head + "\n" + "\n".join(_row(_BY_NAME[n], key) for n in SECTIONS[section])


def markdown_virtual_plc() -> str:
    """The virtual_plc table of docs/configuration.md."""
    from excavator_common.parameters import markdown_table

    return markdown_table(VIRTUAL_PLC.parameters)
