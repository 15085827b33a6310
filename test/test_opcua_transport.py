"""The OPC UA transport (plc_transport: opcua) against the virtual PLC's OPC UA server: the real
protocol (asyncua client and server over loopback TCP, Basic256Sha256 SignAndEncrypt, user
login), real certificates made by the project's own command; no mocks.

- the bridge end to end over OPC UA (virtual PLC in its own process);
- a command is one Write request taken whole: the virtual PLC scans after every single
  variable written (or after a random half of them) and takes a command only when its CRC
  matches: never a torn one; a writer without the CRC has nothing taken;
- security acceptance: an unknown server certificate, an unknown client certificate, a wrong
  password, an anonymous login, policy None, a password file others can read, an expired
  certificate: each refused with a message naming the fix;
- Siemens behaviour: the namespace found by URI at another index, a type mismatch refused at
  connect, the CPU in STOP answering writes Bad, the minimum publishing interval.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from helpers import EVENT_WAIT_S, opcua_rig

from excavator_hil.hil_harness import wait_until
from excavator_kinematics.vehicle import twist_from_artof
from plc_bridge import redis_keys as keys
from plc_bridge.command_crc import seal
from plc_bridge.config import BridgeConfig, default_config_path, load_config
from plc_bridge.errors import BridgeConfigError, LinkRefusedError
from plc_bridge.opcua_pki import Pki, generate
from plc_bridge.transport.opcua import OpcUaSession
from plc_bridge.transport.plc_link import PlcLink
from plc_bridge.virtual_plc.opcua_server import OpcUaServer
from plc_bridge.virtual_plc.server import VirtualPlc
from plc_bridge.virtual_plc.users import hash_password

PASSWORD = "correct horse battery staple"
PASSWORD_HASH = hash_password(PASSWORD)


@dataclasses.dataclass
class Lab:
    root: Path
    server: Pki
    client: Pki
    password_file: Path
    users_file: Path
    user: Pki | None = None   # an X.509 user certificate the server maps to "operator"


def _secret(path: Path, text: str) -> Path:
    path.write_text(text)
    os.chmod(path, 0o600)
    return path


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    """Server and client PKI folders made by `excavator-hil opcua-certs`'s code, each side
    trusting the other; a password file and the server's users file, both mode 0600."""
    root = tmp_path_factory.mktemp("opcua")
    server = generate(root / "virtual_plc", "virtual_plc", server=True)
    client = generate(root / "plc_bridge", "plc_bridge")
    shutil.copy(server.cert, client.trusted / "virtual_plc.der")
    shutil.copy(client.cert, server.trusted / "plc_bridge.der")
    return Lab(root, server, client, _secret(root / "password", PASSWORD + "\n"),
               _secret(root / "users", f"bridge:{hash_password(PASSWORD)}\n"),
               generate(root / "operator", "plc_bridge"))


@pytest.fixture(scope="module")
def served(lab: Lab) -> Iterator[tuple[VirtualPlc, OpcUaServer]]:
    """A virtual PLC (S7 and OPC UA on free ports) whose Siemens namespace is at index 5."""
    plc = VirtualPlc(load_config(None), port=0)
    plc.start()
    assert lab.user is not None
    server = OpcUaServer(plc, port=0, pki=lab.server, users={"bridge": PASSWORD_HASH},
                         namespace_shift=2, min_publishing_interval_ms=200.0,
                         user_certs={"operator": lab.user.cert.read_bytes()})
    server.start()
    try:
        yield plc, server
    finally:
        server.stop()
        plc.stop()


def opcua_config(lab: Lab, port: int, base: BridgeConfig | None = None, **changes: Any
                 ) -> BridgeConfig:
    cfg = base or load_config(None)
    values: dict[str, Any] = {
        "plc_transport": "opcua", "opcua_port": port, "opcua_pki_dir": str(lab.client.root),
        "opcua_user": "bridge", "opcua_password_file": str(lab.password_file),
        "plc_timeout_s": 2.0}
    values.update(changes)
    return dataclasses.replace(cfg, **values)


def connect(link: PlcLink, timeout_s: float = EVENT_WAIT_S) -> str:
    """Poll until connected ('') or the first attempt was refused (its error)."""
    def done() -> str | None:
        if link.poll(time.monotonic()):
            return "connected"
        err = link._reconnector.last_error
        return err or None
    result = wait_until(done, timeout_s, "the OPC UA connect to end")
    return "" if result == "connected" else str(result)


