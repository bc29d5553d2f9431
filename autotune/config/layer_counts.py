"""Recompute-table rule family (layer-setting spec §3–§4.1): count specs → [vpp][pp] tables.

One normaliser F turns every count spec (``recompute``, each select / comm / exclude pattern's
value) into "how many layers of each mini-stage" (§3.1): ``True``/``False``, a 1-D per-stage list
split round-robin over the interleave chunks (§3.2), a list of strings (= all layers), or a
[vpp][pp] table (bool rows, bool or int items; ints are capped at the mini-stage size, which
MindFormers accepts silently: warning W_RECOMPUTE_CLAMPED). In swap mode the values are layer-id
lists instead (§3.5). :func:`patterns_of` picks the op patterns of a select-type key (§4.1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autotune.config.layer_types import (DEFAULT_PATTERNS, HUGE, Warning_, is_int, is_intlike,
                                         rule_error)
from autotune.config.limits import MAX_PATTERNS


def is_1d_counts(spec: Any) -> bool:
    """A list/tuple whose items are all ints or bools (the per-stage form, empty list included)."""
    return isinstance(spec, (list, tuple)) and all(is_intlike(x) for x in spec)


def is_str_list(spec: Any) -> bool:
    """A list/tuple of strings only (op patterns; empty list included)."""
    return isinstance(spec, (list, tuple)) and all(isinstance(x, str) for x in spec)


def _clamped(warns: list[Warning_], path: str, where: str, count: int, room: int) -> None:
    warns.append(Warning_("W_RECOMPUTE_CLAMPED", path,
                          f"count {count} {where} is more than the {room} layer(s) there; MindFormers "
                          f"silently caps it at {room}; write {room} (or true) if all are meant"))


def _table_1d(spec: Any, layers: np.ndarray, path: str, warns: list[Warning_]) -> np.ndarray:
    """§3.2: each stage's count capped at its layers, dealt one at a time to chunk 0, 1, …"""
    vpp, pp = layers.shape
    if len(spec) > pp:
        raise rule_error("R_RECOMPUTE_LEN", path, spec,
                         f"a per-stage list has {len(spec)} entries, more than pipeline_stage = {pp} "
                         "(IndexError in MindFormers)", f"give at most {pp} entries")
    table = np.zeros_like(layers)
    colsum = layers.sum(axis=0)
    for j, c in enumerate(spec):
        c = HUGE if c is True or c is np.True_ else int(c)
        if c < 0:
            raise rule_error("R_RECOMPUTE_NEGATIVE", path, spec,
                             f"count {c} for stage {j} is negative; MindFormers' round-robin split "
                             "never terminates (hang)", "use counts >= 0")
        if c != HUGE and c > colsum[j] >= 0:
            _clamped(warns, path, f"for stage {j}", c, int(colsum[j]))
        c = min(c, int(colsum[j]))
        if c < 0:
            raise rule_error("R_RECOMPUTE_NEGATIVE", path, spec,
                             f"stage {j} has a negative layer total, so the split never terminates",
                             "fix the offset first")
        room = np.maximum(layers[:, j], 0)
        while c > 0:
            for v in range(vpp):
                if c > 0 and table[v, j] < room[v]:
                    table[v, j] += 1
                    c -= 1
    return table


def _row_2d(spec: Any, row: Any, v: int, layers: np.ndarray, path: str, *, strict: bool,
            warns: list[Warning_], fix: str) -> list[int]:
    pp = layers.shape[1]
    if len(row) > pp:
        raise rule_error("R_RECOMPUTE_LEN", path, spec,
                         f"row {v} has {len(row)} entries, more than pipeline_stage = {pp} "
                         "(IndexError in MindFormers)", f"give {pp} entries per row")
    new_row = []
    for j, c in enumerate(row):
        if isinstance(c, (bool, np.bool_)):
            val = int(layers[v, j]) if c else 0
        elif is_int(c):
            if c > layers[v, j] >= 0:
                _clamped(warns, path, f"at [{v}][{j}]", int(c), int(layers[v, j]))
            val = min(int(c), int(layers[v, j]))
            if val < 0:
                msg = f"count {int(c)} at [{v}][{j}] is negative; MindFormers keeps it and selects no layer"
                if strict:
                    raise rule_error("R_RECOMPUTE_NEGATIVE", path, spec, msg, "use counts >= 0")
                warns.append(Warning_("W_RECOMPUTE_NEGATIVE", path, msg))
        else:
            raise rule_error("R_RECOMPUTE_TYPE", path, spec,
                             f"illegal entry {c!r} at [{v}][{j}] (MindFormers: 'Illegal input list for "
                             "select_recompute')", fix)
        new_row.append(val)
    if len(row) < pp and np.any(layers[v, len(row):] > 0):
        raise rule_error("R_RECOMPUTE_LEN", path, spec,
                         f"row {v} has {len(row)} entries, fewer than pipeline_stage = {pp}; MindFormers "
                         "raises IndexError when it configures those layers", f"give {pp} entries per row")
    return new_row


