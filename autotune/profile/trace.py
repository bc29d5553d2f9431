"""Profiler timelines (Chrome trace JSON) -> forward/backward time per layer kind per micro-batch.

Reads Chrome-trace-format files: MindSpore profiler's ``trace_view.json`` and PyTorch profiler
exports (``{"traceEvents": [...]}`` or a bare list). Only complete events (``"ph": "X"``, with
``ts`` and ``dur`` in microseconds) are used.

**Classification** (regular expressions on the event name, overridable with a layer map):

- ``layer``: a decoder layer and its index, e.g. ``model.layers.3.self_attn`` (PyTorch / HF),
  ``layers-CellList/3-LLamaDecodeLayer`` (MindSpore scope names), ``DecoderLayer_3``;
- ``head`` (embedding), ``tail`` (final norm, LM head, loss): names not matching ``layer``;
- direction: ``backward`` (``Gradients/`` scopes, ``backward``/``Backward``, ``grad``),
  ``recompute`` (replayed forward ops inside a backward), else forward;
- ``step``: step markers (``ProfilerStep#7``, ``Step 7``) delimit steps.

**Measurement.** In each file, only the busiest thread (the compute stream) is used, so
communication overlapping on other streams is not added. Consecutive events of the same
(part, layer, direction) form one *occurrence* = that part's work for one micro-batch (a run also
ends when its first event name comes round again: the next micro-batch of the same part); its
time is the union of its event intervals. Occurrences in the first ``warmup_steps`` steps are dropped
(needs step markers; without them every occurrence is kept and a warning says so). Per layer and
direction the occurrences are averaged after rejecting outliers (``|x - median| > k · 1.4826 ·
MAD``, k = 3.5); per kind the per-layer means are averaged the same way. The spread is reported as
the coefficient of variation of the kept occurrences and the min/max per-layer mean.

Times are ms (``ts``/``dur`` µs / 1000).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from autotune.config.training import read_json, read_yaml
from autotune.errors import ConfigError

DEFAULT_PATTERNS: dict[str, str] = {
    "layer": r"layers(?:-CellList)?[./](\d+)(?:[./\-]|$)|DecoderLayer_(\d+)",
    "backward": r"(?:^|/)Gradients/|[Bb]ackward|(?:^|[/._])grad(?:$|[/._])|Grad(?:$|[/._])",
    "recompute": r"[Rr]ecompute",
    "head": r"embed|tok_embeddings|\bwte\b",
    "tail": r"lm_head|output_layer|norm_out|final_norm|model\.norm\b|\bloss\b|CrossEntropy",
    "step": r"^ProfilerStep#\d+$|^[Ss]tep[ _#]?\d+$",
}
OUTLIER_K = 3.5
DIRECTIONS = ("fwd", "bwd", "rec")


@dataclass(frozen=True)
class LayerMap:
    """Name patterns and the kind of every decoder layer.

    Attributes:
        patterns: regex per role (keys of :data:`DEFAULT_PATTERNS`).
        layer_kinds: runs ``[(kind, count), ...]`` over decoder layer indices 0..N-1; None = every
            layer is ``dense``.
    """

    patterns: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_PATTERNS))
    layer_kinds: list[tuple[str, int]] | None = None

    def kind_of(self, index: int) -> str:
        if self.layer_kinds is None:
            return "dense"
        left = index
        for kind, count in self.layer_kinds:
            if left < count:
                return kind
            left -= count
        return self.layer_kinds[-1][0]


def load_layer_map(path: str | Path | None) -> LayerMap:
    """Read a layer-map YAML: ``patterns: {layer: REGEX, ...}`` (any subset) and
    ``layer_kinds: [[dense, 3], [moe, 58]]``. None gives the defaults.

    Raises:
        ConfigError: unreadable file, unknown pattern role, a regex that does not compile.
    """
    if path is None:
        return LayerMap()
    data = read_yaml(path)
    pats = dict(DEFAULT_PATTERNS)
    for role, rx in (data.get("patterns") or {}).items():
        if role not in DEFAULT_PATTERNS:
            raise ConfigError(f"unknown pattern role {role!r}; roles: {', '.join(DEFAULT_PATTERNS)}",
                              field=f"patterns.{role}", value=rx, rule="layer_map")
        try:
            re.compile(str(rx))
        except re.error as exc:
            raise ConfigError(f"not a regular expression: {exc}", field=f"patterns.{role}", value=rx,
                              rule="layer_map") from None
        pats[role] = str(rx)
    lk = data.get("layer_kinds")
    runs = None
    if lk is not None:
        try:
            runs = [(str(k), int(c)) for k, c in lk]
        except (TypeError, ValueError):
            raise ConfigError("layer_kinds must be a list of [kind, count] pairs", field="layer_kinds",
                              value=lk, rule="layer_map") from None
    return LayerMap(pats, runs)


def read_trace_events(path: str | Path) -> list[dict[str, Any]]:
    """Complete events (``ph == "X"``) of one Chrome-trace JSON file.

    Raises:
        ConfigError: missing file, not JSON, or no events list.
    """
    data = read_json(path, rule="trace", what="a Chrome trace JSON file")
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ConfigError("expected a list of events or {'traceEvents': [...]}", field=str(path),
                          value=None, rule="trace")
    out = []
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e and "dur" in e and "name" in e:
            try:
                out.append({"name": str(e["name"]), "ts": float(e["ts"]), "dur": float(e["dur"]),
                            "tid": (e.get("pid"), e.get("tid"))})
            except (TypeError, ValueError):
                continue
    return out


def _classify(name: str, rx: dict[str, re.Pattern[str]]) -> tuple[str, int, str] | None:
    m = rx["layer"].search(name)
    if m:
        idx = next(int(g) for g in m.groups() if g is not None) if m.groups() else 0
        part = "layer"
    elif rx["head"].search(name):
        part, idx = "head", 0
    elif rx["tail"].search(name):
        part, idx = "tail", 0
    else:
        return None
    if rx["recompute"].search(name):
        d = "rec"
    elif rx["backward"].search(name):
        d = "bwd"
    else:
        d = "fwd"
    return part, idx, d


def _union_ms(iv: list[tuple[float, float]]) -> float:
    iv = sorted(iv)
    total, cur_s, cur_e = 0.0, iv[0][0], iv[0][1]
    for s, e in iv[1:]:
        if s > cur_e:
            total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return (total + cur_e - cur_s) / 1000.0


def robust_mean(x: Sequence[float], k: float = OUTLIER_K) -> tuple[float, np.ndarray]:
    """Mean after dropping outliers ``|x - median| > k · 1.4826 · MAD``; returns (mean, kept)."""
    a = np.asarray(x, dtype=float)
    med = float(np.median(a))
    mad = float(np.median(np.abs(a - med)))
    tol = k * 1.4826 * mad if mad > 0 else 1e-9 * max(abs(med), 1e-12)
    kept = a[np.abs(a - med) <= tol]
    return float(kept.mean()), kept


@dataclass(frozen=True)
class PartTiming:
    """Measured time of one part (a kind, the head or the tail) in one direction, per micro-batch.

    Attributes: mean_ms, samples (kept occurrences), dropped (outliers), cv (std/mean of kept
    occurrences), min_layer_ms / max_layer_ms (per-layer means, kinds only), layers (how many).
    """

    mean_ms: float
    samples: int
    dropped: int
    cv: float
    min_layer_ms: float
    max_layer_ms: float
    layers: int


@dataclass(frozen=True)
class TraceMeasurement:
    """Result of :func:`measure_traces`.

    Attributes:
        timings: {(part, direction): PartTiming}; part = a kind name, ``head`` or ``tail``;
            direction = ``fwd``, ``bwd`` or ``rec`` (replayed forward inside the backward).
        per_layer_ms: {(layer index, direction): robust mean ms}.
        files: the trace files; steps_used: steps kept per file; warnings: human-readable notes.
    """

    timings: dict[tuple[str, str], PartTiming]
    per_layer_ms: dict[tuple[int, str], float]
    files: list[str]
    steps_used: list[int]
    warnings: list[str]

    def fields(self) -> dict[str, float]:
        """Profile field paths measured: ``kinds.<k>.fwd_ms`` / ``bwd_ms``, ``head.*``, ``tail.*``.

        The replay time (``rec``) is reported but not written: which recompute class produced it
        depends on the traced config.
        """
        out: dict[str, float] = {}
        for (part, d), t in self.timings.items():
            if d == "rec":
                continue
            key = "fwd_ms" if d == "fwd" else "bwd_ms"
            prefix = part if part in ("head", "tail") else f"kinds.{part}"
            out[f"{prefix}.{key}"] = t.mean_ms
        return out

    def table(self) -> str:
        """Text table: part, direction, mean ms, samples, outliers dropped, CV, per-layer range."""
        lines = [f"trace: {len(self.files)} file(s), steps used per file {self.steps_used}",
                 f"{'part':<10} {'dir':<4} {'mean ms':>10} {'n':>5} {'out':>4} {'cv %':>6} "
                 f"{'layer min..max ms':>20}"]
        for (part, d), t in sorted(self.timings.items()):
            rng = f"{t.min_layer_ms:.4g}..{t.max_layer_ms:.4g}" if t.layers > 1 else "-"
            lines.append(f"{part:<10} {d:<4} {t.mean_ms:>10.4g} {t.samples:>5} {t.dropped:>4} "
                         f"{100 * t.cv:>6.2f} {rng:>20}")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _occurrences(events: list[dict[str, Any]], rx: dict[str, re.Pattern[str]],
                 warmup_steps: int) -> tuple[dict[tuple[str, int, str], list[float]], int, list[str]]:
    warnings: list[str] = []
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if rx["step"].search(e["name"]))
    work = [e for e in events if not rx["step"].search(e["name"])]
    cls = [(e, _classify(e["name"], rx)) for e in work]
    cls = [(e, c) for e, c in cls if c is not None]
    if not cls:
        return {}, 0, ["no event matched the layer/head/tail patterns"]
    busy: dict[Any, float] = {}
    for e, _ in cls:
        busy[e["tid"]] = busy.get(e["tid"], 0.0) + e["dur"]
    tid = max(busy, key=lambda t: busy[t])
    if len(busy) > 1:
        warnings.append(f"{len(busy)} threads carry matched events; using the busiest {tid} "
                        f"(the compute stream)")
    cls = sorted(((e, c) for e, c in cls if e["tid"] == tid), key=lambda t: t[0]["ts"])
    if steps:
        cut = steps[warmup_steps][0] if warmup_steps < len(steps) else float("inf")
        used = max(0, len(steps) - warmup_steps)
    else:
        cut = float("-inf")
        used = 1
        if warmup_steps:
            warnings.append("no step markers found: warm-up steps cannot be dropped, all "
                            "occurrences are used")
    occ: dict[tuple[str, int, str], list[float]] = {}
    run_key, run_iv, run_start, run_first = None, [], 0.0, None
    for e, c in cls + [(None, None)]:
        # a run ends at another part/direction, or when its first kernel comes round again
        # (the next micro-batch of the same part, e.g. back-to-back warm-up forwards)
        if c != run_key or (e is not None and e["name"] == run_first):
            if run_key is not None and run_start >= cut:
                occ.setdefault(run_key, []).append(_union_ms(run_iv))
            run_key, run_iv = c, []
            if e is not None:
                run_start, run_first = e["ts"], e["name"]
        if e is not None:
            run_iv.append((e["ts"], e["ts"] + e["dur"]))
    return occ, used, warnings


def measure_traces(paths: Sequence[str | Path], *, layer_map: LayerMap | None = None,
                   warmup_steps: int = 1) -> TraceMeasurement:
    """Measure per-micro-batch times per layer kind, head and tail from trace files.

    Args:
        paths: Chrome-trace JSON files (e.g. one per pipeline stage).
        layer_map: patterns and layer kinds (default :class:`LayerMap`).
        warmup_steps: steps to drop at the start of every file (needs step markers).

    Raises:
        ConfigError: unreadable files, or nothing matched the patterns in any file (rule ``trace``).
    """
    lm = layer_map or LayerMap()
    rx = {k: re.compile(v) for k, v in lm.patterns.items()}
    all_occ: dict[tuple[str, int, str], list[float]] = {}
    steps_used, warnings = [], []
    for p in paths:
        occ, used, w = _occurrences(read_trace_events(p), rx, warmup_steps)
        steps_used.append(used)
        warnings += [f"{Path(p).name}: {x}" for x in w]
        for k, v in occ.items():
            all_occ.setdefault(k, []).extend(v)
    if not all_occ:
        raise ConfigError("no decoder-layer, head or tail events found; check the name patterns "
                          "(--layer-map) against the trace's event names", field="--from-trace",
                          value=[str(p) for p in paths], rule="trace")
    per_layer: dict[tuple[int, str], float] = {}
    groups: dict[tuple[str, str], list[tuple[float, np.ndarray, int]]] = {}
    for (part, idx, d), vals in sorted(all_occ.items()):
        mean, kept = robust_mean(vals)
        if part == "layer":
            per_layer[(idx, d)] = mean
            name = lm.kind_of(idx)
        else:
            name = part
        groups.setdefault((name, d), []).append((mean, kept, len(vals) - kept.size))
    timings: dict[tuple[str, str], PartTiming] = {}
    for key, items in groups.items():
        means = [m for m, _, _ in items]
        mean, kept_layers = robust_mean(means)
        allkept = np.concatenate([k for _, k, _ in items])
        cv = float(allkept.std() / allkept.mean()) if allkept.size > 1 and allkept.mean() > 0 else 0.0
        timings[key] = PartTiming(mean, int(allkept.size), int(sum(d for _, _, d in items)),
                                  cv, float(min(means)), float(max(means)), len(items))
        if kept_layers.size < len(means):
            warnings.append(f"{key[0]} {key[1]}: {len(means) - kept_layers.size} layer(s) with outlying "
                            f"mean time left out of the kind's average")
    return TraceMeasurement(timings, per_layer, [str(p) for p in paths], steps_used, warnings)


def write_chrome_trace(path: str | Path, events: Iterable[Mapping[str, Any]]) -> None:
    """Write events as ``{"traceEvents": [...]}`` (used by tests and examples)."""
    Path(path).write_text(json.dumps({"traceEvents": list(events)}), encoding="utf-8")
