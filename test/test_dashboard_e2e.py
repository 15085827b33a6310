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
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
import snap7
from helpers import REPO, NodeProcess, RedisServer, RosTestNode, free_port, wait_for

from excavator_kinematics.geometry import default_geometry
from excavator_kinematics.inverse_kinematics import ACTIVE_JOINTS, InverseKinematics
from plc_bridge.config import load_config

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
selenium = pytest.importorskip("selenium", reason="pip selenium not installed (requirements.txt)")
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                       reason="Debian's chromium and chromium-driver are not installed: run "
                              "`make browser` as root (apt-get install chromium chromium-driver)"),
    pytest.mark.timeout(600),
]
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run",
                  "--disable-dev-shm-usage", "--window-size=1600,1150")


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
    try:
        plc = _proc("plc_bridge.virtual_plc_cli", ["--port", str(plc_port), "--control-port",
                                                   str(control_port), "--model", "skid_steer"],
                    logs, procs)
        wait_for(lambda: "VIRTUAL_PLC READY" in plc.log(), 30.0, plc.log)
        bridge = _proc("plc_bridge.bridge_cli", ["--redis-url", redis.url, "--plc-port",
                                                 str(plc_port), "--model", "skid_steer"],
                       logs, procs)
        params = ["--ros-args", "-p", "use_sim_time:=false"]
        sim = _proc("excavator_sim.sim_node", [*params, "--params-file",
                                               str(REPO / "config" / "sim.yaml"),
                                               "-p", "terrain.contact:=false"], logs, procs)
        soil = _proc("excavator_sim.soil.soil_node", [*params, "--params-file",
                                                      str(REPO / "config" / "soil.yaml")],
                     logs, procs)
        ik = _proc("excavator_kinematics.ik_node", params, logs, procs)
        dash = _proc("excavator_hil.dashboard.app", ["--port", str(web_port), "--redis-url",
                                                     redis.url], logs, procs)
        for p, line in ((bridge, "PLC_BRIDGE READY"), (sim, "ready:"), (soil, "ready:"),
                        (ik, "ready:"), (dash, "DASHBOARD READY")):
            wait_for(lambda p=p, line=line: line in p.log() or not p.alive(), 60.0, p.log)
            assert p.alive(), p.log()
        yield {"redis": redis, "plc_port": plc_port, "url": f"http://127.0.0.1:{web_port}/",
               "bridge": bridge, "dash": dash, "logs": logs}
    finally:
        for p in reversed(procs):
            p.stop()
        redis.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"   # never let Selenium Manager download anything
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium_profile')}")
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(60)
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
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, css).text


def _page_joints(driver) -> dict[str, float]:
    """The joint readout table of the page: name -> value (deg for angles, m for cylinders)."""
    from selenium.webdriver.common.by import By

    out = {}
    for row in driver.find_elements(By.CSS_SELECTOR, ".dash-joints tbody tr"):
        cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
        if len(cells) >= 2:
            with contextlib.suppress(ValueError):
                out[cells[0]] = float(cells[1])
    return out