# --- the bridge end to end -----------------------------------------------------------------------
def test_the_bridge_drives_the_virtual_plc_over_opcua(redis_server, spawn, lab, tmp_path):
    """Redis -> bridge -> OPC UA (Basic256Sha256 SignAndEncrypt, user login) -> the virtual
    PLC in its own process -> plant -> OPC UA -> Redis; the namespace at index 3 found by URI,
    the first command taken after connecting a stop, the setpoints taken whole."""
    port = _free_port()
    cmd = (0.8, 0.0, 0.3)
    rig = opcua_rig(lab, redis_server.url, spawn, port)
    try:
        rig.command(*cmd)
        rig.start()
        rig.wait_status("running", EVENT_WAIT_S)
        session = rig.core.plc.session
        assert isinstance(session, OpcUaSession) and session.namespace_index == 3
        cfg, core = rig.config, rig.core
        expected = core.model.inverse(twist_from_artof(*cmd, "left"),
                                      np.array(rig.plc.status()["angles"]))

        def taken_drive() -> dict[str, Any] | None:
            taken = [w for w in rig.plc.writes(0.0) if w["refused"] is None]
            drive = [w for w in taken if w["enable"] and not w["stop"]]
            return drive[-1] if drive else None
        last = wait_until(taken_drive, EVENT_WAIT_S, "a drive command taken by the PLC")
        first = rig.plc.writes(0.0)[0]
        assert first["stop"] and not first["enable"], f"first command taken: {first}"
        got = np.array([last[n] for n in cfg.speed_sp_fields()])
        np.testing.assert_array_equal(got, expected.speeds.astype(np.float32))

        def monitor_follows() -> bool:
            v = rig.get(keys.MON_LONGITUDINAL)
            return v is not None and abs(float(v) - cmd[0]) <= 0.01 * cmd[0]
        wait_until(monitor_follows,
                   EVENT_WAIT_S, "the monitor velocity in Redis to follow the plant")
        assert rig.get(keys.BRIDGE_STATUS) == "running"
        assert rig.get(keys.STATE_VALID) == "true"
    finally:
        rig.close()


def _free_port() -> int:
    from excavator_hil.local_services import free_port

    return int(free_port())


# --- a command taken whole ---------------------------------------------------------------------
def _commands(cfg: BridgeConfig, first_seq: int, n: int, stops: int = 1,
              crc: bool = True) -> list[bytes]:
    """``stops`` stops (two clear a latched watchdog: the second one's alive is a change), then
    drive commands whose every field says which seq they belong to; sealed with their crc as
    the bridge seals them, or (``crc`` False) with none (a writer that knows no CRC)."""
    out = []
    for k in range(first_seq, first_seq + n):
        v = cfg.control.zero_values()
        drive = k >= first_seq + stops
        v.update(alive=k % 65536, enable=drive, stop=not drive, seq=k,
                 speed_sp_left=float(k % 1000) / 1000.0 if drive else 0.0,
                 speed_sp_right=-float(k % 1000) / 1000.0 if drive else 0.0)
        raw = cfg.control.encode(v)
        out.append(seal(cfg.control, raw) if crc else raw)
    return out


def _torn(cfg: BridgeConfig, writes: list[dict[str, Any]], first_seq: int, stops: int = 1
          ) -> list[dict]:
    """Commands the PLC took whose values are not those of their seq."""
    bad = []
    for w in writes:
        k = int(w["seq"])
        if k < first_seq + stops:
            continue
        want = float(np.float32(float(k % 1000) / 1000.0))
        if not (w["speed_sp_left"] == want and w["speed_sp_right"] == -want
                and w["alive"] == k % 65536 and w["enable"]):
            bad.append(w)
    return bad


class _SomeScans:
    """A CPU whose scans land after a seeded random half of the variables written (a scan
    between any two variables of a Write, or none), instead of after every one."""

    def __init__(self, server: OpcUaServer, seed: int) -> None:
        self._scan = server.scan_control
        self._rng = np.random.default_rng(seed)

    def __call__(self, raw: bytes) -> None:
        if self._rng.random() < 0.5:
            self._scan(raw)


_FIRST_SEQS = itertools.count(1_000_000, 10_000)


