"""benchmarks/scaling.py's ``--steps`` line (:func:`benchmarks.scaling.step_line`): what each solver
step earned, from the (step, wall s, best ms, bound ms) marks of one search."""

from __future__ import annotations

from benchmarks.scaling import step_line


def test_step_line_charges_gains_to_their_steps() -> None:
    steps = [["exact enumeration or even splits", 0.0, None, None],
             ["first bound pass", 0.01, 200.0, None],
             ["local search", 1.51, 200.0, 100.0],
             ["bound pass bound", 2.51, 150.0, 100.0],
             ["study", 3.01, 150.0, 120.0],
             ["end", 4.01, 149.0, 120.0]]
    assert step_line(steps) == ("first bound pass 1.5s (bound set); local search 1.0s (-25.00%); "
                                "bound pass bound 0.5s (bound +20.00%); study 1.0s (-0.67%)")


def test_step_line_with_a_first_bound_of_zero() -> None:
    """A first pass the clock cut may prove 0 ms (a Lagrangian stopped before its first
    iteration); the next proof is then "set", not a division by zero."""
    steps = [["exact enumeration or even splits", 0.0, None, None],
             ["first bound pass", 0.01, 200.0, None],
             ["anytime path LP", 1.01, 200.0, 0.0],
             ["local search", 2.01, 200.0, 90.0],
             ["end", 3.01, 180.0, 90.0]]
    assert step_line(steps) == ("first bound pass 1.0s (bound set); anytime path LP 1.0s (bound set); "
                                "local search 1.0s (-10.00%)")