def _table_2d(spec: Any, layers: np.ndarray, path: str, *, strict: bool, warns: list[Warning_],
              fix: str) -> tuple[list[Any], np.ndarray]:
    """§3.1 2-D form: bool rows, bool/int items (ints capped), shape checks (R12/R13)."""
    vpp, pp = layers.shape
    real_rows = [r for r in spec[vpp:] if not (isinstance(r, (list, tuple)) and len(r) == 0)]
    if len(spec) > vpp and real_rows:
        raise rule_error("R_RECOMPUTE_LEN", path, spec,
                         f"the table has {len(spec)} rows, more than pp_interleave_num = {vpp} "
                         "(IndexError in MindFormers)", f"give {vpp} row(s) of {pp}")
    out_rows: list[Any] = []
    table = np.zeros_like(layers)
    for v, row in enumerate(spec):
        if v >= vpp:
            out_rows.append(list(row))
        elif isinstance(row, (bool, np.bool_)):
            r = layers[v].copy() if row else np.zeros(pp, dtype=np.int64)
            table[v] = r
            out_rows.append(r.tolist())
        else:
            new_row = _row_2d(spec, row, v, layers, path, strict=strict, warns=warns, fix=fix)
            table[v, :len(new_row)] = new_row
            out_rows.append(new_row)
    if len(spec) < vpp and np.any(layers[len(spec):] > 0):
        raise rule_error("R_RECOMPUTE_LEN", path, spec,
                         f"the table has {len(spec)} rows, fewer than pp_interleave_num = {vpp}; "
                         "MindFormers raises IndexError when it configures those layers",
                         f"give {vpp} row(s) of {pp}")
    return out_rows, table


def count_table(spec: Any, layers: np.ndarray, path: str, *, key: str, strict: bool,
                warns: list[Warning_]) -> tuple[Any, np.ndarray]:
    """F of §3.1 for one count spec against ``layers`` (int [vpp][pp]).

    Returns:
        (the value as MindFormers logs it, the dense int table [vpp][pp] used per layer).

    Raises:
        ConfigError: R_RECOMPUTE_LEN, R_RECOMPUTE_NEGATIVE, R_RECOMPUTE_TYPE (field = ``path``).
    """
    vpp, pp = layers.shape
    fix = (f"write true/false, a list of up to {pp} per-stage counts, or a [{vpp}][{pp}] table of "
           "non-negative counts")
    if isinstance(spec, (bool, np.bool_)):
        table = layers.copy() if spec else np.zeros_like(layers)
        return table.tolist(), table
    if isinstance(spec, (list, tuple)):
        if is_1d_counts(spec):
            table = _table_1d(spec, layers, path, warns)
            return table.tolist(), table
        if is_str_list(spec):
            if key == "recompute":
                msg = ("a list of strings in recompute means 'every layer' to MindFormers (shared "
                       "formatter), which is almost never intended")
                if strict:
                    raise rule_error("R_RECOMPUTE_TYPE", path, spec, msg,
                                     "write recompute: true, or move op patterns to select_recompute")
                warns.append(Warning_("W_RECOMPUTE_STRINGS", path, msg))
            table = layers.copy()
            return table.tolist(), table
        if all(isinstance(r, (list, tuple, bool, np.bool_)) for r in spec):
            return _table_2d(spec, layers, path, strict=strict, warns=warns, fix=fix)
    raise rule_error("R_RECOMPUTE_TYPE", path, spec,
                     "not an accepted count form (MindFormers: 'Illegal input list for select_recompute')", fix)


def swap_value(spec: Any, path: str) -> Any:
    """Swap mode: True stays True, False -> [], an int list is kept as layer ids (§3.5).

    Raises:
        ConfigError: R_RECOMPUTE_TYPE for any other form.
    """
    if isinstance(spec, (bool, np.bool_)):
        return True if spec else []
    if isinstance(spec, (list, tuple)) and all(is_int(x) for x in spec):
        return [int(x) for x in spec]
    raise rule_error("R_RECOMPUTE_TYPE", path, spec,
                     "in swap mode (swap_config.swap: true) recompute values are layer-index lists",
                     "write true/false or a list of layer ids")


def check_swap_layers(spec: Any, n: int, path: str) -> None:
    """Swap-mode layer ids must lie in 0..n-1 (R_RECOMPUTE_LEN)."""
    if isinstance(spec, list):
        bad = [x for x in spec if not 0 <= x < n]
        if bad:
            raise rule_error("R_RECOMPUTE_LEN", path, spec, f"layer ids {bad[:10]} are outside 0..{n - 1}",
                             f"use layer ids in 0..{n - 1}")


def patterns_of(spec: Any, key: str, mode: str, path: str) -> list[tuple[str, Any, str]]:
    """(pattern, count spec, YAML path of the spec) of a select-type key (§4.1): a string list
    names the patterns (each covers all layers), a dict maps pattern -> spec, anything else gives
    the key's default patterns with the whole value as spec.

    Raises:
        ConfigError: R_RECOMPUTE_TYPE (null, or a non-string dict key), R_LIMIT_PATTERNS (more
            than :data:`~autotune.config.limits.MAX_PATTERNS` patterns).
    """
    if isinstance(spec, (list, tuple, dict)) and len(spec) > MAX_PATTERNS and (
            isinstance(spec, dict) or is_str_list(spec)):
        raise rule_error("R_LIMIT_PATTERNS", path, f"<{len(spec)} patterns>",
                         f"{len(spec)} patterns is over the limit of {MAX_PATTERNS} per key",
                         "name the ops to recompute, a few patterns")
    if is_str_list(spec):
        return [(p, spec, path) for p in dict.fromkeys(spec)]
    if isinstance(spec, dict):
        out = []
        for k, v in spec.items():
            if not isinstance(k, str):
                raise rule_error("R_RECOMPUTE_TYPE", path, spec, f"pattern keys must be strings, got {k!r}",
                                 "quote the op-name regex, e.g. 'feed_forward\\.mul'")
            out.append((k, v, f"{path}.{k}"))
        return out
    if spec is None:
        raise rule_error("R_RECOMPUTE_TYPE", path, spec, f"{key} must not be null (ValueError in MindFormers)",
                         "omit the key or write false")
    return [(p, spec, path) for p in DEFAULT_PATTERNS.get((key, mode), [])]
