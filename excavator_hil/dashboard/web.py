"""The dashboard's web layer (NiceGUI: Vue/Quasar widgets, ECharts, three.js, all served from
the installed package; nothing is fetched from the internet).

One page, ``/``; each browser tab gets its own widgets and timers over the shared ``Dashboard``
state (the adapters' latest values), so a second viewer costs the control path nothing.

A fleet: the header's machine selector lists the machines on the graph (RosLink, from
excavator_common.machines) and switches the dashboard to the one chosen (every tab follows):
the machine view, the joint readout, the soil readout, the target's frame and Send serve that
machine. A Send names the machine its tab showed and is refused when another one is served
now. The PLC panel and Drive are the chosen machine's bridge where the dashboard has one
(``bridges``: ``--machine-redis``, or ``--redis-url`` for ``bridge_machine``), else the default
bridge's, named as such, with Drive off; switching machines stops any driving.
"""

from __future__ import annotations

import functools
import hmac
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs

import numpy as np
from nicegui import ui
from nicegui.events import GenericEventArguments

from excavator_hil.dashboard.adapter import RedisLink, RosLink
from excavator_hil.dashboard.core import (
    JointReadout,
    Reachability,
    SideView,
    TargetChecker,
    flat_profile,
    fmt,
    read_number,
    readout_table,
    shown,
)
from plc_bridge import redis_keys as keys

VIEW_R = (-3.0, 10.0)   # side view, horizontal distance from the swing axis [m]
VIEW_Z = (-3.0, 6.0)    # side view, height [m]
SIDE_PROFILE_R = np.arange(VIEW_R[0], VIEW_R[1] + 1e-9, 0.2)   # terrain profile samples [m]
READOUT_HZ = 5.0          # joint readout, badges, banner [Hz] (at most the machine view's rate)
PLC_HZ = 2.0              # PLC panel [Hz] (the Redis MGET runs at 5 Hz)
CHART_STEP_S = 0.5        # the soil charts show one point per 0.5 s (120 over the minute)
SCENE_FPS = 10            # three.js frames per second while the machine moves or is handled
SCENE_IDLE_FPS = 1        # ... and while nothing changed for SCENE_IDLE_S (three.js renders
SCENE_IDLE_S = 2.0        # continuously at its fps: this is its "redraw only on change")
TERRAIN_3D_NODES = 32     # the 3D terrain: at most 32 x 32 points ...
TERRAIN_3D_PERIOD_S = 2.0  # ... re-sent at most every 2 s, and only when the grid changed
TWIST = ("longitudinal", "lateral", "angular")   # the drive sliders, in set_command's order
PART_COLOURS = {"undercarriage": "#555555", "chassis": "#e0a000", "boom": "#d08000",
                "arm": "#d08000", "bucket": "#804000", "boom_cylinder": "#3070c0",
                "arm_cylinder": "#3070c0", "bucket_cylinder": "#3070c0", "links": "#888888"}


@dataclass
class Dashboard:
    """Everything a page needs: the pure core and the two adapters."""

    checker: TargetChecker
    side: SideView
    ros: RosLink
    bridge: RedisLink
    model: str
    refresh_hz: float = 10.0   # side view (and 3D view when shown) [Hz]
    bridge_machine: str = ""   # the machine of the Redis link's bridge ("": the one at start)
    chart_hz: float = 1.0      # soil charts [Hz]
    # machine -> its bridge's Redis link (a fleet: one per machine); default {bridge_machine:
    # bridge}
    bridges: dict[str, RedisLink] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.bridge_machine:
            self.bridge_machine = self.ros.machine
        if not self.bridges:
            self.bridges = {self.bridge_machine: self.bridge}


class TokenGate:
    """ASGI middleware: with a token set, every HTTP and websocket request needs it, as the
    query argument ``token`` (the first visit; it is then kept in a cookie) or that cookie."""

    COOKIE = "excavator_dashboard_token"

    def __init__(self, app: Any, token: str):
        self.app = app
        self.token = token.encode()

    def _allowed(self, scope: dict[str, Any]) -> tuple[bool, bool]:
        query = parse_qs(scope.get("query_string", b"").decode(errors="replace"))
        given = query.get("token", [""])[0].encode()
        if given and hmac.compare_digest(given, self.token):
            return True, True
        for name, value in scope.get("headers", []):
            if name == b"cookie":
                morsel = SimpleCookie(value.decode(errors="replace")).get(self.COOKIE)
                if morsel and hmac.compare_digest(morsel.value.encode(), self.token):
                    return True, False
        return False, False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        ok, set_cookie = self._allowed(scope)
        if not ok:
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 4401})
                return
            body = b"401: this dashboard needs ?token=... (see excavator-hil dashboard --help)\n"
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"text/plain"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        if not set_cookie:
            await self.app(scope, receive, send)
            return
        cookie = (f"{self.COOKIE}={self.token.decode()}; Path=/; HttpOnly; SameSite=Strict"
                  ).encode()

        async def send_with_cookie(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []),
                                                  (b"set-cookie", cookie)]}
            await send(message)

        await self.app(scope, receive, send_with_cookie)


