"""The plant link's exchange against the second S7 server implementation: the original C snap7
library's server (test_bridge_snap7_c.py: ``libsnap7.so``, skipped when absent), at PDU 240 as
an S7-1200 negotiates. It serves the four blocks; a small "PLC program" thread here plays the
HIL program: each 5 ms it reads plant_in and writes plant_out whole, torque = 100 N m per m/s
of the measured speed, seq + 1. The plant link runs in this process without ROS
(``link.PlantLink``: its thread, its PLC link), handed sensors directly."""

from __future__ import annotations

import ctypes
import itertools
import threading
import time
from collections.abc import Iterator

import pytest
from helpers import EVENT_WAIT_S, free_port, wait_for
from test_bridge_snap7_c import LIB, P_I32_PDU_REQUEST, P_U16_LOCAL_PORT, SRV_AREA_DB

from plc_bridge.command_crc import seal
from plc_bridge.config import BridgeConfig
from plc_bridge.plant_link.config import load_plant_link_config
from plc_bridge.plant_link.core import Actuation, ImuReading, Sensors
from plc_bridge.plant_link.link import PlantLink, with_overrides
from plc_bridge.transport.s7 import S7Session

GAIN = 100.0   # the program's torque per measured speed [N m per m/s]


class CHilPlc:
    """The C server with the control, monitor, plant_in and plant_out DBs, and the program."""

    def __init__(self, config: BridgeConfig, pdu: int = 240, seals: bool = True) -> None:
        """``seals``: the program seals plant_out with its crc (False: a program generated
        before the crc, or for another layout)."""
        self.config = config
        self.seals = seals
        self.lib = ctypes.CDLL(str(LIB))
        self.lib.Srv_Create.restype = ctypes.c_void_p
        self.handle = ctypes.c_void_p(self.lib.Srv_Create())
        self.port = free_port()
        for number, value in ((P_U16_LOCAL_PORT, ctypes.c_uint16(self.port)),
                              (P_I32_PDU_REQUEST, ctypes.c_int32(pdu))):
            assert self.lib.Srv_SetParam(self.handle, ctypes.c_int(number),
                                         ctypes.byref(value)) == 0
        self.bufs = {db: (ctypes.c_uint8 * size)() for db, size in (
            (config.control_db, config.control.size), (config.monitor_db, config.monitor.size),
            (config.plant_in_db, config.plant_in.size),
            (config.plant_out_db, config.plant_out.size))}
        for db, buf in self.bufs.items():
            rc = self.lib.Srv_RegisterArea(self.handle, SRV_AREA_DB, ctypes.c_uint16(db),
                                           ctypes.byref(buf), ctypes.c_int(ctypes.sizeof(buf)))
            assert rc == 0, f"Srv_RegisterArea DB{db}: {rc:#x}"
        assert self.lib.Srv_StartTo(self.handle, b"127.0.0.1") == 0
        self.seen_plant_in: list[dict] = []
        self.written: dict[int, dict] = {}        # seq -> the plant_out written with it
        self.seq = 5000
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._program, daemon=True)
        self._thread.start()

    def get(self, db: int) -> bytes:
        self.lib.Srv_LockArea(self.handle, SRV_AREA_DB, ctypes.c_uint16(db))
        try:
            return bytes(self.bufs[db])
        finally:
            self.lib.Srv_UnlockArea(self.handle, SRV_AREA_DB, ctypes.c_uint16(db))

    def _put(self, db: int, data: bytes) -> None:
        self.lib.Srv_LockArea(self.handle, SRV_AREA_DB, ctypes.c_uint16(db))
        try:
            ctypes.memmove(self.bufs[db], data, len(data))
        finally:
            self.lib.Srv_UnlockArea(self.handle, SRV_AREA_DB, ctypes.c_uint16(db))

    def _program(self) -> None:
        cfg = self.config
        while not self._stop.is_set():
            pin = cfg.plant_in.decode(self.get(cfg.plant_in_db))
            if not self.seen_plant_in or pin != self.seen_plant_in[-1]:
                self.seen_plant_in.append(pin)
            self.seq += 1
            out = {**cfg.plant_out.zero_values(), "alive": self.seq & 0xFFFF, "enable": True,
                   "seq": self.seq}
            out.update({t: GAIN * pin[s] for t, s in zip(cfg.torque_sp_fields(),
                                                         cfg.speed_fields(), strict=True)})
            self.written[self.seq] = out
            data = cfg.plant_out.encode(out)
            self._put(cfg.plant_out_db, seal(cfg.plant_out, data) if self.seals else data)
            time.sleep(0.005)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        self.lib.Srv_Stop(self.handle)
        self.lib.Srv_Destroy(ctypes.byref(self.handle))


