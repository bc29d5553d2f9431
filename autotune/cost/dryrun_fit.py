"""Dry-run peak memories per stage -> fitted memory profile (least squares with fit quality).

The dry runs are read by :mod:`autotune.profile.dryrun`. Given the layout that produced those
peaks (offset, recompute, select/comm recompute, ``pp_interleave_num``) and the schedule, every
stage's peak is a known function of the profile's memory fields. This module writes that function
exactly as the cost model evaluates it (:mod:`autotune.cost.simulate`), fits its unknowns by least
squares, and reports per-stage residuals, the matrix rank, the condition number and standard
errors.

**Model** (stage p of one dry run; ``L`` = a live-count vector [V] of our compiled schedule, i.e.
how many micro-batches of each chunk are in flight at one point of the stage's op order)::

    peak_p = Σ_k static_k · n_{k,p}                      (weights + grads + optimizer per layer)
           + stage_const                                  (every stage, exactly once)
           + [p = 0] · head_static + [p = P-1] · tail_static
           + max over the stage's live vectors L of
               Σ_v L_v · (Σ_{k,c} act_{k,c} · n_{k,c,v,p} + [v,p = 0,0]·head_act
                                                          + [v,p = V-1,P-1]·tail_act)
               (+ the workspace of the chunk whose backward runs, for backward points)

with ``n_{k,c,v,p}`` the layers of kind k and recompute class c (none / select / comm / both /
full; "the first r layers" rule, :func:`autotune.cost.inputs.class_counts`) in mini-stage (v, p).
For 1F1B with V = 1 the live vector is ``min(P - p, m)``; interleaved and other schedules use
their own tables, so interleaved dry runs fit too (cost-model reference §3.2).

Unlike MindFormers' old ``pipeline_balance`` (SAPP, cost-model reference §3.4), the per-stage
constant enters every stage once: ``head_static`` / ``tail_static`` are the *extra* memory of the
first / last stage, not a second constant; the in-flight counts are the schedule's own (not
always ``p - i``); and the fit reports its quality and refuses an under-determined system.

**Unknowns** are named by the profile field they fill (``kinds.dense.static_mib``,
``kinds.dense.act_mib``, ``kinds.dense.select.act_mib``, …, ``kinds.dense.full.workspace_mib``,
``stage_const_mib``, ``head.static_mib``, ``tail.static_mib``). A recompute class that no probed
stage uses is not fitted (listed in :attr:`MemoryFit.not_covered`). Fields a dry run cannot
separate (head/tail activation vs. their static part at a fixed in-flight count; workspaces other
than full recompute's) are taken from ``prior`` (e.g. the analytic profile) or 0, and listed in
:attr:`MemoryFit.fixed`; without a prior, ``head.static_mib`` / ``tail.static_mib`` hold the whole
first / last-stage extra at the probed in-flight count.

The max over live vectors and workspace sources makes the model piecewise linear; the fit
alternates "pick the active term of every stage at the current estimate" and "solve the linear
least-squares problem" until the active set repeats (it converges in 2-3 rounds in practice).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from autotune.config.layout import Layout
from autotune.cost.inputs import ProfileArrays, class_counts
from autotune.cost.simulate import compile_schedule
from autotune.errors import ConfigError
from autotune.profile.dryrun import DryRun
from autotune.profile.merge import check_field_path
from autotune.profile.schema import RECOMPUTE_CLASSES, LayerKind, ModelProfile

_RANK_TOL = 1e-9          # singular values below this × the largest one count as zero (scaled matrix)
_MAX_ROUNDS = 30


# --------------------------------------------------------------------------------------------
# the fit
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MemoryFit:
    """Result of :func:`fit_dryruns`. Memory in MiB; R = stage peaks used, U = unknowns.

    Attributes:
        names: the U unknowns (profile field paths, see module docstring).
        coef_mib: float [U] fitted values.
        stderr_mib: float [U] standard errors (NaN when R == U: no residual degrees of freedom).
        design: float [R, U] the linear system at the solution (active terms).
        peak_mib: float [R] measured peaks; predicted_mib: float [R] the model at the solution;
            residual_mib = peak_mib - predicted_mib.
        rows: (run label, stage) of every row.
        rank: rank of ``design``; cond: condition number of ``design`` with unit-norm columns
            (scale-free; above ~1e6 the coefficients are unreliable).
        fixed: profile fields held at the prior's value (or 0) because dry runs cannot separate them.
        not_covered: fields no probed stage exercises (left to the prior / analytic profile).
        rounds: active-set rounds until convergence.
    """

    names: list[str]
    coef_mib: np.ndarray
    stderr_mib: np.ndarray
    design: np.ndarray
    peak_mib: np.ndarray
    predicted_mib: np.ndarray
    rows: list[tuple[str, int]]
    rank: int
    cond: float
    fixed: dict[str, float] = field(default_factory=dict)
    not_covered: list[str] = field(default_factory=list)
    rounds: int = 1

    @property
    def residual_mib(self) -> np.ndarray:
        return self.peak_mib - self.predicted_mib

    @property
    def rms_residual_mib(self) -> float:
        return float(np.sqrt(np.mean(self.residual_mib ** 2)))

    @property
    def max_abs_residual_mib(self) -> float:
        return float(np.max(np.abs(self.residual_mib)))

    def coef(self) -> dict[str, float]:
        """Fitted values by field path."""
        return {n: float(v) for n, v in zip(self.names, self.coef_mib)}

    def fields(self) -> dict[str, float]:
        """Profile fields this fit measured (for :func:`autotune.profile.merge.merge_profile`)."""
        return self.coef()

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary (coefficients, standard errors, residuals, rank, condition)."""
        return {
            "coefficients_mib": self.coef(),
            "stderr_mib": {n: float(s) for n, s in zip(self.names, self.stderr_mib)},
            "residuals_mib": [{"run": r, "stage": p, "measured": float(y), "predicted": float(f),
                               "residual": float(y - f)}
                              for (r, p), y, f in zip(self.rows, self.peak_mib, self.predicted_mib)],
            "rank": self.rank, "unknowns": len(self.names), "rows": len(self.rows),
            "cond": self.cond, "rms_residual_mib": self.rms_residual_mib,
            "max_abs_residual_mib": self.max_abs_residual_mib,
            "fixed": dict(self.fixed), "not_covered": list(self.not_covered),
        }

    def table(self) -> str:
        """Human-readable report: coefficients ± standard errors, then per-stage residuals."""
        lines = [f"dry-run memory fit: {len(self.rows)} stage peaks, {len(self.names)} unknowns, "
                 f"rank {self.rank}, condition number {self.cond:.3g} (unit-norm columns)",
                 f"{'field':<34} {'MiB':>12} {'± stderr':>10}"]
        for n, v, s in zip(self.names, self.coef_mib, self.stderr_mib):
            se = "-" if not np.isfinite(s) else f"{s:.1f}"
            lines.append(f"{n:<34} {v:>12.1f} {se:>10}")
        if self.fixed:
            lines.append("held fixed (not separable by dry runs): "
                         + ", ".join(f"{k}={v:g}" for k, v in self.fixed.items()))
        if self.not_covered:
            lines.append("not covered by these dry runs: " + ", ".join(self.not_covered))
        lines.append(f"{'run':<24} {'stage':>5} {'measured':>10} {'predicted':>10} {'residual':>9}")
        for (r, p), y, f in zip(self.rows, self.peak_mib, self.predicted_mib):
            lines.append(f"{r[:24]:<24} {p:>5} {y:>10.0f} {f:>10.1f} {y - f:>9.1f}")
        lines.append(f"rms residual {self.rms_residual_mib:.1f} MiB, max |residual| "
                     f"{self.max_abs_residual_mib:.1f} MiB")
        return "\n".join(lines)


