"""teleop_node's parameters (``config/teleop.yaml``): one spec table, read with or without ROS.

The node declares every entry of :data:`TELEOP_PARAMETERS` with its descriptor (run-time
changeable: the mode, the pattern, the stick shaping, the input timeouts and the force
feedback scales and limits; the rest read-only); tools and tests read the same file with
:func:`load_teleop_parameters`. :func:`settings_from_parameters` builds the core's dataclasses
and raises ``ConfigError`` naming the parameter. Renamed for their units (former names accepted
for one release, with a warning): ``control_rate`` -> ``control_rate_hz``, ``joy_timeout``,
``hand_timeout``, ``state_timeout``, ``wrench_timeout`` -> ``*_s``, ``coordinated.damping`` ->
``coordinated.damping_m``, ``coordinated.singular_threshold`` ->
``coordinated.singular_threshold_m``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from excavator_common.parameters import ParameterSpec, ParameterTable, load_parameters
from excavator_common.paths import config_file
from excavator_kinematics.errors import ConfigError
from excavator_kinematics.teleop.control_patterns import ALIASES
from excavator_kinematics.teleop.coordinated import CoordinatedSettings
from excavator_kinematics.teleop.impedance import FeedbackScaling, ImpedanceParams
from excavator_kinematics.teleop.joystick import JoyLayout, Shaping, TravelLayout
from excavator_kinematics.teleop.ticks import ControlTicks

INF = math.inf


def _four_flags(values: Any) -> tuple[bool, bool, bool, bool]:
    """``axes.invert``: four booleans (left_x, left_y, right_x, right_y)."""
    flags = tuple(bool(v) for v in values)
    if len(flags) != 4:
        raise ConfigError(f"axes.invert has {len(flags)} entries: give 4 booleans "
                          "(left_x, left_y, right_x, right_y)")
    return flags[0], flags[1], flags[2], flags[3]


def _p(name: str, default: Any, low: float | None, high: float | None, unit: str,
       description: str, **kw: Any) -> ParameterSpec:
    return ParameterSpec(name, default, description, unit, low, high, **kw)


_RUN_TIME = {"dynamic": True}


PARAMETERS: tuple[ParameterSpec, ...] = (
    _p("mode", "joystick", None, None, "", "joystick (rate control per function), coordinated "
       "(bucket tip velocity) or impedance (hand controller, DiMaio eq. 1)",
       choices=("joystick", "coordinated", "impedance"), **_RUN_TIME),
    _p("pattern", "iso", None, None, "", "control pattern: iso (ISO 10968) or sae (backhoe, "
       "SAE J1814; alias backhoe)", choices=tuple(ALIASES), **_RUN_TIME),
    _p("control_rate_hz", 50.0, 1.0, 1000.0, "Hz", "rate of joint_command, track_command and "
       "the force feedback while an input is live", deprecated_names=("control_rate",)),
    _p("joy_timeout_s", 0.5, 0.05, 10.0, "s", "a Joy older than this stops the machine (hold)",
       deprecated_names=("joy_timeout",), **_RUN_TIME),
    _p("hand_timeout_s", 0.25, 0.01, 10.0, "s", "a hand pose older than this holds the machine "
       "and releases the clutch", deprecated_names=("hand_timeout",), **_RUN_TIME),
    _p("max_command_age_s", 0.25, 0.01, 3600.0, "s", "a joy, joy_travel or hand_pose message "
       "older than this on arrival (by its stamp) is dropped, counted and reported; stamp 0 "
       "is not judged (docs/teleoperation.md, Late commands)", **_RUN_TIME),
    _p("state_timeout_s", 0.5, 0.05, 10.0, "s", "joint_states older than this: no command at "
       "all", deprecated_names=("state_timeout",), **_RUN_TIME),
    _p("wrench_timeout_s", 0.5, 0.01, 10.0, "s", "a soil wrench older than this counts as zero",
       deprecated_names=("wrench_timeout",), **_RUN_TIME),
    _p("command_lead_s", 0.3, 0.01, 5.0, "s", "rate modes: a moving joint's target leads the "
       "measured position by rate x this"),
    _p("stop_time_s", 0.05, 0.0, 1.0, "s", "a released joint is held at q + q_dot x this"),
    _p("command_delay_s", 0.0, 0.0, 1.0, "s", "> 0 (with use_sim_time) makes the commands a "
       "function of the stamps, so a recorded session replays to the same motion: rate modes "
       "answer each Joy from the joint_states of its stamp, impedance mode ticks on simulated "
       "time; each joint_command is stamped input stamp + this (sim_node applies it then); "
       "0 = stamp when sent, applied on arrival"),
    _p("input_lockstep", False, None, None, "", "with command_delay_s and sim_node's "
       "command_lockstep_timeout_s: the simulation waits for the operator's input too, the "
       "Joys in a rate mode (the time markers go no further than the newest Joy's command) and "
       "the hand poses in impedance mode (a tick waits for a pose taken in at or after it), "
       "until it waited input_lockstep_timeout_s with no input arriving; so a scripted "
       "session or a bag replay acts at its stamps however late a loaded host delivers it, "
       "and an input is re-stamped only when its command would act before one already sent. "
       "For sessions, not for a live operator", deprecated_names=("joy_lockstep",)),
    _p("input_lockstep_timeout_s", 3.0, 0.05, 60.0, "s", "input_lockstep: how long of wall "
       "time the simulation waits with no input arriving before it runs on without it (the "
       "session ended: counted as input_lockstep_releases; then joy_timeout_s or "
       "hand_timeout_s acts on simulated time) until the next input comes", **_RUN_TIME),
    _p("machine", "", None, None, "", "the machine of a fleet to drive, by namespace (exc2 or "
       "/exc2): its joint_states, soil/wrench in, its joint_command, track_command, "
       "teleop/valve_command out; the operator's joy, joy_travel, hand_pose and the teleop/ "
       "feedback topics stay in this node's namespace; empty = this node's own namespace"),
    _p("geometry_file", "", None, None, "path", "excavator geometry YAML; empty = the package's "
       "config/excavator.yaml"),
    _p("hydraulics_file", "", None, None, "path", "simulation parameter file with the flow "
       "limits (hydraulics.*, tracks.speed_limit_m_s); empty = the package's config/sim.yaml"),
    _p("total_flow_lpm", 235.0, 1.0, 1.0e4, "L/min", "the pumps' total flow shared by the "
       "cylinders (flow sharing)"),
    _p("shaping.dead_band", 0.1, 0.0, 0.9, "-", "stick dead band, fraction of full deflection",
       **_RUN_TIME),
    _p("shaping.expo", 0.3, 0.0, 1.0, "-", "expo: 0 linear, 1 cubic", **_RUN_TIME),
    _p("axes.left_x", 0, 0, 63, "index", "Joy.axes index of the left stick, left/right"),
    _p("axes.left_y", 1, 0, 63, "index", "Joy.axes index of the left stick, forward/back"),
    _p("axes.right_x", 3, 0, 63, "index", "Joy.axes index of the right stick, left/right"),
    _p("axes.right_y", 4, 0, 63, "index", "Joy.axes index of the right stick, forward/back"),
    _p("axes.invert", [False, False, False, False], None, None, "", "invert left_x, left_y, "
       "right_x, right_y (the joy convention: left and forward positive)", length=4),
    _p("buttons.enable", -1, -1, 63, "index", "deadman button held to move; -1 = none"),
    _p("buttons.mode_toggle", -1, -1, 63, "index", "button that toggles joystick <-> "
       "coordinated; -1 = none"),
    _p("travel.enabled", True, None, None, "", "publish track_command from the travel input"),
    _p("travel.separate_device", True, None, None, "", "travel input on joy_travel (pedals); "
       "false = on joy"),
    _p("travel.left_axis", 0, -1, 63, "index", "axis of the left track pedal/lever; -1 = none"),
    _p("travel.right_axis", 1, -1, 63, "index", "axis of the right track pedal/lever; -1 = none"),
    _p("travel.left_forward_button", -1, -1, 63, "index", "button: left track forward"),
    _p("travel.left_reverse_button", -1, -1, 63, "index", "button: left track reverse"),
    _p("travel.right_forward_button", -1, -1, 63, "index", "button: right track forward"),
    _p("travel.right_reverse_button", -1, -1, 63, "index", "button: right track reverse"),
    _p("travel.button_fraction", 0.5, 0.0, 1.0, "-", "a travel button's share of full speed"),
    _p("travel.speed_fraction", 1.0, 0.01, 1.0, "-", "full pedal = this x tracks.speed_limit_m_s"),
    _p("coordinated.max_tip_speed_m_s", 0.5, 0.01, 5.0, "m/s", "full stick = this tip speed"),
    _p("coordinated.max_bucket_rate_rad_s", 0.6, 0.01, 5.0, "rad/s", "full stick = this "
       "bucket angle rate"),
    _p("coordinated.damping_m", 0.05, 1e-4, 1.0, "m", "damped least squares: largest damping",
       deprecated_names=("coordinated.damping",)),
    _p("coordinated.singular_threshold_m", 0.15, 1e-3, 2.0, "m", "smallest singular value "
       "below which damping starts", deprecated_names=("coordinated.singular_threshold",)),
    _p("coordinated.angle_weight_m_per_rad", 0.5, 1e-3, 10.0, "m/rad", "weight of the bucket "
       "angle against the tip position in the least squares"),
    _p("coordinated.horizon_s", 0.1, 0.001, 2.0, "s", "look-ahead for the joint limits"),
    _p("impedance.mass_kg", 3500.0, 1.0, 1.0e6, "kg", "M_d of r and z (DiMaio: machine mass)"),
    _p("impedance.damping_n_s_per_m", 5000.0, 1.0, 1.0e8, "N s/m", "B_d of r and z (Table 1)"),
    _p("impedance.stiffness_n_per_m", 1.0e5, 1.0, 1.0e9, "N/m", "K_d of r and z (Table 1: "
       "1e4..1e5)"),
    _p("impedance.inertia_kg_m2", 875.0, 0.01, 1.0e6, "kg m^2", "M_d of alpha"),
    _p("impedance.angular_damping_nm_s_per_rad", 1250.0, 0.01, 1.0e8, "N m s/rad",
       "B_d of alpha"),
    _p("impedance.angular_stiffness_nm_per_rad", 2.5e4, 0.01, 1.0e9, "N m/rad", "K_d of alpha"),
    _p("impedance.max_step_s", 0.1, 0.001, 1.0, "s", "the most model time one control "
       "callback integrates: late or missed ticks are made up (counted on /diagnostics), a "
       "longer stall is not (at least 1 / control_rate_hz)"),
    _p("impedance.position_scale", 10.0, 0.01, 1000.0, "m/m", "machine metres per hand metre"),
    _p("impedance.angle_scale", 1.0, 0.01, 100.0, "rad/rad", "bucket radians per hand radian"),
    _p("feedback.force_scale", 1.0e-3, 0.0, 1.0, "N/N", "device force per soil force",
       **_RUN_TIME),
    _p("feedback.torque_scale", 1.0e-3, 0.0, 1.0, "N m/N m", "device torque per soil torque",
       **_RUN_TIME),
    _p("feedback.max_force_n", 10.0, 0.0, 1000.0, "N", "device force range (saturation)",
       **_RUN_TIME),
    _p("feedback.max_torque_nm", 1.0, 0.0, 100.0, "N m", "device torque range (saturation)",
       **_RUN_TIME),
    _p("feedback.frame_id", "hand_controller", None, None, "", "frame of the force feedback"),
)


def _check(values: Mapping[str, Any]) -> None:
    _build(values)  # the groups' own checks (axes.invert has 4 entries...)


TELEOP_PARAMETERS = ParameterTable("teleop_node", PARAMETERS, error=ConfigError, check=_check)
PARAMETER_BY_NAME = {p.name: p for p in PARAMETERS}


def load_teleop_parameters(path: str | Path | None = None) -> dict[str, Any]:
    """Every parameter of a teleop parameter file (its ``/**`` and ``teleop_node`` sections;
    defaults for missing keys), dotted names."""
    return load_parameters(TELEOP_PARAMETERS,
                           Path(path) if path else config_file("teleop.yaml"))


def settings_from_parameters(values: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted parameter values (missing ones: defaults) -> keyword arguments of
    ``TeleopSettings``, checked against :data:`TELEOP_PARAMETERS`."""
    return _build(TELEOP_PARAMETERS.validate(values, "teleop_node parameters"))


def _build(v: Mapping[str, Any]) -> dict[str, Any]:

    def group(prefix: str) -> dict[str, Any]:
        return {k[len(prefix) + 1:]: x for k, x in v.items() if k.startswith(prefix + ".")}

    travel = group("travel")
    ControlTicks(1.0 / v["control_rate_hz"], v["impedance.max_step_s"])  # checks the pair
    return {
        "mode": v["mode"],
        "pattern": v["pattern"],
        "command_lead_s": v["command_lead_s"],
        "stop_time_s": v["stop_time_s"],
        "shaping": Shaping(v["shaping.dead_band"], v["shaping.expo"]),
        "layout": JoyLayout(v["axes.left_x"], v["axes.left_y"], v["axes.right_x"],
                            v["axes.right_y"], _four_flags(v["axes.invert"])),
        "travel": TravelLayout(**{k: travel[k] for k in (
            "left_axis", "right_axis", "left_forward_button", "left_reverse_button",
            "right_forward_button", "right_reverse_button", "button_fraction")}),
        "travel_speed_fraction": travel["speed_fraction"],
        "max_tip_speed_m_s": v["coordinated.max_tip_speed_m_s"],
        "max_bucket_rate_rad_s": v["coordinated.max_bucket_rate_rad_s"],
        "coordinated": CoordinatedSettings(
            damping=v["coordinated.damping_m"],
            singular_threshold=v["coordinated.singular_threshold_m"],
            angle_weight_m_per_rad=v["coordinated.angle_weight_m_per_rad"],
            horizon_s=v["coordinated.horizon_s"]),
        "impedance": ImpedanceParams(**{k: x for k, x in group("impedance").items()
                                        if not k.endswith("_scale") and k != "max_step_s"}),
        "control_period_s": 1.0 / v["control_rate_hz"],
        "impedance_max_step_s": v["impedance.max_step_s"],
        "position_scale": v["impedance.position_scale"],
        "angle_scale": v["impedance.angle_scale"],
        "feedback": FeedbackScaling(**{k: x for k, x in group("feedback").items()
                                       if k != "frame_id"}),
    }
