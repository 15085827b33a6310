"""The plant link node in its own process, in the whole loop, over real S7 and real DDS:

    Redis -> bridge (in this process, BridgeCore) -> control DB -> virtual PLC (plant_mode
    external, own process) -> plant_out -> plant link (own process) -> plant/actuation -> this
    process, playing the simulation -> plant/sensors + imu -> plant link -> plant_in -> PLC ->
    monitor DB -> bridge -> Redis.

The simulation stand-in publishes fixed measured speeds (its "machine" does not move), so the
PLC's speed loops act on a known error: the torque's sign and its growth (integral action) are
what a PI must do; the monitor keys must show the fed speeds, never the set-points. Faults are
made from outside (the stand-in stops publishing, SIGKILL / SIGSTOP of the PLC, a stalled TCP
proxy, a rogue snap7 client), and nothing is timed on this process's clock: states are waited
for, and what happened when is read from the PLC's own logs (plant_in writes, plant_out reads
with their seq) and the plant link's counters on /diagnostics.
"""

from __future__ import annotations

import itertools
import math
import signal
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import snap7
from helpers import EVENT_WAIT_S, NodeProcess, ros_parameters_file, wait_for

from excavator_hil.faults.tcp_proxy import TcpProxy
from excavator_hil.hil_harness import HilRig
from plc_bridge import redis_keys as keys
from plc_bridge.command_crc import seal
from plc_bridge.config import load_virtual_plc
from plc_bridge.virtual_plc.hil_program import dint

VP = load_virtual_plc()
PATIENT_S = 10.0     # a plant watchdog a stalled test process cannot trip


class SimStandIn:
    """Publishes plant/sensors and imu every 10 ms (the simulated time advancing 10 ms a
    message) with the measured ``speeds``; collects plant/actuation and the plant link's
    /diagnostics. ``frozen`` stops the publishing (a simulation paused or dead)."""

    def __init__(self, probe: Any) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import Imu, JointState

        self.node = probe.node
        self.sensors_pub = self.node.create_publisher(JointState, "plant/sensors",
                                                      qos_profile_sensor_data)
        self.imu_pub = self.node.create_publisher(Imu, "imu", qos_profile_sensor_data)
        self.actuations: list[Any] = []
        self.node.create_subscription(JointState, "plant/actuation", self.actuations.append, 50)
        self.diagnostics: list[dict[str, str]] = []
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 50)
        self.speeds = (0.0, 0.0)
        self.frozen = False
        self.drop = ""            # a joint left out of plant/sensors (a bad message)
        self.sim_ns = 1_000_000_000
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _on_diag(self, msg: Any) -> None:
        for st in msg.status:
            if st.name == "plant_link":
                self.diagnostics.append({"message": st.message,
                                         **{kv.key: kv.value for kv in st.values}})

    def _run(self) -> None:
        from sensor_msgs.msg import Imu, JointState

        while not self._stop.wait(0.01):
            if self.frozen:
                continue
            self.sim_ns += 10_000_000
            js = JointState()
            js.header.stamp.sec, js.header.stamp.nanosec = divmod(self.sim_ns, 1_000_000_000)
            names = ["track_left", "track_right", "ground_speed", "drive_ready",
                     "drive_fault", "brake"]
            nan = math.nan
            position = [0.0, 0.0, nan, 1.0, 0.0, 0.0]
            velocity = [*self.speeds, sum(self.speeds) / 2, nan, nan, nan]
            effort = [0.0, 0.0, nan, nan, nan, nan]
            keep = [i for i, n in enumerate(names) if n != self.drop]
            js.name = [names[i] for i in keep]
            js.position = [position[i] for i in keep]
            js.velocity = [velocity[i] for i in keep]
            js.effort = [effort[i] for i in keep]
            imu = Imu()
            imu.header.stamp = js.header.stamp
            imu.header.frame_id = "base_link"
            imu.orientation.w = 1.0
            self.sensors_pub.publish(js)
            self.imu_pub.publish(imu)

    def diag(self) -> dict[str, str]:
        return self.diagnostics[-1] if self.diagnostics else {}

    def counter(self, name: str) -> int:
        return int(self.diag().get(f"counter.{name}", "0"))

    def wait_diag(self, predicate: Any, what: str, timeout: float = EVENT_WAIT_S) -> dict[str, str]:
        return wait_for(lambda: self.diagnostics and predicate(self.diag()) and self.diag(),
                        timeout, lambda: f"{what} (last diagnostics {self.diag()})")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)


