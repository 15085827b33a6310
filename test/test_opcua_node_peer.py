"""node-opcua (an independent OPC UA implementation, Node.js) reads the virtual PLC's OPC UA
server over Basic256Sha256 SignAndEncrypt with a user login: its answers and ours (asyncua,
the bridge's own client) agree on the namespace index, the node ids, the types and the values.

node-opcua is installed by ``test/peers/install_node_opcua.sh`` (``npm ci`` from the lockfile
in test/peers/node_opcua); without it (or without Node.js) these tests skip and say so."""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from asyncua import ua
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID
from helpers import EVENT_WAIT_S
from test_opcua_transport import PASSWORD, _commands, connect, lab, opcua_config, served  # noqa: F401 - the module's fixtures, shared

from plc_bridge.command_crc import block_crc
from plc_bridge.opcua_nodes import SIEMENS_NAMESPACE_URI, VARIANT_TYPES, db_name
from plc_bridge.transport.plc_link import PlcLink

PEER = Path(__file__).resolve().parent / "peers" / "node_opcua"
PEER_URI = "urn:excavator_hil:node_opcua_peer"


def _peer_available() -> str:
    if shutil.which("node") is None:
        return "Node.js is not installed"
    if not (PEER / "node_modules" / "node-opcua").is_dir():
        return "node-opcua is not installed: run test/peers/install_node_opcua.sh"
    return ""


pytestmark = pytest.mark.skipif(bool(_peer_available()), reason=_peer_available() or "-")


def _peer_certificate(folder: Path) -> tuple[Path, Path, bytes]:
    """The node-opcua client's own certificate (PEM, as it reads them) with its URI."""
    from asyncua.crypto.cert_gen import generate_self_signed_app_certificate

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = generate_self_signed_app_certificate(
        key, "excavator_hil node-opcua peer", {"organizationName": "excavator_hil"},
        [x509.UniformResourceIdentifier(PEER_URI), x509.DNSName("localhost")],
        [ExtendedKeyUsageOID.CLIENT_AUTH], days=2)
    folder.mkdir(parents=True)
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    assert cert.not_valid_after_utc > datetime.datetime.now(datetime.UTC)
    return cert_path, key_path, cert.public_bytes(serialization.Encoding.DER)


