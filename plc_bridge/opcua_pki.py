"""The OPC UA certificates of the bridge, the plant link and the virtual PLC: one folder each.

A PKI folder (``opcua_pki_dir``) holds::

    own/cert.der    this application's certificate (SubjectAltName: its application URI and
                    the host name), made by ``excavator-hil opcua-certs``, never committed
    own/key.pem     its private key, mode 0600 (checked: a key others can read is refused)
    trusted/        the peers' certificates this application trusts (.der or .pem)
    rejected/       certificates of peers that were refused, saved for inspection: compare the
                    thumbprint with the peer's own, then move the file to trusted/

No certificate is ever trusted on first use: an unknown one is refused, saved in rejected/, and
the refusal says where it is and how to trust it. Expired or not-yet-valid ones are refused,
trusted or not.
"""

from __future__ import annotations

import datetime
import getpass
import hashlib
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

from plc_bridge.errors import BridgeConfigError, LinkRefusedError

APPLICATION_URIS = {"plc_bridge": "urn:excavator_hil:plc_bridge",
                    "plant_link": "urn:excavator_hil:plant_link",
                    "virtual_plc": "urn:excavator_hil:virtual_plc"}


def default_pki_dir(application: str) -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "excavator_hil" / "pki" / application


def check_private(path: Path, what: str) -> None:
    """A secret (private key, password file) must be a regular file of this user that nobody
    else can read or write; otherwise ``BridgeConfigError`` naming the fix."""
    try:
        st = path.stat()
    except OSError as e:
        raise BridgeConfigError(f"{what} {path}: {e.strerror}; create it (excavator-hil "
                                f"opcua-certs makes keys) or fix the path") from None
    if not stat.S_ISREG(st.st_mode):
        raise BridgeConfigError(f"{what} {path} is not a regular file")
    if st.st_mode & 0o077:
        raise BridgeConfigError(
            f"{what} {path} has mode {stat.S_IMODE(st.st_mode):04o}: others can read or write "
            f"it; run chmod 600 {path}")
    if st.st_uid != os.geteuid():
        raise BridgeConfigError(f"{what} {path} belongs to uid {st.st_uid}, not to this user "
                                f"({getpass.getuser()}); chown it")


def read_password(path: str) -> str:
    """The first line of a password file whose permissions were checked."""
    p = Path(path).expanduser()
    check_private(p, "opcua_password_file")
    lines = p.read_text().splitlines()
    return lines[0] if lines else ""


def thumbprint(der: bytes) -> str:
    """SHA-1 thumbprint as OPC UA tools (UaExpert, TIA Portal) show it: AA:BB:..."""
    return ":".join(f"{b:02X}" for b in hashlib.sha1(der, usedforsecurity=False).digest())


def describe(cert: x509.Certificate) -> str:
    return (f"'{cert.subject.rfc4514_string()}' (SHA-1 thumbprint "
            f"{thumbprint(cert.public_bytes(serialization.Encoding.DER))}, valid "
            f"{cert.not_valid_before_utc:%Y-%m-%d} to {cert.not_valid_after_utc:%Y-%m-%d})")


@dataclass(frozen=True)
class Pki:
    """One application's PKI folder (see the module docstring)."""

    root: Path

    @classmethod
    def of(cls, configured: str, application: str) -> Pki:
        return cls(Path(configured).expanduser() if configured else default_pki_dir(application))

    @property
    def cert(self) -> Path:
        return self.root / "own" / "cert.der"

    @property
    def key(self) -> Path:
        return self.root / "own" / "key.pem"

    @property
    def trusted(self) -> Path:
        return self.root / "trusted"

    @property
    def rejected(self) -> Path:
        return self.root / "rejected"

    def check_own(self) -> None:
        """The own certificate and key exist and the key is private."""
        if not self.cert.is_file():
            raise BridgeConfigError(
                f"no OPC UA certificate at {self.cert}: make one with `excavator-hil "
                f"opcua-certs --pki-dir {self.root}` (the key stays on this host)")
        check_private(self.key, "OPC UA private key")

    def trusted_certs(self) -> list[bytes]:
        out: list[bytes] = []
        if not self.trusted.is_dir():
            return out
        for f in sorted(self.trusted.iterdir()):
            data = f.read_bytes()
            if f.suffix == ".pem":
                out.append(x509.load_pem_x509_certificate(data).public_bytes(
                    serialization.Encoding.DER))
            elif f.suffix == ".der":
                out.append(data)
        return out

    def check_peer(self, der: bytes, peer: str) -> None:
        """Refuse (``LinkRefusedError``) a peer certificate that is not in trusted/ or not valid
        now; an untrusted one is saved in rejected/ and the message says how to trust it."""
        cert = x509.load_der_x509_certificate(der)
        now = datetime.datetime.now(datetime.UTC)
        if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
            raise LinkRefusedError(
                f"{peer} presented certificate {describe(cert)}, which is not valid now "
                f"({now:%Y-%m-%d %H:%M} UTC): renew it on the peer (or correct the clocks), "
                f"then trust the new one")
        if der in self.trusted_certs():
            return
        self.rejected.mkdir(parents=True, exist_ok=True)
        saved = self.rejected / f"{thumbprint(der).replace(':', '')[:16].lower()}.der"
        saved.write_bytes(der)
        raise LinkRefusedError(
            f"{peer} presented certificate {describe(cert)}, which is not in the trust list "
            f"{self.trusted}: it was saved as {saved}. Compare its thumbprint with the one the "
            f"peer shows (TIA Portal: the CPU's certificate manager; the virtual PLC: its "
            f"own/cert.der), then trust it with: mv {saved} {self.trusted}/")