def torques(msg: Any) -> list[float]:
    return [msg.effort[msg.name.index(n)] for n in ("track_left", "track_right")]


def flag(msg: Any, name: str) -> bool:
    return msg.position[msg.name.index(name)] == 1.0


class Loop:
    """The whole loop of the module docstring."""

    def __init__(self, redis_url: str, spawn: Any, tmp_path: Any, probe: Any,
                 plant_watchdog_s: float = PATIENT_S, via_proxy: bool = False) -> None:
        # the PLC's watchdog on the bridge: patient, the bridge runs in this (loaded) process
        plant = ros_parameters_file(tmp_path / "virtual_plc_external.yaml", {
            "plant_mode": "external", "plant_watchdog_timeout_s": plant_watchdog_s,
            "watchdog_timeout_s": PATIENT_S})
        self.rig = HilRig("skid_steer", redis_url, spawn, plc_args=["--plant-config",
                                                                      str(plant)])
        self.sim = SimStandIn(probe)
        self.proxy = TcpProxy(self.rig.plc_port) if via_proxy else None
        port = self.proxy.port if self.proxy else self.rig.plc_port
        self.link = spawn("plc_bridge.plant_link.node",
                          ["--ros-args", "-p", f"plc_port:={port}"])
        self.cfg = self.rig.config

    def start_driving(self, longitudinal: float, angular: float = 0.0) -> None:
        self.rig.start()
        self.rig.command(longitudinal, 0.0, angular)
        wait_for(lambda: self.rig.get(keys.BRIDGE_STATUS) == "running", EVENT_WAIT_S,
                 lambda: f"bridge running (now {self.rig.get(keys.BRIDGE_STATUS)}: "
                         f"{self.rig.get(keys.BRIDGE_DETAIL)}; plant link "
                         f"{self.sim.diag()}; {self.link.log()[-2000:]})")

    def driving(self) -> list[Any]:
        """Actuations that drive (enable on)."""
        return [m for m in self.sim.actuations if flag(m, "drive_enable")]

    def close(self) -> None:
        self.sim.close()
        self.rig.close()
        if self.proxy:
            self.proxy.close()


@pytest.fixture
def loop(redis_server, spawn, tmp_path, ros_node) -> Iterator[Loop]:
    lp = Loop(redis_server.url, spawn, tmp_path, ros_node)
    yield lp
    lp.close()


def test_a_set_point_gives_torque_of_the_right_sign_and_the_monitor_shows_the_measurement(loop):
    """0.8 m/s forward against measured 0.3 / 0.3 m/s: both torques positive and growing
    (integral action) on plant/actuation, drives enabled, brakes off; Redis shows the measured
    0.3 m/s, not the 0.8 m/s set-point. Then a turn on the spot against measured 0: the left
    track pulls back, the right forward."""
    loop.sim.speeds = (0.3, 0.3)
    loop.start_driving(0.8)

    def pulling(drive: list[Any]) -> bool:
        """30 actuations in a row that drive forward with the integral growing."""
        left = [torques(m)[0] for m in drive]
        return (len(drive) == 30 and all(not flag(m, "brake") for m in drive)
                and all(t > 0.0 for m in drive for t in torques(m))
                and all(b >= a for a, b in itertools.pairwise(left)) and left[-1] > left[0])

    # Waited for, not taken at a count: on a loaded host the stack may go through a real fault
    # first (the 100 ms S7 timeout, the plant watchdog), and its recovery rightly begins with a
    # stop and the set-point's ramp (negative torque while it is under the measured 0.3 m/s).
    # A PI that never pulls, or whose integral does not grow, still fails here. The integral
    # needs ~5 s to reach the torque limit, far longer than 30 actuations (0.3 s).
    drive = wait_for(lambda: pulling(d := loop.driving()[-30:]) and d, EVENT_WAIT_S,
                     lambda: "30 actuations in a row pulling forward, torque growing (last: "
                             f"{[torques(m) for m in loop.driving()[-5:]]})")
    assert all(math.isnan(m.velocity[m.name.index("track_left")]) for m in drive)
    monitor = (keys.wheel_speed_key("left"), keys.wheel_speed_key("right"),
               keys.MON_LONGITUDINAL)

    def measured() -> list[float]:
        return [float(loop.rig.get(key) or "nan") for key in monitor]

    # the measured 0.3 m/s, never the 0.8 m/s set-point (waited for: a fault on a loaded host
    # rightly shows nan meanwhile)
    wait_for(lambda: measured() == pytest.approx([0.3] * 3, abs=1e-6), EVENT_WAIT_S,
             lambda: f"the monitor showing the measured 0.3 m/s: {measured()} ({monitor})")
    # the PLC's monitor bits on Redis: the plant is there, the drives not saturated yet
    assert loop.rig.get(keys.state_key("plant_lost")) == "false"
    loop.sim.speeds = (0.0, 0.0)
    loop.rig.command(0.0, 0.0, 0.5)
    wait_for(lambda: (t := torques(loop.driving()[-1]))[0] < 0.0 < t[1], EVENT_WAIT_S,
             "left torque back, right forward")
    diag = loop.sim.wait_diag(lambda d: d.get("status") == "running", "plant link running")
    assert int(diag["counter.forwarded"]) > 30 and int(diag["counter.refused"]) == 0