def _zero_profile(layer_kinds: Sequence[tuple[str, int]]) -> ModelProfile:
    kinds = {k: LayerKind(fwd_ms=0, bwd_ms=0, act_mib=0, static_mib=0) for k, _ in layer_kinds}
    return ModelProfile(kinds=kinds, layer_kinds=[(k, int(c)) for k, c in layer_kinds])


def _class_counts(layer_kinds: Sequence[tuple[str, int]], layout: Layout) -> np.ndarray:
    """int [K, C, V, P] layers of each kind and recompute class (the cost model's own rule)."""
    pa = ProfileArrays.from_profile(_zero_profile(layer_kinds))
    L = layout
    return class_counts(pa, L.layers_vp[None], L.recompute_vp[None], L.select_vp[None],
                        L.comm_vp[None])[:, :, 0]


def _act_name(kind: str, cls: str) -> str:
    return f"kinds.{kind}.act_mib" if cls == "none" else f"kinds.{kind}.{cls}.act_mib"


def _ws_name(kind: str, cls: str) -> str:
    return f"kinds.{kind}.workspace_mib" if cls == "none" else f"kinds.{kind}.{cls}.workspace_mib"


@dataclass
class _Row:
    """One stage peak: static features + candidate active terms."""

    label: str
    stage: int
    y: float
    base: dict[str, float]                        # unknown -> coefficient (static, const, head/tail)
    cands: list[tuple[dict[str, float], float]]   # (unknown -> coef, fixed MiB) per candidate term


