"""The Megatron-LM search orders candidates as the MindFormers search does (issue 17,
invariance): least memory excess, then least step time, near-ties (within REL_TOL) by position,
so multiplying every time by a constant cannot change which layout wins."""

import numpy as np

from autotune.megatron.search import Choice, _best, _ranked_items
from autotune.tuner.problem import Candidate


def _cand(step_ms: float, excess_mib: float = -1.0, tag: str = "") -> Candidate:
    z = np.zeros((1, 2), dtype=np.int64)
    return Candidate(1, z + 1, z, z, z, step_ms=step_ms, peak_mib=0.0, excess_mib=excess_mib, origin=tag)


def test_near_tie_goes_to_the_first_at_every_scale():
    # 0.1 * 3 rounds to 0.30000000000000004 > 0.3: a float min picks the second, position the first
    for scale in (1.0, 7.0, 1 / 3, 1e6):
        a, b = _cand(0.1 * 3 * scale, tag="a"), _cand(0.3 * scale, tag="b")
        assert _best([a, b]).origin == "a"
        assert _best([b, a]).origin == "b"


def test_excess_before_step_and_ranked_items():
    fast_over = _cand(1.0, excess_mib=5.0, tag="over")
    slow_fits = _cand(9.0, tag="fits")
    faster_fits = _cand(8.0, tag="faster")
    assert _best([fast_over, slow_fits]).origin == "fits"
    items = {(Choice("none"), 1): fast_over, (Choice("none"), 2): slow_fits, (Choice("none"), 3): faster_fits}
    assert [c.origin for _, c in _ranked_items(items)] == ["faster", "fits", "over"]