def test_a_sensors_message_lacking_a_joint_is_refused_counted_and_named(loop):
    """plant/sensors without ``track_right`` (taken and judged by the exchange thread, each
    message): not used, counted and named on /diagnostics; plant_in's alive counter stands
    (nothing newer was used) and runs again with the first whole message."""
    loop.sim.wait_diag(lambda d: d.get("status") == "running", "plant link running")
    loop.sim.drop = "track_right"
    first = loop.sim.wait_diag(
        lambda d: int(d.get("sensor_messages_rejected", "0")) >= 10, "rejections counted")
    assert "lacks joint 'track_right'" in first["last_sensor_error"]
    rejected = int(first["sensor_messages_rejected"])
    later = loop.sim.wait_diag(
        lambda d: int(d.get("sensor_messages_rejected", "0")) >= rejected + 50,
        "50 more rejections")
    assert later["plant_in_alive"] == first["plant_in_alive"]
    assert int(later["counter.sim_time_repeated"]) > int(first["counter.sim_time_repeated"])
    loop.sim.drop = ""
    loop.sim.wait_diag(lambda d: d["plant_in_alive"] != later["plant_in_alive"],
                       "the alive counter running again")


def test_a_frozen_simulation_trips_plant_lost_and_the_bridge_names_it(redis_server, spawn,
                                                                      tmp_path, ros_node):
    """The simulation stops publishing (SIGSTOP or death look the same to the plant link): the
    plant link keeps writing plant_in but the alive counter stops with the simulated time, the
    PLC's plant watchdog (the shipped 0.25 s) puts the drives in the safe state, and the bridge
    reports stopped:plc_plant_lost on Redis; the actuations after it brake."""
    lp = Loop(redis_server.url, spawn, tmp_path, ros_node,
              plant_watchdog_s=VP.plant_watchdog_timeout_s)
    try:
        lp.sim.speeds = (0.2, 0.2)
        lp.start_driving(0.5)
        wait_for(lp.driving, EVENT_WAIT_S, "driving")
        lp.sim.frozen = True
        wait_for(lambda: lp.rig.get(keys.BRIDGE_STATUS) == "stopped:plc_plant_lost", EVENT_WAIT_S,
                 lambda: f"stopped:plc_plant_lost (now {lp.rig.get(keys.BRIDGE_STATUS)})")
        assert "plant_lost" in lp.rig.get(keys.BRIDGE_DETAIL)
        assert lp.rig.get(keys.state_key("plant_lost")) == "true"
        assert lp.rig.get(keys.state_key("fault")) == "true"
        n = len(lp.sim.actuations)
        wait_for(lambda: len(lp.sim.actuations) > n + 20,
                 EVENT_WAIT_S, "actuations after plant_lost")
        # one read before the PLC's plant_lost scan may still have been on its way
        after = lp.sim.actuations[n:]
        first = next(i for i, m in enumerate(after) if flag(m, "brake"))
        assert first <= 1 and len(after) - first > 10
        assert all(flag(m, "brake") and not flag(m, "drive_enable") for m in after[first:])
        assert all(t == 0.0 for m in after[first:] for t in torques(m))
        diag = lp.sim.wait_diag(lambda d: int(d.get("counter.sim_time_repeated", 0)) > 10,
                                "plant_in writes without a newer simulated time")
        assert diag["status"] == "running"   # the link itself is fine
        # the PLC's log: plant_in writes went on, their alive counter stood still
        writes = lp.rig.plc.plant_writes(lp.rig.plc.status()["now"] - 0.2)
        assert len(writes) > 3 and len({w["alive"] for w in writes}) == 1
    finally:
        lp.close()


