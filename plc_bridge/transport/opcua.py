"""The OPC UA transport: the CPU's own OPC UA server (S7-1500 >= FW 2.0, S7-1200 >= FW 4.4),
signed and encrypted, with a user login (asyncua client).

Connect (in the link's reconnect thread; each step's refusal names the fix):

1. the server's endpoints are asked for over an unsecured discovery channel (no secret on it);
   the one of ``opcua_security_policy`` / ``opcua_security_mode`` is taken and its certificate
   checked against the trust list (``opcua_pki.Pki``: never trusted on first use);
2. secure channel with this link's own certificate, session, user name + password (the password
   is encrypted with the server's key, and never sent on an unsecured channel: config refuses);
3. the namespace index of ``opcua_namespace_uri`` is asked of the server (never assumed 3);
4. the node of every field is checked in one Read of its DataType (an unknown node or another
   type is refused, naming the node, the types and what to do in TIA Portal), then all nodes
   are registered once for the session (RegisterNodes: the CPU's fast access path).

Each exchange: a block is read with one Read request and written with one Write request of
all its variables. A scan may land between any two of them (OPC UA does not even order the
operations of one Write: "The order the operations are processed in the Server is not defined
... If a Client requires sequential processing the Client needs separate Service calls", Part 4
5.10.4, and the CPU keeps only each elementary variable consistent). The control block carries
a CRC over the others (``command_crc``): the PLC takes a command only when the CRC matches what
it finds, so a scan between two variables takes nothing and the next scan finds the command
whole (docs/plc_setup.md section 4).

One request is in flight at a time: the calls come from the owner's thread one after the other,
and the client's keep-alive probe is off (the exchanges are the keep-alive). asyncua runs in an
event loop thread of the session's own; a request without a reply within the timeout fails and
the session is dropped at once (socket closed, no CloseSession on a dead link).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from asyncua import ua
from asyncua.client.client import Client
from asyncua.crypto import security_policies
from asyncua.ua.attribute_ids import AttributeIds
from asyncua.ua.uaerrors import UaStatusCodeError

from plc_bridge.config import BridgeConfig
from plc_bridge.db_layout import DbLayout
from plc_bridge.errors import LinkRefusedError, PlcStoppedError
from plc_bridge.opcua_nodes import FieldNode, field_nodes, parse_node_ids
from plc_bridge.opcua_pki import APPLICATION_URIS, Pki, describe, read_password

_LOG = logging.getLogger("plc_bridge.opcua")
T = TypeVar("T")

CONNECT_TIMEOUT_S = 5.0          # each request of the connect sequence
SESSION_TIMEOUT_MS = 30_000      # the server frees a session of a vanished client after this
SECURE_CHANNEL_LIFETIME_MS = 600_000   # token renewed at 75 % of it (Part 4 5.5.2)
_STATUS_HINTS = {
    "BadUserAccessDenied": "the PLC refused the user: check opcua_user and its password file "
                           "(TIA Portal: OPC UA > Server > Security > User authentication)",
    "BadIdentityTokenRejected": "the PLC refused the user: check opcua_user and its password "
                                "file (TIA Portal: OPC UA > Server > Security > User "
                                "authentication; anonymous: guest access)",
    "BadIdentityTokenInvalid": "the PLC refused the login: a user name and password are "
                               "needed (opcua_user, opcua_password_file)",
    "BadCertificateUntrusted": "the PLC does not trust this application's certificate: add "
                               "{cert} to its trusted clients (TIA Portal: OPC UA > Server > "
                               "Security > Trusted clients, then download; the virtual PLC: "
                               "copy it into its trusted/ folder)",
    "BadSecurityChecksFailed": "the PLC refused the secure channel (its trust list, or the "
                               "clocks): add {cert} to its trusted clients",
    "BadCertificateTimeInvalid": "a certificate is out of its validity: renew it "
                                 "(excavator-hil opcua-certs --force) or correct the clocks",
}


def _policy_class(name: str) -> type[security_policies.SecurityPolicy]:
    return getattr(security_policies, f"SecurityPolicy{name}")  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Prepared:
    """What a connect needs, checked at start-up (not at each reconnect)."""

    config: BridgeConfig
    url: str
    application: str
    blocks: tuple[tuple[DbLayout, tuple[FieldNode, ...]], ...]
    password: str
    pki: Pki | None


class _LoopThread:
    """An asyncio event loop in a daemon thread: the session's coroutines run there."""

    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout_s)
        except TimeoutError:
            future.cancel()
            raise TimeoutError(f"no reply within {timeout_s * 1e3:.0f} ms") from None

    def stop(self) -> None:
        async def _cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(_cancel_all(), self.loop).result(1.0)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(2.0)
        if not self._thread.is_alive():
            self.loop.close()


