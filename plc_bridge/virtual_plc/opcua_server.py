"""The virtual PLC's OPC UA server: the same data blocks as its S7 server, addressed as an
S7-1500 addresses them, secured as a hardened CPU is (asyncua server).

- Namespace ``http://www.siemens.com/simatic-s7-opcua`` (at index 3 by default, as on a CPU;
  ``namespace_shift`` registers that many other namespaces before it, so a client that assumes
  3 fails), the variables ``ns=<i>;s="<DB name>"."<field>"`` under ``Objects/DataBlocksGlobal``,
  each with its built-in type (REAL Float, INT Int16, DINT Int32, BOOL Boolean, UINT/WORD
  UInt16), writable only in the blocks clients write (control, plant_in).
- Reads and writes go to the very bytes the S7 server serves (``VirtualPlc.blocks``): a read
  decodes the block as it is now, a write changes one variable under the S7 area lock.
- The PLC scans after every single variable written (``VirtualPlc.take_control``): the worst
  interleaving a CPU could produce. The scan takes the control block only when its ``crc``
  matches and its ``seq`` is not 0 and differs from the one it took last: what
  docs/plc_setup.md section 4 asks of the PLC program, so every scan during a Write but the
  last finds the block half written and takes nothing, and a client that sends no valid CRC
  has nothing taken.
- Only secure endpoints by default (Basic256Sha256, Aes256Sha256RsaPss, Aes128Sha256RsaOaep; Sign
  and SignAndEncrypt); ``allow_insecure`` adds None (a lab; logged as a warning). Anonymous
  login is off unless ``allow_anonymous``; users log in with a name and password checked
  against ``users`` (name -> scrypt hash, :mod:`plc_bridge.virtual_plc.users`: the server
  never holds a password) or with an X.509 user certificate of ``user_certs``
  (name -> DER; the token's signature checked by asyncua). Client certificates must be in
  the PKI's trusted/ folder: an unknown one is refused (BadCertificateUntrusted), saved in
  rejected/, and the log says how to trust it.
- Subscriptions: the publishing interval is raised to ``min_publishing_interval_ms`` (Siemens:
  "the server will still only send a message every" minimum interval); values are sampled
  into the address space at that interval.
- the CPU in STOP (``cpu_stop``, the virtual PLC's fault flag of that name, shared with its
  S7 server): as the S7-1500 manual describes it ("If you write values to the OPC UA server,
  the OPC UA server will accept those values. However, the CPU will not process the values",
  Communication Function Manual A5E03735815, section 9.1, "Server response in detail"):
  writes are answered Good and land in the block, no scan takes them (logged ``refused:
  "cpu_stop"``, as over S7), reads show the new values and otherwise the blocks as the last
  scan left them (the alive counter stands still). ``stop_writes="bad"`` answers writes
  BadOutOfService instead, for a server that says so (not seen on a Siemens CPU; the bridge
  names it ``plc_cpu_stop``).
- ``restart()`` stops the OPC UA server and starts it again on the same port, the process and
  its S7 server staying up (the control channel's ``opcua`` command): sessions and
  subscriptions end with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import Any

from asyncua import ua
from asyncua.common.utils import ServiceError
from asyncua.crypto.permission_rules import User, UserRole
from asyncua.server.address_space import AttributeService
from asyncua.server.server import Server
from asyncua.server.user_managers import UserManager
from asyncua.ua.attribute_ids import AttributeIds
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from plc_bridge.command_crc import is_whole
from plc_bridge.errors import LinkRefusedError
from plc_bridge.opcua_nodes import SIEMENS_NAMESPACE_URI, VARIANT_TYPES, db_name
from plc_bridge.opcua_pki import APPLICATION_URIS, Pki
from plc_bridge.virtual_plc.server import VirtualPlc
from plc_bridge.virtual_plc.users import UsersFileError, check_hash, verify_password

_LOG = logging.getLogger("virtual_plc.opcua")
# what a write to a CPU in STOP gets: "accept" (Good; the value lands, no scan takes it: what
# the S7-1500 manual describes) or "bad" (BadOutOfService)
STOP_WRITES = ("accept", "bad")
# how long the server's start (the certificates, the address space: seconds on a loaded host)
# and its stop may take [s]; a control-channel reply to "opcua" with "up" waits for them
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0
SECURE_POLICIES = (
    ua.SecurityPolicyType.Basic256Sha256_SignAndEncrypt, ua.SecurityPolicyType.Basic256Sha256_Sign,
    ua.SecurityPolicyType.Aes256Sha256RsaPss_SignAndEncrypt,
    ua.SecurityPolicyType.Aes256Sha256RsaPss_Sign,
    ua.SecurityPolicyType.Aes128Sha256RsaOaep_SignAndEncrypt,
    ua.SecurityPolicyType.Aes128Sha256RsaOaep_Sign)


class _Users(UserManager):  # type: ignore[misc]
    """Users by name and password, or by X.509 user certificate (DER -> name)."""

    def __init__(self, users: dict[str, str], allow_anonymous: bool,
                 user_certs: dict[bytes, str]):
        self._users = users
        self._anonymous = allow_anonymous
        self._certs = user_certs

    def get_user(self, iserver: Any, username: str | None = None, password: str | None = None,
                 certificate: Any = None) -> User | None:
        if username is None:
            # an X.509 user token (asyncua verified its signature) or anonymous (then this is
            # the channel's application certificate, never one of the user certificates:
            # OpcUaServer refuses a user certificate that is also a trusted application's)
            der = bytes(certificate) if certificate is not None else b""
            if der in self._certs:
                return User(role=UserRole.User, name=self._certs[der])
            if self._anonymous:
                return User(role=UserRole.User, name="anonymous")
            if der:
                _LOG.warning("virtual PLC (OPC UA): a login without a user name and with an "
                             "unknown certificate refused")
            return None
        stored = self._users.get(username or "")
        if stored is None or password is None or not verify_password(stored, str(password)):
            _LOG.warning("virtual PLC (OPC UA): login of user %r refused", username)
            return None
        return User(role=UserRole.User, name=username)


_ADMIN = User(role=UserRole.Admin)   # asyncua's default for server-internal writes


class _Field:
    __slots__ = ("name", "role", "variant", "writable")

    def __init__(self, role: str, name: str, variant: ua.VariantType, writable: bool):
        self.role, self.name, self.variant, self.writable = role, name, variant, writable


class _DbAttributes(AttributeService):  # type: ignore[misc]
    """Reads and writes of the data-block variables go to the virtual PLC's bytes; every other
    node is the address space's, as before."""

    def __init__(self, base: AttributeService, owner: OpcUaServer):
        super().__init__(base._aspace)
        self._owner = owner

    def read(self, params: ua.ReadParameters) -> list[ua.DataValue]:
        fields = self._owner.fields
        if not any(r.NodeId in fields and r.AttributeId == AttributeIds.Value
                   for r in params.NodesToRead):
            return list(super().read(params))
        plc = self._owner.plc
        while plc.faults.stall and not self._owner.stopping:
            time.sleep(0.002)   # a pulled cable: nothing is answered (the server loop waits)
        now = time.monotonic()
        blocks: dict[str, dict[str, Any]] = {}
        out: list[ua.DataValue] = []
        for r in params.NodesToRead:
            f = fields.get(r.NodeId)
            if f is None or r.AttributeId != AttributeIds.Value:
                out.append(self._aspace.read_attribute_value(r.NodeId, r.AttributeId))
                continue
            if f.role not in blocks:
                raw = plc.snapshot(f.role)
                blocks[f.role] = plc.blocks()[f.role][0].decode(raw)
                plc.log_read(f.role, raw, now)
            value = blocks[f.role][f.name]
            out.append(ua.DataValue(Value=ua.Variant(_python(value, f.variant), f.variant)))
        return out

    async def write(self, params: ua.WriteParameters, user: User = _ADMIN) -> list[ua.StatusCode]:
        owner = self._owner
        out: list[ua.StatusCode] = []
        plant_in_written = False
        for w in params.NodesToWrite:
            f = owner.fields.get(w.NodeId)
            if f is None:
                out.extend(await super().write(ua.WriteParameters(NodesToWrite=[w]), user))
                continue
            while owner.plc.faults.stall and not owner.stopping:
                await asyncio.sleep(0.002)   # a pulled cable: never answered
            out.append(self._write_one(f, w, user))
            plant_in_written |= f.role == "plant_in" and out[-1].is_good()
        if plant_in_written:
            owner.plc.log_plant_in(owner.plc.snapshot("plant_in"), time.monotonic())
        return out

    def _write_one(self, f: _Field, w: ua.WriteValue, user: User) -> ua.StatusCode:
        owner = self._owner
        if user.role == UserRole.Anonymous:
            return ua.StatusCode(ua.StatusCodes.BadUserAccessDenied)
        if w.AttributeId != AttributeIds.Value or not f.writable:
            return ua.StatusCode(ua.StatusCodes.BadNotWritable)
        if owner.cpu_stop and owner.stop_writes == "bad":
            return ua.StatusCode(ua.StatusCodes.BadOutOfService)
        variant = w.Value.Value if w.Value is not None else None
        if variant is None or variant.VariantType != f.variant:
            return ua.StatusCode(ua.StatusCodes.BadTypeMismatch)
        if w.IndexRange:
            return ua.StatusCode(ua.StatusCodes.BadIndexRangeInvalid)
        try:
            raw = owner.plc.write_field(f.role, f.name, variant.Value)
        except Exception:  # noqa: BLE001 - out of range for the S7 type
            return ua.StatusCode(ua.StatusCodes.BadOutOfRange)
        if f.role == "control":
            if owner.cpu_stop:   # landed, read back as written, but no scan takes it
                owner.plc.log_untaken_control(time.monotonic(), raw)
            else:
                owner.scan_control(raw)
        return ua.StatusCode()


