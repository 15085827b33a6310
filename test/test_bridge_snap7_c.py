"""The bridge against a second, independent S7 server: the original C snap7 library's server
(``libsnap7.so`` from python-snap7 1.3's wheel, made by ``make snap7-c``), driven through its
documented C API (``Srv_Create``, ``Srv_SetParam``, ``Srv_RegisterArea``, ``Srv_StartTo``,
``Srv_LockArea``...). It serves the bridge's two DBs on a loopback port and negotiates a PDU of
240 bytes, as an S7-1200 does; a small "PLC program" thread here plays OB1 (alive counter,
status bits, speeds follow the setpoints while enabled, the last seq taken reported in
``seq_accepted``, starting from an earlier bridge's).
"""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from helpers import EVENT_WAIT_S, LOADED_HOST_BRIDGE, REPO, free_port, wait_for

from excavator_hil.hil_harness import Heartbeat
from plc_bridge import redis_keys as keys
from plc_bridge.bridge.core import BridgeCore
from plc_bridge.command_seq import from_dint, seq_newer
from plc_bridge.config import BridgeConfig, default_config_path, load_config
from plc_bridge.transport.s7 import S7Session

LIB = Path(os.environ.get("SNAP7_C_LIB", REPO / ".venv" / "snap7-c" / "libsnap7.so"))
SRV_AREA_DB = 5          # srvAreaDB
P_U16_LOCAL_PORT = 1     # p_u16_LocalPort
P_I32_PDU_REQUEST = 10   # p_i32_PDURequest
COMMAND = (0.8, 0.0, 0.3)
EARLIER_SEQ = 2**31 - 10   # the seq an earlier bridge left in the PLC (DINT; wraps next)


class CSnap7Server:
    """The C library's S7 server with two DBs and a minimal PLC program."""

    def __init__(self, config: BridgeConfig, pdu: int = 240, seq_accepted: int = 0) -> None:
        self.config = config
        self.seq_accepted = seq_accepted   # DINT: the last seq taken (0: none)
        self.lib = ctypes.CDLL(str(LIB))
        self.lib.Srv_Create.restype = ctypes.c_void_p
        for name in ("Srv_SetParam", "Srv_RegisterArea", "Srv_StartTo", "Srv_Stop",
                     "Srv_LockArea", "Srv_UnlockArea"):
            getattr(self.lib, name).restype = ctypes.c_int
        self.handle = ctypes.c_void_p(self.lib.Srv_Create())
        self.port = free_port()
        self._set(P_U16_LOCAL_PORT, ctypes.c_uint16(self.port))
        self._set(P_I32_PDU_REQUEST, ctypes.c_int32(pdu))
        self.control = (ctypes.c_uint8 * max(config.control.size, 2))()
        self.monitor = (ctypes.c_uint8 * config.monitor.size)()
        for db, buf in ((config.control_db, self.control), (config.monitor_db, self.monitor)):
            rc = self.lib.Srv_RegisterArea(self.handle, SRV_AREA_DB, ctypes.c_uint16(db),
                                           ctypes.byref(buf), ctypes.c_int(ctypes.sizeof(buf)))
            assert rc == 0, f"Srv_RegisterArea DB{db}: {rc:#x}"
        rc = self.lib.Srv_StartTo(self.handle, b"127.0.0.1")
        assert rc == 0, f"Srv_StartTo: {rc:#x}"
        self.speeds = [0.0] * len(config.wheels)
        self.controls: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._program, daemon=True)
        self._thread.start()

    def _set(self, number: int, value: ctypes._SimpleCData) -> None:
        rc = self.lib.Srv_SetParam(self.handle, ctypes.c_int(number), ctypes.byref(value))
        assert rc == 0, f"Srv_SetParam {number}: {rc:#x}"

    def _program(self) -> None:
        cfg = self.config
        alive = 0
        while not self._stop.is_set():
            self.lib.Srv_LockArea(self.handle, SRV_AREA_DB, ctypes.c_uint16(cfg.control_db))
            raw = bytes(self.control)[:cfg.control.size]
            self.lib.Srv_UnlockArea(self.handle, SRV_AREA_DB, ctypes.c_uint16(cfg.control_db))
            ctrl = cfg.control.decode(raw)
            self.controls.append(ctrl)
            seq = from_dint(int(ctrl["seq"]))
            if seq and seq_newer(seq, from_dint(self.seq_accepted) or None):
                self.seq_accepted = int(ctrl["seq"])
            drive = ctrl["enable"] and not ctrl["stop"]
            self.speeds = [float(ctrl[n]) if drive else 0.0 for n in cfg.speed_sp_fields()]
            alive = (alive + 1) & 0xFFFF
            values = {**cfg.monitor.zero_values(), "alive": alive, "ready": True, "auto": True,
                      "seq_accepted": self.seq_accepted}
            values.update(zip(cfg.speed_fields(), self.speeds, strict=True))
            data = cfg.monitor.encode(values)
            self.lib.Srv_LockArea(self.handle, SRV_AREA_DB, ctypes.c_uint16(cfg.monitor_db))
            ctypes.memmove(self.monitor, data, len(data))
            self.lib.Srv_UnlockArea(self.handle, SRV_AREA_DB, ctypes.c_uint16(cfg.monitor_db))
            time.sleep(0.005)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        self.lib.Srv_Stop(self.handle)
        self.lib.Srv_Destroy(ctypes.byref(self.handle))