class OpcUaSession:
    """One secure channel + session with the blocks' nodes registered (``open``)."""

    connecting_note = "connecting (OPC UA: secure channel, session, nodes; no reply yet)"

    def __init__(self, prepared: Prepared, loop: _LoopThread, client: Client,
                 nodes: dict[int, list[tuple[FieldNode, ua.NodeId]]], warning: str):
        self._prepared = prepared
        self._loop = loop
        self.client = client
        self.nodes = nodes      # db number -> (field node, registered node id), layout order
        self.namespace_index = -1
        self.warning = warning
        self._timeout_s = CONNECT_TIMEOUT_S
        self.write_requests = 0                 # Write requests sent (the bench counts them)

    # --- start-up -----------------------------------------------------------------------------
    @staticmethod
    def prepare(config: BridgeConfig, writes: Sequence[DbLayout], reads: Sequence[DbLayout],
                application: str) -> Prepared:
        """Check now what does not change between connects (``BridgeConfigError`` naming the
        fix): the node ids of every field, the own certificate and key, the password file."""
        numeric = parse_node_ids(config.opcua_node_ids)
        blocks = tuple((b, field_nodes(config, b, numeric)) for b in (*writes, *reads))
        pki = None
        if config.opcua_security_policy != "None":
            pki = Pki.of(config.opcua_pki_dir, application)
            pki.check_own()
        password = read_password(config.opcua_password_file) if config.opcua_user else ""
        if config.opcua_user_certificate:
            from pathlib import Path

            from plc_bridge.opcua_pki import check_private

            check_private(Path(config.opcua_user_key).expanduser(), "opcua_user_key")
        url = f"opc.tcp://{config.plc_host}:{config.opcua_port}"
        return Prepared(config, url, application, blocks, password, pki)

    # --- connect --------------------------------------------------------------------------------
    @classmethod
    def open(cls, prepared: Prepared) -> OpcUaSession:
        loop = _LoopThread(f"opcua-{prepared.application}")
        try:
            return loop.run(cls._open(prepared, loop), 4 * CONNECT_TIMEOUT_S)
        except BaseException:
            loop.stop()
            raise

    @classmethod
    async def _open(cls, prepared: Prepared, loop: _LoopThread) -> OpcUaSession:
        cfg = prepared.config
        client = Client(prepared.url, timeout=CONNECT_TIMEOUT_S, watchdog_intervall=1e6)
        client.application_uri = APPLICATION_URIS[prepared.application]
        client.name = f"excavator_hil {prepared.application}"
        client.session_timeout = SESSION_TIMEOUT_MS
        client.secure_channel_timeout = SECURE_CHANNEL_LIFETIME_MS
        warning = ""
        where = f"the OPC UA server at {prepared.url}"
        if prepared.pki is None:
            warning = (f"{where}: security policy None (opcua_allow_insecure): the channel is "
                       f"neither signed nor encrypted and the PLC's certificate is not checked; "
                       f"a lab only")
        else:
            await cls._secure(client, prepared, where)
        if cfg.opcua_user:
            client.set_user(cfg.opcua_user)
            client.set_password(prepared.password)
        elif cfg.opcua_user_certificate:   # X.509 user token: signed with its key, no secret
            await client.load_client_certificate(cfg.opcua_user_certificate)
            await client.load_private_key(cfg.opcua_user_key)
        try:
            await client.connect()
        except UaStatusCodeError as e:
            raise LinkRefusedError(cls._refusal(e, prepared, where)) from None
        session = cls(prepared, loop, client, {}, warning)
        try:
            await session._resolve(where)
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.disconnect(), 1.0)
            raise
        return session

    @staticmethod
    async def _secure(client: Client, prepared: Prepared, where: str) -> None:
        cfg, pki = prepared.config, prepared.pki
        assert pki is not None
        policy = _policy_class(cfg.opcua_security_policy)
        mode = getattr(ua.MessageSecurityMode, cfg.opcua_security_mode)
        endpoints = await client.connect_and_get_server_endpoints()
        chosen = [e for e in endpoints
                  if e.SecurityPolicyUri == policy.URI and e.SecurityMode == mode]
        if not chosen:
            offered = ", ".join(sorted({f"{e.SecurityPolicyUri.rsplit('#', 1)[-1]}/"
                                        f"{e.SecurityMode.name}" for e in endpoints}))
            raise LinkRefusedError(
                f"{where} offers no endpoint {cfg.opcua_security_policy}/"
                f"{cfg.opcua_security_mode} (it offers: {offered}); enable it on the PLC (TIA "
                f"Portal: OPC UA > Server > Security > Security policies) or set "
                f"opcua_security_policy / opcua_security_mode to one it offers")
        der = bytes(chosen[0].ServerCertificate)
        pki.check_peer(der, where)
        await client.set_security(policy, str(pki.cert), str(pki.key), server_certificate=der,
                                  mode=mode)

    @staticmethod
    def _refusal(e: UaStatusCodeError, prepared: Prepared, where: str) -> str:
        name = ua.StatusCode(e.code).name
        cert = str(prepared.pki.cert) if prepared.pki is not None else "its certificate"
        if prepared.pki is not None and prepared.pki.cert.is_file():
            from cryptography import x509
            cert = (f"{prepared.pki.cert} "
                    f"{describe(x509.load_der_x509_certificate(prepared.pki.cert.read_bytes()))}")
        hint = _STATUS_HINTS.get(name, "see the PLC's diagnostic buffer")
        cfg = prepared.config
        user = (f" as user {cfg.opcua_user!r}" if cfg.opcua_user else
                f" with user certificate {cfg.opcua_user_certificate}"
                if cfg.opcua_user_certificate else " anonymously")
        return f"{where} refused the session{user}: {name}: {hint.format(cert=cert)}"

    async def _resolve(self, where: str) -> None:
        cfg = self._prepared.config
        try:
            ns = await self.client.get_namespace_index(cfg.opcua_namespace_uri)
        except ValueError:
            uris = await self.client.get_namespace_array()
            raise LinkRefusedError(
                f"{where} has no namespace {cfg.opcua_namespace_uri!r} (opcua_namespace_uri); "
                f"it has: {', '.join(uris)}") from None
        self.namespace_index = ns
        flat = [(block, n, _node_id(n.identifier, ns))
                for block, nodes in self._prepared.blocks for n in nodes]
        kinds = await self.client.uaclient.read_attributes([i for _, _, i in flat],
                                                           AttributeIds.DataType)
        problems: list[str] = []
        for (block, node, _), dv in zip(flat, kinds, strict=True):
            if dv.StatusCode is not None and not dv.StatusCode.is_good():
                problems.append(f"{node.text(ns)} ({block.name}.{node.field}): "
                                f"{dv.StatusCode.name}")
                continue
            want = _node_id(getattr(ua.VariantType, node.variant).value, 0)
            got = dv.Value.Value if dv.Value is not None else None
            if got != want:
                got_name = (ua.VariantType(got.Identifier).name
                            if isinstance(got, ua.NodeId) and got.NamespaceIndex == 0 and
                            isinstance(got.Identifier, int) and got.Identifier <= 25 else got)
                problems.append(f"{node.text(ns)} ({block.name}.{node.field}) is {got_name} on "
                                f"the PLC, the layout says "
                                f"{block.field(node.field).s7_type} ({node.variant})")
        if problems:
            raise LinkRefusedError(
                f"{where}: {len(problems)} variable(s) do not match config/plc.yaml: "
                f"{'; '.join(problems[:6])}{' ...' if len(problems) > 6 else ''}. Import the "
                f"generated DB source (excavator-hil plc-db-source), tick 'Accessible from "
                f"HMI/OPC UA' (and 'Writable' on the blocks the link writes), compile and "
                f"download")
        registered = await self.client.uaclient.register_nodes([i for _, _, i in flat])
        for (block, node, _), rid in zip(flat, registered, strict=True):
            self.nodes.setdefault(block.db_number, []).append((node, rid))

    # --- exchanges ------------------------------------------------------------------------------
    def set_timeout(self, timeout_s: float) -> None:
        self._timeout_s = timeout_s

    def write(self, block: DbLayout, data: bytes) -> None:
        self._loop.run(self._write(block, block.decode(data)), self._timeout_s)

    def read(self, block: DbLayout) -> bytes:
        values = self._loop.run(self._read(block), self._timeout_s)
        return block.encode(values, nonfinite_ok=True)

    async def _write_request(self, block: DbLayout,
                             items: list[tuple[FieldNode, ua.NodeId, Any]]) -> None:
        self.write_requests += 1
        dvs = [ua.DataValue(Value=ua.Variant(v, getattr(ua.VariantType, n.variant)))
               for n, _, v in items]
        results = await self.client.uaclient.write_attributes([i for _, i, _ in items], dvs)
        bad = [f"{block.name}.{n.field}: {r.name}"
               for (n, _, _), r in zip(items, results, strict=True) if not r.is_good()]
        if bad and all(r.value == ua.StatusCodes.BadOutOfService
                       for r in results if not r.is_good()):
            raise PlcStoppedError(
                f"the PLC's CPU is in STOP: it answered the write of {bad[0].split(':')[0]} "
                f"with BadOutOfService; nothing is taken until the CPU is in RUN (mode "
                f"selector, TIA Portal 'Online & diagnostics', or the cause in its diagnostic "
                f"buffer)")
        if bad:
            raise ConnectionError(f"the PLC refused the write of {', '.join(bad)}")

    async def _write(self, block: DbLayout, values: dict[str, Any]) -> None:
        nodes = self.nodes[block.db_number]
        await self._write_request(block, [(n, i, _wire(values[n.field], n.variant))
                                          for n, i in nodes])

    async def _read(self, block: DbLayout) -> dict[str, Any]:
        nodes = self.nodes[block.db_number]
        dvs = await self.client.uaclient.read_attributes([i for _, i in nodes],
                                                         AttributeIds.Value)
        out: dict[str, Any] = {}
        for (n, _), dv in zip(nodes, dvs, strict=True):
            if dv.StatusCode is not None and not dv.StatusCode.is_good():
                raise ConnectionError(f"read of {block.name}.{n.field}: {dv.StatusCode.name}")
            variant = dv.Value
            if variant is None or variant.VariantType != getattr(ua.VariantType, n.variant):
                got = variant.VariantType.name if variant is not None else "no value"
                raise ConnectionError(f"read of {block.name}.{n.field}: {got}, the layout says "
                                      f"{n.variant}")
            out[n.field] = variant.Value
        return out

    def abort(self, graceful: bool = False) -> None:
        async def _down() -> None:
            if graceful:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.client.disconnect(), 1.0)
                    return
            with contextlib.suppress(Exception):
                self.client.uaclient.disconnect_socket()

        with contextlib.suppress(Exception):
            self._loop.run(_down(), 2.0)
        self._loop.stop()


def _wire(value: Any, variant: str) -> Any:
    """A decoded S7 value as the Python value of its variant (bool, int or float)."""
    if variant == "Boolean":
        return bool(value)
    if variant == "Float":
        return float(value)
    return int(value)


def _node_id(identifier: str | int, namespace_index: int) -> ua.NodeId:
    return ua.NodeId(identifier, namespace_index)
