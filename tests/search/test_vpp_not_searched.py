"""pp_interleave_num candidates the config cannot run are named, with the reason, instead of being
dropped silently (a new user's pp 3 config with 128 micro-batches searched vpp 1 alone without a
word): :func:`autotune.tuner.problem.vpp_not_runnable`, the search's ``vpp_not_searched``, its
text line and json key."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from autotune.cli import main
from autotune.tuner.problem import runnable_vpp, vpp_not_runnable

TOY = Path(__file__).resolve().parents[1] / "e2e" / "data" / "toy.yaml"
MULTIPLE = ("interleaved 1F1B needs micro_batch_num to be a multiple of pipeline_stage "
            "(got micro_batch_num=8, pipeline_stage=3)")


def test_each_dropped_candidate_has_its_reason() -> None:
    assert vpp_not_runnable(16, 3, 8, "1f1b", [1, 2, 3, 4]) == {2: MULTIPLE, 3: MULTIPLE, 4: MULTIPLE}
    assert vpp_not_runnable(16, 8, 16, "1f1b", [1, 2, 3, 4]) == {
        3: "pipeline_stage × pp_interleave_num = 24 mini-stages exceed num_layers = 16",
        4: "pipeline_stage × pp_interleave_num = 32 mini-stages exceed num_layers = 16"}
    assert set(vpp_not_runnable(16, 1, 8, "1f1b", [1, 2])) == {2}   # one stage: nothing to interleave
    assert vpp_not_runnable(16, 1, 8, "1f1b", [2, 3]) == {}         # an explicit list without 1 is kept
    for args in [(16, 3, 8, "1f1b", [1, 2, 3, 4]), (16, 8, 16, "1f1b", [1, 2, 3, 4]), (16, 4, 8, "1f1b", [1, 2, 4])]:
        assert runnable_vpp(*args) == [V for V in args[4] if V not in vpp_not_runnable(*args)]


def test_the_search_says_which_candidates_it_did_not_search(tmp_path: Path) -> None:
    cfg = tmp_path / "toy_pp3.yaml"
    text = TOY.read_text(encoding="utf-8")
    for a, b in [("pipeline_stage: 4", "pipeline_stage: 3"), ("offset: [-1, 1, 1, -1]", "offset: 0"),
                 ("recompute: [2, 1, 0, 0]", "recompute: False")]:
        assert a in text
        text = text.replace(a, b)
    cfg.write_text(text, encoding="utf-8")
    r = CliRunner().invoke(main, ["search", str(cfg), "--trials", "3", "--quiet"])
    assert r.exit_code == 0, r.output
    assert f"pp_interleave_num 2, 3, 4 not searched: {MULTIPLE}" in r.stdout
    js = CliRunner().invoke(main, ["search", str(cfg), "--trials", "3", "--quiet", "--format", "json"])
    assert json.loads(js.stdout)["vpp_not_searched"] == {"2": MULTIPLE, "3": MULTIPLE, "4": MULTIPLE}
    every = CliRunner().invoke(main, ["search", str(TOY), "--trials", "3", "--quiet", "--format", "json"])
    assert json.loads(every.stdout)["vpp_not_searched"] == {}