def test_a_killed_plc_leaves_nothing_driving(loop):
    """SIGKILL of the PLC: the plant link's next request fails, it publishes one brake and
    nothing after it drives (there is no PLC: the simulation's timeout would brake anyway)."""
    loop.sim.speeds = (0.3, 0.3)
    loop.start_driving(0.6)
    wait_for(lambda: len(loop.driving()) > 5, EVENT_WAIT_S, "driving")
    n = len(loop.sim.actuations)
    loop.rig.kill_plc()
    loop.sim.wait_diag(lambda d: int(d.get("counter.link_faults", 0)) >= 1, "link fault seen")
    loop.sim.wait_diag(lambda d: int(d.get("counter.link_down_periods", 0)) > 50,
                       "periods without a PLC")
    # after the kill: what was read before it (if anything was in flight), then one brake,
    # then nothing
    after = loop.sim.actuations[n:]
    brakes = [i for i, m in enumerate(after) if not flag(m, "drive_enable")]
    assert brakes and brakes[-1] == len(after) - 1, "the last actuation must brake"
    assert len(after) - brakes[0] == 1, "nothing after the brake"
    last = after[-1]
    assert flag(last, "brake") and torques(last) == [0.0, 0.0]
    assert loop.sim.diag()["status"] == "link_lost"


def test_a_paused_plc_resumes_without_any_actuation_from_its_old_memory(redis_server, spawn,
                                                                       tmp_path, ros_node):
    """A PLC paused (SIGSTOP) with an actuation in its memory the plant link never read (the
    link was cut while it was written, its plant program then stopped writing): when the PLC
    answers again the plant link reconnects, and that old block, though its seq is newer than
    anything forwarded, is a baseline and never forwarded; what the PLC writes after is."""
    lp = Loop(redis_server.url, spawn, tmp_path, ros_node, via_proxy=True)
    try:
        lp.sim.speeds = (0.3, 0.3)
        lp.start_driving(0.6)
        wait_for(lambda: len(lp.driving()) > 5, EVENT_WAIT_S, "driving")
        assert lp.proxy is not None
        lp.proxy.block_new = True
        lp.proxy.stall()
        lp.sim.wait_diag(lambda d: int(d.get("counter.link_faults", 0)) >= 1, "link fault")
        lp.rig.plc.faults(freeze_plant_out=True)
        cfg = lp.cfg
        marker = 1234.5                                      # a torque nobody else writes
        rogue = snap7.Client()
        rogue.connect("127.0.0.1", 0, 1, lp.rig.plc_port)
        try:
            out = cfg.plant_out.decode(rogue.db_read(cfg.plant_out_db, 0, cfg.plant_out.size))
            old = {**out, "seq": dint(out["seq"] + 1000), "enable": True, "brake": False,
                   "torque_sp_left": marker, "torque_sp_right": marker}
            # sealed (as a PLC program writes it): the baseline rule, not the CRC, must hold it
            rogue.db_write(cfg.plant_out_db, 0, bytearray(seal(cfg.plant_out,
                                                               cfg.plant_out.encode(old))))
        finally:
            rogue.disconnect()
        proc = lp.rig.plc_proc.proc
        proc.send_signal(signal.SIGSTOP)
        try:
            down = lp.sim.counter("link_down_periods")
            lp.proxy.block_new = False
            lp.proxy.release()                               # the way is open, the PLC paused
            lp.sim.wait_diag(lambda d: int(d.get("counter.link_down_periods", 0)) > down + 20,
                             "periods against the paused PLC")
            reconnects = lp.sim.counter("plc_reconnects")
        finally:
            proc.send_signal(signal.SIGCONT)
        diag = lp.sim.wait_diag(lambda d: d.get("status") == "running"
                                and int(d.get("counter.plc_reconnects", 0)) > reconnects,
                                "reconnected", EVENT_WAIT_S)
        fresh = int(diag["counter.not_fresh"])
        lp.sim.wait_diag(lambda d: int(d.get("counter.not_fresh", 0)) > fresh + 20,
                         "reads of the old block")
        assert not any(marker in torques(m) for m in lp.sim.actuations), "old memory acted"
        lp.rig.plc.faults(freeze_plant_out=False)            # the PLC writes again: forwarded
        forwarded = lp.sim.counter("forwarded")
        lp.sim.wait_diag(lambda d: int(d.get("counter.forwarded", 0)) > forwarded + 5,
                         "fresh actuations forwarded")
        assert not any(marker in torques(m) for m in lp.sim.actuations)
    finally:
        lp.close()


