"""The virtual PLC's OPC UA users file (plc_bridge.virtual_plc.users): scrypt hashes only, mode
0600, written by `excavator-hil opcua-user`; a password in the clear is refused at start, and a
login is checked against the hash (over a real SignAndEncrypt session in
test_opcua_transport.py, whose users file this module's hash now fills)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plc_bridge.errors import BridgeConfigError
from plc_bridge.virtual_plc.users import (
    UsersFileError,
    hash_password,
    read_users,
    verify_password,
    write_user,
)


@settings(max_examples=8, deadline=None)   # each check is one scrypt (~50 ms)
@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=40))
def test_a_hash_takes_its_password_and_no_other(password: str, other: str) -> None:
    stored = hash_password(password)
    assert len(password) < 8 or password not in stored   # (a short one may occur by chance)
    assert verify_password(stored, password)
    assert verify_password(stored, other) == (other == password)


def test_two_hashes_of_one_password_differ_by_their_salt() -> None:
    a, b = hash_password("same"), hash_password("same")
    assert a != b and verify_password(a, "same") and verify_password(b, "same")


def _private(path: Path, text: str) -> Path:
    path.write_text(text)
    os.chmod(path, 0o600)
    return path


def test_a_password_in_the_clear_is_refused_naming_the_line_and_the_fix(tmp_path: Path) -> None:
    users = _private(tmp_path / "users", f"# lab\nbridge:{hash_password('x')}\nplant:secret\n")
    with pytest.raises(UsersFileError) as e:
        read_users(users)
    msg = str(e.value)
    assert f"{users}:3" in msg and "'plant'" in msg and "opcua-user plant" in msg
    assert "secret" not in msg   # the refusal does not echo the password


@pytest.mark.parametrize("line", ["bridge", ":scrypt$16384$8$1$AAAA$AAAA",
                                  "bridge:scrypt$1000$8$1$AAAA$AAAA",
                                  "bridge:scrypt$16384$8$1$not-base64!$AAAA"])
def test_a_malformed_line_is_refused(tmp_path: Path, line: str) -> None:
    with pytest.raises(UsersFileError, match=f"{tmp_path / 'users'}:1"):
        read_users(_private(tmp_path / "users", line + "\n"))


def test_a_users_file_others_can_read_is_refused(tmp_path: Path) -> None:
    users = _private(tmp_path / "users", f"bridge:{hash_password('x')}\n")
    os.chmod(users, 0o644)
    with pytest.raises(BridgeConfigError, match="chmod 600"):
        read_users(users)


def test_write_user_adds_replaces_and_deletes_keeping_mode_0600(tmp_path: Path) -> None:
    users = tmp_path / "conf" / "users"
    write_user(users, "bridge", "first")
    write_user(users, "plant", "other")
    write_user(users, "bridge", "second")   # a new password replaces the line
    assert stat.S_IMODE(users.stat().st_mode) == 0o600
    got = read_users(users)
    assert sorted(got) == ["bridge", "plant"]
    assert verify_password(got["bridge"], "second") and not verify_password(got["bridge"],
                                                                             "first")
    write_user(users, "plant", None)
    assert sorted(read_users(users)) == ["bridge"]
    with pytest.raises(UsersFileError, match="not in"):
        write_user(users, "plant", None)
    with pytest.raises(UsersFileError, match="colon"):
        write_user(users, "a:b", "x")


def test_the_cli_reads_the_password_from_stdin_and_stores_only_its_hash(tmp_path: Path) -> None:
    users = tmp_path / "users"
    run = subprocess.run([sys.executable, "-m", "excavator_hil.cli", "opcua-user", "bridge",
                          "--users-file", str(users)], input="s3cret pass\n", text=True,
                         capture_output=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    assert "s3cret" not in users.read_text()
    assert verify_password(read_users(users)["bridge"], "s3cret pass")
    # a refused file is named with its fix, exit 2
    os.chmod(users, 0o640)
    run = subprocess.run([sys.executable, "-m", "excavator_hil.cli", "opcua-user", "plant",
                          "--users-file", str(users)], input="x\n", text=True,
                         capture_output=True, timeout=60, check=False)
    assert run.returncode == 2 and "chmod 600" in run.stderr, run.stderr


def test_the_virtual_plc_refuses_a_clear_text_users_file_at_start(tmp_path: Path) -> None:
    users = _private(tmp_path / "users", "bridge:hunter2\n")
    run = subprocess.run([sys.executable, "-m", "plc_bridge.virtual_plc.cli", "--port", "0",
                          "--control-port", "-1", "--opcua-port", "0", "--opcua-users",
                          str(users), "--opcua-pki", str(tmp_path / "pki")],
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 2, run.stderr
    assert "opcua-user bridge" in run.stderr and "hunter2" not in run.stderr, run.stderr