def _prior_value(prior: ModelProfile | None, path: str) -> float:
    if prior is None:
        return 0.0
    parts = path.split(".")
    if parts[0] in ("head", "tail"):
        return float(getattr(getattr(prior, parts[0]), parts[1]))
    if parts[0] == "kinds":
        kind = prior.kinds.get(parts[1])
        if kind is None:
            return 0.0
        if len(parts) == 3:
            return float(getattr(kind, parts[2]))
        return float(getattr(kind.option(parts[2]), parts[3]))
    return float(getattr(prior, path))


def _build_rows(runs: Sequence[DryRun], layer_kinds: Sequence[tuple[str, int]],
                prior: ModelProfile | None, fit_workspace: bool) -> tuple[list[_Row], dict[str, float]]:
    kinds = [k for k, _ in layer_kinds]
    kinds = list(dict.fromkeys(kinds))
    fixed: dict[str, float] = {}

    def fixed_val(name: str) -> float:
        v = _prior_value(prior, name)
        fixed[name] = v
        return v

    rows: list[_Row] = []
    for run in runs:
        L = run.layout
        V, P = L.vpp, L.pp
        try:
            cs = compile_schedule(run.schedule, P, V, run.micro_batch_num)
        except (KeyError, ValueError) as exc:
            raise ConfigError(f"dry run {run.label!r}: {exc}", field="schedule", value=run.schedule,
                              rule="dryrun_schedule") from None
        cnt = _class_counts(layer_kinds, L)  # K C V P
        for p in range(P):
            base: dict[str, float] = {"stage_const_mib": 1.0}
            for ki, k in enumerate(kinds):
                n = float(cnt[ki, :, :, p].sum())
                if n:
                    base[f"kinds.{k}.static_mib"] = n
            if p == 0:
                base["head.static_mib"] = 1.0
            if p == P - 1:
                base["tail.static_mib"] = base.get("tail.static_mib", 0.0) + 1.0

            def act_terms(vec: np.ndarray, cnt: np.ndarray = cnt, p: int = p, P: int = P,
                          V: int = V) -> tuple[dict[str, float], float]:
                coef: dict[str, float] = {}
                fx = 0.0
                for ki, k in enumerate(kinds):
                    for ci, cls in enumerate(RECOMPUTE_CLASSES):
                        f = float(vec @ cnt[ki, ci, :, p])
                        if f:
                            coef[_act_name(k, cls)] = coef.get(_act_name(k, cls), 0.0) + f
                if p == 0:
                    fx += vec[0] * fixed_val("head.act_mib")
                if p == P - 1:
                    fx += vec[V - 1] * fixed_val("tail.act_mib")
                return coef, fx

            cands: list[tuple[dict[str, float], float]] = []
            for vec in cs.mem_fwd[p]:
                cands.append(act_terms(vec))
            vecs, chunks = cs.mem_bwd[p]
            for vec, c in zip(vecs, chunks):
                coef, fx = act_terms(vec)
                # workspace sources present in chunk c: (unknown name or None, fixed value)
                sources: list[tuple[str | None, float]] = [(None, 0.0)]
                for ki, k in enumerate(kinds):
                    for ci, cls in enumerate(RECOMPUTE_CLASSES):
                        if cnt[ki, ci, c, p] > 0:
                            name = _ws_name(k, cls)
                            if cls == "full" and fit_workspace:
                                sources.append((name, 0.0))
                            else:
                                sources.append((None, fixed_val(name)))
                if c == 0 and p == 0:
                    sources.append((None, fixed_val("head.workspace_mib")))
                if c == V - 1 and p == P - 1:
                    sources.append((None, fixed_val("tail.workspace_mib")))
                for name, val in sources:
                    cc = dict(coef)
                    if name is not None:
                        cc[name] = cc.get(name, 0.0) + 1.0
                    cands.append((cc, fx + val))
            rows.append(_Row(run.label, p, float(run.peak_mib_p[p]), base, cands))
    return rows, fixed