def test_a_cut_link_brakes_and_nothing_drives_until_it_is_back(redis_server, spawn, tmp_path,
                                                             ros_node):
    """The plant link's S7 connection through a proxy that stalls (a pulled cable): requests
    time out, one brake, no driving actuation while it is cut; released, the link reconnects
    (a new baseline) and the loop drives again."""
    lp = Loop(redis_server.url, spawn, tmp_path, ros_node, via_proxy=True)
    try:
        lp.sim.speeds = (0.3, 0.3)
        lp.start_driving(0.6)
        wait_for(lambda: len(lp.driving()) > 5, EVENT_WAIT_S, "driving")
        assert lp.proxy is not None
        lp.proxy.block_new = True                            # no way round the cut either
        lp.proxy.stall()
        lp.sim.wait_diag(lambda d: int(d.get("counter.link_faults", 0)) >= 1, "link fault")
        wait_for(lambda: flag(lp.sim.actuations[-1], "brake"), EVENT_WAIT_S, "the brake")
        n = len(lp.sim.actuations)
        lp.sim.wait_diag(lambda d: int(d.get("counter.link_down_periods", 0)) > 30,
                         "periods without the link")
        assert len(lp.sim.actuations) == n                   # nothing while cut
        lp.proxy.block_new = False
        lp.proxy.release()
        lp.sim.wait_diag(lambda d: d.get("status") == "running"
                         and int(d.get("counter.plc_reconnects", 0)) >= 1, "reconnected",
                         EVENT_WAIT_S)
        k = len(lp.driving())
        wait_for(lambda: len(lp.driving()) > k + 5, EVENT_WAIT_S, "driving again")
    finally:
        lp.close()


def test_a_nan_in_plant_out_is_not_forwarded_as_a_number(loop):
    """The PLC's plant program stops writing plant_out (freeze_plant_out) and a rogue snap7
    client writes one with a newer seq and a NaN torque: the plant link forwards a brake (finite
    zero torques, drives off), counts it and names it on /diagnostics."""
    loop.sim.speeds = (0.3, 0.3)
    loop.start_driving(0.6)
    wait_for(lambda: len(loop.driving()) > 5, EVENT_WAIT_S, "driving")
    loop.rig.plc.faults(freeze_plant_out=True)
    cfg = loop.cfg
    rogue = snap7.Client()
    rogue.connect("127.0.0.1", 0, 1, loop.rig.plc_port)
    try:
        out = cfg.plant_out.decode(rogue.db_read(cfg.plant_out_db, 0, cfg.plant_out.size))
        data = bytearray(cfg.plant_out.encode({**out, "seq": dint(out["seq"] + 1000),
                                               "enable": True, "brake": False}))
        at = cfg.plant_out.field("torque_sp_left").byte_offset
        data[at:at + 4] = struct.pack(">f", math.nan)
        data = bytearray(seal(cfg.plant_out, data))   # a whole block, with a NaN set-point
        n = len(loop.sim.actuations)
        rogue.db_write(cfg.plant_out_db, 0, data)
    finally:
        rogue.disconnect()
    diag = loop.sim.wait_diag(lambda d: int(d.get("counter.refused", 0)) >= 1, "refused")
    assert "torque_sp_left = nan" in diag["last_refusal"]
    wait_for(lambda: len(loop.sim.actuations) > n, EVENT_WAIT_S, "the brake")
    after = loop.sim.actuations[n:]
    assert all(math.isfinite(t) for m in after for t in torques(m))
    assert flag(after[-1], "brake") and not flag(after[-1], "drive_enable")
    assert torques(after[-1]) == [0.0, 0.0]


def test_bad_parameters_end_the_node_with_one_message(tmp_path):
    for args, text in ((["-p", "exchange_hz:=0.0"], "exchange_hz = 0 Hz is outside 1 .. 1000"),
                       (["-p", "write_allow_list:=[100, 102]"], "holds control_db = 100"),
                       (["-p", "exchange_rate:=5.0"], "unknown parameter 'exchange_rate'")):
        proc = NodeProcess("plc_bridge.plant_link.node", ["--ros-args", *args],
                           log_dir=tmp_path)
        assert proc.proc.wait(EVENT_WAIT_S) == 2, proc.log()
        assert text in proc.log() and "Traceback" not in proc.log(), proc.log()