@pytest.fixture
def c_hil() -> Iterator[tuple[CHilPlc, PlantLink, list[Actuation]]]:
    if not LIB.exists():
        pytest.skip(f"the C snap7 library is not at {LIB}: run `make snap7-c` or set "
                    f"SNAP7_C_LIB (test_bridge_snap7_c.py)")
    base = load_plant_link_config()
    plc = CHilPlc(base.plc)
    config = with_overrides(base, plc_port=plc.port, pdu_size_bytes=240)
    sent: list[Actuation] = []
    link = PlantLink(config, sent.append)
    yield plc, link, sent
    link.stop()
    plc.close()


def test_the_plant_link_exchanges_with_the_c_snap7_server_at_pdu_240(c_hil):
    plc, link, sent = c_hil
    cfg = plc.config
    link.set_imu(ImuReading(yaw_rate=0.05, pitch=0.01, roll=-0.02))
    stamp = [1_000_000_000]

    def feed(left: float, right: float) -> None:
        stamp[0] += 10_000_000
        link.set_sensors(Sensors(stamp[0], (left, right), (1.0, 2.0), (), 0.5, True, False,
                                 False))

    feed(0.2, 0.4)
    link.start()
    wait_for(lambda: link.snapshot().status == "running", EVENT_WAIT_S,
             lambda: f"running (now {link.snapshot()})")
    assert isinstance(link.plc.session, S7Session) and link.plc.session.client.pdu_length == 240
    # the program computes torques from what the plant link wrote: they come back forwarded
    wait_for(lambda: sent and sent[-1].torques == pytest.approx((20.0, 40.0), rel=1e-6),
             EVENT_WAIT_S,
             lambda: f"torques of 0.2 / 0.4 m/s (last {sent[-1:]})")
    for left in (0.5, 0.7):
        feed(left, -left)
        wait_for(lambda left=left: sent[-1].torques == pytest.approx(
            (GAIN * left, -GAIN * left), rel=1e-6), EVENT_WAIT_S, f"torques of {left} m/s")
    # each forwarded actuation is exactly a block the program wrote, each seq once, in order
    seqs = [a.seq for a in sent]
    assert all(b > a for a, b in itertools.pairwise(seqs))   # type: ignore[operator]
    for act in sent:
        written = plc.written[act.seq]                        # type: ignore[index]
        assert act.torques == pytest.approx((written["torque_sp_left"],
                                             written["torque_sp_right"]), rel=1e-6)
        assert act.enable and not act.brake
    # plant_in as the program read it: the sensors, the IMU, the counter and the time
    last = plc.seen_plant_in[-1]
    assert last["speed_left"] == pytest.approx(0.7) and last["speed_right"] == pytest.approx(-0.7)
    assert last["torque_right"] == 2.0 and last["yaw_rate"] == pytest.approx(0.05)
    assert last["roll"] == pytest.approx(-0.02) and last["drive_ready"]
    assert last["sim_time"] == stamp[0] // 1_000_000
    alive = [p["alive"] for p in plc.seen_plant_in if p["alive"]]
    assert alive == sorted(alive) and len(set(alive)) == 3    # one per new simulated time
    assert dint_ok(last["actuation_seq"], seqs)
    # nothing written outside plant_in: the bridge's blocks untouched
    assert plc.get(cfg.control_db) == bytes(cfg.control.size)
    assert plc.get(cfg.monitor_db) == bytes(cfg.monitor.size)
    snap = link.snapshot()
    assert snap.counters["refused"] == 0 and snap.counters["link_faults"] == 0
    assert snap.counters["baselines"] == 1


def dint_ok(actuation_seq: int, forwarded: list[int | None]) -> bool:
    """plant_in.actuation_seq is one of the seqs forwarded (the program's are small: no wrap)."""
    return actuation_seq in forwarded


def test_the_write_allow_list_holds_at_the_c_server(c_hil):
    """A write to any block but plant_in is refused in code before a byte is sent."""
    from plc_bridge.errors import WriteNotAllowedError

    plc, link, _ = c_hil
    link.start()
    wait_for(lambda: link.plc.connected, EVENT_WAIT_S, "connected")
    for db in (plc.config.control_db, plc.config.plant_out_db):
        with pytest.raises(WriteNotAllowedError, match=rf"DB{db} refused: only \[102\]"):
            link.plc.write(db, b"\x00\x00")


