"""A soil preset defined only in the user's own parameter file: the pure loader and soil_node
(in its own process, over real DDS) both take it; an incomplete or out-of-range one stops them."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import InertiaStamped, PoseStamped, TwistStamped, WrenchStamped
from helpers import EVENT_WAIT_S, NodeProcess, RosTestNode, send_bucket_state, wait_for
from std_msgs.msg import Float64

from excavator_common.paths import config_file
from excavator_kinematics.geometry import default_geometry
from excavator_sim.soil.bucket_prism import BucketPose, BucketPrism
from excavator_sim.soil.config import load_soil_config
from excavator_sim.soil.errors import SoilConfigError
from excavator_sim.soil.scenarios import cut_tip_path, pitch_for_attack, pose_for_tip

BUCKET = BucketPrism.from_geometry(default_geometry())
DENSITY = 2345.0  # [kg/m^3] of the user's preset: no shipped preset has it


def _shipped() -> dict[str, Any]:
    return yaml.safe_load(config_file("soil.yaml").read_text())["/**"]["ros__parameters"]


def _gravel() -> dict[str, float]:
    return dict(_shipped()["presets"]["loose_sand"], density_kg_m3=DENSITY)


def _params_file(path: Path, params: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": params}}))
    return path


# --- the pure loader ---------------------------------------------------------------------------
def test_the_loader_selects_a_preset_of_the_users_file(tmp_path: Path) -> None:
    params = _shipped()
    params["presets"]["test_gravel"] = _gravel()
    params["preset"] = "test_gravel"
    config = load_soil_config(_params_file(tmp_path / "soil.yaml", params))
    assert config.preset == "test_gravel" and "test_gravel" in config.presets
    assert config.dimaio.density_kg_m3 == DENSITY and config.terrain.density_kg_m3 == DENSITY


def test_the_loader_rejects_an_incomplete_preset_even_when_not_selected(tmp_path: Path) -> None:
    params = _shipped()
    params["presets"]["wet_clya"] = {"density_kg_m3": 1900.0}  # a misspelt preset name
    path = _params_file(tmp_path / "soil.yaml", params)
    with pytest.raises(SoilConfigError, match=r"parameter presets\.wet_clya\.\w+ is missing; "
                                              r"add it .*range .*meant the preset 'wet_clay'"):
        load_soil_config(path)


# --- soil_node ---------------------------------------------------------------------------------
class Probe:
    def __init__(self, probe: RosTestNode):
        self.wrenches: list[WrenchStamped] = probe.collect(WrenchStamped, "soil/wrench", 1000)
        self.loads: list[Float64] = probe.collect(Float64, "soil/bucket_load", 1000)
        self.payloads: list[InertiaStamped] = probe.collect(InertiaStamped,
                                                            "soil/bucket_payload", 1000)
        self.diagnostics: list[DiagnosticArray] = probe.collect(DiagnosticArray,
                                                               "/diagnostics", 100)
        self.pose = probe.node.create_publisher(PoseStamped, "bucket_pose", 1000)
        self.twist = probe.node.create_publisher(TwistStamped, "bucket_twist", 1000)

    def send(self, pose: BucketPose, vel: np.ndarray, t: float) -> None:
        send_bucket_state(self.pose, self.twist, pose, vel, t)

    def status(self, key: str) -> str | None:
        for d in reversed(self.diagnostics):
            for s in d.status:
                if s.name.startswith("soil_node"):
                    return next((v.value for v in s.values if v.key == key), None)
        return None


def test_soil_node_runs_on_a_preset_defined_only_in_the_params_file(tmp_path: Path) -> None:
    gravel = _gravel()
    gravel["densty_kg_m3"] = 1.0  # a misspelt key next to the right one: warned, ignored
    path = _params_file(tmp_path / "my_soil.yaml", {
        "preset": "test_gravel",
        "heightmap_rate_hz": 5.0,
        "terrain": {"size_x_m": 8.0, "size_y_m": 6.0, "centre_x_m": 4.0,
                    "bucket_soil_model": "cells"},
        "presets": {"test_gravel": gravel},
    })
    proc = NodeProcess("excavator_sim.soil.soil_node", ["--ros-args", "--params-file", str(path)],
                       log_dir=tmp_path)
    probe = RosTestNode("soil_user_preset_probe")
    try:
        ch = Probe(probe)
        wait_for(lambda: ch.status("preset") is not None
                 and ch.pose.get_subscription_count() > 0
                 and ch.twist.get_subscription_count() > 0, EVENT_WAIT_S,
                 lambda: f"soil_node to come up; its log:\n{proc.log()}")
        assert ch.status("preset") == "test_gravel"
        log = proc.log()
        assert "ready: preset test_gravel" in log
        warnings = [line for line in log.splitlines() if "is not a parameter of" in line]
        assert len(warnings) == 1, log  # the preset's 15 keys are parameters, the typo is not
        assert "'presets.test_gravel.densty_kg_m3'" in warnings[0]
        assert "did you mean 'presets.test_gravel.density_kg_m3'" in warnings[0]

        # the preset's density is what the load weighs: scoop, then lift the bucket off the
        # grid, where the load's mass rho V goes on soil/bucket_payload (the per-cell bucket
        # soil, the default: its weight is not in the wrench, which is zero there)
        pitch = pitch_for_attack(BUCKET, math.radians(30.0))
        sent = 0
        for t, tip, vel in cut_tip_path(0.25, x_start=5.5, length_m=1.0, speed_m_s=0.5,
                                        dt=0.01):
            # lock-step (pose, then its wrench): the node works on the newest pose only, so
            # a faster sender would see poses skipped on a slow machine
            ch.send(pose_for_tip(BUCKET, tip, pitch, 0.0), vel, 100.0 + t)
            sent += 1
            wait_for(lambda n=sent: len(ch.wrenches) >= n, EVENT_WAIT_S,
                     lambda n=sent: f"wrench {n} (got {len(ch.wrenches)})")
        # outside the 8 m grid, within the machine's reach (40 m is implausible input now)
        ch.send(BucketPose(10.0, 0.0, 0.0, 0.0, 0.0), np.array([-0.5, 0.0, 0.0]), 502.0)
        wait_for(lambda: len(ch.wrenches) == sent + 1, EVENT_WAIT_S, "the off-grid wrench")
        # its load comes after it, on its own topic
        wait_for(lambda: len(ch.loads) == sent + 1, EVENT_WAIT_S, "the off-grid bucket_load")
        load = ch.loads[-1].data
        assert load > 0.05
        f = ch.wrenches[-1].wrench.force
        assert (f.x, f.y, f.z) == (0.0, 0.0, 0.0)
        wait_for(lambda: ch.payloads and ch.payloads[-1].header.stamp
                 == ch.wrenches[-1].header.stamp, EVENT_WAIT_S, "the off-grid payload")
        assert ch.payloads[-1].inertia.m == pytest.approx(DENSITY * load, rel=1e-9)
        # the status published after that last pose (1 Hz): one from during the scoop carries
        # a smaller load, so the status is waited for by its value, not taken as it comes
        wait_for(lambda: float(ch.status("bucket_load_kg") or 0.0) == pytest.approx(
            DENSITY * load, abs=0.1), EVENT_WAIT_S,
            lambda: f"the load {DENSITY * load:.1f} kg on /diagnostics (last "
            f"{ch.status('bucket_load_kg')})")
    finally:
        probe.close()
        code = proc.stop()
    assert code == 0, proc.log()


@pytest.mark.parametrize(("preset", "expected"), [
    # incomplete (and not even selected): every missing key is named with its range and the fix
    ({"wet_clya": {"density_kg_m3": 1900.0}},
     ["parameter presets.wet_clya.", "is missing; add it", "in the range ",
      "if you meant the preset 'wet_clay'"]),
    # out of range: soil_config's range and message
    ({"test_gravel": {**_gravel(), "density_kg_m3": 9000.0}},
     ["parameter presets.test_gravel.density_kg_m3 = 9000 kg/m^3 is outside 100 .. 5000",
      "set it within the range"]),
])
def test_a_broken_user_preset_stops_soil_node_naming_the_parameter(
        tmp_path: Path, preset: dict[str, Any], expected: list[str]) -> None:
    path = _params_file(tmp_path / "my_soil.yaml", {"presets": preset})
    proc = NodeProcess("excavator_sim.soil.soil_node", ["--ros-args", "--params-file", str(path)],
                       log_dir=tmp_path)
    proc.proc.wait(EVENT_WAIT_S)
    log = proc.log()
    assert proc.proc.returncode == 2, log
    assert "[FATAL] invalid configuration" in log
    for text in expected:
        assert text in log, log
    assert "Traceback" not in log