class OpcUaServer:
    """Serves ``plc``'s blocks over OPC UA on ``opc.tcp://host:port`` (``start``/``stop``)."""

    def __init__(self, plc: VirtualPlc, *, host: str = "127.0.0.1", port: int = 4840,
                 pki: Pki | None = None, users: dict[str, str] | None = None,
                 allow_anonymous: bool = False, allow_insecure: bool = False,
                 min_publishing_interval_ms: float = 100.0, namespace_shift: int = 0,
                 user_certs: dict[str, bytes] | None = None, stop_writes: str = "accept"):
        if stop_writes not in STOP_WRITES:
            raise ValueError(f"stop_writes {stop_writes!r}: one of {', '.join(STOP_WRITES)}")
        self.stop_writes = stop_writes
        if pki is None and not allow_insecure:
            raise ValueError("an OPC UA server without a PKI folder serves only policy None: "
                             "pass allow_insecure=True (a lab) or a Pki")
        self.plc = plc
        self.host, self.port = host, port
        self.pki = pki
        self.users = dict(users or {})
        for name, stored in self.users.items():
            try:
                check_hash(stored)
            except UsersFileError as e:
                raise ValueError(f"OPC UA user {name!r}: {e}; give the hash of its password "
                                 "(plc_bridge.virtual_plc.users.hash_password)") from None
        self.user_certs = {der: name for name, der in (user_certs or {}).items()}
        if pki is not None and set(self.user_certs) & set(pki.trusted_certs()):
            raise ValueError("a user certificate is also a trusted application certificate: "
                             "give users certificates of their own")
        self.allow_anonymous = allow_anonymous
        self.allow_insecure = allow_insecure
        self.min_publishing_interval_ms = float(min_publishing_interval_ms)
        self.namespace_shift = namespace_shift
        self.namespace_index = -1
        self.stopping = False
        self.fields: dict[ua.NodeId, _Field] = {}
        self._last_seq_taken: int | None = None
        self._seq_at = plc.config.control.field("seq").byte_offset
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._server: Server | None = None
        self._sampler: asyncio.Task[None] | None = None

    @property
    def cpu_stop(self) -> bool:
        """The CPU in STOP (the virtual PLC's ``cpu_stop`` fault: one flag for both servers)."""
        return self.plc.faults.cpu_stop

    @cpu_stop.setter
    def cpu_stop(self, value: bool) -> None:
        self.plc.set_faults(cpu_stop=value)

    @property
    def running(self) -> bool:
        return self._server is not None

    def subscriptions(self) -> int:
        """Subscriptions open on the server now (0 while it is stopped)."""
        server = self._server
        if server is None:
            return 0

        async def _count() -> int:
            assert server is not None
            return len(server.iserver.subscription_service.subscriptions)
        return asyncio.run_coroutine_threadsafe(_count(), self._loop).result(10.0)

    def restart(self, up: bool) -> None:
        """Stop (``up`` False) or start again (True) the OPC UA server only, on the same port."""
        if not up and self._server is not None:
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(STOP_TIMEOUT_S)
        elif up and self._server is None:
            self.fields.clear()
            self._last_seq_taken = None
            asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(START_TIMEOUT_S)

    @property
    def url(self) -> str:
        return f"opc.tcp://{self.host}:{self.port}"

    # --- the PLC scan after a write -------------------------------------------------------------
    def scan_control(self, raw: bytes) -> None:
        """What the PLC program finds in the control block now: a new command only when its
        ``crc`` matches (not half written: ``command_crc``), its ``seq`` is not 0 and not the
        one judged last (a block left as it was is not written again)."""
        if not is_whole(self.plc.config.control, raw):
            self.plc.count_torn()   # a scan between two variables of one Write: not logged
            return
        seq = int.from_bytes(raw[self._seq_at:self._seq_at + 4], "big", signed=True)
        if seq in (0, self._last_seq_taken):
            return
        self._last_seq_taken = seq
        self.plc.take_control(time.monotonic(), raw)

    # --- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop.run_forever, name="virtual-plc-opcua",
                                        daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(START_TIMEOUT_S)

    def stop(self) -> None:
        self.stopping = True
        if self._thread is None:
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(STOP_TIMEOUT_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5.0)
        self._thread = None

    async def _stop(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
        if self._server is not None:
            await self._server.stop()
            self._server = None

    async def _start(self) -> None:
        server = Server(user_manager=_Users(self.users, self.allow_anonymous,
                                            self.user_certs))
        await server.init()
        server.set_endpoint(self.url)
        server.set_server_name("excavator_hil virtual PLC (S7-1500 OPC UA, simulated)")
        await server.set_application_uri(APPLICATION_URIS["virtual_plc"])
        policies = list(SECURE_POLICIES) if self.pki is not None else []
        if self.allow_insecure:
            policies.append(ua.SecurityPolicyType.NoSecurity)
            _LOG.warning("virtual PLC (OPC UA): policy None offered (allow_insecure): a lab only")
        server.set_security_policy(policies)
        tokens: list[type] = [ua.UserNameIdentityToken]
        if self.user_certs:
            tokens.append(ua.X509IdentityToken)
        if self.allow_anonymous:
            tokens.append(ua.AnonymousIdentityToken)
        server.set_identity_tokens(tokens)
        if self.pki is not None:
            self.pki.check_own()
            await server.load_certificate(str(self.pki.cert))
            await server.load_private_key(str(self.pki.key))
            server.set_certificate_validator(self._validate_client)
        for i in range(self.namespace_shift + 1):   # ns 2.. as on a CPU, ours after them
            await server.register_namespace(f"urn:excavator_hil:virtual_plc:other:{i}")
        ns = await server.register_namespace(SIEMENS_NAMESPACE_URI)
        self.namespace_index = ns
        await self._add_blocks(server, ns)
        iserver = server.iserver
        iserver.attribute_service = _DbAttributes(iserver.attribute_service, self)
        self._clamp_subscriptions(server)
        await server.start()
        if server.bserver is not None:
            self.port = int(server.bserver.port)   # the port bound (for port 0)
        self._server = server
        self._sampler = asyncio.create_task(self._sample())
        _LOG.info("virtual PLC (OPC UA) serving on %s, namespace %s at index %d", self.url,
                  SIEMENS_NAMESPACE_URI, ns)

    async def _add_blocks(self, server: Server, ns: int) -> None:
        folder = await server.nodes.objects.add_folder(
            ua.NodeId("DataBlocksGlobal", ns), ua.QualifiedName("DataBlocksGlobal", ns))
        for role, (layout, _, writable) in self.plc.blocks().items():
            name = db_name(layout)
            block = await folder.add_object(ua.NodeId(f'"{name}"', ns),
                                            ua.QualifiedName(name, ns))
            values = layout.decode(self.plc.snapshot(role))
            for f in layout.fields:
                variant = getattr(ua.VariantType, VARIANT_TYPES[f.s7_type])
                nid = ua.NodeId(f'"{name}"."{f.name}"', ns)
                var = await block.add_variable(
                    nid, ua.QualifiedName(f.name, ns),
                    ua.Variant(_python(values[f.name], variant), variant), varianttype=variant)
                if writable:
                    await var.set_writable()
                self.fields[nid] = _Field(role, f.name, variant, writable)

    def _clamp_subscriptions(self, server: Server) -> None:
        service = server.iserver.subscription_service
        create = service.create_subscription
        floor = self.min_publishing_interval_ms

        async def create_clamped(params: ua.CreateSubscriptionParameters, *args: Any,
                                 **kwargs: Any) -> ua.CreateSubscriptionResult:
            params.RequestedPublishingInterval = max(params.RequestedPublishingInterval, floor)
            return await create(params, *args, **kwargs)

        service.create_subscription = create_clamped

    async def _sample(self) -> None:
        """Copy the blocks into the address space every minimum publishing interval, so
        subscriptions see them change (reads always get the bytes as they are)."""
        server = self._server
        assert server is not None
        aspace = server.iserver.aspace
        while True:
            await asyncio.sleep(self.min_publishing_interval_ms / 1000.0)
            decoded: dict[str, dict[str, Any]] = {}
            for nid, f in self.fields.items():
                if f.role not in decoded:
                    decoded[f.role] = self.plc.blocks()[f.role][0].decode(
                        self.plc.snapshot(f.role))
                value = ua.DataValue(Value=ua.Variant(_python(decoded[f.role][f.name],
                                                               f.variant), f.variant))
                await aspace.write_attribute_value(nid, AttributeIds.Value, value)

    async def _validate_client(self, cert: x509.Certificate,
                               app: ua.ApplicationDescription) -> None:

        assert self.pki is not None
        der = cert.public_bytes(serialization.Encoding.DER)
        try:
            self.pki.check_peer(der, f"the OPC UA client {app.ApplicationUri!r}")
        except LinkRefusedError as e:
            _LOG.warning("virtual PLC (OPC UA): %s", str(e).replace("Compare", "Check"))
            code = (ua.StatusCodes.BadCertificateTimeInvalid if "not valid now" in str(e)
                    else ua.StatusCodes.BadCertificateUntrusted)
            raise ServiceError(code) from None


def _python(value: Any, variant: ua.VariantType) -> Any:
    if variant == ua.VariantType.Boolean:
        return bool(value)
    if variant in (ua.VariantType.Float, ua.VariantType.Double):
        return float(value)
    return int(value)


__all__ = ["OpcUaServer"]