def _check_field(name: str) -> None:
    check_field_path(name)


def _value(terms: dict[str, float], theta: dict[str, float]) -> float:
    return sum(c * theta.get(n, 0.0) for n, c in terms.items())


def _active(rows: list[_Row], theta: dict[str, float]) -> list[int]:
    out = []
    for r in rows:
        vals = [_value(c, theta) + fx for c, fx in r.cands]
        out.append(int(np.argmax(vals)))
    return out


def _predict(rows: list[_Row], theta: dict[str, float]) -> np.ndarray:
    return np.asarray([_value(r.base, theta) + max(_value(c, theta) + fx for c, fx in r.cands)
                       for r in rows])


def _underdetermined(names: list[str], A: np.ndarray, rank: int, s: np.ndarray, vt: np.ndarray,
                     runs: Sequence[DryRun], kinds_arg: str) -> ConfigError:
    U, R = len(names), A.shape[0]
    groups = []
    for row in vt[rank:]:
        w = np.abs(row) / np.abs(row).max()
        groups.append(" + ".join(n for n, x in zip(names, w) if x > 0.05))
    P = runs[0].layout.pp
    N = runs[0].layout.num_layers
    need = U - rank
    more = (f"{need} more independent stage peak{'s' if need > 1 else ''}" if R >= U else
            f"at least {U - R} more stage peaks (have {R} for {U} unknowns)")
    msg = (f"under-determined: {U} unknowns but the dry runs give rank {rank}; cannot separate "
           f"{'; '.join(groups)}. Need {more}: dry-run the configs of `autotune probe "
           f"--pipeline-stage {P} --num-layers {N} --kinds {kinds_arg}` (different offsets and "
           f"recompute counts on the middle stages), or fix fields from a prior profile")
    return ConfigError(msg, field="--from-dryrun", value=U - rank, rule="fit_underdetermined")


def _unknowns(rows: list[_Row]) -> list[str]:
    """Every unknown that appears in some row, in report order."""
    all_names: list[str] = []
    for r in rows:
        for n in list(r.base) + [n for c, _ in r.cands for n in c]:
            if n not in all_names:
                all_names.append(n)
    order = ["stage_const_mib", "head.static_mib", "tail.static_mib"]
    names = [n for n in all_names if n.endswith("static_mib") and n.startswith("kinds.")]
    names += [n for n in all_names if n not in names and n not in order]
    names += [n for n in order if n in all_names]
    return names