@pytest.fixture
def c_server_available() -> None:
    if not LIB.exists():
        pytest.skip(f"the C snap7 library is not at {LIB}: run `make snap7-c` (downloads "
                    f"python-snap7 1.3's wheel, which bundles libsnap7.so) or set SNAP7_C_LIB")


@pytest.fixture
def bridge_and_server(c_server_available, redis_server) -> Iterator[tuple[BridgeCore,
                                                                          CSnap7Server]]:
    base = load_config(None, {"model": "skid_steer"})
    server = CSnap7Server(base, seq_accepted=EARLIER_SEQ)
    config = load_config(None, {"model": "skid_steer", "redis_url": redis_server.url,
                                "plc_port": server.port, "pdu_size_bytes": 240})
    core = BridgeCore(config)
    yield core, server
    core.stop()
    server.close()


def test_bridge_runs_against_the_c_snap7_server_at_pdu_240(bridge_and_server, redis_server):
    import redis

    core, server = bridge_and_server
    r = redis.Redis.from_url(redis_server.url)
    r.mset({keys.LONGITUDINAL: "0.8", keys.LATERAL: "0", keys.ANGULAR: "0.3"})
    hb = Heartbeat(redis_server.url, 0.25).start()
    try:
        core.start()
        wait_for(lambda: core.status == "running", EVENT_WAIT_S,
                 lambda: f"running (now {core.status}: {core.snapshot().detail})")
        assert isinstance(core.plc.session, S7Session) and core.plc.session.client.pdu_length == 240
        wait_for(lambda: server.speeds[0] > 0.3, EVENT_WAIT_S, "the setpoints in the C server's DB")
        cfg = core.config

        def agree() -> bool:
            # the bridge's commanded twist and the C server's DB, read together: a snapshot
            # taken in a cycle that had no command (a heartbeat late on a loaded host) reads
            # zero while the DB still holds the last setpoints (ci31)
            commanded = core.snapshot().commanded
            expected = core.model.inverse(commanded).speeds
            return (commanded.vx > 0.3
                    and server.speeds == pytest.approx(list(expected), abs=1e-6))
        wait_for(agree, EVENT_WAIT_S, lambda: f"the C server's DB {server.speeds} as the bridge's "
                 f"commanded twist {core.snapshot().commanded} gives")
        # the program samples every 5 ms: the same write may be seen twice
        seqs = [k for k, _ in itertools.groupby(c["seq"] for c in server.controls[-40:]
                                                if c["enable"])]
        assert seqs and all(b > a for a, b in itertools.pairwise(seqs))   # strictly newer
        # the bridge continued beyond the earlier bridge's seq (and wrapped the DINT doing so)
        written = [from_dint(c["seq"]) for c in server.controls if c["seq"]]
        assert written and all(seq_newer(s, from_dint(EARLIER_SEQ)) for s in written)
        assert all(c["seq"] < 0 for c in server.controls if c["seq"])
        wait_for(lambda: r.get(keys.STATE_VALID) == b"true", EVENT_WAIT_S, "valid monitor keys")
        wait_for(lambda: abs(float(r.get(keys.MON_LONGITUDINAL)) - 0.8) < 1e-5, EVENT_WAIT_S,
                 "the measured twist in Redis")
        assert r.get(keys.wheel_speed_key(cfg.wheels[0])) is not None
    finally:
        hb.stop()
        r.close()


def test_a_pdu_too_small_is_backed_off_and_said_once(c_server_available, redis_server,
                                                     tmp_path, caplog):
    """The config says PDU 480 and the control DB needs it; the C server (an S7-1200)
    negotiates 240: the connect is refused with both sizes, retried every few seconds, not ~16
    times a second, and logged once."""
    doc = yaml.safe_load(default_config_path().read_text())
    params = doc["/**"]["ros__parameters"]
    params["pdu_size_bytes"] = 480
    layout = params["layout"]["skid_steer"]
    layout["control"] = [*layout["control"], *(f"spare{k} | REAL" for k in range(60))]
    path = tmp_path / "plc.yaml"
    path.write_text(yaml.safe_dump(doc))
    base = load_config(path)
    assert base.control.size > 205
    server = CSnap7Server(base, pdu=240)
    # Redis's deadline at its top: the subject is the PLC's refusal, and a starved host's late
    # MGET made the status redis_lost instead (fresh19)
    core = BridgeCore(load_config(path, {"redis_url": redis_server.url,
                                         "plc_port": server.port,
                                         "redis_timeout_s": LOADED_HOST_BRIDGE["redis_timeout_s"]}))
    import redis

    r = redis.Redis.from_url(redis_server.url)
    r.mset({keys.LONGITUDINAL: "0", keys.LATERAL: "0", keys.ANGULAR: "0"})
    r.close()
    try:
        with caplog.at_level("WARNING", logger="plc_bridge"):
            core.start()
            wait_for(lambda: "negotiated a PDU of 240 B" in core.snapshot().detail, EVENT_WAIT_S,
                     lambda: f"the PDU refusal (now {core.snapshot().detail!r})")
            attempts = core.plc._reconnector.attempts
            time.sleep(3.0)
            assert core.plc._reconnector.attempts - attempts <= 1
        said = [r for r in caplog.records if "negotiated a PDU of 240 B" in r.getMessage()]
        assert len(said) == 1, [r.getMessage() for r in said]
        assert core.status == "stopped:plc_link_lost"
    finally:
        core.stop()
        server.close()
