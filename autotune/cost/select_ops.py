"""Per-operator select recompute: which ops a pattern matches and what that saves per mini-stage.

**Op list.** A layer kind may list its operators (``LayerKind.select_ops`` / ``comm_ops``): paths
inside the decoder layer, cell names joined by ".", each with the activation its recompute frees
and its replay time (:class:`~autotune.profile.schema.OpSaving`). The analytic profile names them
after the model class's cells (the registry :mod:`autotune.config.cells`: Llama-style
``attention_norm.norm``, ``attention.wq.matmul``, ``feed_forward.w1.activation.silu``,
``feed_forward.mul``, ...; GLM's ``input_layernorm.norm``, ``self_attention.query_key_value.matmul``,
``mlp.activation_func.silu``; GPT-2's ``layernorm1.layer_norm``, ``output.mapping.matmul``; mcore's
``input_layernorm.norm``, ``self_attention.linear_qkv``, ``mlp.linear_fc1``, ``mlp.experts.*``,
``mlp.shared_experts.*``; see :func:`autotune.profile.analytic.role_savings` for the savings) and
records the family in ``assumptions["cell_family"]``; a pattern that names another cell of that
family (a reshape, a cast, ...) matches and saves nothing, without a warning.

**Matching** (MindFormers, shared/spec/mindformers-layer-setting.md §4.2). A pattern is split on
the literal two characters ``\\.``; each segment is a regular expression that must fully match one
name (``regex`` under MindFormers' 1 s timeout, as r1.6+: a timeout is no match and warns
``W_PATTERN_TIMEOUT``; the config's matches share one budget, whose end is the rule
``R_PATTERN_BUDGET``; :func:`autotune.config.patterns.path_matches`). A pattern of k segments
matches the op path n₁…n_j when segment i full-matches nᵢ for every i ≤ k, and:

- ``select_recompute``: k = j (the op itself) or k < j (a cell on the op's path: MindFormers
  recomputes a matched child cell whole, so every op under it is recomputed);
- ``select_comm_recompute``: k = j only (a matched cell is skipped by MindFormers).

**Savings** of the layer at position k of mini-stage (v, p), for k ≥ r (the first r layers are
fully recomputed): the active select patterns are those whose [V][P] count table has
``table[v, p] > k``; ``saved = Σ act_mib`` and ``replay = Σ extra_ms`` over the ops matched by at
least one active pattern (an op counts once); the same for comm patterns with ``comm_ops``. The
layer then keeps ``act_none − saved_select − saved_comm`` (at least 0) and its backward takes
``bwd_none + replay``. A layout without pattern tables (``select_patterns`` empty, as the search
builds them) means the default op set, i.e. the profile's aggregate ``select`` / ``comm`` options
with counts ``select_vp`` / ``comm_vp``; a kind without an op table also uses its aggregate
options (``both`` when select and comm are both active). A pattern that matches no op of any
listed kind saves nothing and yields the warning ``W_SELECT_NO_MATCH`` (the code of
:mod:`autotune.config.layer_setting`), except a default pattern whose default set matched.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from autotune.config.cells import FAMILIES, pattern_hits
from autotune.config.layer_setting import DEFAULT_PATTERNS, FIELDS, Warning_
from autotune.config.layout import Layout
from autotune.config.patterns import compile_segments, path_matches, pattern_scope
from autotune.cost.inputs import BOTH, COMM, NONE, SELECT, ProfileArrays, StageCosts, first_layers, stage_costs


FAMILIES_BY_NAME = {f.name: f for f in FAMILIES}


def pattern_matches(pattern: str, op_path: str, *, cells: bool = True,
                    field: str = FIELDS["select_recompute"]) -> bool:
    """Does a MindFormers select pattern match the op at ``op_path`` (module docstring)?

    Args: pattern (segments separated by the literal ``\\.``), op_path (names joined by "."),
    cells: True for ``select_recompute`` (a matched cell on the path counts), False for
    ``select_comm_recompute`` (only the op itself); field: the YAML key named by an error.
    Each segment match runs under the 1 s timeout (a timeout is no match) and is charged to the
    enclosing :func:`~autotune.config.patterns.pattern_scope`'s budget.

    Raises:
        ConfigError: a segment is not a valid regular expression (rule R_SELECT_PATTERN), or the
            config's pattern matches have used their budget (R_PATTERN_BUDGET).
    """
    compile_segments(pattern, field)
    return path_matches(pattern, op_path.split("."), cells=cells, path=field)


def _default_group(pattern: str, key: str) -> list[str] | None:
    for (k, _mode), pats in DEFAULT_PATTERNS.items():
        if k == key and pattern in pats:
            return pats
    return None


@pattern_scope()
def pattern_stage_costs(pa: ProfileArrays, layout: Layout, *,
                        pos: np.ndarray | None = None) -> tuple[StageCosts, list[Warning_]]:
    """Stage costs of one layout with per-op select / comm recompute (module docstring).

    Args:
        pa: profile arrays (``select_ops`` / ``comm_ops`` per kind, None = no op list).
        layout: layers, full-recompute counts and the pattern tables ``select_patterns`` /
            ``comm_patterns`` (pattern -> int [V][P]); empty tables fall back to ``select_vp`` /
            ``comm_vp`` with the aggregate options.
        pos: optional int [V, P] pipeline positions (V-shaped schedules).

    Returns:
        (:class:`StageCosts` with B = 1, warnings): act/bwd/recompute_ms/ws per mini-stage [1, V, P].

    Raises:
        ValueError: a pattern table's shape differs from the layout's; ConfigError: bad regex
        (R_SELECT_PATTERN), or the pattern matches used the config's budget (R_PATTERN_BUDGET).
    """
    L = layout.layers_vp
    V, P = L.shape
    z = np.zeros((1, V, P), dtype=np.int64)
    base = stage_costs(pa, L[None], layout.recompute_vp[None], z, z, pos=pos)
    act, bwd, ws = base.act_mib.copy(), base.bwd_ms.copy(), base.ws_mib.copy()
    rec_ms = base.recompute_ms.copy()
    start = first_layers(L[None], pos)[0]
    kind_of = np.argmax(np.diff(pa.kind_prefix, axis=1), axis=0)
    sides = []
    timed_out: list[tuple[str, str, str]] = []   # (key, pattern, name) of a first timeout in this scope
    for key, tables, agg_vp, ops_k, cells in (
            ("select_recompute", layout.select_patterns, layout.select_vp, pa.select_ops, True),
            ("select_comm_recompute", layout.comm_patterns, layout.comm_vp, pa.comm_ops, False)):
        for pat, tab in tables.items():
            if np.shape(tab) != (V, P):
                raise ValueError(f"{key} table of {pat!r} has shape {np.shape(tab)}, layout is {(V, P)}")
        K = len(pa.fwd_k)
        ops_k = ops_k or (None,) * K
        with pattern_scope() as budget:
            seen = dict(budget.timed_out)
            match = {pat: [None if ops_k[k] is None else
                           frozenset(i for i, (name, _, _) in enumerate(ops_k[k])
                                     if pattern_matches(pat, name, cells=cells, field=FIELDS[key]))
                           for k in range(K)]
                     for pat in tables}
            timed_out += [(key, pat, budget.timed_out[pat]) for pat in tables
                          if pat in budget.timed_out and pat not in seen]
        sides.append((key, tables, agg_vp, ops_k, match))
    for v in range(V):
        for p in range(P):
            n = int(L[v, p])
            r = min(int(layout.recompute_vp[v, p]), n)
            for k in range(r, n):
                kd = int(kind_of[start[v, p] + k])
                saved = extra = 0.0
                agg = []
                for key, tables, agg_vp, ops_k, match in sides:
                    if tables:
                        active = [pat for pat, tab in tables.items() if tab[v, p] > k]
                    else:
                        active = ["<default>"] if agg_vp[v, p] > k else []
                    if not active:
                        continue
                    if not tables or ops_k[kd] is None:
                        agg.append(key)
                        continue
                    hit = frozenset().union(*(match[pat][kd] for pat in active))
                    saved += sum(ops_k[kd][i][1] for i in hit)
                    extra += sum(ops_k[kd][i][2] for i in hit)
                if agg:
                    cls = BOTH if len(agg) == 2 else (SELECT if agg[0] == "select_recompute" else COMM)
                    saved += pa.act_kc[kd, NONE] - pa.act_kc[kd, cls]
                    extra += pa.bwd_kc[kd, cls] - pa.bwd_kc[kd, NONE]
                    ws[0, v, p] = max(ws[0, v, p], pa.ws_kc[kd, cls])
                act[0, v, p] -= min(saved, pa.act_kc[kd, NONE])
                bwd[0, v, p] += extra
                rec_ms[0, v, p] += extra
    warns: list[Warning_] = [Warning_("W_PATTERN_TIMEOUT", FIELDS[key],
                                      f"matching pattern {pat[:60]!r} against the op name {name[:60]!r} timed "
                                      "out; like MindFormers r1.6+ (regex, 1 s timeout) this counts as no match")
                             for key, pat, name in timed_out]
    fam = FAMILIES_BY_NAME.get(pa.cell_family or "")
    for key, tables, _agg, ops_k, match in sides:
        if all(o is None for o in ops_k):
            continue
        for pat, tab in tables.items():
            if not np.any(np.asarray(tab) > 0) or any(m for m in match[pat] if m):
                continue
            if fam is not None and pattern_hits(fam, pat, cells=key == "select_recompute", yaml_field=FIELDS[key]):
                continue   # a real cell / op of this model class whose recompute the profile prices at 0
            group = _default_group(pat, key)
            if group and any(any(m for m in match.get(g, []) if m) for g in group if g != pat):
                continue
            what = "op or cell" if key == "select_recompute" else "op"
            warns.append(Warning_("W_SELECT_NO_MATCH", FIELDS[key],
                                  f"pattern {pat!r} matches no {what} of this model's layers, so it saves "
                                  f"nothing; the profile lists e.g. {_examples(ops_k)}"))
    return replace(base, act_mib=act, bwd_ms=bwd, ws_mib=ws, recompute_ms=rec_ms), warns


def _examples(ops_k: tuple) -> str:
    names = [name for ops in ops_k if ops for name, _, _ in ops]
    return ", ".join(dict.fromkeys(names[:6])) or "no ops"
