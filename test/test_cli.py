"""The user CLI, run as users run it (a separate process)."""

from __future__ import annotations

import subprocess
import sys


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "excavator_hil.cli", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_ik_command_solves_a_target_and_reports_the_reached_tip() -> None:
    out = _cli("ik", "--target", "6.0", "0.0", "0.5", "--pitch", "0.3")
    assert out.returncode == 0, out.stderr
    assert "6.000,0.000,0.500" in out.stdout  # the reached tip equals the target


def test_ik_command_fails_with_the_reason_for_an_unreachable_target() -> None:
    out = _cli("ik", "--target", "9.0", "0.0", "0.0")
    assert out.returncode == 1
    assert "out of reach" in out.stdout and "2.973..6.074 m" in out.stdout
