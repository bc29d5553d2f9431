"""``simulate_schedule``: the schedule simulator without any YAML or profile (SAPP-style inputs).

>>> from autotune.cost import simulate_schedule
>>> r = simulate_schedule([[3, 2]], [[6, 4]], micro_batch_num=2)   # P = 2 stages, V = 1 chunk
>>> r.step_ms
21.0
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotune.cost.bubble import bubble_breakdown
from autotune.cost.inputs import StageCosts
from autotune.cost.schedules import SizeError, get_schedule, registered
from autotune.cost.simulate import compile_schedule, live_memory_timeline, simulate
from autotune.errors import ConfigError


@dataclass(frozen=True)
class ScheduleResult:
    """Outcome of :func:`simulate_schedule`.

    Attributes:
        step_ms: makespan of one step (ms).
        bubble: SAPP breakdown ``real = ideal + imbalance + recompute + comm`` (fractions of model
            compute; :mod:`autotune.cost.bubble`).
        peak_mib: per stage, static + peak live activations (MiB) [P].
        max_inflight: per stage, the most chunk-units alive at once [P].
        ops: the op timeline, one dict per op: ``stage``, ``chunk``, ``micro_batch``, ``seq_chunk``,
            ``kind`` ("F"/"B", and "W" for the weight-gradient ops of a schedule that splits the
            backward, zero_bubble_v), ``start_ms``, ``end_ms``; sorted by stage then start.
        memory_timeline: per stage, a list of (time_ms, MiB) steps (static + live activations).
    """

    step_ms: float
    bubble: dict[str, float]
    peak_mib: list[float]
    max_inflight: list[int]
    ops: list[dict[str, Any]] = field(repr=False)
    memory_timeline: list[list[tuple[float, float]]] = field(repr=False)


def _grid(name: str, value: Any, shape: tuple[int, int] | None) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be numbers shaped [chunk][stage], got {value!r}", field=name,
                          value=value, rule="schedule_input") from None
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.size == 0:
        raise ConfigError(f"{name} must be a [chunk][stage] table (or a [stage] list), got shape "
                          f"{arr.shape}", field=name, value=value, rule="schedule_input")
    if shape is not None and arr.shape != shape:
        if arr.shape[0] == 1 and arr.shape[1] == shape[1]:
            arr = np.repeat(arr, shape[0], axis=0)
        else:
            raise ConfigError(f"{name} has shape {arr.shape}, fwd_ms has {shape}", field=name,
                              value=value, rule="schedule_input")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ConfigError(f"{name} must be finite and >= 0", field=name, value=value,
                          rule="schedule_input")
    return arr


def simulate_schedule(fwd_ms: Any, bwd_ms: Any, *, micro_batch_num: int, schedule: str = "1f1b",
                      recompute_ms: Any = None, p2p_ms: float = 0.0, act_mib: Any = None,
                      static_mib: Any = None, seq_split_num: int = 1,
                      bwd_w_frac: Any = 0.5) -> ScheduleResult:
    """Simulate one pipeline step from per-mini-stage times (SAPP's simulator inputs).

    Args:
        fwd_ms: forward time of one micro-batch through mini-stage (chunk v, stage p), [V][P] ms
            (a flat [P] list means V = 1).
        bwd_ms: backward time without recompute, same shape (ms).
        micro_batch_num: micro-batches per step (m).
        schedule: registered name (``1f1b``, ``1f1b_less_memory``, ``gpipe``, ``seqpipe``,
            ``zero_bubble_v``); ``1f1b`` with V > 1 is interleaved 1F1B.
        recompute_ms: replay time added to each backward, [V][P] ms (default 0).
        p2p_ms: time of one cross-stage send (ms; none on a same-device hop).
        act_mib: activation one micro-batch keeps in each mini-stage, [V][P] MiB (default 0).
        static_mib: per-stage static memory [P] MiB (default 0).
        seq_split_num: sequence chunks per micro-batch (seqpipe).
        bwd_w_frac: share of ``bwd_ms`` that is the weight gradient W, a number or [V][P] in
            [0, 1] (default 0.5: T_B = T_W; used only by zero_bubble_v, which splits the
            backward; recompute replay always belongs to B).

    Returns:
        :class:`ScheduleResult` (step time, bubble breakdown, peak MiB per stage, op timeline).

    Raises:
        ConfigError: bad shapes/values (rule ``schedule_input``), unknown schedule (``scheduler``) or
            sizes the schedule cannot run (``R_MICRO_BATCH_MIN`` when micro_batch_num breaks its rule,
            else ``R_SCHEDULE`` naming the size that does: pipeline_stage or pp_interleave_num, from
            the arrays' shapes, or seq_split_num).
    """
    f = _grid("fwd_ms", fwd_ms, None)
    V, P = f.shape
    b = _grid("bwd_ms", bwd_ms, (V, P))
    r = np.zeros((V, P)) if recompute_ms is None else _grid("recompute_ms", recompute_ms, (V, P))
    a = np.zeros((V, P)) if act_mib is None else _grid("act_mib", act_mib, (V, P))
    s = np.zeros(P) if static_mib is None else np.asarray(static_mib, dtype=np.float64).reshape(-1)
    if s.shape != (P,):
        raise ConfigError(f"static_mib needs one value per stage ({P}), got {static_mib!r}",
                          field="static_mib", value=static_mib, rule="schedule_input")
    if p2p_ms < 0:
        raise ConfigError(f"p2p_ms must be >= 0, got {p2p_ms}", field="p2p_ms", value=p2p_ms,
                          rule="schedule_input")
    wf = _grid("bwd_w_frac", bwd_w_frac if np.ndim(bwd_w_frac) else [[bwd_w_frac] * P] * V, (V, P))
    if np.any(wf > 1):
        raise ConfigError("bwd_w_frac must be in [0, 1]", field="bwd_w_frac", value=bwd_w_frac,
                          rule="schedule_input")
    if schedule not in registered():
        raise ConfigError(f"unknown schedule {schedule!r}; registered: {', '.join(registered())}",
                          field="schedule", value=schedule, rule="scheduler")
    try:
        cs = compile_schedule(schedule, P, V, int(micro_batch_num), int(seq_split_num))
    except SizeError as exc:
        raise ConfigError(str(exc), field=exc.knob, value=exc.value, rule=exc.rule) from None
    except ValueError as exc:
        raise ConfigError(str(exc), field="micro_batch_num", value=micro_batch_num,
                          rule="R_MICRO_BATCH_MIN") from None
    costs = StageCosts(fwd_ms=f[None], bwd_ms=(b + r)[None], act_mib=a[None],
                       ws_mib=np.zeros((1, V, P)), static_mib=s[None], recompute_ms=r[None],
                       bwd_w_ms=(wf * b)[None])
    sim = simulate(cs, costs, float(p2p_ms), timeline=True)
    bub = bubble_breakdown(cs, costs, sim, float(p2p_ms))
    start, end = sim.start_ms[:, 0], sim.end_ms[:, 0]
    k = cs.k
    ops = []
    for p in range(P):
        for i in cs.order[p]:
            u = int(cs.mb[i])
            ops.append({"stage": p, "chunk": int(cs.chunk[i]), "micro_batch": u // k,
                        "seq_chunk": u % k, "kind": "FBW"[int(cs.kind[i])],
                        "start_ms": float(start[i]), "end_ms": float(end[i])})
    mem = live_memory_timeline(cs, a, np.zeros((V, P)), start, end)
    timeline = [[(float(t), float(x + s[p])) for t, x in mem[p]] for p in range(P)]
    return ScheduleResult(step_ms=float(sim.step_ms[0]), bubble=bub.row(0),
                          peak_mib=[float(x) for x in sim.peak_mib[0]],
                          max_inflight=[int(x) for x in cs.max_inflight], ops=ops,
                          memory_timeline=timeline)


__all__ = ["ScheduleResult", "simulate_schedule", "get_schedule"]