def generate(root: Path, application: str, *, days: int = 365, hostname: str = "",
             server: bool = False, force: bool = False) -> Pki:
    """Make ``root``'s own certificate and key (RSA 2048, SHA-256, SubjectAltName with the
    application URI and host name, as OPC UA Part 6 asks), and trusted/ + rejected/."""
    from asyncua.crypto.cert_gen import generate_self_signed_app_certificate

    pki = Pki(root)
    if pki.cert.exists() and not force:
        raise BridgeConfigError(f"{pki.cert} exists; keep it (peers trust it) or pass --force")
    host = hostname or socket.gethostname()
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    names = [x509.UniformResourceIdentifier(APPLICATION_URIS[application]), x509.DNSName(host)]
    usage = [ExtendedKeyUsageOID.SERVER_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
    cert = generate_self_signed_app_certificate(
        key, f"excavator_hil {application}@{host}", {"organizationName": "excavator_hil"}, names,
        usage, days=days)
    for d in (pki.root, pki.cert.parent, pki.trusted, pki.rejected):
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(pki.key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    os.chmod(pki.key, 0o600)
    pki.cert.write_bytes(cert.public_bytes(serialization.Encoding.DER))
    return pki


def main(argv: list[str] | None = None) -> int:
    """``excavator-hil opcua-certs``: make an application's certificate and key."""
    import argparse
    import sys

    p = argparse.ArgumentParser(
        prog="excavator-hil opcua-certs",
        description="Make the OPC UA certificate and private key of the bridge, the plant link "
                    "or the virtual PLC (RSA 2048, SHA-256, self-signed), in a PKI folder with "
                    "own/, trusted/ and rejected/. The key never leaves this host; keep it out "
                    "of version control. Then exchange certificates: copy own/cert.der of each "
                    "side into the other's trusted/ (a CPU: TIA Portal's certificate manager).")
    p.add_argument("--application", choices=sorted(APPLICATION_URIS), default="plc_bridge")
    p.add_argument("--pki-dir", default="", help="the folder (default "
                   "~/.local/share/excavator_hil/pki/<application>)")
    p.add_argument("--hostname", default="", help="DNS name in the certificate (default: this "
                   "host's name)")
    p.add_argument("--days", type=int, default=365, help="validity [days] (default 365)")
    p.add_argument("--trust", action="append", default=[], metavar="CERT",
                   help="also trust this peer certificate (.der or .pem): copied into trusted/")
    p.add_argument("--force", action="store_true", help="replace an existing certificate")
    args = p.parse_args(argv)
    if not 1 <= args.days <= 3650:
        p.error(f"--days {args.days} is outside 1..3650")
    root = Pki.of(args.pki_dir, args.application).root
    try:
        pki = generate(root, args.application, days=args.days, hostname=args.hostname,
                       server=args.application == "virtual_plc", force=args.force)
    except BridgeConfigError as e:
        print(f"opcua-certs: {e}", file=sys.stderr)
        return 2
    for peer in args.trust:
        src = Path(peer)
        (pki.trusted / src.name).write_bytes(src.read_bytes())
    cert = x509.load_der_x509_certificate(pki.cert.read_bytes())
    print(f"{pki.cert}: {describe(cert)}\n{pki.key}: private key, mode 0600\n"
          f"trust list: {pki.trusted}/ (peers' certificates), refused ones land in "
          f"{pki.rejected}/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