@pytest.mark.parametrize("scans", ["after_every_variable", "after_some_variables"])
@pytest.mark.parametrize("writer", ["bridge", "without_crc"])
def test_a_command_is_one_write_taken_whole_by_a_scan_between_any_variables(
        served, lab, writer, scans, monkeypatch):
    """The virtual PLC scans after every single variable written (the worst interleaving of a
    CPU scan and one Write request's variables), or after a random half of them. The bridge
    sends each command as one Write request; the PLC finds it half written during the Write
    (counted as torn: the hazard is real, the bridge writes the header before the setpoints),
    takes nothing then, and takes it whole after its last variable: every command it takes
    carries its own values. A writer without the CRC has nothing taken at all (the check can
    fail: a PLC that skipped the CRC would take torn commands from the bridge too)."""
    plc, server = served
    # not under test here: the watchdog (commands skipped by the random scans, or none taken
    # from a writer without the CRC, leave it unfed for longer than its timeout)
    monkeypatch.setattr(plc.guard, "timeout_s", 3600.0)
    if scans != "after_every_variable":
        monkeypatch.setattr(server, "scan_control", _SomeScans(server, seed=29))
    cfg = opcua_config(lab, server.port)
    link = PlcLink(cfg)
    assert connect(link) == ""
    assert link.session is not None
    first = next(_FIRST_SEQS)   # newer than every seq the module's PLC took before
    t0 = time.monotonic()
    torn0 = plc.status()["torn"]
    try:
        before = link.session.write_requests
        for data in _commands(cfg, first, 40, stops=2, crc=writer == "bridge"):
            assert link.write(cfg.control_db, data), link.last_error
        requests = link.session.write_requests - before
    finally:
        link.close()
    taken = [w for w in plc.writes(t0) if int(w["seq"]) >= first and w["refused"] is None]
    torn_scans = plc.status()["torn"] - torn0
    if writer == "without_crc":
        assert taken == []
    else:
        assert _torn(cfg, taken, first, stops=2) == [], "torn commands taken"
    assert requests == 40                      # one Write request per command
    assert torn_scans > 0                      # scans did land inside the Writes
    if writer == "without_crc":
        return
    seqs = [int(w["seq"]) for w in taken]
    assert seqs == sorted(set(seqs))
    if scans == "after_every_variable":
        assert seqs == list(range(first, first + 40))
    else:   # a command whose last variable no scan followed is lost whole, never torn
        assert len(seqs) >= 10, seqs


# --- security acceptance -------------------------------------------------------------------------
def test_an_unknown_server_certificate_is_refused_and_saved_to_trust(served, lab, tmp_path):
    _, server = served
    naive = generate(tmp_path / "naive", "plc_bridge")
    shutil.copy(naive.cert, lab.server.trusted / "naive.der")   # the server would accept it
    try:
        link = PlcLink(opcua_config(lab, server.port, opcua_pki_dir=str(naive.root)))
        err = connect(link)
    finally:
        (lab.server.trusted / "naive.der").unlink()
    assert "not in the trust list" in err and f"{naive.trusted}" in err and "mv " in err, err
    saved = list(naive.rejected.iterdir())
    assert len(saved) == 1 and saved[0].read_bytes() == lab.server.cert.read_bytes()
    assert not link.connected


def test_an_unknown_client_certificate_is_refused_with_how_to_trust_it(served, lab, tmp_path):
    _, server = served
    stranger = generate(tmp_path / "stranger", "plc_bridge")
    shutil.copy(lab.server.cert, stranger.trusted / "virtual_plc.der")
    link = PlcLink(opcua_config(lab, server.port, opcua_pki_dir=str(stranger.root)))
    err = connect(link)
    assert "Bad" in err and str(stranger.cert) in err and "trusted" in err, err
    assert not link.connected
    rejected = [f.read_bytes() for f in lab.server.rejected.iterdir()]
    assert stranger.cert.read_bytes() in rejected


@pytest.mark.parametrize(("user", "password", "status"), [
    ("bridge", "wrong", "BadUserAccessDenied"),
    ("nobody", PASSWORD, "BadUserAccessDenied"),
    ("", "", "BadIdentityTokenRejected"),
])
def test_a_wrong_login_is_refused(served, lab, tmp_path, user, password, status):
    _, server = served
    pw = _secret(tmp_path / "pw", password)
    link = PlcLink(opcua_config(lab, server.port, opcua_user=user,
                                opcua_password_file=str(pw) if user else ""))
    err = connect(link)
    assert status in err and "refused the session" in err, err
    assert not link.connected


