"""The working ranges (ISO 7135) of the fitted Caterpillar 309 CR linkage against its spec sheet.

Each figure within 3 % of the published one (issue 30); the cylinders designed for the fitted
joint ranges are buildable (extended / closed <= 1.65); the seed's linkage is kept as the preset
``seed_midi`` with its former figures; the default machine is the fitted preset; the diagram is
drawn from the geometry.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from excavator_hil.working_ranges_plot import main as working_ranges_main
from excavator_kinematics.geometry import ExcavatorGeometry
from excavator_kinematics.linkage import Linkage
from excavator_kinematics.working_ranges import working_ranges
from excavator_sim.machines import load_machine

FIGURES = ("reach_at_ground_m", "dig_depth_m", "cutting_height_m", "dump_height_m",
           "min_front_swing_radius_m")
INCH = 0.0254
# The spec sheet's figures, typed in from the source (not read back from the preset): Cat 309 CR,
# long stick, dealer spec pages (Cat data feed), inches.
CAT_309CR_LONG_STICK = {"reach_at_ground_m": 293.7 * INCH, "dig_depth_m": 182.8 * INCH,
                        "cutting_height_m": 277.1 * INCH, "dump_height_m": 199.7 * INCH,
                        "min_front_swing_radius_m": 126.6 * INCH}


@pytest.fixture(scope="module")
def cat() -> tuple[ExcavatorGeometry, dict[str, float]]:
    geometry = load_machine("cat_309cr").geometry()
    return geometry, working_ranges(geometry).as_dict()


@pytest.mark.parametrize("figure", FIGURES)
def test_cat_309cr_working_range_within_3_percent(cat: tuple[ExcavatorGeometry, dict[str, float]],
                                                  figure: str) -> None:
    _, model = cat
    published = CAT_309CR_LONG_STICK[figure]
    assert abs(model[figure] - published) <= 0.03 * published, (figure, model[figure], published)


def test_preset_states_the_figures_it_was_fitted_to() -> None:
    published = load_machine("cat_309cr").published
    assert published is not None and "309 CR" in published["source"]
    for figure in FIGURES:
        assert published[figure] == pytest.approx(CAT_309CR_LONG_STICK[figure], abs=5e-4)


def test_cat_309cr_published_stick_and_buildable_cylinders(
        cat: tuple[ExcavatorGeometry, dict[str, float]]) -> None:
    geometry, model = cat
    assert pytest.approx(92.8 * INCH, abs=1e-3) == geometry.HM      # stick length, published
    assert model["max_reach_m"] == pytest.approx(300.7 * INCH, rel=0.03)  # not fitted
    for cyl in geometry.cylinders.values():
        closed = cyl.length(cyl.stroke_min_m)
        extended = cyl.length(cyl.stroke_max_m)
        assert extended / closed <= 1.65 + 1e-3, cyl
    # the designed strokes span the whole fitted range: the linkage's limits come from them
    limits = Linkage(geometry).joint_limits
    assert limits["boom"][0] < -0.6 and limits["boom"][1] > 1.0   # digs below the horizontal


def test_seed_linkage_is_a_preset_with_its_former_figures() -> None:
    seed = working_ranges(load_machine("seed_midi").geometry()).as_dict()
    assert seed["dig_depth_m"] == pytest.approx(1.883, abs=0.005)
    assert seed["max_reach_m"] == pytest.approx(6.850, abs=0.005)


def test_cli_prints_the_table_and_draws_the_diagram(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ranges.png"
    assert working_ranges_main(["--machine", "cat_309cr", "--plot", str(out)]) == 0
    text = capsys.readouterr().out
    assert "maximum digging depth" in text and "4.643" in text
    assert out.stat().st_size > 20_000 and out.read_bytes()[:4] == b"\x89PNG"


def test_the_default_machine_is_the_fitted_preset() -> None:
    """config/excavator.yaml's linkage is the one the fit wrote (no hand edit drifts from it)."""
    from excavator_kinematics.geometry import default_geometry

    default = default_geometry()
    assert load_machine("cat_309cr").geometry(default) == default
