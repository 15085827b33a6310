"""The project's Fast DDS profile (config/fastdds_default.xml, excavator_common.dds_profile):
which file a process loads, what the shipped profiles say, and what it changes over real DDS.

The behaviour: a reliable stream beside 0.8 MB samples from the same process loses samples on
one host (the large ones recycle the small ones' shared-memory buffers before a reader took
them), and its reader delivers nothing past the hole until the writer repairs it on a reader's
answer to a HEARTBEAT. Fast DDS's own profile sends one every 3 s (a hold-up of up to 3 s, the
late soil wrenches of test_teleop_impedance_replay in CI); the project's every 0.1 s."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import REPO, NodeProcess, RosTestNode, wait_for

from excavator_common import dds_profile
from excavator_common.dds_profile import PROFILE_ENV, use_project_profile

NS = {"dds": "http://www.eprosima.com"}
SHIPPED = ["fastdds_default.xml", "fastdds_udp.xml", "fastdds_interface.xml"]
BURST_S = 8.0   # [s]: Fast DDS's 3 s heartbeat falls in it at least twice


# --- which profile --------------------------------------------------------------------------
def test_the_project_profile_is_used_when_none_is_chosen() -> None:
    env: dict[str, str] = {}
    path = use_project_profile(env)
    assert path == env[PROFILE_ENV]
    assert Path(path) == REPO / "config" / "fastdds_default.xml" and Path(path).is_file()


@pytest.mark.parametrize("variable", [PROFILE_ENV, dds_profile.LEGACY_PROFILE_ENV])
def test_a_profile_the_user_chose_is_kept(variable: str) -> None:
    env = {variable: "/etc/my_fastdds.xml"}
    assert use_project_profile(env) == "/etc/my_fastdds.xml"
    assert env == {variable: "/etc/my_fastdds.xml"}


def test_skip_default_xml_loads_no_profile() -> None:
    env = {"SKIP_DEFAULT_XML": "1"}
    assert use_project_profile(env) is None
    assert PROFILE_ENV not in env


# --- what the shipped profiles say -----------------------------------------------------------
def _heartbeat_s(profile: Path) -> float:
    """The heartbeat period [s] of the profile's default data writer."""
    root = ET.parse(profile).getroot()
    writers = [w for w in root.iterfind("dds:profiles/dds:data_writer", NS)
               if w.get("is_default_profile") == "true"]
    assert len(writers) == 1, f"{profile.name}: one default data_writer, found {len(writers)}"
    period = writers[0].find("dds:times/dds:heartbeat_period", NS)
    assert period is not None, f"{profile.name}: no heartbeat_period"
    sec, nanosec = (int(period.findtext(f"dds:{k}", "0", NS)) for k in ("sec", "nanosec"))
    return sec + 1e-9 * nanosec


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_profile_repairs_reliable_streams_within_0_1_s(name: str) -> None:
    """The multi-host profiles replace the default one (one file is loaded): they must carry
    the same writer timing."""
    assert 0.0 < _heartbeat_s(REPO / "config" / name) <= 0.1


# --- what it changes, over real DDS ----------------------------------------------------------
def _run_burst(tmp_path: Path, env: dict[str, str]) -> tuple[float, int]:
    """Run the burst publisher with ``env``; the largest send-to-receive time [s] of its small
    stream here, and how many samples it sent (each of which arrived, in order, once)."""
    from dds_burst_publisher import BIG_TOPIC, SMALL_TOPIC
    from rclpy.qos import QoSProfile
    from std_msgs.msg import Float64MultiArray, Int64

    probe = RosTestNode("dds_profile_probe")
    latencies: list[float] = []
    sent: list[int] = []

    def on_small(msg: Int64) -> None:
        latencies.append(1e-9 * (time.monotonic_ns() - msg.data))
        sent.append(msg.data)
    try:
        probe.node.create_subscription(Int64, SMALL_TOPIC, on_small, QoSProfile(depth=1000))
        probe.node.create_subscription(Float64MultiArray, BIG_TOPIC, lambda _raw: None,
                                       QoSProfile(depth=10), raw=True)
        publisher = NodeProcess("dds_burst_publisher", [str(BURST_S)], log_dir=tmp_path,
                                env={"PYTHONPATH": str(REPO / "test"), **env})
        try:
            wait_for(lambda: "acknowledged" in publisher.log(), BURST_S + 60.0,
                     lambda: f"the burst publisher to finish\n{publisher.log()}")
            time.sleep(0.5)   # acknowledged: in this reader's history; the callbacks follow
        finally:
            publisher.stop()
        log = publisher.log()
        count = int(log.split("sent ")[1].split(",")[0])
        assert sent == sorted(set(sent)), "the small stream arrived out of order or twice"
        assert len(sent) == count, f"{count - len(sent)} of {count} samples lost\n{log}"
        return max(latencies), count
    finally:
        probe.close()


def test_a_reliable_stream_beside_large_samples_is_held_up_for_at_most_a_repair(
        tmp_path: Path) -> None:
    """Same publisher twice in one run: with Fast DDS's own writer timing (an empty profile)
    the small stream is held up behind lost samples for seconds; with the project's profile
    for no longer than a repair (0.1 s heartbeat) plus scheduling, well under a second."""
    empty = tmp_path / "fastdds_empty.xml"
    # a profile that sets nothing (Fast DDS refuses a file without one)
    empty.write_text('<?xml version="1.0" encoding="UTF-8" ?>\n'
                     '<dds xmlns="http://www.eprosima.com"><profiles>'
                     '<data_writer profile_name="not_the_default"/></profiles></dds>\n')
    default_hold, default_count = _run_burst(tmp_path, {PROFILE_ENV: str(empty)})
    # unset ("" reads as unset): the publisher picks the project's profile itself
    project_hold, project_count = _run_burst(tmp_path, {PROFILE_ENV: ""})
    print(f"largest hold-up of the 100 Hz stream: Fast DDS's profile {default_hold:.3f} s "
          f"({default_count} samples), the project's {project_hold:.3f} s ({project_count})")
    # the premise: without the profile this load holds the stream up for seconds
    assert default_hold > 1.5
    assert project_hold < 1.0
