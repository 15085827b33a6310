"""The virtual PLC's OPC UA users: names and password hashes, never the passwords.

A users file holds one ``name:scrypt$<N>$<r>$<p>$<salt>$<key>`` line per user (salt and key in
base64), in a file only its owner can read (mode 0600, checked). The hash is scrypt (RFC 7914,
Python's ``hashlib.scrypt``) with a random 16-byte salt per user: a copied file gives no
password, and two users with the same password have different lines. A line with a password
in the clear is refused, naming the line and the command that writes the hash::

    excavator-hil opcua-user bridge --users-file ~/.config/excavator_hil/opcua_users

asks for the password twice on a terminal (or reads one line from standard input), adds the
user or replaces its line, and keeps the file at mode 0600. ``--delete`` removes the user.
"""

from __future__ import annotations

import argparse
import base64
import getpass
import hashlib
import hmac
import os
import secrets
import sys
from collections.abc import Sequence
from pathlib import Path

from plc_bridge.errors import BridgeConfigError

SCHEME = "scrypt"
# N = 2^14, r = 8, p = 1: ~16 MiB and ~50 ms per check on this class of machine, once per
# login (RFC 7914's interactive-login figure; a session is not re-created every cycle)
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2 ** 14, 8, 1
SALT_BYTES, KEY_BYTES = 16, 32
_MAXMEM = 64 * 1024 * 1024   # hashlib's default (32 MiB) is below N = 2^15's need; room to raise N


class UsersFileError(BridgeConfigError):
    """A users file or entry that cannot be used (the message names it and the fix)."""


def hash_password(password: str, salt: bytes | None = None) -> str:
    """The stored form of ``password``: ``scrypt$N$r$p$salt$key`` (a fresh salt unless given)."""
    if not password:
        raise UsersFileError("an empty password: choose one")
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    key = hashlib.scrypt(password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P,
                         dklen=KEY_BYTES, maxmem=_MAXMEM)
    b64 = base64.b64encode
    return (f"{SCHEME}${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}$"
            f"{b64(salt).decode()}${b64(key).decode()}")


def _parse(stored: str) -> tuple[int, int, int, bytes, bytes]:
    parts = stored.split("$")
    if len(parts) != 6 or parts[0] != SCHEME:
        raise UsersFileError(f"not a password hash ({SCHEME}$N$r$p$salt$key)")
    try:
        n, r, p = (int(v) for v in parts[1:4])
        salt, key = (base64.b64decode(v, validate=True) for v in parts[4:6])
    except ValueError as e:
        raise UsersFileError(f"a malformed {SCHEME} hash: {e}") from None
    if n < 2 or n & (n - 1) or r < 1 or p < 1 or not salt or not key:
        raise UsersFileError(f"a malformed {SCHEME} hash: N={n} (a power of 2), r={r}, p={p}")
    return n, r, p, salt, key


def check_hash(stored: str) -> None:
    """UsersFileError unless ``stored`` is a hash this module can check."""
    _parse(stored)


def verify_password(stored: str, password: str) -> bool:
    """Whether ``password`` matches the stored hash (constant-time comparison)."""
    n, r, p, salt, key = _parse(stored)
    try:
        got = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, dklen=len(key),
                             maxmem=_MAXMEM)
    except (ValueError, MemoryError):   # parameters beyond this host's limit: no match
        return False
    return hmac.compare_digest(got, key)


def read_users(path: str | Path) -> dict[str, str]:
    """``name`` -> stored hash, from a users file only its owner can read."""
    from plc_bridge.opcua_pki import check_private

    p = Path(path).expanduser()
    check_private(p, "OPC UA users file")
    users: dict[str, str] = {}
    for n, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, stored = line.partition(":")
        if not sep or not name:
            raise UsersFileError(f"{p}:{n}: not 'name:{SCHEME}$...' (a user name, a colon, "
                                 f"the hash `excavator-hil opcua-user NAME --users-file {p}` "
                                 "writes)")
        try:
            check_hash(stored)
        except UsersFileError as e:
            raise UsersFileError(
                f"{p}:{n}: user {name!r}: {e}; a password is never kept in the clear: write "
                f"the line with `excavator-hil opcua-user {name} --users-file {p}`") from None
        users[name] = stored
    return users


def write_user(path: str | Path, name: str, password: str | None) -> None:
    """Add ``name`` with ``password`` (hashed) to the users file, or replace its line;
    ``password`` None deletes the user. The file is created, and kept, at mode 0600."""
    if not name or ":" in name or any(c.isspace() for c in name):
        raise UsersFileError(f"user name {name!r}: not empty, no colon, no white space")
    p = Path(path).expanduser()
    lines = read_users_lines(p)
    kept = [ln for ln in lines if ln.partition(":")[0] != name or ln.startswith("#")]
    if password is None and len(kept) == len(lines):
        raise UsersFileError(f"user {name!r} is not in {p}: nothing deleted")
    if password is not None:
        kept.append(f"{name}:{hash_password(password)}")
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join(ln + "\n" for ln in kept))
    os.chmod(tmp, 0o600)
    os.replace(tmp, p)   # whole or not at all: a reader never sees half a file


def read_users_lines(p: Path) -> list[str]:
    """The file's lines (none if it does not exist yet), its mode checked when it does."""
    if not p.exists():
        return []
    from plc_bridge.opcua_pki import check_private

    check_private(p, "OPC UA users file")
    return p.read_text().splitlines()


def _password(name: str) -> str:
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\n")
    first = getpass.getpass(f"password of {name}: ")
    if first != getpass.getpass(f"password of {name}, again: "):
        raise UsersFileError("the two passwords differ: nothing written")
    return first


def main(argv: Sequence[str] | None = None) -> int:
    """``excavator-hil opcua-user``: add, change or delete a user of the virtual PLC."""
    ap = argparse.ArgumentParser(
        prog="excavator-hil opcua-user",
        description="Add a user of the virtual PLC's OPC UA server, or change its password "
                    "(asked twice on a terminal, else one line of standard input), or delete "
                    "it; the file keeps scrypt hashes only, mode 0600 (virtual_plc "
                    "--opcua-users FILE)")
    ap.add_argument("name", help="the user name the bridge logs in with (opcua_user)")
    ap.add_argument("--users-file", required=True, help="the users file (created if absent)")
    ap.add_argument("--delete", action="store_true", help="remove the user")
    args = ap.parse_args(argv)
    try:
        write_user(args.users_file, args.name,
                   None if args.delete else _password(args.name))
    except (BridgeConfigError, OSError) as e:
        print(f"opcua-user: {e}", file=sys.stderr)
        return 2
    print(f"opcua-user: {args.name} {'deleted from' if args.delete else 'written to'} "
          f"{args.users_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
