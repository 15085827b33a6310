"""The chaos soak, short: ``bench/soak.py --minutes 2 --seed 6 --time-scale 0.6`` as a user
runs it (the demo's stack, every part its own process over real DDS, a real redis-server, the
real S7 protocol), one fault of each kind. Its schedule: the link cut, the PLC paused, Redis
restarted, a dashboard client vanishing, the virtual PLC killed (restarted by the supervisor),
soil_node frozen, the recorder stopped. Zero violations; every fault injected and recovered from
within the bounds the stack's own timeouts give. Every judgement is made on the stack's records
(the PLC's write log, Redis's TIME, the nodes' stamps), never on this test's clock: it holds on
a loaded host."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import run_stack

from excavator_hil.soak.runner import SoakOptions
from excavator_hil.soak.schedule import KINDS

REPO = Path(__file__).resolve().parents[1]
SEED = 6


@pytest.fixture(scope="module")
def soak(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, Path]:
    out = tmp_path_factory.mktemp("soak")
    # the quick demo's legs (0.6): the warm-up's whole dig cycle takes 15 s instead of 25 s,
    # and the two minutes of faults meet more cycles
    run = run_stack([sys.executable, str(REPO / "bench" / "soak.py"), "--minutes", "2",
                     "--seed", str(SEED), "--time-scale", "0.6", "--output", str(out)],
                    1500, "the soak")
    assert run.returncode == 0, f"soak failed:\n{run.stdout[-6000:]}\n{run.stderr[-6000:]}"
    return json.loads(run.stdout.strip().splitlines()[-1]), run.stdout, out


@pytest.mark.slow
@pytest.mark.timeout(1600)
def test_the_schedule_of_the_short_soak_has_every_kind() -> None:
    schedule = SoakOptions(minutes=2.0, seed=SEED).schedule()
    assert sorted(f.kind for f in schedule) == sorted(KINDS)
    assert schedule[-1].at_s < 120.0 - 20.0     # a quiet tail for the footprint at the end


@pytest.mark.slow
@pytest.mark.timeout(1600)
def test_two_minutes_of_chaos_and_nothing_stale_lost_or_leaking(soak) -> None:
    summary, stdout, out = soak
    assert f"seed {SEED}" in stdout and f"--seed {SEED}" in stdout
    assert summary["bench"] == "soak" and summary["seed"] == SEED
    assert summary["violations"] == 0, stdout[-8000:]
    for kind in KINDS:
        k = summary["by_kind"][kind]
        assert k["scheduled"] >= 1, kind
        assert k["injected"] == k["scheduled"] and k["recovered"] == k["injected"], (kind, k)
    assert summary["faults_injected"] == summary["faults_scheduled"]
    assert summary["dig_cycles"] >= 1 and summary["drive_commands"] > 1000
    assert summary["plc_writes"] > 1000 and summary["unexpected_exits"] == 0
    assert (out / "report.txt").read_text().startswith("chaos soak: seed")
