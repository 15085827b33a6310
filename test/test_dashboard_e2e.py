"""The dashboard end to end in a real headless browser (Debian's chromium + chromedriver via
selenium; no browser download) against the running stack: redis-server, the virtual PLC and the
PLC bridge (own processes, real S7), sim_node, soil_node and ik_node over real DDS, and the
dashboard process itself.

Move a slider, send, the joints move and the page's readout agrees with /joint_states; drive the
tracks through Redis from the page; press STOP and the PLC's control DB holds zero (read over
S7); kill the bridge and the page says so. With ``EXCAVATOR_HIL_DASHBOARD_SCREENSHOTS=docs/img``
the screenshots are written there (docs/dashboard.md shows them).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import snap7
from helpers import (
    CHROMEDRIVER,
    CHROMIUM,
    EVENT_WAIT_S,
    REPO,
    STARTUP_TIMEOUT_S,
    NodeProcess,
    RedisServer,
    RosTestNode,
    chromium_driver,
    free_port,
    wait_for,
)

from excavator_kinematics.geometry import default_geometry
from excavator_kinematics.inverse_kinematics import ACTIVE_JOINTS, InverseKinematics
from plc_bridge.config import load_config

selenium = pytest.importorskip("selenium", reason="pip selenium not installed (requirements.txt)")
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                       reason="Debian's chromium and chromium-driver are not installed: run "
                              "`make browser` as root (apt-get install chromium chromium-driver)"),
    pytest.mark.timeout(600),
]


def _proc(module: str, args: list[str], logs: Path, procs: list[NodeProcess]) -> NodeProcess:
    p = NodeProcess(module, args, log_dir=logs)
    procs.append(p)
    return p


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """Every process of a rig, started as users start them; stopped at the end."""
    logs = tmp_path_factory.mktemp("dashboard_stack")
    redis = RedisServer(logs / "redis")
    redis.start()
    procs: list[NodeProcess] = []
    plc_port, control_port, web_port = free_port(), free_port(), free_port()
    # The bridge at 20 Hz with 0.1 s timeouts: at 100 Hz with 20 ms a 2-core machine running
    # MuJoCo, the soil model and a browser loses the links every few seconds (each loss needs a
    # fresh heartbeat edge), which tests the bridge, not the page.
    config = logs / "plc.yaml"
    text = (REPO / "config" / "plc.yaml").read_text()
    for key, value in (("cycle_hz", "20.0"), ("plc_timeout_s", "0.1"), ("redis_timeout_s", "0.1")):
        text, n = re.subn(rf"^(\s*{key}:\s*)[0-9.]+", rf"\g<1>{value}", text, flags=re.M)
        assert n == 1, key
    config.write_text(text)
    try:
        plc = _proc("plc_bridge.virtual_plc.cli", ["--port", str(plc_port), "--control-port",
                                                   str(control_port), "--model", "skid_steer",
                                                   "--config", str(config)],
                    logs, procs)
        wait_for(lambda: "VIRTUAL_PLC READY" in plc.log(), STARTUP_TIMEOUT_S, plc.log)
        bridge = _proc("plc_bridge.bridge.cli", ["--redis-url", redis.url, "--plc-port",
                                                 str(plc_port), "--model", "skid_steer",
                                                 "--config", str(config)],
                       logs, procs)
        params = ["--ros-args", "-p", "use_sim_time:=false"]
        sim = _proc("excavator_sim.sim_node", [*params, "--params-file",
                                               str(REPO / "config" / "sim.yaml"),
                                               "-p", "terrain.contact:=false"], logs, procs)
        soil = _proc("excavator_sim.soil.soil_node", [*params, "--params-file",
                                                      str(REPO / "config" / "soil.yaml")],
                     logs, procs)
        ik = _proc("excavator_kinematics.ik_node", params, logs, procs)
        # --nice 0: at its default niceness 10 the dashboard gets ~1 % of a core on a machine
        # loaded by other test runs (by design, below the control path), which tests the load
        dash = _proc("excavator_hil.dashboard.app", ["--port", str(web_port), "--redis-url",
                                                     redis.url, "--plc-config", str(config),
                                                     "--nice", "0"],
                     logs, procs)
        for p, line in ((bridge, "PLC_BRIDGE READY"), (sim, "ready:"), (soil, "ready:"),
                        (ik, "ready:"), (dash, "DASHBOARD READY")):
            wait_for(lambda p=p, line=line: line in p.log() or not p.alive(),
                     STARTUP_TIMEOUT_S, p.log)
            assert p.alive(), p.log()
        yield {"redis": redis, "plc_port": plc_port, "url": f"http://127.0.0.1:{web_port}/",
               "bridge": bridge, "plc": plc, "dash": dash, "logs": logs}
    finally:
        for p in reversed(procs):
            p.stop()
        redis.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = chromium_driver(tmp_path_factory.mktemp("chromium_profile"))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def probe():
    node = RosTestNode("dashboard_probe")
    try:
        yield node
    finally:
        node.close()


def _shots_dir(tmp: Path) -> Path:
    target = os.environ.get("EXCAVATOR_HIL_DASHBOARD_SCREENSHOTS")
    return (REPO / target) if target else tmp


def _text(driver, css: str) -> str:
    """An element's text, read in one script call (Vue may re-render it at any moment)."""
    return driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.innerText.trim() : '';", css)


