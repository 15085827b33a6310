"""The dashboard's page from a client that is not a browser: the page's own socket.io events
carry any value (NaN as "nan", inf, text, a list, 25 m), as a buggy or hostile client sends them
(the input boxes are no guard). Issue 31, holes 7 and 8.

The page must judge every value it takes as the IK does (``TargetChecker.verdict``: a field that
holds no number, NaN/inf, a number outside the field's range, then the IK), show that verdict
(never the previous one), keep Send from sending a refused target, never clamp a typed value
into a field's range, and stay up. Real processes: the dashboard, a redis-server whose write log
is the record of every twist written, a DDS probe on ``target_pose``."""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
import urllib.request
import uuid
from typing import Any

import pytest
from geometry_msgs.msg import PoseStamped
from helpers import (
    EVENT_WAIT_S,
    STARTUP_TIMEOUT_S,
    NodeProcess,
    RedisServer,
    RosTestNode,
    free_port,
    wait_for,
)
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from excavator_hil.dashboard.core import DriveLimits, TargetChecker, read_number
from excavator_kinematics.geometry import default_geometry
from plc_bridge import redis_keys as keys
from plc_bridge.config import load_config

socketio = pytest.importorskip("socketio", reason="python-socketio (NiceGUI's) not installed")
nicegui_json = pytest.importorskip("nicegui.json", reason="nicegui not installed")

CHECKER = TargetChecker(default_geometry())
FIELDS = ("x", "y", "z", "pitch")
START = {"x": 6.0, "y": 0.0, "z": 0.5, "pitch": 30.0}   # the page's initial fields
TWIST = ("longitudinal", "lateral", "angular")
PLC = load_config(None, {})
LIMITS = DriveLimits.for_model(PLC.model, PLC.max_longitudinal_m_s, PLC.max_lateral_m_s,
                               PLC.max_angular_rad_s)