def test_an_x509_user_certificate_logs_in_and_an_unknown_one_is_refused(served, lab, tmp_path):
    """The X.509 user token: the certificate the server maps to a user logs in (no password
    anywhere); another one, signed by its own key just as well, is refused."""
    _, server = served
    assert lab.user is not None
    stranger = generate(tmp_path / "stranger_user", "plc_bridge")
    for user, ok in ((lab.user, True), (stranger, False)):
        link = PlcLink(opcua_config(lab, server.port, opcua_user="", opcua_password_file="",
                                    opcua_user_certificate=str(user.cert),
                                    opcua_user_key=str(user.key)))
        err = connect(link)
        try:
            if ok:
                assert err == "" and link.read(link.read_block.db_number,
                                               link.read_block.size) is not None
            else:
                assert "BadUserAccessDenied" in err and "with user certificate" in err, err
        finally:
            link.close()


def test_policy_none_and_a_password_on_it_are_refused_by_config(tmp_path):
    doc = yaml.safe_load(default_config_path().read_text())
    params = doc["/**"]["ros__parameters"]
    params.update(plc_transport="opcua", opcua_security_policy="None")
    path = tmp_path / "plc.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(BridgeConfigError, match="opcua_allow_insecure"):
        load_config(path)
    params.update(opcua_allow_insecure=True, opcua_user="bridge",
                  opcua_password_file=str(tmp_path / "pw"))
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(BridgeConfigError, match="never travels on an unsecured channel"):
        load_config(path)
    params.update(opcua_user="")
    path.write_text(yaml.safe_dump(doc))
    assert load_config(path).opcua_security_policy == "None"


def _secret_on_the_wire(recorded: dict[str, bytearray], secret: str) -> list[str]:
    """Where ``secret`` shows in a capture, in the encodings a client could send it in."""
    return [f"{way} ({enc})" for way, data in recorded.items()
            for enc in ("utf-8", "utf-16-le") if secret.encode(enc) in data]


def test_a_password_never_travels_in_the_clear(served, lab):
    """Every byte between the bridge's link and the PLC, tapped on the loopback link (the
    fault proxy recording both directions), through a Basic256Sha256 SignAndEncrypt connect
    with a user login, commands and reads, and the session's close: the password is not in
    them. The tap is shown to see a password sent in the clear: an asyncua client logging in
    on a lab server's None endpoint (which the bridge refuses to do: the config test above)
    puts it on the wire, and the same search finds it."""
    import asyncio

    from asyncua import Client

    from excavator_hil.faults.tcp_proxy import TcpProxy

    plc, server = served
    proxy = TcpProxy(server.port, record=True)
    cfg = opcua_config(lab, server.port)
    link = PlcLink(dataclasses.replace(cfg, opcua_port=proxy.port))
    try:
        assert connect(link) == ""
        for data in _commands(cfg, 6_000_000, 5):
            assert link.write(cfg.control_db, data), link.last_error
            assert link.read(cfg.monitor_db, cfg.monitor.size) is not None, link.last_error
        link.close()
        assert proxy.recorded is not None
        sent = bytes(proxy.recorded["to_server"])
        assert sent.startswith(b"HEL") and b"OPNF" in sent and b"Basic256Sha256" in sent
        assert b"MSGF" in sent and b"CLOF" in sent   # the session ran and ended on this tap
        assert _secret_on_the_wire(proxy.recorded, PASSWORD) == []
    finally:
        link.close()
        proxy.close()

    # the tap sees a password sent in the clear
    lab_server = OpcUaServer(plc, port=0, allow_insecure=True, users={"bridge": PASSWORD_HASH})
    lab_server.start()
    clear = TcpProxy(lab_server.port, record=True)

    async def login() -> None:
        client = Client(f"opc.tcp://127.0.0.1:{clear.port}", timeout=10)
        client.set_user("bridge")
        client.set_password(PASSWORD)
        await client.connect()
        await client.disconnect()

    try:
        asyncio.run(login())
        assert clear.recorded is not None
        assert _secret_on_the_wire(clear.recorded, PASSWORD) != []
    finally:
        clear.close()
        lab_server.stop()


def test_a_password_file_others_can_read_is_refused(served, lab, tmp_path):
    _, server = served
    pw = tmp_path / "pw"
    pw.write_text(PASSWORD)
    os.chmod(pw, 0o644)
    with pytest.raises(BridgeConfigError, match="chmod 600"):
        PlcLink(opcua_config(lab, server.port, opcua_password_file=str(pw)))