def test_node_opcua_reads_what_the_bridge_wrote_with_the_same_ids_and_types(
        served, lab, tmp_path):  # noqa: F811 - the fixtures imported above
    _, server = served
    cfg = opcua_config(lab, server.port)
    cert, key, der = _peer_certificate(tmp_path / "peer_own")
    (lab.server.trusted / "node_opcua_peer.der").write_bytes(der)
    link = PlcLink(cfg)
    try:
        assert connect(link) == ""
        command = _commands(cfg, 9_000_000, 2)[1]      # a drive command, every field set
        assert link.write(cfg.control_db, command), link.last_error
        ours = cfg.control.decode(command)
        blocks = [(cfg.control, ours), (cfg.monitor, None)]
        ids = [f'"{db_name(b)}"."{f.name}"' for b, _ in blocks for f in b.fields]
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps({
            "url": server.url, "pki": str(tmp_path / "peer_pki"), "cert": str(cert),
            "key": str(key), "serverCert": str(lab.server.cert), "applicationUri": PEER_URI,
            "user": "bridge", "password": PASSWORD, "namespaceUri": SIEMENS_NAMESPACE_URI,
            "ids": ids, "out": str(tmp_path / "peer.json")}))
        out = subprocess.run(["node", str(PEER / "read_nodes.js"), str(spec)], cwd=PEER,
                             check=False, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        theirs = json.loads((tmp_path / "peer.json").read_text())
    finally:
        link.close()
        (lab.server.trusted / "node_opcua_peer.der").unlink(missing_ok=True)
    assert theirs["namespaceIndex"] == server.namespace_index
    nodes = iter(theirs["nodes"])
    for block, values in blocks:
        for f in block.fields:
            node = next(nodes)
            assert node["id"] == f'"{db_name(block)}"."{f.name}"'
            assert node["status"] == "Good", node
            want = getattr(ua.VariantType, VARIANT_TYPES[f.s7_type]).value
            assert node["dataType"] == want == node["variantType"], (f.name, node)
            if values is not None:
                got, expected = node["value"], values[f.name]
                if f.s7_type == "REAL":
                    assert np.float32(got) == np.float32(expected), (f.name, got, expected)
                else:
                    assert got == expected, (f.name, got, expected)
    monitor = {n["id"].split(".")[-1].strip('"'): n["value"] for n in theirs["nodes"]}
    assert monitor["ready"] is True and monitor["auto"] is True


def test_the_bridge_writes_a_command_to_a_node_opcua_server_in_one_request(
        lab, tmp_path):  # noqa: F811 - the fixture imported above
    """node-opcua as the server (the S7-1500 node ids in the Siemens namespace, at the index
    node-opcua gives it, Basic256Sha256 SignAndEncrypt, a user login): the bridge's link
    connects, checks the types, registers the nodes, and its command arrives as one Write of
    every field, each value as written, the crc the one the bridge sealed (which the other
    server holds as the same 32 bits); its read decodes what the server serves."""
    import signal

    from test_opcua_transport import _free_port

    from excavator_hil.hil_harness import wait_until
    from plc_bridge.config import load_config
    from plc_bridge.opcua_pki import generate

    cfg0 = load_config(None)
    server = generate(tmp_path / "node_server", "virtual_plc", server=True)
    pem = tmp_path / "node_server.pem"
    pem.write_bytes(x509.load_der_x509_certificate(server.cert.read_bytes()).public_bytes(
        serialization.Encoding.PEM))
    client_pki = generate(tmp_path / "bridge", "plc_bridge")
    shutil.copy(server.cert, client_pki.trusted / "node_server.der")
    monitor = {f.name: False if f.s7_type == "BOOL" else 0 for f in cfg0.monitor.fields}
    monitor.update(alive=7, ready=True, auto=True, speed_left=0.25, speed_right=-0.5)
    blocks = [(cfg0.control, True, cfg0.control.zero_values()), (cfg0.monitor, False, monitor)]
    port = _free_port()
    spec = tmp_path / "serve.json"
    log, ready = tmp_path / "writes.jsonl", tmp_path / "ready"
    spec.write_text(json.dumps({
        "port": port, "pki": str(tmp_path / "node_pki"), "cert": str(pem),
        "key": str(server.key), "applicationUri": "urn:excavator_hil:virtual_plc",
        "trust": [str(client_pki.cert)], "user": "bridge", "password": PASSWORD,
        "namespaceUri": SIEMENS_NAMESPACE_URI, "log": str(log), "ready": str(ready),
        "blocks": [{"name": db_name(b), "writable": w, "fields": [
            {"name": f.name, "type": VARIANT_TYPES[f.s7_type], "value": values[f.name]}
            for f in b.fields]} for b, w, values in blocks]}))
    proc = subprocess.Popen(["node", str(PEER / "serve_blocks.js"), str(spec)], cwd=PEER,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    link = None
    try:
        wait_until(lambda: ready.exists() or proc.poll() is not None, 120.0,
                   "the node-opcua server")
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
        cfg = opcua_config(lab, port, opcua_pki_dir=str(client_pki.root))
        link = PlcLink(cfg)
        assert connect(link, 60.0) == ""
        command = _commands(cfg, 3_000_000, 2)[1]
        assert link.write(cfg.control_db, command), link.last_error
        data = link.read(cfg.monitor_db, cfg.monitor.size)
        assert data is not None, link.last_error
        got = cfg.monitor.decode(bytes(data))
        assert got["alive"] == 7 and got["ready"] and got["auto"] and not got["fault"]
        assert got["speed_left"] == 0.25 and got["speed_right"] == -0.5
        sent = cfg.control.decode(command)
        def logged() -> list[dict] | None:
            text = log.read_text() if log.exists() else ""
            found = [json.loads(x) for x in text.splitlines()]
            return found if len(found) >= len(sent) else None
        lines = wait_until(logged, EVENT_WAIT_S, "the node-opcua server's log of the writes")
        assert len(lines) == len(sent), lines   # one Write, each field once
        got_fields = {x["field"]: x["value"] for x in lines}
        assert set(got_fields) == set(sent)
        assert {x["block"] for x in lines} == {db_name(cfg.control)}
        for name, value in got_fields.items():
            assert np.float32(value) == np.float32(sent[name]) if isinstance(value, float) \
                else value == sent[name], (name, value, sent[name])
        assert got_fields["crc"] & 0xFFFFFFFF == block_crc(cfg.control, command)
    finally:
        if link is not None:
            link.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(EVENT_WAIT_S)