class PageClient:
    """The page's client side without a browser: NiceGUI's socket.io protocol as the page's own
    JavaScript speaks it (the client id from the page, an implicit handshake, ``event``
    messages to an element's listener with JSON-encoded arguments), the elements kept up to
    date from the server's ``update`` messages. ``emit`` sends any JSON text as an event's
    argument."""

    def __init__(self, url: str):
        html = urllib.request.urlopen(url, timeout=30).read().decode()
        tree = re.search(r"parseElements\(String\.raw`(.*?)`\)", html, re.S)
        client_id = re.search(r"'client_id': '([^']+)'", html)
        assert tree and client_id, "the page's elements and client id (NiceGUI's page format)"
        self.elements: dict[int, dict[str, Any]] = {
            int(k): v for k, v in json.loads(tree.group(1)).items()}
        self.client_id = client_id.group(1)
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.hidden = False
        self.sio = self._run(self._connect(url))

    def _run(self, coro: Any, timeout: float = EVENT_WAIT_S) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _connect(self, url: str) -> Any:
        sio = socketio.AsyncClient()
        sio.on("update", self._on_update)
        query = (f"client_id={self.client_id}&tab_id={uuid.uuid4()}&document_id={uuid.uuid4()}"
                 "&implicit_handshake=true&next_message_id=0")
        await sio.connect(f"{url}?{query}", socketio_path="/_nicegui_ws/socket.io",
                          transports=["websocket"], wait_timeout=20)
        return sio

    def _on_update(self, data: dict[str, Any]) -> None:
        with self._lock:
            for key, element in data.items():
                if key != "_id" and element is not None:
                    self.elements[int(key)] = element

    def id_of(self, css: str) -> int:
        with self._lock:
            found = [i for i, e in self.elements.items() if css in e.get("class", [])]
        assert len(found) == 1, f"{css}: {found}"
        return found[0]

    def element(self, css: str) -> dict[str, Any]:
        i = self.id_of(css)
        with self._lock:
            return self.elements[i]

    def text(self, css: str) -> str:
        return str(self.element(css).get("text", ""))

    def props(self, css: str) -> dict[str, Any]:
        return dict(self.element(css).get("props", {}))

    def emit(self, element_id: int, event: str, *args_json: str) -> None:
        """An ``event`` message to the element's ``event`` listener, the arguments as JSON
        texts (as the page's stringifyEventArgs sends them)."""
        with self._lock:
            listener = next(e["listener_id"] for e in self.elements[element_id].get("events", [])
                            if e["type"] == event)
        self._run(self.sio.emit("event", {"id": element_id, "client_id": self.client_id,
                                           "listener_id": listener, "args": list(args_json)}))

    def emit_to(self, css: str, event: str, *args_json: str) -> None:
        self.emit(self.id_of(css), event, *args_json)

    def barrier(self) -> None:
        """Until the server has handled every event sent before: one more event whose answer
        is visible (the tab's visibility, which the side view's ``paused`` prop echoes). One
        socket, one event loop: the events are handled in order, their updates leave in
        order."""
        self.hidden = not self.hidden
        self.emit(0, "dash_visibility", json.dumps(self.hidden))   # 0: the page's layout
        # a wait, not a measurement: the dashboard runs at nice 10 under the launches
        # (realtime:=auto), and with both cores taken it answered a fleet test's page after
        # more than 30 s
        wait_for(lambda: self.props("dash-side").get("paused") is self.hidden, 120.0,
                 "the server to answer the page's events")

    def close(self) -> None:
        self._run(self.sio.disconnect())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5.0)


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory):
    logs = tmp_path_factory.mktemp("dashboard_events")
    redis = RedisServer(logs / "redis")
    redis.record_writes = True   # every value the page writes, from the server's own log
    redis.start()
    port = free_port()
    dash = NodeProcess("excavator_hil.dashboard.app", [
        "--port", str(port), "--redis-url", redis.url, "--nice", "0"], log_dir=logs)
    probe = RosTestNode("dashboard_events_probe")
    page = None
    try:
        wait_for(lambda: "DASHBOARD READY" in dash.log() or not dash.alive(),
                 STARTUP_TIMEOUT_S, dash.log)
        assert dash.alive(), dash.log()
        poses: list[PoseStamped] = probe.collect(PoseStamped, "target_pose", 1000)
        wait_for(lambda: probe.node.count_publishers("target_pose") > 0, EVENT_WAIT_S,
                 "the dashboard's target_pose publisher")
        page = PageClient(f"http://127.0.0.1:{port}/")
        page.barrier()
        yield {"page": page, "dash": dash, "poses": poses, "redis": redis}
    finally:
        if page is not None:
            page.close()
        probe.close()
        dash.stop()
        redis.stop()
    assert "RecursionError" not in dash.log()


class Fields:
    """What the page's target fields hold, as the page must take each event: the JSON value as
    NiceGUI parses it (the page's own json), for either of a field's two inputs."""

    def __init__(self) -> None:
        self.raw: dict[str, Any] = dict(START)

    def take(self, field: str, text: str) -> bool:
        try:
            self.raw[field] = nicegui_json.loads(text)
        except ValueError:
            return False
        return True


def _assert_page_shows_the_cores_verdict(page: PageClient, fields: Fields) -> None:
    expected = CHECKER.verdict(fields.raw)
    assert page.text("dash-verdict") == expected.headline, fields.raw
    assert page.text("dash-verdict-detail") == expected.detail, fields.raw
    assert bool(page.props("dash-send").get("disable")) is (not expected.ok), fields.raw
    for name in FIELDS:   # each field says under itself why its value is refused
        problem = CHECKER.field_problem(name, fields.raw[name])
        props = page.props(f"dash-number-{name}")
        assert props.get("error") is (problem is not None), (name, fields.raw)
        assert props.get("error-message") == (problem.message if problem else None)