def test_an_expired_certificate_is_refused_even_when_trusted(tmp_path):
    peer = generate(tmp_path / "old", "virtual_plc", server=True, days=0)
    pki = generate(tmp_path / "me", "plc_bridge")
    shutil.copy(peer.cert, pki.trusted / "old.der")
    time.sleep(0.01)
    with pytest.raises(LinkRefusedError, match="not valid now"):
        pki.check_peer(peer.cert.read_bytes(), "the OPC UA server at test")


# --- Siemens behaviour ---------------------------------------------------------------------------
def test_the_namespace_is_found_by_uri_and_nodes_are_siemens_string_ids(served, lab):
    _, server = served
    cfg = opcua_config(lab, server.port)
    link = PlcLink(cfg)
    try:
        assert connect(link) == ""
        session = link.session
        assert isinstance(session, OpcUaSession)
        assert session.namespace_index == server.namespace_index == 5
        ids = [n.text(5) for n, _ in session.nodes[cfg.control_db]]
        assert ids[0] == 'ns=5;s="PlcBridge_control_skid_steer"."alive"'
        assert ids == [f'ns=5;s="PlcBridge_control_skid_steer"."{n}"'
                       for n in cfg.control.names]   # every field, in the block's order
        data = link.read(cfg.monitor_db, cfg.monitor.size)
        assert data is not None
        assert cfg.monitor.decode(bytes(data))["ready"] is True
    finally:
        link.close()


def test_a_type_mismatch_is_refused_at_connect_naming_the_node(served, lab, tmp_path):
    _, server = served
    doc = yaml.safe_load(default_config_path().read_text())
    header = doc["/**"]["ros__parameters"]["layout"]["control_header"]
    header[0] = header[0].replace("| UINT |", "| INT |")
    path = tmp_path / "plc.yaml"
    path.write_text(yaml.safe_dump(doc))
    link = PlcLink(opcua_config(lab, server.port, base=load_config(path)))
    err = connect(link)
    assert '"PlcBridge_control_skid_steer"."alive"' in err and "UInt16 on the PLC" in err \
        and "INT (Int16)" in err, err


def test_a_cpu_in_stop_takes_writes_in_the_server_but_not_in_the_program(served, lab):
    """What the S7-1500 manual says a CPU in STOP does with an OPC UA write ("the OPC UA
    server will accept those values. However, the CPU will not process the values", A5E03735815
    section 9.1): the virtual PLC's default. The write is answered Good (the link sees no
    STOP and no error: the bridge's alive check is what finds it, test_opcua_faults), the
    values land in the block, no scan takes them (logged refused cpu_stop, as over S7)."""
    plc, server = served
    assert server.stop_writes == "accept"   # the default, as on a CPU
    cfg = opcua_config(lab, server.port)
    link = PlcLink(cfg)
    try:
        assert connect(link) == ""
        server.cpu_stop = True
        t0 = time.monotonic()
        data = _commands(cfg, 6_000_000, 2)[1]
        assert link.write(cfg.control_db, data), link.last_error
        assert link.cpu_stop == "" and link.connected and link.reconnects == 0
        landed = cfg.control.decode(plc.snapshot("control"))
        assert landed == cfg.control.decode(data), landed   # read back as written
        logged = plc.writes(t0)
        assert logged and all(w["refused"] == "cpu_stop" for w in logged), logged
        assert logged[-1]["seq"] == 6_000_001
    finally:
        server.cpu_stop = False
        link.close()


def test_a_cpu_in_stop_answers_writes_bad_and_the_link_says_so(served, lab):
    """A server that answers writes in STOP with BadOutOfService (``stop_writes="bad"``; not
    what the S7-1500 manual describes, but a Bad status the bridge must name): the link calls
    it STOP and keeps its session."""
    _, server = served
    cfg = opcua_config(lab, server.port)
    link = PlcLink(cfg)
    server.stop_writes = "bad"
    try:
        assert connect(link) == ""
        server.cpu_stop = True
        data = _commands(cfg, 5_000_000, 1)[0]
        assert not link.write(cfg.control_db, data)
        # the PLC answered: named as STOP, the session kept (no reconnect against it)
        assert "BadOutOfService" in link.cpu_stop and "STOP" in link.cpu_stop
        assert link.connected and link.read(cfg.monitor_db, cfg.monitor.size) is not None
        server.cpu_stop = False
        assert link.write(cfg.control_db, _commands(cfg, 5_000_001, 1)[0]), link.last_error
        assert link.cpu_stop == "" and link.reconnects == 0
    finally:
        server.cpu_stop = False
        server.stop_writes = "accept"
        link.close()


