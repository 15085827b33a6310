"""The faults of issue 27 on the whole loop, made from outside as they happen (helpers.HilLoop:
Redis -> bridge -> virtual PLC -> plant link -> sim_node -> plant link -> PLC -> bridge -> Redis,
every part real, each in its own process but the bridge):

- the simulation frozen (SIGSTOP) or killed: the PLC sees the simulation's alive counter stop
  and puts the drives in the safe state within its plant watchdog time (judged on the PLC's own
  log), the bridge names the cause on Redis (``stopped:plc_plant_lost``) and the PLC's monitor
  bits say it; the loop recovers when the simulation runs again (SIGCONT, or a new run);
- the PLC paused or killed, the plant link killed, the plant link's TCP link to the PLC cut:
  the simulated drives brake to a standstill (judged on plant/sensors' stamped rows, in
  simulated time), no actuation older than the actuation timeout drives (sim_node's own record
  on /diagnostics), and nothing the PLC wrote before the fault acts after it: every
  ``actuation_seq`` the plant link reports in ``plant_in`` after the fault (the PLC's log of
  plant_in writes) is the one it had forwarded before, or a block the PLC wrote after the fault
  (its log of the plant_out blocks it wrote); the PLC killed and the link cut also with the
  plant link on OPC UA (helpers.OpcUaHilLoop: Basic256Sha256 SignAndEncrypt with a user login
  to the virtual PLC's OPC UA server; the bridge stays on S7);
- NaN, inf or an out-of-range torque in ``plant_out`` written by a rogue S7 client (a buggy PLC
  program; the virtual PLC's own plant program frozen): a drive fault that brakes, named on
  /diagnostics, seen by the PLC (``plant_in.drive_fault``, its fault bit on Redis), while the
  simulation keeps running.

Nothing is timed on this process's clock: figures come from stamped records (plant/sensors in
simulated time, the PLC's logs in its monotonic time, sim_node's diagnostics); the waits are
generous for a loaded host.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import EVENT_WAIT_S, HilLoop, OpcUaHilLoop, RogueWriter, wait_for

from excavator_hil.hil_harness import HilRig
from plc_bridge import redis_keys as keys
from plc_bridge.command_seq import seq_newer
from plc_bridge.command_seq import to_dint as dint

SPEED_M_S = 0.5
WATCHDOG_S = 1.0      # the PLC's plant watchdog where a test is about it (patient: a loaded
                      # host's sim_node must not trip it while it runs)
TIMEOUT_S = 0.5       # sim_node's plant_actuation_timeout_s [s of simulated time]
BURST_S = 0.06        # sim_node checks the timeout once per burst of periods (test_sim_plant)
RUN_S = 15.0          # simulated time before the simulation is killed [s]
BRAKE_S = 1.0         # braked from 0.5 m/s to a standstill within this [s of simulated time]


@pytest.fixture
def make_loop(redis_server: Any, spawn: Any, tmp_path: Path,
              ros_node: Any) -> Iterator[Callable[..., HilLoop]]:
    loops: list[HilLoop] = []

    def make(transport: str = "s7", **kw: Any) -> HilLoop:
        # the plant link's transport: the bridge stays on S7 either way
        loop = OpcUaHilLoop if transport == "opcua" else HilLoop
        lp = loop(redis_server.url, spawn, tmp_path, ros_node,
                  actuation_timeout_s=TIMEOUT_S, **kw)
        loops.append(lp)
        return lp

    yield make
    for lp in loops:
        lp.close()


# --- records ---------------------------------------------------------------------------------
def wait_stopped(pid: int) -> None:
    """Until the kernel shows ``pid`` stopped (state T): it runs no more instruction."""
    def state() -> str:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]

    wait_for(lambda: state() == "T", EVENT_WAIT_S, f"process {pid} stopped")


def plc_proc(rig: HilRig) -> Any:
    return getattr(rig.plc_proc, "proc", rig.plc_proc)


def braked_to_a_standstill(lp: HilLoop, t0: float) -> tuple[float, float]:
    """From plant/sensors' rows after simulated time ``t0`` (the last row seen before the
    fault): the first braked row, and the first row at a standstill after it [s of simulated
    time]; asserts the standstill within ``BRAKE_S`` of the brake and that the machine stays
    braked and still in every row after it."""
    def rested() -> tuple[float, float] | None:
        rows = lp.record.since(t0)
        braked = np.flatnonzero(rows[:, 4] == 1.0)
        if not len(braked):
            return None
        t_brake = rows[braked[0], 0]
        after = rows[braked[0]:]
        still = np.flatnonzero((after[:, 1] == 0.0) & (after[:, 2] == 0.0)
                               & (np.abs(after[:, 3]) < 1e-3))
        if not len(still) or after[-1, 0] < after[still[0], 0] + 1.0:
            return None   # not yet, or not yet a second of rows at rest to judge
        return float(t_brake), float(after[still[0], 0])

    t_brake, t_rest = wait_for(rested, EVENT_WAIT_S, lambda: f"braked to a standstill after {t0} s "
                               f"(last rows {lp.record.since(t0)[-3:]})\n{lp.logs()}")
    assert t_rest - t_brake < BRAKE_S, (t_brake, t_rest)
    resting = lp.record.since(t_rest)
    assert np.all(resting[:, 4] == 1.0) and np.all(resting[:, 1:3] == 0.0), resting[:5]
    return t_brake, t_rest


def no_actuation_outlived_its_timeout(lp: HilLoop, timeouts_before: int, t_after: float
                                      ) -> None:
    """sim_node's record (/diagnostics, from a status after simulated time ``t_after``): the
    drives were braked by an actuation before the timeout, or by the timeout itself with the
    latest actuation at most ``TIMEOUT_S`` (+ one burst) old: no actuation from before the
    fault drove longer than that."""
    _, _, values = wait_for(lambda: (s := lp.record.sim_status())[2] and float(
        s[2]["sim_time_s"]) > t_after and s, EVENT_WAIT_S, "a sim_node status after the standstill")
    if int(values["plant_actuation_timeouts"]) > timeouts_before:
        # sim_node reports the age to the ms: its "> TIMEOUT_S" may print as exactly 0.500
        age = float(values["plant_actuation_age_at_timeout_s"])
        assert TIMEOUT_S - 5e-4 <= age <= TIMEOUT_S + BURST_S, values


def sim_timeouts(lp: HilLoop) -> int:
    # (a status with the plant's figures: sim_node's first ones may come before it has any)
    values = wait_for(lambda: (v := lp.record.sim_status()[2]).get("plant_actuation_timeouts")
                      is not None and v, EVENT_WAIT_S, "a sim_node status with the plant's figures")
    return int(values["plant_actuation_timeouts"])


def nothing_from_before_acts(rig: HilRig, back: float, fault: float) -> None:
    """By the PLC's own records (this host's monotonic clock): its log of ``plant_in`` writes
    from ``back`` (the fault's end) and its log of the ``plant_out`` blocks it wrote (time,
    seq). Every ``actuation_seq`` the plant link reports after the fault (the seq of the last
    ``plant_out`` it forwarded) is either the one it had forwarded before the fault (at most
    one value, in a prefix: that block had acted before the fault; written before ``fault``
    where the same PLC process logged it, and older than every block forwarded since) or a block
    the PLC wrote after ``back``; none is a block written during the fault; and forwarding has
    resumed. Seqs are compared in RFC 1982 order, as the plant link does."""
    writes = rig.plc.plant_writes(back)  # type: ignore[union-attr]
    seqs = [int(w["actuation_seq"]) & 0xFFFFFFFF for w in writes]
    logged = rig.plc.plant_out_writes(0.0)  # type: ignore[union-attr]
    after = {int(q) & 0xFFFFFFFF for t, q in logged if t >= back}
    # empty for a PLC restarted since (a new process, a new log)
    before = {int(q) & 0xFFFFFFFF for t, q in logged if t < fault}
    fresh = [i for i, q in enumerate(seqs) if q in after]
    assert fresh, f"no actuation forwarded after the fault ({seqs[-5:]})"
    old = set(seqs[:fresh[0]])
    assert len(old) <= 1, old
    assert not before or old <= before | {0}, (old, "written during the fault")
    forwarded = seqs[fresh[0]:]
    # from the first block written after the fault on, only such blocks act
    assert all(a in after for a in forwarded), (sorted(after)[:3], forwarded[:3])
    if before:
        # the same PLC process: its seqs only grow, so none of them is older than the old one
        assert all(seq_newer(a, o) for o in old for a in forwarded), (old, forwarded[:3])
    # A PLC restarted with its memory lost numbers its first blocks from the plant_in it found
    # (none yet: from 0) until it reads the link's last forwarded seq, and the link takes its
    # first block after reconnecting as a baseline: what follows may be older by number than
    # the old process's last block (seen: 66048 after 66336, then 131874) though the old
    # process and its blocks are gone; every one of them is in the new process's log.
    late = [q for q in seqs[fresh[0]:] if q not in after]
    assert not late, f"blocks not written after the fault acted after it: {late[:5]}"


def recovered(lp: HilLoop) -> None:
    """The bridge running again and the tracks driving the commanded speed again."""
    lp.wait_status("running", EVENT_WAIT_S)
    n = len(lp.record.rows)   # by arrival: a new run's simulated time starts from 0 again
    wait_for(lambda: any(r[1] > 0.8 * SPEED_M_S for r in lp.record.rows[n:]), EVENT_WAIT_S,
             lambda: f"driving again\n{lp.logs()}")
    wait_for(lambda: lp.rig.get(keys.STATE_VALID) == "true",
             EVENT_WAIT_S, "the measurements valid again")


# --- the simulation frozen or killed ---------------------------------------------------------
def plc_went_safe_within_its_watchdog(rig: HilRig) -> None:
    """The PLC's own record: the last scan that drove was at most the plant watchdog time after
    the scan that last saw the alive counter move, and plant_lost came no earlier than it."""
    st = rig.plc.status()  # type: ignore[union-attr]
    assert st["hil"]["mode"] == "safe" and st["hil"]["plant_lost"], st["hil"]
    assert st["hil"]["torques"] == [0.0, 0.0]
    writes = rig.plc.plant_writes(st["now"] - 30.0)  # type: ignore[union-attr]
    i = len(writes) - 1                              # the last write that changed alive
    while i > 0 and writes[i - 1]["alive"] == writes[i]["alive"]:
        i -= 1
    seen = st["plant_alive_seen_at"]
    # (no order between writes[i]["t"] and seen: the server logs a write when its event is
    # handled, after the bytes landed, and a scan in between sees them first: 1.7 ms once on a
    # loaded host; t is a late bound of the write, which the last check below allows for)
    assert st["drove_at"] - seen <= WATCHDOG_S
    assert st["changed_at"]["plant_lost"] - writes[i]["t"] > WATCHDOG_S
    # its log of mode changes says the same: from drive to safe, at the scan after the last
    # that drove (what the demo's figures take as when it drove)
    modes = rig.plc.modes(st["now"] - 30.0)  # type: ignore[union-attr]
    assert [m for _, m in modes[-2:]] == ["drive", "safe"], modes
    assert st["drove_at"] < modes[-1][0] <= st["changed_at"]["plant_lost"], (modes, st)


def plant_lost_on_redis(lp: HilLoop) -> None:
    rig = lp.rig
    wait_for(lambda: rig.get(keys.BRIDGE_STATUS) == "stopped:plc_plant_lost", EVENT_WAIT_S,
             lambda: f"stopped:plc_plant_lost\n{lp.logs()}")
    assert "plant_lost" in (rig.get(keys.BRIDGE_DETAIL) or "")
    wait_for(lambda: rig.get(keys.state_key("plant_lost")) == "true",
             EVENT_WAIT_S, "plant_lost key")
    assert rig.get(keys.state_key("fault")) == "true"
    assert rig.core.snapshot().plc_state["plant_lost"]   # the bridge's /diagnostics plc.*
    # the PLC's inputs are the last the simulation sent: no measurement of now, never frozen
    assert rig.get(keys.MON_LONGITUDINAL) == keys.INVALID
    assert rig.get(keys.STATE_VALID) == "false"


@pytest.mark.parametrize("how", ["frozen", "killed"])
def test_a_lost_simulation_puts_the_plc_in_its_safe_state_and_the_loop_recovers(
        make_loop: Callable[..., HilLoop], how: str) -> None:
    lp = make_loop(plant_watchdog_s=WATCHDOG_S)
    lp.drive(SPEED_M_S)
    # a run long enough that a new one must be followed before its time gets this far
    wait_for(lambda: lp.record.last_t() > RUN_S, 120.0, f"{RUN_S} s of simulated time")
    sim = lp.sim
    if how == "frozen":
        sim.proc.send_signal(signal.SIGSTOP)
        wait_stopped(sim.pid)
    else:
        sim.proc.send_signal(signal.SIGKILL)
        sim.proc.wait(EVENT_WAIT_S)
    try:
        plant_lost_on_redis(lp)
        plc_went_safe_within_its_watchdog(lp.rig)
        # the plant link is fine and keeps writing plant_in: only the simulated time stands
        wait_for(lambda: (d := lp.record.last("plant_link"))[2].get(
            "status") == "running" and int(d[2]["counter.sim_time_repeated"]) > 50 and d,
            EVENT_WAIT_S, lambda: f"plant_in writes without a newer simulated time "
                          f"({lp.record.last('plant_link')})")
        # the PLC keeps it lost while the simulation is away
        assert lp.rig.get(keys.state_key("plant_lost")) == "true"
    finally:
        if how == "frozen":
            sim.proc.send_signal(signal.SIGCONT)
    if how == "killed":
        t_end = lp.record.last_t()
        lp.start_sim()   # a new run: its simulated time starts again from 0
        wait_for(lambda: lp.record.rows[-1][0] < t_end, 120.0,
                 lambda: f"the new run's plant/sensors\n{lp.logs()}")
        n = len(lp.record.rows)
    recovered(lp)
    assert lp.rig.get(keys.state_key("plant_lost")) == "false"
    if how == "killed":   # the new run is followed at once, not once its time passed the old's
        rows = np.array(lp.record.rows[n:])
        assert rows[rows[:, 1] > 0.8 * SPEED_M_S][0, 0] < t_end, (t_end, rows[-1])


# --- the PLC, the plant link, the link between them --------------------------------------------
def link_lost(lp: HilLoop, transport: str) -> None:
    """The plant link on /diagnostics: ERROR ``link_lost``, naming the PLC on its transport."""
    wait_for(lambda: lp.record.last("plant_link")[2].get("status") == "link_lost", EVENT_WAIT_S,
             lambda: f"plant link link_lost ({lp.record.last('plant_link')})")
    assert lp.record.last("plant_link")[0] == 2      # ERROR
    if transport == "opcua":
        assert "opc.tcp://" in str(lp.record.last("plant_link")[1])


@pytest.mark.parametrize(("how", "transport"),
                         [("paused", "s7"), ("killed", "s7"), ("killed", "opcua")])
def test_a_lost_plc_brakes_the_simulated_drives_and_nothing_old_acts_after_it(
        make_loop: Callable[..., HilLoop], how: str, transport: str) -> None:
    lp = make_loop(transport)
    rig = lp.rig
    lp.drive(SPEED_M_S)
    timeouts = sim_timeouts(lp)
    t0 = lp.record.last_t()
    proc = plc_proc(rig)
    if how == "paused":
        proc.send_signal(signal.SIGSTOP)
        wait_stopped(proc.pid)
    else:
        rig.kill_plc()
    fault = time.monotonic()            # the PLC wrote nothing after this
    try:
        _, t_rest = braked_to_a_standstill(lp, t0)
        no_actuation_outlived_its_timeout(lp, timeouts, t_rest)
        link_lost(lp, transport)
        lp.wait_status("stopped:plc_link_lost", EVENT_WAIT_S)
        time.sleep(1.0)   # the fault lasts a while (not a measurement: the PLC is away)
    finally:
        back = time.monotonic()
        if how == "paused":
            proc.send_signal(signal.SIGCONT)
        else:
            rig.start_plc()               # a new PLC on the same ports (OPC UA served again)
    recovered(lp)
    nothing_from_before_acts(rig, back, fault)


def test_a_killed_plant_link_brakes_on_the_actuation_timeout(
        make_loop: Callable[..., HilLoop]) -> None:
    lp = make_loop(plant_watchdog_s=WATCHDOG_S)
    lp.drive(SPEED_M_S)
    timeouts = sim_timeouts(lp)
    t0 = lp.record.last_t()
    lp.link.proc.send_signal(signal.SIGKILL)
    lp.link.proc.wait(EVENT_WAIT_S)
    fault = time.monotonic()
    _, t_rest = braked_to_a_standstill(lp, t0)
    # no plant link, no brake from it: sim_node's own timeout braked
    _, _, values = wait_for(lambda: (s := lp.record.sim_status())[2] and float(
        s[2]["sim_time_s"]) > t_rest and s, EVENT_WAIT_S, "a sim_node status after the standstill")
    assert int(values["plant_actuation_timeouts"]) > timeouts, values
    no_actuation_outlived_its_timeout(lp, timeouts, t_rest)
    # the PLC's plant_in is no longer written: its plant watchdog, the cause on Redis
    plant_lost_on_redis(lp)
    back = time.monotonic()
    lp.start_link()
    recovered(lp)
    nothing_from_before_acts(lp.rig, back, fault)


@pytest.mark.parametrize("transport", ["s7", "opcua"])
def test_a_cut_plant_link_cable_brakes_and_nothing_old_acts_after_it(
        make_loop: Callable[..., HilLoop], transport: str) -> None:
    lp = make_loop(transport, plant_watchdog_s=WATCHDOG_S, via_proxy=True)
    assert lp.proxy is not None
    lp.drive(SPEED_M_S)
    timeouts = sim_timeouts(lp)
    t0 = lp.record.last_t()
    lp.proxy.cut()
    fault = time.monotonic()
    try:
        _, t_rest = braked_to_a_standstill(lp, t0)
        no_actuation_outlived_its_timeout(lp, timeouts, t_rest)
        link_lost(lp, transport)
        # the PLC's plant_in is no longer written: its plant watchdog, the cause on Redis
        plant_lost_on_redis(lp)
    finally:
        back = time.monotonic()
        lp.proxy.restore()
    recovered(lp)
    # blocks the PLC wrote during the cut never reached the simulation
    nothing_from_before_acts(lp.rig, back, fault)


# --- bad values in plant_out -----------------------------------------------------------------
@pytest.mark.parametrize("bad", [math.nan, math.inf, 1.0e6])
def test_a_bad_plant_out_is_a_drive_fault_that_brakes_while_the_simulation_runs(
        make_loop: Callable[..., HilLoop], bad: float) -> None:
    """A PLC program bug writes ``bad`` as the left torque set-point (the virtual PLC's own
    plant program frozen, a rogue S7 client writing plant_out with newer seqs): the drives
    brake to a standstill, the fault is named on /diagnostics (NaN/inf: the plant link never
    forwards them as numbers; out of range: sim_node refuses it), the PLC sees the drive fault
    in plant_in (its fault bit on Redis), and the simulated time goes on."""
    lp = make_loop()
    rig = lp.rig
    cfg = rig.config
    lp.drive(SPEED_M_S)
    t0 = lp.record.last_t()
    rig.plc.faults(freeze_plant_out=True)  # type: ignore[union-attr]
    seq0 = int(rig.plc.status()["hil"]["seq"]) + 1000  # type: ignore[union-attr]

    def buggy(seq: int) -> dict[str, Any]:
        return {**cfg.plant_out.zero_values(), "seq": seq, "enable": True, "brake": False,
                "alive": seq & 0xFFFF, "torque_sp_left": bad, "torque_sp_right": 1000.0}

    with RogueWriter(cfg, rig.plc_port, dint(seq0), db=cfg.plant_out_db, block=cfg.plant_out,
                     values=buggy):
        _, t_rest = braked_to_a_standstill(lp, t0)
        if math.isfinite(bad):   # forwarded: sim_node refuses it, a drive fault
            _, message, _ = wait_for(
                lambda: next((d for d in reversed(lp.record.diagnostics["sim_node"])
                              if d[0] == 2 and "drive fault" in d[1]), None), EVENT_WAIT_S,
                lambda: f"sim_node's drive fault on /diagnostics\n{lp.logs()}")
            assert "torque set-point 1e+06 N m is beyond" in message, message
            # plant/sensors' drive_fault from the first bad actuation on, latched: the frozen
            # PLC's silence may brake the drives first (plant_actuation_timeout_s) when the
            # rogue writer is slow to connect on a loaded host
            rows, = wait_for(lambda: (r := lp.record.since(t0)).size
                             and np.any(r[:, 5] == 1.0) and (r,), EVENT_WAIT_S,
                             "plant/sensors' drive_fault")
            onset = int(np.flatnonzero(rows[:, 5] == 1.0)[0])
            cleared = rows[onset:][rows[onset:, 5] != 1.0]
            assert not cleared.size, f"drive_fault cleared at {cleared[:3, 0]} s\n{lp.logs()}"
        else:                    # never forwarded as a number: the plant link brakes
            _, message, values = wait_for(
                lambda: (d := lp.record.last("plant_link"))[0] == 2 and d, EVENT_WAIT_S,
                lambda: f"the plant link's drive fault ({lp.record.last('plant_link')})")
            assert f"torque_sp_left = {bad}" in message and "drive fault" in message, message
            assert f"torque_sp_left = {bad}" in values["last_refusal"]
        # the PLC sees its drive in fault (plant_in.drive_fault): safe state, its fault and
        # drive_fault bits, the bridge naming the cause
        wait_for(lambda: rig.get(keys.state_key("drive_fault")) == "true", EVENT_WAIT_S,
                 lambda: f"the PLC's drive fault on Redis\n{lp.logs()}")
        assert rig.get(keys.state_key("fault")) == "true"
        lp.wait_status("stopped:plc_drive_fault", EVENT_WAIT_S)
        assert "drive_fault" in (rig.get(keys.BRIDGE_DETAIL) or "")
        wait_for(lambda: rig.plc.status()["hil"]["mode"] == "safe", EVENT_WAIT_S,  # type: ignore
                 "the PLC in its safe state")
        # the simulation keeps running: simulated time goes on, the machine braked
        wait_for(lambda: lp.record.last_t() > t_rest + 2.0, EVENT_WAIT_S, "2 s more simulated time")
        assert lp.sim.alive()
    rig.plc.faults(freeze_plant_out=False)  # type: ignore[union-attr]
    recovered(lp)
    assert lp.rig.get(keys.state_key("drive_fault")) == "false"