class SideView2D(ui.element, component="side_view.js"):
    """The side view: a small SVG (``side_view.js``) redrawn when a frame arrives; the server
    sends a frame only when the machine, the terrain under it or the target changed."""

    def __init__(self) -> None:
        super().__init__()
        self._props["view"] = [VIEW_R[0], VIEW_R[1], VIEW_Z[0], VIEW_Z[1]]
        self._props["styles"] = {part: [colour, 0.22 if "cylinder" in part else 0.14]
                                 for part, colour in PART_COLOURS.items()}
        self._props["lines"] = {}
        self._props["terrain"] = []
        self._props["target"] = []
        self.sent = 0   # frames sent to the browser

    def draw(self, lines: dict[str, list[float]] | None, terrain: list[float] | None,
             target: list[float]) -> bool:
        """Send what changed (None: unchanged) in one call of the component's ``draw``, not as
        an element update (which re-renders NiceGUI's whole page in the browser); the props
        keep the frame for a remount. False: nothing was sent."""
        send: list[Any] = []
        with self._props.suspend_updates():
            for key, value in (("lines", lines), ("terrain", terrain), ("target", target)):
                if value is not None and self._props[key] != value:
                    self._props[key] = value
                    send.append(value)
                else:
                    send.append(None)
        if all(v is None for v in send):
            return False
        self.sent += 1
        self.run_method("draw", *send)
        return True


class FieldNumber(ui.number):
    """A target field's number input that takes every value a client sends as it is and hands
    it to ``on_input`` (the page judges it: ``TargetChecker.verdict``, the IK's own checks).
    NiceGUI's number input converts with ``float()`` (on "abc" or a list an exception, the
    field and the verdict left as they were) and clamps to its min/max on blur (a target typed
    at 25 m became 7.00 m and was judged as that): here nothing is converted or clamped; a
    value out of the field's range is refused and the field says why (``validation``)."""

    def __init__(self, on_input: Callable[[Any], object], **kwargs: Any) -> None:
        self._on_input = on_input
        super().__init__(**kwargs)

    def _event_args_to_value(self, e: GenericEventArguments) -> Any:
        self._on_input(e.args)   # every event, also one that repeats the field's value
        return e.args

    def sanitize(self) -> None:
        """No clamping into min..max: the verdict refuses the value, naming the range."""

    def _value_to_model_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return value   # what the client typed, shown as typed
        number = read_number(value)
        if number is None:
            return None if value is None else ""
        return self.format % number if self.format and math.isfinite(number) else str(number)


class FieldSlider(ui.slider):
    """A target field's slider: every value a client sends goes to ``on_input``, which returns
    the position the slider keeps (a valid number; a refused value leaves it where it was:
    Quasar would draw an out-of-range value at its end, a value the field does not hold)."""

    def __init__(self, on_input: Callable[[Any], float], **kwargs: Any) -> None:
        self._on_input = on_input
        super().__init__(**kwargs)

    def _event_args_to_value(self, e: GenericEventArguments) -> float:
        return self._on_input(e.args)


def _soil_chart_options() -> dict[str, Any]:
    return {
        "animation": False,
        "legend": {"bottom": 0},
        "grid": {"left": 50, "right": 50, "top": 30, "bottom": 50},
        "xAxis": {"type": "value", "min": -60, "max": 0, "name": "t [s]",
                  "nameLocation": "middle", "nameGap": 22},
        "yAxis": [{"type": "value", "name": "load [m^3]", "min": 0, "position": "left",
                   "nameLocation": "middle", "nameGap": 38},
                  {"type": "value", "name": "force [kN]", "min": 0, "position": "right",
                   "nameLocation": "middle", "nameGap": 38}],
        "series": [
            {"name": "bucket load [m^3]", "type": "line", "showSymbol": False, "data": []},
            {"name": "soil force [kN]", "type": "line", "showSymbol": False, "yAxisIndex": 1,
             "data": []},
        ],
    }


def _rot_z_y(heading: float, pitch: float) -> list[list[float]]:
    """Rotation taking +x to the direction (heading about z, then pitch up)."""
    ch, sh, cp, sp = math.cos(heading), math.sin(heading), math.cos(pitch), math.sin(pitch)
    return [[ch * cp, -sh, -ch * sp], [sh * cp, ch, -sh * sp], [sp, 0.0, cp]]