def test_the_exchange_takes_its_inputs_itself_just_before_it_writes_plant_in(c_hil):
    """``take_inputs`` (the node's take of plant/sensors and imu) runs in the exchange thread,
    once a period, before plant_in is built: the last block written carries the sensors of the
    last take. A take that fails is counted and never faults the link nor brakes."""
    plc, _, _ = c_hil
    threads: set[str] = set()
    stamps: list[int] = []
    sent: list[Actuation] = []

    def take() -> None:
        threads.add(threading.current_thread().name)
        if len(stamps) in (12, 15):     # two takes fail (a context gone, a bug)
            stamps.append(0)
            raise RuntimeError("take failed")
        stamps.append(1_000_000_000 + 10_000_000 * len(stamps))
        link.set_sensors(Sensors(stamps[-1], (0.1 * len(stamps), 0.0), (0.0, 0.0), (), 0.0,
                                 True, False, False))

    config = with_overrides(load_plant_link_config(), plc_port=plc.port, pdu_size_bytes=240)
    link = PlantLink(config, sent.append, take_inputs=take)
    link.start()
    try:
        wait_for(lambda: link.snapshot().status == "running" and link.wait_exchanges(30,
                                                                                     EVENT_WAIT_S),
                 EVENT_WAIT_S, lambda: f"30 exchanges running (now {link.snapshot()})")
    finally:
        link.stop()
    assert threads == {"plant-link"}
    last = next(s for s in reversed(stamps) if s)
    cfg = plc.config
    pin = cfg.plant_in.decode(plc.get(cfg.plant_in_db))
    assert pin["sim_time"] == last // 1_000_000          # the newest take, not an older one
    snap = link.snapshot()
    assert snap.counters["take_errors"] == stamps.count(0) == 2
    assert snap.counters["link_faults"] == 0
    assert sent and all(a.enable and not a.brake for a in sent[:-1])   # the last: stop()'s brake
    assert sent[-1].reason == "plant link stopped"


def test_a_program_that_does_not_seal_plant_out_drives_nothing_and_is_named():
    """The PLC program replaced mid-run by one of another version that writes plant_out
    without its crc: every read is torn. Nothing of it is forwarded, one braking actuation is
    (what the simulation last got must not go on acting), plant_in is still written (the plant
    stays alive for the PLC), and the status names the cause and the fix."""
    if not LIB.exists():
        pytest.skip(f"the C snap7 library is not at {LIB}: run `make snap7-c`")
    base = load_plant_link_config()
    plc = CHilPlc(base.plc)
    sent: list[Actuation] = []
    link = PlantLink(with_overrides(base, plc_port=plc.port, pdu_size_bytes=240), sent.append)
    link.set_sensors(Sensors(1_000_000_000, (0.2, 0.4), (1.0, 2.0), (), 0.5, True, False, False))
    link.start()
    try:
        wait_for(lambda: len(sent) > 5, EVENT_WAIT_S, lambda: f"actuations (now {link.snapshot()})")
        plc.seals = False
        wait_for(lambda: link.snapshot().status == "plant_out_torn", EVENT_WAIT_S,
                 lambda: f"the status plant_out_torn (now {link.snapshot()})")
        snap = link.snapshot()
        assert "crc" in snap.detail and "plc_bridge.scl_export --hil" in snap.detail, snap.detail
        assert snap.counters["torn"] >= 10 and snap.counters["link_faults"] == 0
        last = sent[-1]
        assert (last.seq, last.enable, last.brake) == (None, False, True), sent[-3:]
        assert "crc" in last.reason
        forwarded, n = snap.counters["forwarded"], len(sent)
        plant_in = len(plc.seen_plant_in)
        link.set_sensors(Sensors(1_010_000_000, (0.3, 0.4), (1.0, 2.0), (), 0.5, True, False,
                                 False))
        wait_for(lambda: len(plc.seen_plant_in) > plant_in,
                 EVENT_WAIT_S, "plant_in written all along")
        assert link.snapshot().counters["forwarded"] == forwarded and len(sent) == n
        plc.seals = True      # the program of this config back: forwarded again
        wait_for(lambda: link.snapshot().status == "running" and len(sent) > n, EVENT_WAIT_S,
                 lambda: f"running again (now {link.snapshot()})")
        assert sent[-1].enable and sent[-1].seq is not None
    finally:
        link.stop()
        plc.close()