def _set(page: PageClient, fields: Fields, name: str, text: str, widget: str = "number") -> None:
    assert fields.take(name, text)
    page.emit_to(f"dash-{widget}-{name}", "update:modelValue", text)
    page.barrier()


def test_a_nan_target_is_refused_with_the_iks_reason(rig: dict[str, Any]) -> None:
    """The issue's case: NaN typed into x (as "nan", what float() reads). It was a
    RecursionError in the value binding, the previous verdict "reachable" stayed and Send
    stayed enabled."""
    page, fields = rig["page"], Fields()
    for name in FIELDS:
        _set(page, fields, name, json.dumps(str(START[name])))
    assert page.text("dash-verdict") == "reachable"
    _set(page, fields, "x", '"nan"')
    assert page.text("dash-verdict") == "refused: NOT_FINITE (input (NaN/inf))"
    assert page.text("dash-verdict-detail") == CHECKER.check(
        math.nan, 0.0, 0.5, math.radians(30.0)).message    # the IK's own words
    assert page.props("dash-send").get("disable") is True
    _assert_page_shows_the_cores_verdict(page, fields)
    before = len(rig["poses"])
    page.emit_to("dash-send", "click")   # a client that ignores "disabled": nothing is sent
    _set(page, fields, "x", "6.0")
    assert page.text("dash-verdict") == "reachable"
    page.emit_to("dash-send", "click")
    wait_for(lambda: len(rig["poses"]) == before + 1,
             EVENT_WAIT_S, "the valid target's target_pose")
    assert rig["poses"][-1].pose.position.x == 6.0
    assert "RecursionError" not in rig["dash"].log()


@pytest.mark.parametrize("widget", ["number", "slider"])
def test_a_value_out_of_range_is_refused_naming_the_range_not_clamped(
        rig: dict[str, Any], widget: str) -> None:
    """A target typed at 25 m showed up as the range's end (NiceGUI clamps a number input into
    min/max on blur) and was judged as that."""
    page, fields = rig["page"], Fields()
    for name in FIELDS:
        _set(page, fields, name, json.dumps(str(START[name])))
    slider_before = page.props("dash-slider-x")["model-value"]
    _set(page, fields, "x", '"25"', widget)
    page.emit_to("dash-number-x", "blur")   # what leaving the field sends
    page.barrier()
    low, high = CHECKER.ranges().x
    assert page.text("dash-verdict") == f"refused: OUT_OF_RANGE (x range {low:.2f}..{high:.2f} m)"
    assert f"x = 25.00 m is outside the field's range {low:.2f}..{high:.2f} m" in page.text(
        "dash-verdict-detail")
    props = page.props("dash-number-x")
    assert props["model-value"] == "25", "the field shows what was typed, not a clamped value"
    assert f"{low:.2f}..{high:.2f} m" in props["error-message"]
    assert page.props("dash-slider-x")["model-value"] == slider_before   # not at its end
    assert page.props("dash-send").get("disable") is True
    _assert_page_shows_the_cores_verdict(page, fields)


# Any JSON value an event can carry, the NaN/inf/number strings a number input reads among them.
JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.floats(-200.0, 200.0) | st.sampled_from([6.0, 0.0, 0.5, 30.0, -7.0, 7.0, 180.0, 1e308])
    | st.sampled_from(["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e999", "-1e999",
                       " 6.5 ", "6,5", "0x10", "", "abc", "25", "-0", "6", "1_0"])
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                  max_size=2),
    max_leaves=4)
EVENT_TEXT = JSON_VALUE.map(json.dumps) | st.sampled_from(["1e308", "-0.0", "1.5e-400"])


@pytest.fixture(scope="module")
def fuzz_fields(rig: dict[str, Any]) -> Fields:
    page, fields = rig["page"], Fields()
    for name in FIELDS:
        _set(page, fields, name, json.dumps(str(START[name])))
    rig["sent"] = []
    rig["poses_before"] = len(rig["poses"])
    rig["log_before"] = len(rig["dash"].log())
    return fields