def _page_joints(driver) -> dict[str, float]:
    """The joint readout table of the page: name -> value (deg for angles, m for cylinders)."""
    rows = driver.execute_script(
        "return Array.from(document.querySelectorAll('.dash-joints tbody tr'))"
        "  .map(r => Array.from(r.cells).map(c => c.innerText.trim()));")
    out = {}
    for cells in rows:
        if len(cells) >= 2:
            with contextlib.suppress(ValueError):
                out[cells[0]] = float(cells[1])
    return out


def _slider_keys(driver, css: str, key: str, times: int) -> None:
    """Move a Quasar slider with the keyboard, as a user would (focus, arrow keys)."""
    from selenium.webdriver.common.action_chains import ActionChains

    driver.execute_script(   # found and focused in one call: Vue may re-render between calls
        "const e = document.querySelector(arguments[0]);"
        "const s = e.querySelector('[tabindex]') || e;"
        "s.scrollIntoView({block: 'center'}); s.focus();", css)
    for _ in range(times):
        ActionChains(driver).send_keys(key).perform()


def _number(driver, name: str) -> float | None:
    v = driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.value : null;",
        f".dash-number-{name} input")
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _slider_value(driver, css: str) -> float | None:
    v = driver.execute_script(
        "const e = document.querySelector(arguments[0]);"
        "return e ? e.getAttribute('aria-valuenow') : null;", css)
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _slider_to(driver, css: str, goal: float, tol: float = 1e-6) -> None:
    """Arrow keys on the slider until it shows ``goal`` (each step echoes through the server, so
    count on the slider's value, not on the key presses)."""
    from selenium.webdriver.common.keys import Keys

    for _ in range(400):
        v = _slider_value(driver, css)
        if v is not None and abs(v - goal) < tol:
            return
        key = Keys.ARROW_RIGHT if v is None or v < goal else Keys.ARROW_LEFT
        _slider_keys(driver, css, key, 1)
        time.sleep(0.05)
    raise AssertionError(f"slider {css} did not reach {goal} (at {_slider_value(driver, css)})")