def _assemble(rows: list[_Row], act: Sequence[int], names: list[str],
              held: dict[str, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Design [R, U] and known part [R] at an active set; ``held`` unknowns go to the known part."""
    A = np.zeros((len(rows), len(names)))
    fx = np.zeros(len(rows))
    idx = {n: j for j, n in enumerate(names)}
    held = held or {}
    for i, (r, a) in enumerate(zip(rows, act)):
        terms, f = r.cands[a]
        for n, c in list(r.base.items()) + list(terms.items()):
            if n in idx:
                A[i, idx[n]] += c
            else:
                f += c * held.get(n, 0.0)
        fx[i] = f
    return A, fx


def design_quality(runs: Sequence[DryRun], layer_kinds: Sequence[tuple[str, int]]) -> tuple[list[str], int, float]:
    """``(unknowns, rank, cond)`` of the fit these runs would give (peaks are not needed).

    The active terms are those of a profile whose memory fields are all 1 MiB (every live vector
    weighted by its size, the full-recompute workspace active wherever full recompute is used).
    ``cond`` is the condition number with unit-norm columns (inf when rank-deficient).
    """
    rows, _ = _build_rows(runs, layer_kinds, None, True)
    names = _unknowns(rows)
    theta = {n: 1.0 for n in names}
    A, _ = _assemble(rows, _active(rows, theta), names)
    used = np.abs(A).sum(axis=0) > 0
    names = [n for n, u in zip(names, used) if u]
    A = A[:, used]
    s = np.linalg.svd(A / np.linalg.norm(A, axis=0), compute_uv=False)
    rank = int((s > _RANK_TOL * s[0]).sum())
    cond = float(s[0] / s[-1]) if rank == len(names) else float("inf")
    return names, rank, cond


def _layer_kinds(runs: Sequence[DryRun], layer_kinds: Sequence[tuple[str, int]] | None,
                 prior: ModelProfile | None) -> Sequence[tuple[str, int]]:
    """The layer kinds of the fit (given, the prior's, or one ``dense`` kind), checked against the
    runs. Raises ConfigError: no runs, runs of different layer counts, kinds of another count."""
    if not runs:
        raise ConfigError("no dry runs given", field="--from-dryrun", value=None, rule="dryrun_missing")
    N = runs[0].layout.num_layers
    if any(r.layout.num_layers != N for r in runs):
        raise ConfigError(f"dry runs place different layer counts: {[r.layout.num_layers for r in runs]}",
                          field="--from-dryrun", value=None, rule="dryrun_layers")
    if layer_kinds is None:
        layer_kinds = list(prior.with_num_layers(N).layer_kinds) if prior is not None else [("dense", N)]
    if sum(c for _, c in layer_kinds) != N:
        raise ConfigError(f"layer_kinds describe {sum(c for _, c in layer_kinds)} layers, the dry runs "
                          f"{N}", field="layer_kinds", value=list(layer_kinds), rule="profile_layers")
    return layer_kinds


def fit_dryruns(runs: Sequence[DryRun], layer_kinds: Sequence[tuple[str, int]] | None = None, *,
                prior: ModelProfile | None = None, fit_workspace: bool = True,
                fix: Sequence[str] = ()) -> MemoryFit:
    """Fit the memory fields of a profile to dry-run peaks (see module docstring for the model).

    Args:
        runs: one or more dry runs of the same model (same ``num_layers``).
        layer_kinds: decoder layer kinds as runs ``[[kind, count], ...]``; default one kind
            ``dense`` for all layers (or the prior's when given).
        prior: a profile (e.g. analytic) that supplies the fields dry runs cannot separate
            (head/tail activation and workspace, workspaces of non-full classes); 0 when None.
        fit_workspace: fit ``kinds.<k>.full.workspace_mib`` (the transient of a fully recomputed
            layer's backward) when full recompute is probed; else take it from the prior.
        fix: unknowns to hold at the prior's value (0 without prior) instead of fitting, e.g.
            ``["stage_const_mib"]`` when only 2 stages were dry-run.

    Returns:
        :class:`MemoryFit` with coefficients (MiB), residuals, rank, condition number, stderr.

    Raises:
        ConfigError: no runs, runs of different layer counts, unknown schedule, or an
            under-determined system (rule ``fit_underdetermined``; the message says which
            unknowns cannot be separated and how many more stage peaks / which probes are needed).
    """
    layer_kinds = _layer_kinds(runs, layer_kinds, prior)
    rows, fixed = _build_rows(runs, layer_kinds, prior, fit_workspace)
    names = _unknowns(rows)
    held = {n: _prior_value(prior, n) for n in fix}
    for n in held:
        _check_field(n)
    fixed.update(held)
    names = [n for n in names if n not in held]
    kinds = list(dict.fromkeys(k for k, _ in layer_kinds))
    covered = set(names)
    not_covered = [_act_name(k, c) for k in kinds for c in RECOMPUTE_CLASSES
                   if _act_name(k, c) not in covered]
    present_classes = sorted({n.split(".")[2] for n in names
                              if n.startswith("kinds.") and n.count(".") == 3 and n.endswith("act_mib")})
    kinds_arg = ",".join(c for c in ("full", "select", "comm") if c in present_classes) or "full,select,comm"
    # initial estimate: prior values, else ones (any positive start ranks the live vectors by size)
    theta = {n: (_prior_value(prior, n) if prior is not None else 1.0) for n in names}
    theta.update(held)
    y = np.asarray([r.y for r in rows])
    seen: dict[tuple[int, ...], tuple[float, dict[str, float], np.ndarray]] = {}
    act = tuple(_active(rows, theta))
    rounds = 0
    while act not in seen and rounds < _MAX_ROUNDS:
        rounds += 1
        A, fx = _assemble(rows, act, names, held)
        used = np.abs(A).sum(axis=0) > 0
        if not used.all():  # a term inactive everywhere (e.g. workspace never the max): drop it
            dropped = [n for n, u in zip(names, used) if not u]
            names = [n for n, u in zip(names, used) if u]
            A = A[:, used]
            for n in dropped:
                theta.pop(n, None)
                if n.endswith("workspace_mib"):
                    fixed[n] = 0.0
        scale = np.linalg.norm(A, axis=0)
        As = A / scale
        U_, s, vt = np.linalg.svd(As, full_matrices=True)
        rank = int((s > _RANK_TOL * s[0]).sum())
        if rank < len(names):
            raise _underdetermined(names, As, rank, s, vt, runs, kinds_arg)
        sol, *_ = np.linalg.lstsq(As, y - fx, rcond=None)
        coef = sol / scale
        theta = dict(zip(names, coef))
        theta.update(held)
        rss = float(np.sum((y - _predict(rows, theta)) ** 2))
        seen[act] = (rss, dict(theta), A)
        act = tuple(_active(rows, theta))
    # best round (a cycle, if any, keeps the lowest true residual)
    rss, theta, A = min(seen.values(), key=lambda t: t[0])
    names = [n for n in theta if n not in held]
    coef = np.asarray([theta[n] for n in names])
    pred = _predict(rows, theta)
    scale = np.linalg.norm(A, axis=0)
    As = A / scale
    s = np.linalg.svd(As, compute_uv=False)
    cond = float(s[0] / s[-1])
    dof = len(rows) - len(names)
    if dof > 0:
        s2 = float(np.sum((y - pred) ** 2)) / dof
        cov = s2 * np.linalg.pinv(As.T @ As)
        stderr = np.sqrt(np.clip(np.diag(cov), 0, None)) / scale
    else:
        stderr = np.full(len(names), np.nan)
    fixed = {k: v for k, v in fixed.items() if k not in names}
    return MemoryFit(names=names, coef_mib=coef, stderr_mib=stderr, design=A, peak_mib=y,
                     predicted_mib=pred, rows=[(r.label, r.stage) for r in rows], rank=len(names),
                     cond=cond, fixed=fixed, not_covered=not_covered, rounds=rounds)