def build_page(dash: Dashboard) -> None:
    """The widgets of one browser tab and their timers."""
    from nicegui import context, ui

    client = context.client
    peer = client.request.client.host if client.request and client.request.client else "?"
    print(f"dashboard: page opened from {peer} (client {client.id})", flush=True)
    state: dict[str, Any] = {"terrain_version": -1, "scene": None, "machine": dash.ros.machine,
                             "machines_version": dash.ros.machines_version}

    def _bridge_machine() -> str:
        """The machine whose bridge the PLC panel shows: the chosen one's, else the default."""
        return state["machine"] if state["machine"] in dash.bridges else dash.bridge_machine

    def _bridge() -> RedisLink:
        return dash.bridges[_bridge_machine()]

    def _bridge_of() -> str:
        m = _bridge_machine()
        return "" if m == "/" and len(dash.bridges) == 1 else f" of {m}"   # (a single machine)
    query = client.request.query_params if client.request else {}
    open_3d = query.get("view3d", "0").lower() in ("1", "true", "on", "yes")

    def _field_message(name: str, _value: Any) -> str | None:
        """What a target field shows under itself: why what it holds is refused (``raw``: the
        value as sent; the input's own value can differ from it by type alone, True vs 1)."""
        problem = dash.checker.field_problem(name, raw[name])
        return None if problem is None else problem.message

    # what each target field holds, as the client sent it (any JSON value); the sliders'
    # positions (the last valid number of each field)
    raw: dict[str, Any] = {}
    slider_at: dict[str, float] = {}

    def _take(name: str, source: str, value: Any) -> float:
        """A target field takes ``value`` (typed, dragged, copied from the machine, or whatever
        a client sent): it holds it as sent, the number input shows it, the slider follows a
        valid number, the verdict is redone. Returns the slider's position."""
        raw[name] = value
        if source != "number":
            numbers[name].value = value
        number = read_number(value)
        if number is not None and dash.checker.field_problem(name, value) is None:
            slider_at[name] = number
            if source != "slider":
                sliders[name].value = number
        numbers[name].validate(return_result=False)
        _check()
        return slider_at[name]

    def _twist_input(name: str, value: Any) -> float:
        """A drive slider took ``value`` (dragged, or whatever a client sent): with this tab's
        other two sliders it is the twist commanded, through the envelope's checks
        (``DriveLimits.redis_values``: finite, within max_*). A refused value (NaN, text, beyond
        the envelope) is shown with the reason and the slider stays where it was: the sliders
        never show a twist that is not commanded. Returns the slider's position."""
        command = {n: float(twist[n].value) for n in TWIST}
        number = read_number(value)
        try:
            if number is None:
                raise ValueError(f"{name} = {shown(value)} is not a number")
            command[name] = number
            _bridge().set_command(*command.values())
        except ValueError as exc:
            drive_error.set_text(f"refused: {exc}; still commanded: " + ", ".join(
                f"{n} {v:.3f}" for n, v in zip(TWIST, _bridge().command, strict=True)))
            return float(twist[name].value)
        drive_error.set_text("")
        return number

    ui.page_title("excavator_hil dashboard")
    with ui.header().classes("items-center bg-grey-9 q-py-xs"):
        ui.label("excavator_hil").classes("text-h6")
        machine_sel = ui.select(options=dash.ros.choice.options(), value=dash.ros.machine,
                                label="machine").classes("dash-machine min-w-[180px]").props(
            "dense dark options-dense")
        machine_error = ui.label("").classes("dash-machine-error text-caption text-orange")
        ros_badge = ui.badge("ROS: waiting").classes("dash-ros-badge")
        bridge_badge = ui.badge("bridge: ?").classes("dash-bridge-badge")
        ui.space()
        stop_btn = ui.button("STOP", color="red").classes(
            "dash-stop text-h6").props("size=lg")
    banner = ui.label("").classes("dash-banner w-full text-white bg-red-8 q-pa-sm text-bold")
    banner.set_visibility(False)

    with ui.row().classes("w-full no-wrap items-start"):
        # ---------------------------------------------------------------- left: targets
        with ui.column().classes("w-1/4 min-w-[320px]"):
            with ui.card().classes("w-full"):
                target_title = ui.label("").classes(
                    "dash-target-machine text-subtitle1 text-bold")
                # Each field is a slider and a number input kept in step by ``_take`` (a
                # two-way binding of the two looped on NaN, never equal to itself, until a
                # RecursionError, and the page kept its previous verdict).
                specs = dash.checker.fields()
                sliders: dict[str, FieldSlider] = {}
                numbers: dict[str, FieldNumber] = {}
                for name, step, value in (("x", 0.05, 6.0), ("y", 0.05, 0.0), ("z", 0.05, 0.5),
                                          ("pitch", 1.0, 30.0)):
                    f = specs[name]
                    raw[name], slider_at[name] = value, value
                    with ui.row().classes("w-full items-start no-wrap"):
                        ui.label(f"{name} [{f.unit}]").classes("w-16 q-pt-sm")
                        sliders[name] = FieldSlider(
                            functools.partial(_take, name, "slider"), min=f.low, max=f.high,
                            step=step, value=value).classes(
                            f"dash-slider-{name} grow").props("label")
                        numbers[name] = FieldNumber(
                            functools.partial(_take, name, "number"),
                            value=value, min=f.low, max=f.high, step=step, format="%.2f",
                            validation=functools.partial(_field_message, name)).classes(
                            f"dash-number-{name} w-28").props("dense hide-bottom-space")
                verdict = ui.label("").classes("dash-verdict text-bold")
                verdict_detail = ui.label("").classes("dash-verdict-detail text-caption")
                with ui.row():
                    send_btn = ui.button("Send target_pose").classes(
                        "dash-send")
                    from_btn = ui.button("From machine").props(
                        "flat").classes("dash-from-machine")
                sent = ui.label("").classes("dash-sent text-caption")
            with ui.card().classes("w-full"):
                ui.label("Joint states").classes("text-subtitle1 text-bold")
                table = ui.table(columns=[
                    {"name": "name", "label": "joint", "field": "name", "align": "left"},
                    {"name": "value", "label": "value", "field": "value"},
                    {"name": "unit", "label": "", "field": "unit", "align": "left"},
                ], rows=[], row_key="name").props("dense flat").classes("dash-joints w-full")
                tip_label = ui.label("tip: -").classes("dash-tip text-caption")
                age_label = ui.label("").classes("dash-joint-age text-caption")

        # ---------------------------------------------------------------- middle: machine
        with ui.column().classes("w-5/12 min-w-[420px]"):
            with ui.card().classes("w-full"):
                ui.label("Side view (boom plane)").classes("text-subtitle1 text-bold")
                side = SideView2D().classes("dash-side w-full h-80")
            # a wheeled machine (issue 28): its wheels from above, turned by their measured
            # steering angles (joint_states steer_<w>), laid out as its robot_description says
            wheels_card = ui.card().classes("w-full dash-wheels-card")
            with wheels_card:
                ui.label("Wheels (plan view, steering as measured)").classes(
                    "text-subtitle1 text-bold")
                with ui.row().classes("w-full items-center"):
                    # generated here from numbers, not user text: nothing to sanitize
                    wheels_svg = ui.html("", sanitize=False).classes("dash-wheels")
                    wheels_text = ui.label("").classes("dash-wheels-text text-caption")
            wheels_card.set_visibility(False)
            with ui.card().classes("w-full"):
                with ui.row().classes("w-full items-center"):
                    ui.label("3D (world)").classes("text-subtitle1 text-bold")
                    ui.space()
                    view3d = ui.switch("show", value=open_3d).classes("dash-3d-toggle")
                scene_box = ui.element("div").classes("dash-3d w-full")
            with ui.card().classes("w-full"):
                ui.label("Soil: the last minute").classes("text-subtitle1 text-bold")
                soil_now = ui.label("").classes("dash-soil-now text-caption")
                soil = ui.echart(_soil_chart_options()).classes("dash-soil w-full h-56")

        # ---------------------------------------------------------------- right: PLC
        with ui.column().classes("w-1/3 min-w-[340px]"), ui.card().classes("w-full"):
            # the bridge of --redis-url: one machine's, whichever machine is shown
            plc_title = ui.label(f"PLC bridge{_bridge_of()}").classes(
                "dash-plc-machine text-subtitle1 text-bold")
            plc_status = ui.label("status: -").classes("dash-plc-status text-bold")
            plc_detail = ui.label("").classes("dash-plc-detail text-caption")
            with ui.row().classes("dash-plc-bits"):
                chips = {bit: ui.chip(f"{bit}: -", color="grey").props("dense square").classes(
                    f"dash-bit-{bit}") for bit in ("valid", *keys.STATE_BITS)}
            with ui.expansion("Redis keys, counters, latency", value=True).classes(
                    "dash-plc-keys w-full").props("dense") as keys_panel:
                plc_table = ui.table(columns=[
                    {"name": "key", "label": "Redis key", "field": "key", "align": "left"},
                    {"name": "value", "label": "value", "field": "value"},
                ], rows=[], row_key="key").props("dense flat").classes("dash-plc-table w-full")
            ui.separator()
            ui.label("Drive the tracks (Redis, ARTOF keys)").classes("text-bold")
            drive_switch = ui.switch("Drive (heartbeat on)", on_change=lambda e: _drive(
                e.value)).classes("dash-drive")
            lim = dash.bridge.limits
            twist: dict[str, FieldSlider] = {}
            for name, limit, unit in (("longitudinal", lim.max_longitudinal, "m/s"),
                                      ("lateral", lim.max_lateral, "m/s"),
                                      ("angular", lim.max_angular, "rad/s")):
                with ui.row().classes("w-full items-center no-wrap"):
                    ui.label(f"{name} [{unit}]").classes("w-32 text-caption")
                    s = FieldSlider(functools.partial(_twist_input, name), min=-limit,
                                    max=limit, step=limit / 50 if limit else 0.1,
                                    value=0.0).classes(f"dash-twist-{name} grow").props("label")
                    if limit <= 0.0:
                        s.disable()
                twist[name] = s
            zero_btn = ui.button("zero twist").props("flat")
            drive_error = ui.label("").classes("dash-drive-error text-negative text-caption")

    # ---------------------------------------------------------------- actions
    def _verdict() -> Reachability:
        """The verdict on what the fields hold now (TargetChecker.verdict: the IK's checks)."""
        return dash.checker.verdict(raw)

    def _check() -> None:
        r = state["verdict"] = _verdict()
        verdict.set_text(r.headline)
        _set_classes(verdict, "dash-verdict text-bold " + (
            "text-positive" if r.ok else "text-negative"))
        verdict_detail.set_text(r.detail)
        send_btn.set_enabled(r.ok)

    def _send() -> None:
        r = _verdict()   # judged again: a click can come from a client that ignores "disabled"
        if not r.ok or r.target is None:
            _check()
            return
        x, y, z, pitch = r.target
        try:   # to the machine this tab shows, or nowhere (another tab chose another)
            served = dash.ros.send_target(x, y, z, pitch, machine=state["machine"])
        except ValueError as exc:
            sent.set_text(f"not sent: {exc}")
            return
        sent.set_text(f"sent target_pose ({x:.2f}, {y:.2f}, {z:.2f}) m, pitch "
                      f"{math.degrees(pitch):.1f} deg to {served} at {time.strftime('%H:%M:%S')}")

    def _target_title() -> None:
        prefix = dash.ros.frame_prefix(state["machine"])
        frame = "?/base_link: waiting for its robot_description" if prefix is None else (
            prefix + "base_link")
        target_title.set_text(f"Bucket-tip target ({frame}) of {state['machine']}")

    def _choose(value: Any) -> None:
        """The user picks a machine in this tab's selector (or a client sent anything)."""
        if state.get("syncing_machine"):
            return
        try:
            dash.ros.select(value)
        except ValueError as exc:
            machine_error.set_text(f"refused: {exc}")
            _sync_selector()
            return
        machine_error.set_text("")
        _machine_changed()

    def _sync_selector() -> None:
        state["syncing_machine"] = True
        try:
            machine_sel.set_options(dash.ros.choice.options(), value=dash.ros.machine)
        finally:
            state["syncing_machine"] = False
        state["machines_version"] = dash.ros.machines_version

    def _machine_changed() -> None:
        """The dashboard serves another machine (chosen here or in another tab): this tab's
        views start over for it; driving another machine's bridge stops."""
        state["machine"] = dash.ros.machine
        for key in ("joints", "rows", "profile_key", "pose_3d"):
            state.pop(key, None)
        for m, link in dash.bridges.items():   # driving another machine's bridge: it stops
            if link.driving and m != state["machine"]:
                link.stop()
        drive_switch.set_enabled(state["machine"] in dash.bridges)
        plc_title.set_text(f"PLC bridge{_bridge_of()}")
        for key in ("plc_rows",):
            state.pop(key, None)
        if machine_sel.value != dash.ros.machine:
            _sync_selector()
        _target_title()
        _check()

    def _from_machine() -> None:
        j = dash.ros.joints
        if j is None:
            return
        for name, v in (*zip(("x", "y", "z"), j.tip, strict=True),
                        ("pitch", math.degrees(j.pitch))):
            _take(name, "machine", round(v, 2))

    def _stop() -> None:
        state["stopping"] = True
        for s in twist.values():
            s.value = 0.0
        drive_switch.value = False
        # the bridge shown, and any this dashboard drives
        for link in {id(b): b for b in (_bridge(), *(b for b in dash.bridges.values()
                                                     if b.driving))}.values():
            link.stop()
        state["stopping"] = False
        ui.notify("STOP: velocity keys 0, heartbeat stopped", type="negative")

    def _drive(on: Any) -> None:
        if state.get("stopping") or state.get("syncing"):
            return
        if not isinstance(on, bool):   # a client sent "false" (truthy) or 1: refused, shown
            drive_error.set_text(f"refused: Drive = {shown(on)} is not true or false")
            state["syncing"] = True
            drive_switch.value = _bridge().driving
            state["syncing"] = False
            return
        if on and state["machine"] not in dash.bridges:
            drive_error.set_text(f"refused: no PLC bridge of {state['machine']} here "
                                 f"(--machine-redis); bridges of {', '.join(dash.bridges)}")
            state["syncing"] = True
            drive_switch.value = False
            state["syncing"] = False
            return
        if on:
            state["driver"] = client.id
            state["driven"] = _bridge()
            # this tab's sliders (valid numbers only) are the twist to drive with
            _bridge().set_command(*(float(twist[n].value) for n in TWIST))
            _bridge().start_driving()
        else:
            _bridge().stop()

    def _zero_twist() -> None:
        for s in twist.values():
            s.value = 0.0
        _bridge().set_command(0.0, 0.0, 0.0)
        drive_error.set_text("")

    def _on_disconnect() -> None:
        # a closed tab must not keep the machine driving: its heartbeat stops with it
        driven = state.get("driven")
        if state.get("driver") == client.id and driven is not None and driven.driving:
            driven.stop()

    client.on_disconnect(_on_disconnect)
    machine_sel.on_value_change(lambda e: _choose(e.value))
    stop_btn.on_click(_stop)
    send_btn.on_click(_send)
    from_btn.on_click(_from_machine)
    zero_btn.on_click(_zero_twist)

    # ---------------------------------------------------------------- a hidden tab: no updates
    def _on_visibility(hidden: bool) -> None:
        state["hidden"] = hidden
        side.props["paused"] = hidden   # (the last update before the pause; read by the test)

    ui.on("dash_visibility", lambda e: _on_visibility(e.args is True))
    ui.add_body_html("<script>document.addEventListener('visibilitychange', () => "
                     "window.emitEvent && emitEvent('dash_visibility', document.hidden));"
                     "</script>")

    # ---------------------------------------------------------------- the 3D view, on demand
    def _show_3d(on: bool) -> None:
        """Build the scene when switched on, drop it (and its WebGL rendering, its updates)
        when switched off: off, the 3D view costs neither the browser nor the server."""
        scene_box.clear()
        state["scene"] = None
        state["terrain_version"] = -1
        state["pose_3d"] = None
        if not on:
            with scene_box:
                ui.label("Off: machine and terrain in three.js on demand (WebGL, without a GPU "
                         "it costs the browser CPU that a HIL host may need).").classes(
                    "text-caption text-grey-7")
            return
        with scene_box, ui.scene(width=520, height=320, grid=(40, 40),
                                 background_color="#dfe8ee", fps=SCENE_FPS).classes(
                "dash-scene") as scene:
            base = scene.group()
            with base:
                scene.box(3.2, 2.4, 0.45).move(0, 0, 0.225).material("#444444")
                upper = scene.group()
            with upper:
                g = dash.checker.geometry
                scene.box(2.6, 2.3, 1.1).move(-0.3, 0, g.B[1] + 0.55).material("#e0a000")
            links = {name: scene.box(1.0, w, w).material(colour)
                     for name, w, colour in (("boom", 0.35, "#d08000"),
                                             ("arm", 0.28, "#d08000"),
                                             ("bucket", 0.5, "#804000"))}
            terrain = scene.point_cloud([], [], point_size=0.3)
        scene.move_camera(x=-3, y=-7, z=5, look_at_x=3, look_at_y=0, look_at_z=0.5)
        state["scene"] = {"scene": scene, "base": base, "upper": upper, "links": links,
                          "terrain": terrain}
        state["scene_active_s"] = time.monotonic()
        # the user turns or zooms the view: full frame rate while handled
        for event in ("pointerdown", "pointermove", "wheel"):
            scene.on(event, _scene_handled, throttle=0.5)
        j = dash.ros.joints
        if j is not None:
            _update_3d(j)

    def _on_view3d(value: Any) -> None:
        if not isinstance(value, bool):   # what a client sent, not a switch's true/false
            view3d.value = False          # (this change calls back with False)
            return
        _show_3d(value)

    view3d.on_value_change(lambda e: _on_view3d(e.value))

    def _scene_handled() -> None:
        state["scene_active_s"] = time.monotonic()
        _scene_fps()

    def _scene_fps() -> None:
        """SCENE_FPS while something changed in the last SCENE_IDLE_S, else SCENE_IDLE_FPS."""
        objs = state["scene"]
        if objs is not None:
            idle = time.monotonic() - state["scene_active_s"] > SCENE_IDLE_S
            _set_prop(objs["scene"], "fps", SCENE_IDLE_FPS if idle else SCENE_FPS)

    def _update_3d(j: JointReadout) -> None:
        objs = state["scene"]
        pose = (tuple(round(v, 3) for v in j.base), tuple(round(v, 3) for v in j.q))
        if pose != state.get("pose_3d"):
            if state.get("pose_3d") is None:   # a new scene or machine: the camera on it
                bx, by, _ = pose[0]
                objs["scene"].move_camera(x=bx - 3, y=by - 7, z=5, look_at_x=bx + 3,
                                          look_at_y=by, look_at_z=0.5)
            state["pose_3d"] = pose
            state["scene_active_s"] = time.monotonic()
            bx, by, yaw = pose[0]
            q = np.array(pose[1])
            objs["base"].move(bx, by, 0.0)
            objs["base"].rotate(0.0, 0.0, yaw)
            objs["upper"].rotate(0.0, 0.0, float(q[0]))
            pts = dash.checker.ik.fk.points(q)
            c, s = math.cos(yaw), math.sin(yaw)

            def world(p: np.ndarray) -> np.ndarray:
                return np.array([bx + c * p[0] - s * p[1], by + s * p[0] + c * p[1], p[2]])

            heading = yaw + float(q[0])
            for name, (a, b) in (("boom", ("C", "H")), ("arm", ("H", "M")),
                                 ("bucket", ("M", "tip"))):
                pa, pb = world(pts[a]), world(pts[b])
                d = pb - pa
                length = float(np.linalg.norm(d))
                pitch = math.atan2(d[2], math.hypot(d[0], d[1]))
                mid = (pa + pb) / 2
                objs["links"][name].move(*(round(float(v), 3) for v in mid))
                objs["links"][name].rotate_R(_rot_z_y(heading, pitch))
                objs["links"][name].scale(max(length, 1e-3), 1.0, 1.0)
        now = time.monotonic()
        grid = dash.ros.terrain
        if (grid is not None and dash.ros.terrain_version != state["terrain_version"]
                and now - state.get("terrain_sent_s", -1e9) >= TERRAIN_3D_PERIOD_S):
            state["terrain_version"] = dash.ros.terrain_version
            state["terrain_sent_s"] = now
            state["scene_active_s"] = now
            objs["terrain"].set_points(*grid.cloud(TERRAIN_3D_NODES))

    # ---------------------------------------------------------------- periodic refresh
    def _set_prop(element: Any, key: str, value: Any) -> None:
        """Change a prop only when it differs (each change is a message to the browser)."""
        if element.props.get(key) != value:
            element.props[key] = value

    def _set_classes(element: Any, classes: str) -> None:
        if " ".join(element.classes) != classes:
            element.classes(replace=classes)

    def _refresh_machine() -> None:
        """The side view (and the 3D view when shown) at ``refresh_hz``: a frame only when the
        machine, the terrain under it or the target changed."""
        if state.get("hidden"):
            return   # a hidden tab (another tab in front, minimised): nothing to send
        j: JointReadout | None = dash.ros.joints
        lines = terrain = None
        if j is not None and j is not state.get("joints"):
            state["joints"] = j
            lines = dash.side.flat_lines(j.q)
            grid = dash.ros.terrain
            heading = (round(j.base[0], 2), round(j.base[1], 2), round(j.base[2] + j.q[0], 3))
            key = (dash.ros.terrain_version, heading)
            if grid is not None and key != state.get("profile_key"):
                state["profile_key"] = key
                terrain = flat_profile(SIDE_PROFILE_R, grid.profile(
                    heading[:2], heading[2], SIDE_PROFILE_R))
            if state["scene"] is not None:
                _update_3d(j)
        _refresh_wheels(j)
        target = state["verdict"].target
        side.draw(lines, terrain, [] if target is None else
                  [round(math.hypot(*target[:2]), 3), round(target[2], 3)])
        _scene_fps()

    def _refresh_wheels(j: JointReadout | None) -> None:
        """The plan view of a wheeled machine's wheels, when its steering changed by 0.1 deg
        (hidden for a tracked machine, or before its robot_description arrived)."""
        layout = dash.ros.wheel_layouts.get(dash.ros.machine)
        if layout is None or j is None:
            wheels_card.set_visibility(False)
            return
        angles = {w: round(a, 3) for w, a in j.steering}
        key = (id(layout), tuple(sorted(angles.items())))
        if key != state.get("wheels_key"):
            state["wheels_key"] = key
            wheels_svg.set_content(layout.plan_svg(angles))
            wheels_text.set_text(", ".join(f"{w} {math.degrees(a):+.1f} deg"
                                           for w, a in j.steering) or "no steered wheel")
        wheels_card.set_visibility(True)

    def _refresh_readout() -> None:
        """Readouts and badges at ``readout_hz``; each widget only when its text changed."""
        if dash.ros.machine != state["machine"]:
            _machine_changed()   # another tab chose another machine
        elif dash.ros.machines_version != state["machines_version"]:
            _sync_selector()     # machines came or went
        if state.get("hidden"):
            return   # a hidden tab (another tab in front, minimised): nothing to send
        _target_title()
        j: JointReadout | None = dash.ros.joints
        now = time.monotonic()
        if j is None:
            ros_badge.set_text(f"ROS: no joint_states of {state['machine']}" + (
                "" if dash.ros.choice.present else " (not on the graph)"))
            _set_prop(ros_badge, "color", "red")
        else:
            age = now - (dash.ros.joints_received_s or now)
            ros_badge.set_text("ROS: joint_states live" if age < 0.5 else
                               f"ROS: joint_states {age:.0f} s ago")
            _set_prop(ros_badge, "color", "green" if age < 2.0 else "red")
            rows = readout_table(j)
            if rows != state.get("rows"):
                state["rows"] = rows
                table.rows = rows
            tip_label.set_text(f"tip (FK): {j.tip[0]:.3f}, {j.tip[1]:.3f}, {j.tip[2]:.3f} m; "
                               f"pitch {math.degrees(j.pitch):.1f} deg")
            age_label.set_text(f"base {j.base[0]:.2f}, {j.base[1]:.2f} m, yaw "
                               f"{math.degrees(j.base[2]):.1f} deg; stamp {j.stamp_s:.1f} s")
        v = _bridge().view
        bridge_badge.set_text(f"bridge{_bridge_of()}: {'DOWN' if v.bridge_down else v.status}"
                              f"{' / PLC DOWN' if v.plc_down and not v.bridge_down else ''}")
        bad = v.bridge_down or v.plc_down or v.status != "running"
        _set_prop(bridge_badge, "color", "red" if bad else "green")
        banner.set_text(v.banner)
        banner.set_visibility(bool(v.banner))

    def _refresh_plc() -> None:
        if state.get("hidden"):
            return   # a hidden tab (another tab in front, minimised): nothing to send
        v = _bridge().view
        text = v.status if not v.reason else f"stopped: {v.reason} ({v.reason_text})"
        plc_status.set_text(f"model {dash.model}; status {text}")
        _set_classes(plc_status, "dash-plc-status text-bold " + (
            "text-positive" if v.status == "running" and not v.banner else "text-negative"))
        plc_detail.set_text(v.detail)
        for bit, chip in chips.items():
            on = v.state_bits.get(bit)
            bad = (bit in ("fault", "estop", "watchdog") and on) or (
                bit in ("valid", "ready", "auto") and not on)
            chip.set_text(f"{bit}: {'-' if on is None else ('1' if on else '0')}")
            _set_prop(chip, "color", "grey" if on is None else ("red" if bad else "green"))
        if drive_switch.value != _bridge().driving:   # stopped elsewhere (another tab, exit)
            state["stopping"] = True
            drive_switch.value = _bridge().driving
            state["stopping"] = False
        if not keys_panel.value:
            return   # the key table is folded away: nothing to send
        rows = [{"key": k, "value": val} for k, val in v.control.items()]
        rows += [{"key": k, "value": fmt(val, digits=4)} for k, val in v.monitor.items()]
        rows += [{"key": keys.STATE_PLC_ALIVE, "value": v.plc_alive or "-"}]
        rows += [{"key": keys.counter_key(k), "value": "-" if val is None else str(val)}
                 for k, val in v.counters.items()]
        rows += [{"key": "bridge cycle rate", "value": fmt(v.cycle_rate_hz, "Hz", 1)},
                 {"key": "PLC alive counter age", "value": fmt(
                     None if v.plc_alive_age_s is None else v.plc_alive_age_s * 1e3, "ms", 0)},
                 {"key": "Redis round trip (MGET)", "value": fmt(v.redis_rtt_ms, "ms", 2)},
                 {"key": "dashboard driving", "value": str(_bridge().driving)}]
        if rows != state.get("plc_rows"):
            state["plc_rows"] = rows
            plc_table.rows = rows

    def _refresh_soil() -> None:
        """The soil readout and the one-minute charts at ``chart_hz``, thinned to 2 points a
        second (120 a series)."""
        if state.get("hidden"):
            return   # a hidden tab (another tab in front, minimised): nothing to send
        now = time.monotonic()
        load, force = dash.ros.load.last(), dash.ros.force.last()
        soil_now.set_text(f"bucket load {fmt(load, 'm^3', 4)}, soil force "
                          f"{fmt(None if force is None else force / 1e3, 'kN', 2)}")
        loads = dash.ros.load.points(now, CHART_STEP_S, 4)
        forces = [[t, round(f / 1e3, 2)] for t, f in dash.ros.force.points(now, CHART_STEP_S)]
        if not loads and not forces and state.get("charted"):
            return
        state["charted"] = True
        series = soil.options["series"]
        series[0]["data"], series[1]["data"] = loads, forces
        soil.update()

    _target_title()
    drive_switch.set_enabled(state["machine"] in dash.bridges)
    _check()
    _show_3d(open_3d)
    # One timer: the panels' updates leave in the same websocket message as a side-view frame,
    # so the browser builds at most refresh_hz frames a second (each costs it a composite).
    every = {fn: max(1, round(dash.refresh_hz / hz)) for fn, hz in (
        (_refresh_readout, READOUT_HZ), (_refresh_plc, PLC_HZ), (_refresh_soil, dash.chart_hz))}
    ticks = [0]

    def _tick() -> None:
        _refresh_machine()
        for fn, k in every.items():
            if ticks[0] % k == 0:
                fn()
        ticks[0] += 1

    ui.timer(1.0 / dash.refresh_hz, _tick)