def _slider_keys(driver, css: str, key: str, times: int) -> None:
    """Move a Quasar slider with the keyboard, as a user would (focus, arrow keys)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    el = driver.find_element(By.CSS_SELECTOR, css)
    driver.execute_script(
        "const s = arguments[0].querySelector('[tabindex]') || arguments[0];"
        "s.scrollIntoView({block: 'center'}); s.focus();", el)
    for _ in range(times):
        ActionChains(driver).send_keys(key).perform()


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
    from selenium.webdriver.common.keys import Keys
    from sensor_msgs.msg import JointState

    shots = _shots_dir(tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    states = probe.collect(JointState, "joint_states", 10)
    browser.get(stack["url"])
    wait_for(lambda: len(_page_joints(browser)) == 7, 60.0,
             lambda: "the page's joint readout: " + browser.page_source[-2000:])
    wait_for(lambda: len(states) > 5, 30.0, "joint_states in the probe")

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
    _slider_keys(browser, ".dash-slider-z", Keys.ARROW_RIGHT, 20)
    wait_for(lambda: abs(float(browser.find_element(
        By.CSS_SELECTOR, ".dash-number-z input").get_attribute("value")) - (z0 + 1.0)) < 1e-6,
        10.0, "the z number field to follow the slider")
    target = (6.0, 0.0, z0 + 1.0, math.radians(30.0))
    wait_for(lambda: _text(browser, ".dash-verdict") == "reachable", 10.0, "the IK verdict")
    solution = InverseKinematics(default_geometry()).solve(target[:3], target[3])
    browser.find_element(By.CSS_SELECTOR, ".dash-send").click()
    wait_for(lambda: "sent target_pose" in _text(browser, ".dash-sent"), 10.0, "the send")

    def settled() -> bool:
        return bool(np.max(np.abs(q_now() - solution.q)) < 0.02)
    wait_for(settled, 60.0, lambda: f"joints {q_now()} to reach the IK solution {solution.q}")
    assert np.max(np.abs(q_now() - q_before)) > 0.05, "the target must have moved the machine"

    def readout_agrees() -> bool:
        page = _page_joints(browser)
        q = q_now()
        return all(abs(page[n] - math.degrees(v)) < 0.1 for n, v in zip(ACTIVE_JOINTS, q,
                                                                         strict=True))
    wait_for(readout_agrees, 20.0,
             lambda: f"page {_page_joints(browser)} vs joint_states {np.degrees(q_now())}")
    browser.save_screenshot(str(shots / "dashboard.png"))

    # --- unreachable target: the verdict names the limit, send is disabled -------------------
    x_field = browser.find_element(By.CSS_SELECTOR, ".dash-number-x input")
    x_field.send_keys(Keys.CONTROL, "a")
    x_field.send_keys("6.9", Keys.TAB)   # typed into the number field this time
    wait_for(lambda: _text(browser, ".dash-verdict").startswith("unreachable"), 10.0,
             "an unreachable verdict")
    assert "OUT_OF_REACH" in _text(browser, ".dash-verdict")
    assert "out of reach" in _text(browser, ".dash-verdict-detail")
    assert browser.find_element(By.CSS_SELECTOR, ".dash-send").get_attribute("disabled")
    browser.save_screenshot(str(shots / "dashboard_unreachable.png"))

    # --- drive the tracks through Redis from the page ----------------------------------------
    browser.find_element(By.CSS_SELECTOR, ".dash-drive").click()
    _slider_keys(browser, ".dash-twist-longitudinal", Keys.ARROW_RIGHT, 5)   # 5 x 0.06 m/s
    r = stack["redis"]

    def lon() -> str | None:
        import redis as redis_py

        v = redis_py.Redis.from_url(r.url).get("plc.control.navigation.velocity.longitudinal")
        return None if v is None else v.decode()
    wait_for(lambda: lon() is not None and abs(float(lon()) - 0.3) < 1e-9, 10.0,
             lambda: f"the longitudinal key at 0.3 (is {lon()})")
    wait_for(lambda: "status running" in _text(browser, ".dash-plc-status"), 20.0,
             lambda: _text(browser, ".dash-plc-status"))

    def driving_db() -> bool:
        db = _control_db(stack["plc_port"])
        return db["enable"] and not db["stop"] and db["speed_sp_left"] > 0.1
    wait_for(driving_db, 10.0, lambda: f"control DB driving: {_control_db(stack['plc_port'])}")
    browser.save_screenshot(str(shots / "dashboard_driving.png"))

    # --- STOP: the PLC's control DB holds zero -----------------------------------------------
    browser.find_element(By.CSS_SELECTOR, ".dash-stop").click()

    def stopped_db() -> bool:
        db = _control_db(stack["plc_port"])
        return (db["stop"] and not db["enable"] and db["speed_sp_left"] == 0.0
                and db["speed_sp_right"] == 0.0)
    wait_for(stopped_db, 10.0, lambda: f"control DB stopped: {_control_db(stack['plc_port'])}")
    assert lon() == "0"
    wait_for(lambda: "heartbeat_stale" in _text(browser, ".dash-plc-status"), 10.0,
             lambda: _text(browser, ".dash-plc-status"))

    # --- the bridge dies: the page says so ---------------------------------------------------
    stack["bridge"].proc.send_signal(signal.SIGKILL)
    wait_for(lambda: "PLC bridge down" in _text(browser, ".dash-banner"), 20.0,
             lambda: f"banner {_text(browser, '.dash-banner')!r}")
    assert "DOWN" in _text(browser, ".dash-bridge-badge")
    browser.save_screenshot(str(shots / "dashboard_bridge_down.png"))
