"""The dashboard's web layer (NiceGUI: Vue/Quasar widgets, ECharts, three.js, all served from
the installed package; nothing is fetched from the internet).

One page, ``/``; each browser tab gets its own widgets and timers over the shared ``Dashboard``
state (the adapters' latest values), so a second viewer costs the control path nothing.
"""

from __future__ import annotations

import hmac
import math
import time
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs

import numpy as np

from excavator_hil.dashboard.adapter import RedisLink, RosLink
from excavator_hil.dashboard.core import (
    JointReadout,
    SideView,
    TargetChecker,
    fmt,
    readout_table,
)
from plc_bridge import redis_keys as keys

TERRAIN_3D_PERIOD_S = 1.0   # the 3D terrain (~2,000 points) is re-sent at most this often
VIEW_R = (-3.0, 10.0)   # side view, horizontal distance from the swing axis [m]
VIEW_Z = (-3.0, 6.0)    # side view, height [m]
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
    refresh_hz: float = 10.0
    chart_hz: float = 2.0


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


def _side_chart_options(dash: Dashboard) -> dict[str, Any]:
    series: list[dict[str, Any]] = [
        {"name": "terrain", "type": "line", "data": [], "showSymbol": False, "areaStyle":
         {"color": "#c8a882", "origin": "start"}, "lineStyle": {"color": "#8b6b47"},
         "z": 1},
        {"name": "target", "type": "scatter", "data": [], "symbolSize": 12,
         "itemStyle": {"color": "#d02020"}, "z": 5},
    ]
    for part, colour in PART_COLOURS.items():
        series.append({"name": part, "type": "line", "data": [], "showSymbol": part in (
            "boom", "arm", "bucket"), "symbolSize": 4, "lineStyle": {
            "color": colour, "width": 6 if "cylinder" in part else 4}, "itemStyle":
            {"color": colour}, "z": 3, "animation": False})
    return {
        "animation": False,
        "grid": {"left": 45, "right": 10, "top": 10, "bottom": 30},
        "xAxis": {"type": "value", "min": VIEW_R[0], "max": VIEW_R[1], "name": "r [m]",
                  "nameLocation": "middle", "nameGap": 20},
        "yAxis": {"type": "value", "min": VIEW_Z[0], "max": VIEW_Z[1], "name": "z [m]",
                  "nameLocation": "middle", "nameGap": 25},
        "series": series,
    }


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

    rng = dash.checker.ranges()
    client = context.client
    peer = client.request.client.host if client.request and client.request.client else "?"
    print(f"dashboard: page opened from {peer} (client {client.id})", flush=True)
    state: dict[str, Any] = {"terrain_version": -1}

    ui.page_title("excavator_hil dashboard")
    with ui.header().classes("items-center bg-grey-9 q-py-xs"):
        ui.label("excavator_hil").classes("text-h6")
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
                ui.label("Bucket-tip target (base_link)").classes("text-subtitle1 text-bold")
                fields: dict[str, Any] = {}
                for name, unit, (lo, hi), step, value in (
                    ("x", "m", rng.x, 0.05, 6.0), ("y", "m", rng.y, 0.05, 0.0),
                    ("z", "m", rng.z, 0.05, 0.5),
                    ("pitch", "deg", (-180.0, 180.0), 1.0, 30.0),
                ):
                    with ui.row().classes("w-full items-center no-wrap"):
                        ui.label(f"{name} [{unit}]").classes("w-16")
                        slider = ui.slider(min=lo, max=hi, step=step, value=value).classes(
                            f"dash-slider-{name} grow").props("label")
                        number = ui.number(value=value, min=lo, max=hi, step=step,
                                           format="%.2f").classes(f"dash-number-{name} w-20")
                        number.bind_value(slider)
                    fields[name] = slider
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
                side = ui.echart(_side_chart_options(dash)).classes("dash-side w-full h-80")
            with ui.card().classes("w-full"):
                ui.label("3D (world)").classes("text-subtitle1 text-bold")
                with ui.scene(width=520, height=320, grid=(40, 40), background_color="#dfe8ee",
                              fps=20).classes("dash-scene") as scene:
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
                    terrain = scene.point_cloud([], [], point_size=0.25)
                scene.move_camera(x=-3, y=-7, z=5, look_at_x=3, look_at_y=0, look_at_z=0.5)
            with ui.card().classes("w-full"):
                ui.label("Soil: the last minute").classes("text-subtitle1 text-bold")
                soil_now = ui.label("").classes("dash-soil-now text-caption")
                soil = ui.echart(_soil_chart_options()).classes("dash-soil w-full h-56")

        # ---------------------------------------------------------------- right: PLC
        with ui.column().classes("w-1/3 min-w-[340px]"), ui.card().classes("w-full"):
            ui.label("PLC bridge").classes("text-subtitle1 text-bold")
            plc_status = ui.label("status: -").classes("dash-plc-status text-bold")
            plc_detail = ui.label("").classes("dash-plc-detail text-caption")
            with ui.row().classes("dash-plc-bits"):
                chips = {bit: ui.chip(f"{bit}: -", color="grey").props("dense square").classes(
                    f"dash-bit-{bit}") for bit in ("valid", *keys.STATE_BITS)}
            plc_table = ui.table(columns=[
                {"name": "key", "label": "Redis key", "field": "key", "align": "left"},
                {"name": "value", "label": "value", "field": "value"},
            ], rows=[], row_key="key").props("dense flat").classes("dash-plc-table w-full")
            ui.separator()
            ui.label("Drive the tracks (Redis, ARTOF keys)").classes("text-bold")
            drive_switch = ui.switch("Drive (heartbeat on)", on_change=lambda e: _drive(
                e.value)).classes("dash-drive")
            lim = dash.bridge.limits
            twist: dict[str, Any] = {}
            for name, limit, unit in (("longitudinal", lim.max_longitudinal, "m/s"),
                                      ("lateral", lim.max_lateral, "m/s"),
                                      ("angular", lim.max_angular, "rad/s")):
                with ui.row().classes("w-full items-center no-wrap"):
                    ui.label(f"{name} [{unit}]").classes("w-32 text-caption")
                    s = ui.slider(min=-limit, max=limit, step=limit / 50 if limit else 0.1,
                                  value=0.0, on_change=lambda _e: _twist()).classes(
                        f"dash-twist-{name} grow").props("label")
                    if limit <= 0.0:
                        s.disable()
                twist[name] = s
            zero_btn = ui.button("zero twist").props("flat")
            drive_error = ui.label("").classes("text-negative text-caption")

    # ---------------------------------------------------------------- actions
    def _target() -> tuple[float, float, float, float] | None:
        """The target in SI units; None while a field is empty (being typed into)."""
        values = [fields[n].value for n in ("x", "y", "z", "pitch")]
        if any(v is None for v in values):
            return None
        x, y, z, p = (float(v) for v in values)
        return x, y, z, math.radians(p)

    def _check() -> None:
        target = _target()
        if target is None:
            verdict.set_text("enter a number in every field")
            verdict.classes(replace="dash-verdict text-bold text-negative")
            send_btn.disable()
            return
        r = dash.checker.check(*target)
        if r.ok:
            verdict.set_text("reachable")
            verdict.classes(replace="dash-verdict text-bold text-positive")
            ext = ", ".join(f"{v:.3f}" for v in r.extensions or ())
            verdict_detail.set_text(f"{r.message}; cylinders {ext} m")
            send_btn.enable()
        else:
            verdict.set_text(f"unreachable: {r.status} ({r.limit})")
            verdict.classes(replace="dash-verdict text-bold text-negative")
            verdict_detail.set_text(r.message)
            send_btn.disable()

    for f in fields.values():
        f.on_value_change(lambda _e: _check())
    _check()

    def _send() -> None:
        target = _target()
        if target is None:
            return
        x, y, z, pitch = target
        if not dash.checker.check(x, y, z, pitch).ok:
            return
        dash.ros.send_target(x, y, z, pitch)
        sent.set_text(f"sent target_pose ({x:.2f}, {y:.2f}, {z:.2f}) m, pitch "
                      f"{math.degrees(pitch):.1f} deg at {time.strftime('%H:%M:%S')}")

    def _from_machine() -> None:
        j = dash.ros.joints
        if j is None:
            return
        for name, v in zip(("x", "y", "z"), j.tip, strict=True):
            fields[name].value = round(v, 2)
        fields["pitch"].value = round(math.degrees(j.pitch), 1)

    def _stop() -> None:
        state["stopping"] = True
        for s in twist.values():
            s.value = 0.0
        drive_switch.value = False
        dash.bridge.stop()
        state["stopping"] = False
        ui.notify("STOP: velocity keys 0, heartbeat stopped", type="negative")

    def _drive(on: bool) -> None:
        if state.get("stopping"):
            return
        if on:
            state["driver"] = client.id
            _twist()                      # this tab's sliders are the twist to drive with
            dash.bridge.start_driving()
        else:
            dash.bridge.stop()

    def _twist() -> None:
        if state.get("stopping"):
            return
        try:
            dash.bridge.set_command(float(twist["longitudinal"].value),
                                    float(twist["lateral"].value),
                                    float(twist["angular"].value))
            drive_error.set_text("")
        except ValueError as exc:
            drive_error.set_text(str(exc))

    def _zero_twist() -> None:
        for s in twist.values():
            s.value = 0.0

    def _on_disconnect() -> None:
        # a closed tab must not keep the machine driving: its heartbeat stops with it
        if state.get("driver") == client.id and dash.bridge.driving:
            dash.bridge.stop()

    client.on_disconnect(_on_disconnect)
    stop_btn.on_click(_stop)
    send_btn.on_click(_send)
    from_btn.on_click(_from_machine)
    zero_btn.on_click(_zero_twist)

    # ---------------------------------------------------------------- periodic refresh
    def _refresh_machine() -> None:
        j: JointReadout | None = dash.ros.joints
        now = time.monotonic()
        if j is None:
            ros_badge.set_text("ROS: no joint_states")
            ros_badge.props("color=red")
        else:
            age = now - (dash.ros.joints_received_s or now)
            ros_badge.set_text(f"ROS: joint_states {age:.1f} s ago")
            ros_badge.props(f"color={'green' if age < 2.0 else 'red'}")
            table.rows = readout_table(j)
            table.update()
            tip_label.set_text(f"tip (FK): {j.tip[0]:.3f}, {j.tip[1]:.3f}, {j.tip[2]:.3f} m; "
                               f"pitch {math.degrees(j.pitch):.1f} deg")
            age_label.set_text(f"base {j.base[0]:.2f}, {j.base[1]:.2f} m, yaw "
                               f"{math.degrees(j.base[2]):.1f} deg; stamp {j.stamp_s:.2f} s")
            lines = dash.side.lines(j.q)
            series = side.options["series"]
            for s in series[2:]:
                s["data"] = lines[s["name"]]
            terrain_grid = dash.ros.terrain
            if terrain_grid is not None:
                r = np.linspace(VIEW_R[0], VIEW_R[1], 131)
                z = terrain_grid.profile(j.base[:2], j.base[2] + j.q[0], r)
                series[0]["data"] = [[float(a), float(b)] for a, b in zip(r, z, strict=True)
                                     if math.isfinite(b)]
            target = _target()
            series[1]["data"] = [] if target is None else [[math.hypot(*target[:2]), target[2]]]
            side.update()
            _update_3d(j)
        v = dash.bridge.view
        bridge_badge.set_text(f"bridge: {'DOWN' if v.bridge_down else v.status}"
                              f"{' / PLC DOWN' if v.plc_down and not v.bridge_down else ''}")
        bad = v.bridge_down or v.plc_down or v.status != "running"
        bridge_badge.props(f"color={'red' if bad else 'green'}")
        banner.set_text(v.banner)
        banner.set_visibility(bool(v.banner))

    def _update_3d(j: JointReadout) -> None:
        bx, by, yaw = j.base
        base.move(bx, by, 0.0)
        base.rotate(0.0, 0.0, yaw)
        upper.rotate(0.0, 0.0, j.q[0])
        pts = dash.checker.ik.fk.points(np.array(j.q))
        c, s = math.cos(yaw), math.sin(yaw)

        def world(p: np.ndarray) -> np.ndarray:
            return np.array([bx + c * p[0] - s * p[1], by + s * p[0] + c * p[1], p[2]])

        heading = yaw + j.q[0]
        for name, (a, b) in (("boom", ("C", "H")), ("arm", ("H", "M")),
                             ("bucket", ("M", "tip"))):
            pa, pb = world(pts[a]), world(pts[b])
            d = pb - pa
            length = float(np.linalg.norm(d))
            pitch = math.atan2(d[2], math.hypot(d[0], d[1]))
            mid = (pa + pb) / 2
            links[name].move(*(float(v) for v in mid))
            links[name].rotate_R(_rot_z_y(heading, pitch))
            links[name].scale(max(length, 1e-3), 1.0, 1.0)
        now = time.monotonic()
        if (dash.ros.terrain is not None and dash.ros.terrain_version != state["terrain_version"]
                and now - state.get("terrain_sent_s", -1e9) >= TERRAIN_3D_PERIOD_S):
            state["terrain_version"] = dash.ros.terrain_version
            state["terrain_sent_s"] = now
            grid = dash.ros.terrain.coarse(48)
            xx, yy = np.meshgrid(grid.xs, grid.ys, indexing="ij")
            zz = grid.z
            ok = np.isfinite(zz)
            lo, hi = float(np.nanmin(zz)), float(np.nanmax(zz))
            t = (zz[ok] - lo) / max(hi - lo, 1e-6)
            colours = np.stack([0.45 + 0.35 * t, 0.33 + 0.3 * t, 0.2 + 0.2 * t], axis=1)
            points = np.stack([xx[ok], yy[ok], zz[ok]], axis=1)
            terrain.set_points(np.round(points, 3).tolist(), np.round(colours, 3).tolist())

    def _refresh_plc_and_soil() -> None:
        v = dash.bridge.view
        text = v.status if not v.reason else f"stopped: {v.reason} ({v.reason_text})"
        plc_status.set_text(f"model {dash.model}; status {text}")
        plc_status.classes(replace="dash-plc-status text-bold " + (
            "text-positive" if v.status == "running" and not v.banner else "text-negative"))
        plc_detail.set_text(v.detail)
        for bit, chip in chips.items():
            on = v.state_bits.get(bit)
            bad = (bit in ("fault", "estop", "watchdog") and on) or (
                bit in ("valid", "ready", "auto") and not on)
            chip.set_text(f"{bit}: {'-' if on is None else ('1' if on else '0')}")
            chip.props(f"color={'grey' if on is None else ('red' if bad else 'green')}")
        rows = [{"key": k, "value": val} for k, val in v.control.items()]
        rows += [{"key": k, "value": fmt(val, digits=4)} for k, val in v.monitor.items()]
        rows += [{"key": keys.STATE_PLC_ALIVE, "value": v.plc_alive or "-"}]
        rows += [{"key": keys.counter_key(k), "value": "-" if val is None else str(val)}
                 for k, val in v.counters.items()]
        rows += [{"key": "bridge cycle rate", "value": fmt(v.cycle_rate_hz, "Hz", 1)},
                 {"key": "PLC alive counter age", "value": fmt(
                     None if v.plc_alive_age_s is None else v.plc_alive_age_s * 1e3, "ms", 0)},
                 {"key": "Redis round trip (MGET)", "value": fmt(v.redis_rtt_ms, "ms", 2)},
                 {"key": "dashboard driving", "value": str(dash.bridge.driving)}]
        if drive_switch.value != dash.bridge.driving:   # stopped elsewhere (another tab, exit)
            state["stopping"] = True
            drive_switch.value = dash.bridge.driving
            state["stopping"] = False
        plc_table.rows = rows
        plc_table.update()
        now = time.monotonic()
        load, force = dash.ros.load.last(), dash.ros.force.last()
        soil_now.set_text(f"bucket load {fmt(load, 'm^3', 4)}, soil force "
                          f"{fmt(None if force is None else force / 1e3, 'kN', 2)}")
        soil.options["series"][0]["data"] = dash.ros.load.points(now)
        soil.options["series"][1]["data"] = [[t, f / 1e3] for t, f in dash.ros.force.points(now)]
        soil.update()

    ui.timer(1.0 / dash.refresh_hz, _refresh_machine)
    ui.timer(1.0 / dash.chart_hz, _refresh_plc_and_soil)
