"""A search result as MindFormers keys, YAML and JSON: what :class:`autotune.api.SearchResult`'s
``tuned_values``, ``tuned_block``, ``to_yaml`` and ``to_dict`` return (the result stays data; any
object with its fields works)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.config.layout import canonical_values, layout_from_config, mtp_layers_in_split
from autotune.cost.report import CostReport
from autotune.emit.apply_keys import TUNED_PATHS, inserts_default
from autotune.emit.render import fits_word, memory_text, report_json
from autotune.emit.splice import leaves, line_ending, read_text_exact, splice
from autotune.emit.yaml_block import deep_merge, dump_yaml, tuned_block
from autotune.errors import ConfigError, InfeasibleError
from autotune.units import parse_memory_mib


def tuned_values(result: Any) -> dict[str, Any]:
    """Canonical MindFormers values of the best config (offset, pp_interleave_num, recompute…).

    Raises:
        InfeasibleError: the search evaluated no configuration.
    """
    report = result.best or result.closest
    if report is None:
        raise InfeasibleError("the search evaluated no configuration")
    return canonical_values(report.layout, use_legacy=result.config.use_legacy,
                            select_patterns=result.select_patterns, comm_patterns=result.comm_patterns,
                            mtp_in_split=mtp_layers_in_split(result.config))


def tuned_keys(result: Any) -> dict[str, Any]:
    """Nested mapping of only the tuned MindFormers keys (to paste), the free space knobs included."""
    report = result.best or result.closest
    block = tuned_block(tuned_values(result), scheduler=report.schedule if report else "1f1b")
    return deep_merge(block, nested(result.settings)) if result.settings else block


def result_yaml(result: Any, *, full: bool = True) -> str:
    """The tuned config as YAML: the user's whole config with the tuned keys written over it
    (``full=True``) or just the tuned keys. A comment header lists the predicted numbers.

    With ``full=True`` and a config read from a file, the tuned values are spliced into the
    file's own text (:func:`autotune.emit.splice.splice`): comments, key order and formatting
    elsewhere stay as the user wrote them, so a diff shows only the tuned lines (and the header).
    It writes what ``apply`` writes: a tuned key at MindFormers' default that the config lacks
    (:func:`autotune.emit.apply_keys.inserts_default`) is not inserted.
    """
    report = result.best or result.closest
    head = ["autotune: tuned pipeline layout" if result.best is not None or report is None else
            f"autotune: {result.no_fit_headline()} the HBM budget; this is the closest layout found and it "
            "does NOT fit (do not train with it)"]
    if report is not None:
        head.append(f"predicted step time {report.step_time_ms:.1f} ms, idle (bubble) "
                    f"{report.bubble_fraction:.1%} of device time, {memory_text(report, result.hbm_margin_mib)}")
    user = result.baselines.get("user")
    if user is not None and report is not None:
        head.append(f"user's config: {user.step_time_ms:.1f} ms, fits: {fits_word(user.fits)}")
    head += budget_notes(result, report)
    head.append("tuned keys: model.model_config.{offset, pp_interleave_num}, parallel.pipeline_config, "
                "recompute_config.{recompute, select_recompute, select_comm_recompute}"
                + "".join(f", {k}" for k in result.settings))
    block = tuned_keys(result)
    if not full:
        return dump_yaml(block, header="\n".join(head))
    # only what ``apply`` would write: a tuned key at MindFormers' default is not inserted
    updates = [(p, v) for p, v in leaves(block) if not inserts_default(".".join(p), v, result.config.raw)]
    source = Path(result.config.source)
    if source.is_file():
        text, _ = splice(read_text_exact(source), updates)
        nl = line_ending(text)
        return "".join(f"# {line}{nl}" for line in head) + text
    data = deep_merge(result.config.raw, nested({".".join(p): v for p, v in updates}))
    return dump_yaml(data, header="\n".join(head))


def check_writable(source: str | Path) -> None:
    """Raise now, not after a search, when ``result_yaml`` could not splice the tuned keys into the
    config file ``source`` (e.g. a tuned key's parent is an alias of a mapping written elsewhere):
    every key a search always writes is spliced, with a placeholder value, into the file's text.

    Raises:
        ConfigError: the rule :func:`autotune.emit.splice.splice` gives (one line, the key named).
    """
    probe = "__autotune_probe__"
    splice(read_text_exact(source), [(tuple(p.split(".")), probe) for p in sorted(TUNED_PATHS)])


#: Warnings about the config's select / comm patterns that concern the search's answer too: it keeps
#: the config's own patterns (by default), so a pattern that matches no op of the model (or whose
#: matches timed out) makes the answer's select / comm counts recompute nothing.
PATTERN_CODES = ("W_SELECT_NO_MATCH", "W_PATTERN_TIMEOUT")


def pattern_warnings(result: Any) -> list[dict[str, str]]:
    """The user baseline's :data:`PATTERN_CODES` warnings as {code, field, message} dicts, once each
    ([] when the user's layout could not be priced)."""
    user = (getattr(result, "baselines", None) or {}).get("user")
    out: list[dict[str, str]] = []
    for w in getattr(user, "warnings", None) or []:
        d = {"code": w.code, "field": w.field, "message": w.message}
        if w.code in PATTERN_CODES and d not in out:
            out.append(d)
    return out


#: The warnings of ``autotune check``'s layer rules that hold whatever layout the search writes
#: (the others speak of the file's own offset, pp_interleave_num or patterns).
RUN_WARNINGS = ("W_MICRO_BATCH_DEFAULT",)


def run_warnings(cfg: Any) -> list:
    """The :data:`RUN_WARNINGS` that ``autotune check`` gives for ``cfg`` (e.g. micro_batch_num not
    set: MindFormers then runs 1 micro-batch, which MindSpore's pipeline rejects when pipeline_stage
    > 1, and the search prices that); [] when the file's own layout breaks a rule (the search
    reports that as ``user_config_error``)."""
    try:
        layout = layout_from_config(cfg)
    except ConfigError:
        return []
    return [w for w in layout.warnings if w.code in RUN_WARNINGS]


def config_warnings(result: Any) -> list[dict[str, str]]:
    """The warnings ``autotune check`` gives for the config's keys (``W_KEY_UNKNOWN``: a near miss
    of a key autotune reads, whose default is then used), the run (:func:`run_warnings`) and its
    select / comm patterns (:func:`pattern_warnings`) as {code, field, message} dicts."""
    cfg = result.config
    return [{"code": w.code, "field": w.field, "message": w.message}
            for w in list(getattr(cfg, "config_warnings", [])) + run_warnings(cfg)] + pattern_warnings(result)


def budget_notes(result: Any, report: CostReport | None) -> list[str]:
    """Header lines of the tuned YAML that a reader must not miss: the key warnings, and a budget
    (``--hbm``) other than the file's ``context.max_device_memory`` (MindFormers runs with the
    file's value, so a layout tuned for more memory may not fit there)."""
    lines = [f"WARNING {w['code']}: {w['field']}: {w['message']}" for w in config_warnings(result)]
    raw = getattr(result.config, "raw", None)
    context = raw.get("context") if isinstance(raw, dict) else None
    ctx = context.get("max_device_memory") if isinstance(context, dict) else None
    if report is not None and report.hbm_budget_mib and ctx is not None:
        try:
            ctx_mib = parse_memory_mib(ctx, field="context.max_device_memory")
        except ConfigError:
            ctx_mib = None
        budget = report.hbm_budget_mib + result.hbm_margin_mib
        if ctx_mib is not None and abs(ctx_mib - budget) > 0.5:
            lines.append(f"NOTE: tuned for an HBM budget of {budget:.0f} MiB (--hbm), but this file's "
                         f"context.max_device_memory is {ctx} ({ctx_mib:.0f} MiB) and MindFormers runs with "
                         f"that: set it to match")
    return lines


def bound_line(result: Any, *, report: bool = False) -> str | None:
    """``lower bound <ms> ms (provable lower bound | exact optimum (space enumerated)) | certified
    gap <percent>`` for a search result; None when it has no bound (``lower_bound_ms`` None). The
    text output adds the trials and seconds; the sweep's report.txt prints it as is (no clock).
    ``report``: the form of report.html / report.md and the notebook view (thousands separators,
    "exact optimum: the space was enumerated")."""
    lb = getattr(result, "lower_bound_ms", None)
    if lb is None:
        return None
    gap = getattr(result, "certified_gap", None)
    gap_txt = "n/a" if gap is None else f"{gap:.2%}"
    exact = getattr(result, "exact", False)
    if report:
        how = "exact optimum: the space was enumerated" if exact else "provable lower bound"
        return f"lower bound {lb:,.1f} ms ({how}) | certified gap {gap_txt}"
    how = "exact optimum (space enumerated)" if exact else "provable lower bound"
    return f"lower bound {lb:.1f} ms ({how}) | certified gap {gap_txt}"


#: Relative tolerance within which a V's bound "is" the answer's step time: the search's own
#: (``autotune.tuner.problem.REL_TOL``, which emit, beside the tuner in the layers, does not import).
SOLVED_TOL = 1e-9


def bounds_by_vpp_line(result: Any) -> str | None:
    """One line with the lower bound of each pp_interleave_num (``result.lower_bound_by_vpp``),
    the answer's V and the least marked, e.g. ``lower bound by pp_interleave_num (...): 1: 165112.1
    ms | 2: 160692.8 ms (the answer's) | 3: 159931.9 ms (the least)``, and the answer's V also
    "proven the best of this pp_interleave_num" when its bound is the answer's step time (within
    :data:`SOLVED_TOL`); None when the result has no
    such breakdown (one V, the space enumerated, or nothing fits). The search tightens a V's bound only while
    it can raise the least one, so the others are proofs, not the best ones it could give."""
    by = getattr(result, "lower_bound_by_vpp", None)
    if not by:
        return None
    mine = result.best.layout.vpp if result.best is not None else None
    step = getattr(result.best, "step_time_ms", None) if result.best is not None else None
    least = min((b for b in by.values() if b is not None), default=None)
    parts = []
    for V, b in by.items():
        # the answer's V with a bound at its step time (within SOLVED_TOL): no layout of that V is
        # faster (the split scan's pp_interleave_num 1)
        solved = V == mine and b is not None and step is not None and b >= step * (1 - SOLVED_TOL)
        tags = ((["the answer's"] if V == mine else [])
                + (["proven the best of this pp_interleave_num"] if solved else [])
                + (["the least"] if b is not None and b == least else []))
        parts.append((f"{V}: none fits" if b is None else f"{V}: {b:.1f} ms")
                     + (f" ({', '.join(tags)})" if tags else ""))
    return ("lower bound by pp_interleave_num (each tightened only while it could raise the least): "
            + " | ".join(parts))


def vpp_not_searched_line(result: Any) -> str | None:
    """One line naming the pp_interleave_num candidates the search could not run and why
    (``result.vpp_not_searched``), grouped by reason, e.g. ``pp_interleave_num 2, 3, 4 not
    searched: interleaved 1F1B needs micro_batch_num to be a multiple of pipeline_stage (...)``;
    None when every candidate ran."""
    why = getattr(result, "vpp_not_searched", None) or {}
    by_reason: dict[str, list[int]] = {}
    for V, reason in why.items():
        by_reason.setdefault(reason, []).append(V)
    if not by_reason:
        return None
    return "; ".join(f"pp_interleave_num {', '.join(map(str, Vs))} not searched: {reason}"
                     for reason, Vs in by_reason.items())


def result_dict(result: Any) -> dict[str, Any]:
    """The stable JSON shape of ``autotune search --format json``."""
    def d(r: CostReport | None) -> dict[str, Any] | None:
        if r is None:
            return None
        out = report_json(r, result.hbm_margin_mib)
        out["config"] = canonical_values(r.layout, use_legacy=result.config.use_legacy,
                                         select_patterns=result.select_patterns,
                                         comm_patterns=result.comm_patterns,
                                         mtp_in_split=mtp_layers_in_split(result.config))
        return out
    return {"best": d(result.best), "closest": d(result.closest) if result.best is None else None,
            "baselines": {k: d(v) for k, v in result.baselines.items()},
            "trials": result.trials, "seconds": result.seconds,
            "lower_bound_ms": result.lower_bound_ms, "certified_gap": result.certified_gap,
            "lower_bound_by_vpp": ({str(V): b for V, b in result.lower_bound_by_vpp.items()}
                                   if result.lower_bound_by_vpp else None),
            "no_fit_proven": result.no_fit_proven,
            "exact": result.exact, "timed_out": result.timed_out, "stopped_by": result.stopped_by,
            "trials_stopped_by": result.trials_stopped_by, "bound_phase_cut": result.bound_phase_cut,
            "bound_phase_s": result.bound_phase_s, "time_left_faster": result.time_left_faster,
            "trials_share_halved": result.trials_share_halved,
            "vpp_not_searched": {str(V): why for V, why in result.vpp_not_searched.items()},
            "time_limit_s": result.time_limit_s,
            "settings": dict(result.settings), "subproblems": result.subproblems,
            "hbm_margin_mib": result.hbm_margin_mib,
            "user_config_error": result.user_config_error, "warnings": config_warnings(result),
            **({"pareto": result.pareto, "pareto_exact": result.pareto_exact}
               if result.pareto is not None else {})}


def nested(settings: dict[str, Any]) -> dict[str, Any]:
    """{"a.b.c": v} -> {"a": {"b": {"c": v}}}."""
    out: dict[str, Any] = {}
    for path, v in settings.items():
        node = out
        keys = path.split(".")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = v
    return out