# Values around the start target (reachable near it), so that the fuzzing also sends targets.
NEAR = {"x": (5.0, 6.5), "y": (-1.0, 1.0), "z": (-0.5, 1.5), "pitch": (0.0, 45.0)}


@st.composite
def _field_events(draw: st.DrawFn) -> tuple[str, str]:
    field = draw(st.sampled_from(FIELDS))
    if draw(st.integers(0, 2)):   # two in three: a number near the start target, as typed
        return field, json.dumps(str(round(draw(st.floats(*NEAR[field])), 2)))
    return field, draw(EVENT_TEXT)


@given(event=_field_events(), widget=st.sampled_from(["number", "slider"]), click=st.booleans())
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_fuzzed_field_events(rig: dict[str, Any], fuzz_fields: Fields, event: tuple[str, str],
                             widget: str, click: bool) -> None:
    """Any value as either input's event: the server stays up, the page shows the core's
    verdict on what its fields hold, and Send sends exactly the valid targets."""
    page = rig["page"]
    field, text = event
    try:
        nicegui_json.loads(text)
    except ValueError:
        assume(False)   # not JSON to the page: test_unparseable_arguments_change_nothing
    _set(page, fuzz_fields, field, text, widget)
    _assert_page_shows_the_cores_verdict(page, fuzz_fields)
    verdict = CHECKER.verdict(fuzz_fields.raw)
    if click:   # Send, also while disabled (a client may ignore that)
        page.emit_to("dash-send", "click")
        page.barrier()
        if verdict.ok:
            assert verdict.target is not None
            rig["sent"].append(verdict.target)
            wait_for(lambda: len(rig["poses"]) - rig["poses_before"] >= len(rig["sent"]),
                     EVENT_WAIT_S,
                     "the target_pose")
    assert rig["dash"].alive(), rig["dash"].log()