def _type_number(driver, name: str, value: float) -> None:
    """Type a value into a target's number field (select all, type, Tab)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    field = driver.find_element(By.CSS_SELECTOR, f".dash-number-{name} input")
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(f"{value}", Keys.TAB)


def _count(driver, css: str) -> int:
    return int(driver.execute_script("return document.querySelectorAll(arguments[0]).length;",
                                     css))


def _click(driver, css: str) -> None:
    """Click an element found and scrolled to in one script call (Vue may re-render)."""
    driver.execute_script("const e = document.querySelector(arguments[0]);"
                          "e.scrollIntoView({block: 'center'}); e.click();", css)


def _scene_fps(driver) -> float | None:
    """The frame rate the 3D view renders at (its Vue component's prop)."""
    return driver.execute_script(
        "const e = document.querySelector('.dash-scene');"
        "return e ? getElement(e).fps : null;")


def _side_attr(driver, name: str) -> str | None:
    return driver.execute_script(
        "const e = document.querySelector('.dash-side'); return e ? e.dataset[arguments[0]]"
        " : null;", name)


def _set_hidden(driver, hidden: bool) -> None:
    """What the browser does when the tab goes to the background (or comes back)."""
    driver.execute_script(
        "Object.defineProperty(document, 'hidden', {value: arguments[0], configurable: true});"
        "document.dispatchEvent(new Event('visibilitychange'));", hidden)


def _side_tip(driver) -> tuple[float, float] | None:
    """The bucket tip drawn in the side view: (r, z) [m] (the SVG's y is -z)."""
    pts = driver.execute_script(
        "const e = document.querySelector('.dash-side-bucket');"
        "return e ? e.getAttribute('points') : null;")
    if not pts:
        return None
    r, y = (float(v) for v in pts.split()[3].split(","))   # M, L, base, tip, M
    return r, -y


def _control_db(plc_port: int) -> dict:
    cfg = load_config(None, {"plc_port": plc_port, "model": "skid_steer"})
    client = snap7.Client()
    client.connect("127.0.0.1", 0, 1, plc_port)
    try:
        return dict(cfg.control.decode(client.db_read(cfg.control_db, 0, cfg.control.size)))
    finally:
        client.disconnect()


def test_dashboard_drives_and_stops_the_rig(stack, browser, probe, tmp_path):
    from selenium.webdriver.common.by import By
    from sensor_msgs.msg import JointState

    shots = _shots_dir(tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    states = probe.collect(JointState, "joint_states", 10)
    browser.get(stack["url"])
    wait_for(lambda: len(_page_joints(browser)) == 7, EVENT_WAIT_S,
             lambda: "the page's joint readout: " + browser.page_source[-2000:])
    wait_for(lambda: len(states) > 5, EVENT_WAIT_S, "joint_states in the probe")

    # everything the page loaded came from the dashboard itself (no internet asset)
    urls = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)")
    assert urls and all(u.startswith(stack["url"]) or u.startswith("data:") for u in urls), urls

    def q_now() -> np.ndarray:
        m = states[-1]
        pos = dict(zip(m.name, m.position, strict=False))
        return np.array([pos[n] for n in ACTIVE_JOINTS])

    q_before = q_now()
    # --- move a slider (z up by 1.0 m: 20 steps of 0.05 m), check the verdict, send ---------
    z0 = float(browser.find_element(By.CSS_SELECTOR, ".dash-number-z input").get_attribute(
        "value"))
    _slider_to(browser, ".dash-slider-z", z0 + 1.0)
    wait_for(lambda: _number(browser, "z") is not None
             and abs(_number(browser, "z") - (z0 + 1.0)) < 1e-6, EVENT_WAIT_S,
             lambda: f"the z number field to follow the slider (at {_number(browser, 'z')})")
    target = (6.0, 0.0, z0 + 1.0, math.radians(30.0))
    wait_for(lambda: _text(browser, ".dash-verdict") == "reachable", EVENT_WAIT_S, "the IK verdict")
    solution = InverseKinematics(default_geometry()).solve(target[:3], target[3])
    browser.find_element(By.CSS_SELECTOR, ".dash-send").click()
    wait_for(lambda: "sent target_pose" in _text(browser, ".dash-sent"), EVENT_WAIT_S, "the send")

    def settled() -> bool:
        return bool(np.max(np.abs(q_now() - solution.q)) < 0.02)
    wait_for(settled,
             EVENT_WAIT_S, lambda: f"joints {q_now()} to reach the IK solution {solution.q}")
    assert np.max(np.abs(q_now() - q_before)) > 0.05, "the target must have moved the machine"

    def readout_agrees() -> bool:
        page = _page_joints(browser)
        q = q_now()
        return all(abs(page[n] - math.degrees(v)) < 0.1 for n, v in zip(ACTIVE_JOINTS, q,
                                                                         strict=True))
    wait_for(readout_agrees, EVENT_WAIT_S,
             lambda: f"page {_page_joints(browser)} vs joint_states {np.degrees(q_now())}")
    browser.save_screenshot(str(tmp_path / "dashboard_target.png"))

    # the side view (an SVG sent only on change) draws the tip where FK puts it
    fk = InverseKinematics(default_geometry()).fk

    def side_agrees() -> bool:
        tip = _side_tip(browser)
        x, y, z = fk.tip(q_now())
        return tip is not None and abs(tip[0] - math.hypot(x, y)) < 0.02 and abs(
            tip[1] - z) < 0.02
    wait_for(side_agrees, EVENT_WAIT_S, lambda: f"side view tip {_side_tip(browser)} vs FK "
                                        f"{fk.tip(q_now())}")
    assert int(_side_attr(browser, "frames")) > 1

    # the 3D view is off by default (no WebGL at all) and built on demand
    assert _count(browser, ".dash-3d canvas") == 0
    _click(browser, ".dash-3d-toggle")
    wait_for(lambda: _count(browser, ".dash-3d canvas") >= 1, EVENT_WAIT_S, "the 3D view's canvas")
    # the machine at rest: three.js drops to its idle frame rate (redraws on change only)
    wait_for(lambda: _scene_fps(browser) == 1, EVENT_WAIT_S, lambda: f"fps {_scene_fps(browser)}")

    def zoomed_at_full_rate() -> bool:
        # the user zooms on (a wheel event per check, the page's throttle 0.5 s): the full
        # frame rate lasts SCENE_IDLE_S past the last one the server took; one event alone
        # could be undone in the same update by a server starved past those 2 s (a calm
        # fresh-clone run's dashboard read 1 for the 10 s after it)
        browser.execute_script(
            "document.querySelector('.dash-scene').dispatchEvent("
            "new WheelEvent('wheel', {deltaY: 1, bubbles: true}));")
        return bool(_scene_fps(browser) == 10)
    # the user zooms: full frame rate while handled, then idle again
    wait_for(zoomed_at_full_rate, EVENT_WAIT_S, lambda: f"fps {_scene_fps(browser)}", 0.3)
    wait_for(lambda: _scene_fps(browser) == 1, EVENT_WAIT_S, lambda: f"fps {_scene_fps(browser)}")

    # --- dig: the soil charts fill (bucket load, soil force from soil_node) ------------------
    from geometry_msgs.msg import WrenchStamped

    wrenches = probe.collect(WrenchStamped, "soil/wrench", 10)
    for name, value in (("x", 4.3), ("z", -1.3), ("pitch", -15.0)):
        _type_number(browser, name, value)
    # the joints the IK gives for it on the default machine, as the page words them
    from excavator_hil.dashboard.core import TargetChecker

    dig = TargetChecker(default_geometry()).check(4.3, 0.0, -1.3, math.radians(-15.0)).detail
    assert dig.startswith("reachable"), dig
    wait_for(lambda: dig in _text(browser, ".dash-verdict-detail"), EVENT_WAIT_S,
             lambda: f"the dig verdict: {_text(browser, '.dash-verdict-detail')} "
             f"(expected: {dig})")
    # a hidden tab gets no updates: the machine moves, the side view stays; shown, it resumes
    _set_hidden(browser, True)
    wait_for(lambda: _side_attr(browser, "paused") == "true", EVENT_WAIT_S, "the server's pause")
    frames, q_hidden = int(_side_attr(browser, "frames")), q_now()
    browser.find_element(By.CSS_SELECTOR, ".dash-send").click()
    wait_for(lambda: "(4.30, 0.00, -1.30) m, pitch -15.0 deg" in _text(browser, ".dash-sent"),
             EVENT_WAIT_S, lambda: _text(browser, ".dash-sent"))
    wait_for(lambda: np.max(np.abs(q_now() - q_hidden)) > 0.1, EVENT_WAIT_S, "the machine to move")
    assert int(_side_attr(browser, "frames")) == frames
    _set_hidden(browser, False)
    wait_for(lambda: int(_side_attr(browser, "frames")) > frames, EVENT_WAIT_S, "frames again")
    assert _side_attr(browser, "paused") == "false"

    def digging() -> bool:
        f = wrenches[-1].wrench.force if wrenches else None
        return f is not None and math.sqrt(f.x**2 + f.y**2 + f.z**2) > 1e3
    wait_for(digging, EVENT_WAIT_S, "a soil force above 1 kN on soil/wrench")
    # the soil profile under the boom (soil_node sends the whole grid while it changes)
    wait_for(lambda: _count(browser, ".dash-side-terrain") == 1,
             EVENT_WAIT_S, "the terrain profile")
    wait_for(lambda: " kN" in _text(browser, ".dash-soil-now")
             and float(_text(browser, ".dash-soil-now").split("soil force ")[1].split()[0]) > 1.0,
             EVENT_WAIT_S, lambda: _text(browser, ".dash-soil-now"))
    dig = InverseKinematics(default_geometry()).solve((4.3, 0.0, -1.3), math.radians(-15.0))
    deadline = time.monotonic() + 20.0   # for the picture: the bucket at the dig target
    while time.monotonic() < deadline and np.max(np.abs(q_now() - dig.q)) > 0.05:
        time.sleep(0.2)
    browser.save_screenshot(str(shots / "dashboard.png"))
    _click(browser, ".dash-3d-toggle")   # off again: the scene and its canvas are gone
    wait_for(lambda: _count(browser, ".dash-3d canvas") == 0, EVENT_WAIT_S, "the 3D view removed")

    # --- unreachable target: the verdict names the limit, send is disabled -------------------
    _type_number(browser, "x", 6.9)
    _type_number(browser, "z", 3.0)
    wait_for(lambda: _text(browser, ".dash-verdict").startswith("unreachable"), EVENT_WAIT_S,
             "an unreachable verdict")
    assert "OUT_OF_REACH" in _text(browser, ".dash-verdict")
    assert "out of reach" in _text(browser, ".dash-verdict-detail")
    assert browser.find_element(By.CSS_SELECTOR, ".dash-send").get_attribute("disabled")
    browser.save_screenshot(str(shots / "dashboard_unreachable.png"))

    # --- a value typed out of a field's range: refused naming the range, not clamped ---------
    _type_number(browser, "x", 25.0)   # (and Tab: NiceGUI clamped into min..max on blur)
    wait_for(lambda: _text(browser, ".dash-verdict").startswith("refused: OUT_OF_RANGE"),
             EVENT_WAIT_S,
             lambda: f"an out-of-range verdict: {_text(browser, '.dash-verdict')}")
    assert _number(browser, "x") == 25.0, "the field keeps what was typed"
    from excavator_hil.dashboard.core import TargetChecker

    x_range = TargetChecker(default_geometry()).fields()["x"].range_text   # the machine's reach
    assert f"outside the field's range {x_range}" in _text(browser, ".dash-number-x")
    assert "x = 25.00 m is outside" in _text(browser, ".dash-verdict-detail")
    assert browser.find_element(By.CSS_SELECTOR, ".dash-send").get_attribute("disabled")
    _type_number(browser, "x", 6.9)
    wait_for(lambda: _text(browser, ".dash-verdict").startswith("unreachable"), EVENT_WAIT_S,
             "the unreachable verdict again")

    # --- drive the tracks through Redis from the page ----------------------------------------
    drive = browser.find_element(By.CSS_SELECTOR, ".dash-drive")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", drive)
    drive.click()
    wait_for(lambda: browser.execute_script(
        "return document.querySelector('.dash-drive').getAttribute('aria-checked')") == "true",
        EVENT_WAIT_S, "the Drive switch on")
    _slider_to(browser, ".dash-twist-longitudinal", 0.3, tol=1e-3)   # 5 steps of 0.06 m/s
    r = stack["redis"]

    def lon() -> str | None:
        import redis as redis_py

        v = redis_py.Redis.from_url(r.url).get("plc.control.navigation.velocity.longitudinal")
        return None if v is None else v.decode()
    try:
        wait_for(lambda: lon() is not None and abs(float(lon()) - 0.3) < 1e-9, EVENT_WAIT_S,
                 lambda: f"the longitudinal key at 0.3 (is {lon()})")
    finally:
        browser.save_screenshot(str(tmp_path / "drive.png"))
    wait_for(lambda: "status running" in _text(browser, ".dash-plc-status"), EVENT_WAIT_S,
             lambda: _text(browser, ".dash-plc-status"))

    def driving_db() -> bool:
        db = _control_db(stack["plc_port"])
        return db["enable"] and not db["stop"] and db["speed_sp_left"] > 0.1
    wait_for(driving_db,
             EVENT_WAIT_S, lambda: f"control DB driving: {_control_db(stack['plc_port'])}")
    browser.save_screenshot(str(shots / "dashboard_driving.png"))

    # --- STOP: the PLC's control DB holds zero -----------------------------------------------
    browser.find_element(By.CSS_SELECTOR, ".dash-stop").click()

    def stopped_db() -> bool:
        db = _control_db(stack["plc_port"])
        return (db["stop"] and not db["enable"] and db["speed_sp_left"] == 0.0
                and db["speed_sp_right"] == 0.0)
    wait_for(stopped_db,
             EVENT_WAIT_S, lambda: f"control DB stopped: {_control_db(stack['plc_port'])}")
    # the keys' zero and the heartbeat's end leave the dashboard together, but the bridge may
    # stop on the stale heartbeat first: a dashboard process starved for longer than
    # heartbeat_timeout_s (a loaded host) writes its zero after the PLC has stopped
    wait_for(lambda: lon() == "0", EVENT_WAIT_S, lambda: f"the longitudinal key at 0 (is {lon()})")
    # heartbeat_stale, or waiting_heartbeat when a link loss of a loaded machine came first
    wait_for(lambda: "status stopped: " in _text(browser, ".dash-plc-status")
             and "heartbeat" in _text(browser, ".dash-plc-status"), EVENT_WAIT_S,
             lambda: _text(browser, ".dash-plc-status"))
    assert _text(browser, ".dash-drive") and browser.find_element(
        By.CSS_SELECTOR, ".dash-drive").get_attribute("aria-checked") == "false"

    # --- the PLC stops answering (SIGSTOP): the page says so ---------------------------------
    stack["plc"].proc.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: "PLC down" in _text(browser, ".dash-banner"), EVENT_WAIT_S,
                 lambda: f"banner {_text(browser, '.dash-banner')!r}")
        assert "PLC DOWN" in _text(browser, ".dash-bridge-badge")
        # (the status keeps the first stop's reason, heartbeat_stale; the monitor is invalid)
        wait_for(lambda: _text(browser, ".dash-bit-valid") == "valid: 0", EVENT_WAIT_S,
                 lambda: f"the valid bit readout {_text(browser, '.dash-bit-valid')!r}")
        browser.save_screenshot(str(shots / "dashboard_plc_down.png"))
    finally:
        stack["plc"].proc.send_signal(signal.SIGCONT)

    # --- the bridge dies: the page says so ---------------------------------------------------
    stack["bridge"].proc.send_signal(signal.SIGKILL)
    wait_for(lambda: "PLC bridge down" in _text(browser, ".dash-banner"), EVENT_WAIT_S,
             lambda: f"banner {_text(browser, '.dash-banner')!r}")
    assert "DOWN" in _text(browser, ".dash-bridge-badge")
    browser.save_screenshot(str(shots / "dashboard_bridge_down.png"))
