"""sim_node's track-command timeout: when ``track_command`` stops arriving (a cut link, a dead
bridge) the simulated base stops after ``track_command_timeout_s`` of simulated time, says so on
``/diagnostics``, and a fresh command moves it again. Over real DDS, sim_node in its own
process; plus the pure core (:mod:`excavator_sim.command_timeout`)."""

from __future__ import annotations

import math
import threading
from pathlib import Path

from diagnostic_msgs.msg import DiagnosticArray
from helpers import REPO, STARTUP_TIMEOUT_S, NodeProcess, RosTestNode, wait_for
from hypothesis import given
from hypothesis import strategies as st
from sensor_msgs.msg import JointState

from excavator_sim.command_timeout import CommandTimeout

LIMIT_S = STARTUP_TIMEOUT_S  # event waits, start-up included: a bound, not a measurement


def test_core_expires_once_per_silence_and_a_command_rearms_it() -> None:
    t = CommandTimeout(0.2)
    assert not t.expires(100.0)            # nothing received yet: nothing to stop
    t.received(1.0)
    assert not t.expires(1.2)              # exactly the timeout: still fresh
    assert t.expires(1.2001)
    assert not t.expires(5.0)              # once per silence
    t.received(5.0)
    assert not t.expired and math.isclose(t.age_s(5.1), 0.1)
    assert t.expires(5.3) and t.expiries == 2


@given(st.floats(0.0, 1e4), st.floats(0.0, 1e4))
def test_core_zero_timeout_holds_forever(arrival: float, later: float) -> None:
    t = CommandTimeout(0.0)
    t.received(arrival)
    assert not t.expires(arrival + later)


def _velocity(msg: JointState, name: str) -> float:
    return msg.velocity[list(msg.name).index(name)]


def _position(msg: JointState, name: str) -> float:
    return msg.position[list(msg.name).index(name)]


def test_base_stops_when_track_commands_stop_and_moves_on_a_fresh_one(tmp_path: Path) -> None:
    probe = RosTestNode("track_timeout_probe")
    states: list[JointState] = probe.collect(JointState, "joint_states", 50)
    diagnostics: list[DiagnosticArray] = probe.collect(DiagnosticArray, "/diagnostics", 50)
    tracks = probe.node.create_publisher(JointState, "track_command", 10)
    sim = NodeProcess("excavator_sim.sim_node",
                      ["--ros-args", "--params-file", str(REPO / "config" / "sim.yaml"),
                       "-p", "real_time_factor:=1.0", "-p", "use_sim_time:=false",
                       "-p", "marker_rate_hz:=0.0", "-p", "track_command_timeout_s:=0.3",
                       "-p", "terrain.nx:=41", "-p", "terrain.ny:=41",
                       "-p", "terrain.cell_size_m:=0.4"], log_dir=tmp_path)
    sending = threading.Event()
    stop = threading.Event()

    def sender() -> None:  # a bridge: 50 Hz while "the link is up"
        msg = JointState(name=["track_left", "track_right"], velocity=[0.5, 0.5])
        while not stop.wait(0.02):
            if sending.is_set():
                tracks.publish(msg)
    thread = threading.Thread(target=sender, daemon=True)
    thread.start()

    def speed() -> float:
        return _velocity(states[-1], "track_left") if states else math.nan

    def status() -> tuple[int, str, dict[str, str]] | None:
        for d in reversed(diagnostics):
            for s in d.status:
                if s.name.startswith("sim_node"):
                    return s.level[0], s.message, {kv.key: kv.value for kv in s.values}
        return None

    try:
        wait_for(lambda: states, LIMIT_S, lambda: f"joint_states from sim_node\n{sim.log()}")
        sending.set()
        wait_for(lambda: abs(speed() - 0.5) < 0.05, LIMIT_S,
                 lambda: f"tracks at 0.5 m/s (now {speed()})\n{sim.log()}")
        x_moving = _position(states[-1], "base_x")
        wait_for(lambda: _position(states[-1], "base_x") > x_moving + 0.2, LIMIT_S,
                 "the base to drive 0.2 m")
        # --- the commands stop (the link is cut) ------------------------------------------
        sending.clear()
        wait_for(lambda: abs(speed()) < 1e-3, LIMIT_S,
                 lambda: f"the tracks to stop without commands (now {speed()})\n{sim.log()}")
        n = len(states)
        wait_for(lambda: len(states) > n + 50, LIMIT_S, "50 more joint_states")
        x_stopped = [_position(m, "base_x") for m in states[n:]]
        assert max(x_stopped) - min(x_stopped) < 0.01, "the base still moves"
        diagnostics.clear()
        wait_for(lambda: (s := status()) is not None and "tracks stopped" in s[1], LIMIT_S,
                 lambda: f"'tracks stopped' on /diagnostics (last {status()})")
        level, message, values = status()  # type: ignore[misc]
        assert level == 1, (level, message)                       # WARN
        assert "track_command_timeout_s 0.3" in message
        assert int(values["track_command_timeouts"]) >= 1
        assert float(values["track_command_age_s"]) > 0.3
        assert "tracks stopped" in sim.log()
        # --- a fresh command moves it again -----------------------------------------------
        sending.set()
        wait_for(lambda: abs(speed() - 0.5) < 0.05, LIMIT_S,
                 lambda: f"tracks at 0.5 m/s again (now {speed()})")
        x_again = _position(states[-1], "base_x")
        wait_for(lambda: _position(states[-1], "base_x") > x_again + 0.2, LIMIT_S,
                 "the base to drive again")
        diagnostics.clear()
        wait_for(lambda: status() is not None, LIMIT_S, "a fresh sim_node status")
        assert "tracks stopped" not in status()[1]  # type: ignore[index]
    finally:
        stop.set()
        thread.join(2.0)
        probe.close()
        code = sim.stop()
    assert code == 0, sim.log()