def test_only_valid_targets_reached_target_pose(rig: dict[str, Any], fuzz_fields: Fields) -> None:
    """After the fuzzing: the topic got exactly the targets sent while valid, in order, each
    one the IK solves; no exception in the server while it took the events."""
    page, sent, poses = rig["page"], rig["sent"], rig["poses"]
    for name in FIELDS:   # one last valid target: what DDS delivers after everything before
        _set(page, fuzz_fields, name, json.dumps(str(START[name])))
    page.emit_to("dash-send", "click")
    last = CHECKER.verdict(fuzz_fields.raw).target
    assert last is not None
    sent.append(last)
    (lx, _ly, _lz), _q = CHECKER.pose(*last)
    # DDS delivers one publisher's messages in order: once the last one is here, so is every
    # message before it, a target that should not have been sent included
    # (counted too: an earlier target of the same x is not the last one arrived)
    wait_for(lambda: len(poses) - rig["poses_before"] >= len(sent)
             and poses[-1].pose.position.x == lx, 120.0, "the last target_pose")
    assert len(sent) > 3, f"the fuzzing sent {len(sent) - 1} valid targets: too few to check"
    got = poses[rig["poses_before"]:]
    assert len(got) == len(sent), f"{len(got)} target_pose for {len(sent)} valid sends"
    for target, msg in zip(sent, got, strict=True):
        (x, y, z), quat = CHECKER.pose(*target)
        p, o = msg.pose.position, msg.pose.orientation
        assert (p.x, p.y, p.z) == (x, y, z) and (o.x, o.y, o.z, o.w) == quat
        assert CHECKER.check(*target).ok
    log = rig["dash"].log()[rig["log_before"]:]
    assert "Traceback" not in log, log[-3000:]


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", "1e999", "{", "nan", "'6'"])
def test_unparseable_arguments_change_nothing(rig: dict[str, Any], text: str) -> None:
    """Not JSON (what JSON.stringify never writes, a raw socket can): NiceGUI refuses the
    message before the page sees it; the fields, the verdict and the server stay as they
    were."""
    page, fields = rig["page"], Fields()
    for name in FIELDS:
        _set(page, fields, name, json.dumps(str(START[name])))
    assert not fields.take("x", text)
    page.emit_to("dash-number-x", "update:modelValue", text)
    page.barrier()
    assert page.text("dash-verdict") == "reachable"
    _assert_page_shows_the_cores_verdict(page, fields)
    assert rig["dash"].alive()


@given(name=st.sampled_from([n for n, lim in zip(TWIST, (LIMITS.max_longitudinal,
                                                          LIMITS.max_lateral, LIMITS.max_angular),
                                                 strict=True) if lim > 0]), text=EVENT_TEXT)
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_fuzzed_twist_events(rig: dict[str, Any], name: str, text: str) -> None:
    """The drive sliders: a value the bridge's envelope refuses (DriveLimits: finite, within
    max_*) or no number is shown as refused, and the sliders go back to the twist commanded:
    they never show a twist that is not driven."""
    page = rig["page"]
    try:
        value = nicegui_json.loads(text)
    except ValueError:
        assume(False)
    if not rig.get("driving"):
        page.emit_to("dash-drive", "update:modelValue", "true")
        rig["driving"] = True
    before = [page.props(f"dash-twist-{n}")["model-value"] for n in TWIST]
    page.emit_to(f"dash-twist-{name}", "update:modelValue", text)
    page.barrier()
    after = [page.props(f"dash-twist-{n}")["model-value"] for n in TWIST]
    sent = [value if n == name else b for n, b in zip(TWIST, before, strict=True)]
    numbers = [read_number(v) for v in sent]
    try:
        LIMITS.redis_values(*(math.nan if v is None else v for v in numbers))
        accepted = True
    except ValueError:
        accepted = False
    error = page.text("dash-drive-error")
    if accepted:   # the sliders hold the numbers commanded
        assert after == numbers and error == "", (text, after, error)
    else:          # refused and said so; the sliders show the twist still commanded
        assert after == before, (text, before, after)
        assert error.startswith("refused: ") and "still commanded" in error, error
    assert rig["dash"].alive()


def test_every_twist_written_to_redis_was_valid(rig: dict[str, Any]) -> None:
    """The record of the server itself (its append-only file): every velocity the page wrote
    is a finite number within the bridge's envelope."""
    page, redis = rig["page"], rig["redis"]
    page.emit_to("dash-drive", "update:modelValue", '"false"')   # not a bool: refused
    page.barrier()
    page.emit_to("dash-stop", "click")
    page.barrier()
    written = {key: redis.values_written(key) for key in (keys.LONGITUDINAL, keys.LATERAL,
                                                          keys.ANGULAR)}
    assert written[keys.LONGITUDINAL], "the page drove (the fuzz wrote twists)"
    for key, limit in ((keys.LONGITUDINAL, LIMITS.max_longitudinal),
                       (keys.LATERAL, LIMITS.max_lateral), (keys.ANGULAR, LIMITS.max_angular)):
        for v in written[key]:
            assert math.isfinite(float(v)) and abs(float(v)) <= limit + 1e-9, (key, v)


@pytest.mark.parametrize("target", [(math.nan, 0.0, 0.5, 0.5), (6.0, math.inf, 0.5, 0.5),
                                    (25.0, 0.0, 0.5, 0.5), (6.0, 0.0, 0.5, math.nan)])
def test_the_ros_link_publishes_no_target_the_ik_refuses(target: tuple[float, ...]) -> None:
    """The last gate before the topic (the page judges first): RosLink.send_target raises with
    the IK's reason and publishes nothing."""
    from excavator_hil.dashboard.adapter import RosLink

    link = RosLink(CHECKER, None, ["-r", "__node:=dashboard_gate_probe"])
    try:
        with pytest.raises(ValueError, match=re.escape(CHECKER.check(*target).message)):
            link.send_target(*target)
    finally:
        link.close()