def test_subscriptions_get_the_minimum_publishing_interval(served, lab):
    import asyncio

    from asyncua.client.client import Client

    _, server = served

    async def revised() -> float:
        client = Client(server.url)
        client.application_uri = "urn:excavator_hil:plc_bridge"
        await client.set_security_string(
            f"Basic256Sha256,SignAndEncrypt,{lab.client.cert},{lab.client.key},"
            f"{lab.server.cert}")
        client.set_user("bridge")
        client.set_password(PASSWORD)
        async with client:
            sub = await client.create_subscription(10, None)
            value = float(sub.parameters.RequestedPublishingInterval)
            await sub.delete()
            return value

    assert asyncio.run(revised()) == 200.0


def test_plc_setup_doc_lists_the_node_ids_the_bridge_uses() -> None:
    """docs/plc_setup.md section 8's node-id tables are those of config/plc.yaml (in the
    block's order)."""
    from plc_bridge.opcua_nodes import markdown_nodes

    cfg = load_config(None)
    doc = (Path(__file__).resolve().parents[1] / "docs" / "plc_setup.md").read_text()
    for block in (cfg.control, cfg.monitor):
        assert markdown_nodes(cfg, block) in doc, block.name


def test_the_plant_link_exchanges_over_opcua_with_its_own_certificate(lab, tmp_path):
    """The plant link over OPC UA (its own certificate, application urn:...:plant_link) with
    the virtual PLC in HIL mode: plant_in written in one request, plant_out read whole in one;
    the PLC sees the sensors, the simulation gets the PLC's actuations in seq order."""
    import dataclasses as dc
    import itertools

    from plc_bridge.plant_link.config import load_plant_link_config
    from plc_bridge.plant_link.core import ImuReading, Sensors
    from plc_bridge.plant_link.link import PlantLink, with_overrides

    base = load_plant_link_config()
    cfg = base.plc
    plc = VirtualPlc(dc.replace(cfg, virtual_plc=dc.replace(cfg.virtual_plc,
                                                               plant_mode="external")), port=0)
    plc.start()
    plant_pki = generate(tmp_path / "plant_link", "plant_link")
    shutil.copy(lab.server.cert, plant_pki.trusted / "virtual_plc.der")
    shutil.copy(plant_pki.cert, lab.server.trusted / "plant_link.der")
    server = OpcUaServer(plc, port=0, pki=lab.server, users={"bridge": PASSWORD_HASH})
    server.start()
    sent: list[Any] = []
    link = PlantLink(with_overrides(
        base, plc_transport="opcua", opcua_port=server.port, opcua_pki_dir=str(plant_pki.root),
        opcua_user="bridge", opcua_password_file=str(lab.password_file), plc_timeout_s=2.0),
        sent.append)
    try:
        link.set_imu(ImuReading(yaw_rate=0.05, pitch=0.01, roll=-0.02))
        stamp = [1_000_000_000]

        def feed() -> None:
            stamp[0] += 10_000_000
            link.set_sensors(Sensors(stamp[0], (0.2, 0.4), (1.0, 2.0), (), 0.5, True, False,
                                     False))
        feed()
        link.start()
        wait_until(lambda: (feed(), link.snapshot().status == "running")[1], EVENT_WAIT_S,
                   "the plant link running over OPC UA")
        assert isinstance(link.plc.session, OpcUaSession)
        wait_until(lambda: (feed(), len(sent) >= 5)[1], EVENT_WAIT_S, "actuations forwarded")
        seqs = [a.seq for a in sent]
        assert all(b > a for a, b in itertools.pairwise(seqs))
        seen = wait_until(lambda: [w for w in plc.plant_writes() if w["speed_left"] != 0.0],
                          EVENT_WAIT_S, "plant_in written")
        assert seen[-1]["speed_left"] == pytest.approx(0.2) and \
            seen[-1]["speed_right"] == pytest.approx(0.4) and seen[-1]["drive_ready"]
    finally:
        link.stop()
        server.stop()
        (lab.server.trusted / "plant_link.der").unlink(missing_ok=True)
        plc.stop()
