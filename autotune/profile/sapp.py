"""Import the old MindFormers pipeline balancer's files (SAPP, ``toolkit/pipeline_balance``), read
exactly as the balancer reads them.

Source: mindspore-lab/mindformers, the balancer's last release, commit 959a24518 (2025-02-24,
"support seqpp and heterogeneous model"; the same semantics are in r1.5.0 and up to its deletion in
c5cc799e3, 2025-05-14):

- ``utils/layer.py``: ``generate_layers_list`` (which keys are read), ``Layer.compute_internal_time``
  (``backward_default_ratio = 2  # of forward time``), ``find_recompute_considered``;
- ``utils/recompute.py``: the key names (``JSON_MEMORY_NAME``, ``JSON_TIME_NAME``, ``JSON_COEF_NAME``)
  and ``DEFAULT_COEF``;
- ``utils/config.py``: ``initialize_layer_json`` / ``memory_parser`` / ``time_parser`` (init file ->
  layer file), ``get_stage_const_mem``; ``utils/compute_memory.py``: ``ComputeMemory`` (the memory
  decomposition of an init file);
- ``sapp/sapp_solver.py``: the model the solver optimises (``stage_param_memory``,
  ``stage_active_memory``, ``compute_activation_nums``, ``_max_stage_bound_head_tail``,
  ``micro_batch_time``).

**Layer file** (JSON, ``layers/<model>.json``)::

    {"name": "toy", "stage_const_mem": 1200,
     "layers_description": [
        {"name": "Embedding", "type": "HEAD", "time": 1.0, "nb_layer": 1, "memory_parameter": 3000},
        {"name": "Decoder", "type": "BODY", "time": 2.0, "nb_layer": 14, "memory_parameter": 800,
         "memory_activation": 400, "memory_recompute": 40, "recompute_time ": 5.0},
        {"name": "LMHead", "type": "TAIL", "time": 1.0, "nb_layer": 1, "memory_parameter": 2000}]}

**The balancer's model** (per micro-batch; times as given, memory in MB = MiB here):

- BODY forward ``f = forward_time`` if given, else ``time``. Backward without recompute
  ``b_none = backward_time`` if given and non-zero, else ``(1 + backward_coef) · 2·time``
  (``backward_coef`` default 0). Backward under class c (select, comm, both, full):
  ``b_c = <c>_time`` if given and non-zero, else ``(1 + <c>_coef) · 2·time`` with ``<c>_coef``
  defaulting to select 0.04, comm 0.125, both 0.165, full 0.5. The time keys are
  ``select_rec_time``, ``select_comm_time``, ``both_comm_select_time`` and ``"recompute_time "``
  **with a trailing space** (the balancer never reads ``recompute_time``).
- A class exists for the balancer only when its memory key is > 0 (``memory_activation``,
  ``memory_select_rec``, ``memory_select_comm``, ``memory_both_comm_select``, ``memory_recompute``).
- HEAD / TAIL: forward ``time``, backward ``2·time`` (``forward_time`` is not read for them);
  ``memory_parameter`` is the first / last stage's whole extra memory (``memory_activation`` is not
  read for them). Several HEAD (TAIL) entries add up.
- Stage s of P (1F1B): ``Σ layers·memory_parameter + [s=0]·HEAD + [s=P-1]·TAIL
  + Σ layers·memory_<class>·(P - s) + stage_const_mem`` (``stage_const_mem`` absent = 0).

The older **"total"** semantics (balancer commits fd38c9046 .. 58c59eea8, 2024-10-29 .. 2025-02-13,
``backward_default_ratio = 2 / 3  # of total time``) read ``time`` as forward + backward: forward
``time/3``, backward base ``2·time/3`` (BODY, HEAD and TAIL alike); everything else as above.

**Mapping** (profile fields, :mod:`autotune.profile.merge` paths): ``kinds.<name>.fwd_ms = f``,
``bwd_ms = b_none``, ``static_mib = memory_parameter``, ``act_mib = memory_activation``,
``kinds.<name>.<c>.act_mib = memory_<c>``, ``<c>.extra_ms = b_c - b_none``; ``head.*`` / ``tail.*``
fwd/bwd/static; ``stage_const_mib = stage_const_mem``. So the imported profile gives the balancer's
per-stage memory and per-micro-batch times exactly (tests/profile/test_sapp.py checks both).

**Init file** (YAML, the balancer's ``--init``): ``pipeline_config`` (pipeline_num, num_layer,
offset), ``recompute_config``, ``memory_usage`` (head_memory, tail_memory, body_memories) and
``time_config`` (head, body, tail). It is turned into the layer file the balancer would write
(:func:`init_to_layer_file`: its ``ComputeMemory`` decomposition, its integer truncation, its
head / tail extras that keep the stage constant, so the constant counts twice on the first and
last stage as in the balancer) and then read as above.

Everything the balancer reads differently from what a file seems to say (keys it ignores,
classes it cannot use, negative values clamped to fit the profile schema) is reported in
``SappImport.notes``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autotune.config.training import read_json, read_yaml
from autotune.errors import ConfigError

#: Balancer release whose semantics are the default.
SAPP_RELEASE = "959a24518"
#: ``--sapp-time`` choices: ``forward`` (959a24518 and later: time = forward) and ``total``
#: (fd38c9046 .. 58c59eea8: time = forward + backward).
TIME_SEMANTICS = ("forward", "total")

#: Recompute classes in the balancer's order (``Recompute.TYPE``: NONE, SLCT, COMM, BOTH, FULL).
CLASSES = ("none", "select", "comm", "both", "full")
MEMORY_KEYS = {"none": "memory_activation", "select": "memory_select_rec", "comm": "memory_select_comm",
               "both": "memory_both_comm_select", "full": "memory_recompute"}
#: ``JSON_TIME_NAME``: the full-recompute key really carries a trailing space.
TIME_KEYS = {"none": "backward_time", "select": "select_rec_time", "comm": "select_comm_time",
             "both": "both_comm_select_time", "full": "recompute_time "}
COEF_KEYS = {"none": "backward_coef", "select": "select_rec_coef", "comm": "select_comm_coef",
             "both": "both_comm_select_coef", "full": "recompute_coef"}
#: ``DEFAULT_COEF`` (marked "old" in the balancer): relative backward increase per class.
DEFAULT_COEF = {"none": 0.0, "select": 0.04, "comm": 0.125, "both": 0.165, "full": 0.5}
_KNOWN_KEYS = ({"name", "type", "model_name", "time", "nb_layer", "forward_time", "memory_parameter"}
               | set(MEMORY_KEYS.values()) | set(TIME_KEYS.values()) | set(COEF_KEYS.values()))
#: recompute_config keys of an init file and the class counts they give (``Recompute.YAML_NAME``).
_INIT_REC_KEYS = {"full": "recompute", "select": "select_recompute", "comm": "select_comm_recompute"}


@dataclass(frozen=True)
class SappImport:
    """Result of :func:`load_sapp`.

    Attributes:
        fields: profile field path -> value (ms, MiB).
        how: field path -> how it was obtained (the key read and the rule applied).
        layer_kinds: BODY kinds as runs ``[(name, nb_layer), ...]`` in file order.
        name: the file's ``name``.
        notes: what the balancer reads differently from what the file seems to say (ignored keys,
            classes it cannot use, clamped negatives), one sentence each.
        semantics: ``forward`` or ``total`` (see module docstring).
    """

    fields: dict[str, float]
    how: dict[str, str]
    layer_kinds: list[tuple[str, int]]
    name: str
    notes: list[str] = field(default_factory=list)
    semantics: str = "forward"

    def renamed(self, mapping: dict[str, str]) -> "SappImport":
        """Same import with BODY kinds renamed (e.g. ``{"LLamaDecodeLayer": "dense"}``)."""
        def ren(path: str) -> str:
            parts = path.split(".")
            if parts[0] == "kinds" and parts[1] in mapping:
                parts[1] = mapping[parts[1]]
            return ".".join(parts)
        return SappImport({ren(k): v for k, v in self.fields.items()},
                          {ren(k): v for k, v in self.how.items()},
                          [(mapping.get(k, k), c) for k, c in self.layer_kinds], self.name,
                          list(self.notes), self.semantics)


def _err(msg: str, where: str, value: Any = None) -> ConfigError:
    return ConfigError(msg, field=where, value=value, rule="sapp")


def _num(entry: dict[str, Any], key: str, where: str) -> float | None:
    """The entry's number at ``key`` (None when absent or null); negatives are allowed (the
    balancer's own init decomposition can write them)."""
    v = entry.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
        raise _err(f"must be a number, got {v!r}", f"{where}.{key!r}" if key.endswith(" ") else
                   f"{where}.{key}", v)
    return float(v)


def _time(entry: dict[str, Any], key: str, where: str) -> float | None:
    v = _num(entry, key, where)
    if v is not None and v < 0:
        raise _err(f"a time must be >= 0, got {v!r}", f"{where}.{key}", v)
    return v


def load_sapp(path: str | Path, *, time_semantics: str = "forward") -> SappImport:
    """Read a balancer layer file (``.json``) or init file (``.yaml`` / ``.yml``).

    Args:
        path: the file.
        time_semantics: ``forward`` (default, the balancer's last release) or ``total``.

    Raises:
        ConfigError: unreadable file, a key the balancer needs missing or malformed, an init file
            the balancer cannot decompose (rule ``sapp``, field = the path in the file).
    """
    p = Path(path)
    if p.suffix.lower() in (".yaml", ".yml"):
        layer_file, notes = init_to_layer_file(read_yaml(p), name=p.stem)
        return sapp_from_dict(layer_file, time_semantics=time_semantics, source="init file",
                              notes=notes)
    return sapp_from_dict(read_json(p, rule="sapp"), time_semantics=time_semantics,
                          default_name=p.stem)


@dataclass(frozen=True)
class _TimeRule:
    """How a balancer ``time`` maps to forward / backward ms: ``forward`` semantics f = time,
    b = 2·time; ``total``: f = time/3, b = 2·time/3."""

    forward: bool

    def f(self, t: float) -> float:
        return t if self.forward else t / 3.0

    def b(self, t: float) -> float:
        return 2.0 * t if self.forward else 2.0 * t / 3.0

    @property
    def rule_f(self) -> str:
        return "time" if self.forward else "time/3"

    @property
    def rule_b(self) -> str:
        return "2·time" if self.forward else "2·time/3"


@dataclass
class _Fields:
    """The profile fields read so far (path -> value, path -> how it was derived) and the notes."""

    notes: list[str]
    fields: dict[str, float] = field(default_factory=dict)
    how: dict[str, str] = field(default_factory=dict)

    def put(self, path: str, v: float, src: str) -> None:
        """Set a field; a negative value is clamped to 0 with a note."""
        if v < 0:
            self.notes.append(f"{path}: the file gives {v:g}, clamped to 0 (profiles hold no negative "
                              f"value; the balancer uses {v:g})")
            v = 0.0
        self.fields[path] = v
        self.how[path] = src


def _entry_header(e: Any, where: str, source: str) -> tuple[str, str, int]:
    """(type, name, nb_layer) of one ``layers_description`` entry, checked.

    Raises:
        ConfigError: not a mapping, a required key missing, an unknown type or a bad nb_layer.
    """
    if not isinstance(e, dict):
        raise _err("each entry must be a mapping", where, e)
    for key in ("name", "type", "nb_layer") + (("time",) if source == "layer file" else ()):
        if key not in e or e[key] is None:
            raise _err(f"missing {key!r} (the balancer's generate_layers_list requires it)",
                       f"{where}.{key}")
    typ, name = e["type"], str(e["name"])
    if typ not in ("HEAD", "BODY", "TAIL"):
        raise _err(f"type must be HEAD, BODY or TAIL (upper case, as the balancer's "
                   f"Layer.type_enum), got {typ!r}", f"{where}.type", typ)
    count = e["nb_layer"]
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise _err(f"nb_layer must be an integer >= 0, got {count!r}", f"{where}.nb_layer", count)
    return typ, name, count


def _end_entry(e: dict[str, Any], typ: str, name: str, t: float | None, where: str, rule: _TimeRule,
               ends: dict[str, dict[str, float]], ends_how: dict[str, dict[str, list[str]]],
               notes: list[str]) -> None:
    """Add a HEAD or TAIL entry's times and memory_parameter to its part's sums."""
    part = typ.lower()
    ignored = [k for k in e if k in _KNOWN_KEYS and k not in
               ("name", "type", "model_name", "time", "nb_layer", "memory_parameter")]
    if ignored:
        notes.append(f"{typ} {name!r}: {', '.join(map(repr, ignored))} not read by the "
                     f"balancer for {typ} entries (it uses time and memory_parameter); ignored")
    vals = {"fwd_ms": None if t is None else rule.f(t), "bwd_ms": None if t is None else rule.b(t),
            "static_mib": _num(e, "memory_parameter", where)}
    srcs = {"fwd_ms": rule.rule_f, "bwd_ms": rule.rule_b, "static_mib": "memory_parameter"}
    for f, v in vals.items():
        if v is not None:
            ends[part][f] = ends[part].get(f, 0.0) + v
            ends_how[part].setdefault(f, []).append(f"{name}: {srcs[f]}")


def _body_bwd(e: dict[str, Any], cls: str, t: float | None, where: str, rule: _TimeRule) -> tuple[float | None, str]:
    """Backward ms of a BODY entry with recompute class ``cls`` and how it was derived: the class's
    time key, else (1 + coefficient) × backward (the balancer's default coefficient when absent)."""
    given = _time(e, TIME_KEYS[cls], where)
    if given:  # the balancer treats 0 as absent
        return given, repr(TIME_KEYS[cls]) if cls == "full" else TIME_KEYS[cls]
    if t is None:
        return None, ""
    coef = _num(e, COEF_KEYS[cls], where)
    if coef is None:
        return (1.0 + DEFAULT_COEF[cls]) * rule.b(t), \
            f"(1 + default {DEFAULT_COEF[cls]:g}) × {rule.rule_b}"
    return (1.0 + coef) * rule.b(t), f"(1 + {COEF_KEYS[cls]}) × {rule.rule_b}"


def _body_entry(e: dict[str, Any], name: str, t: float | None, where: str, rule: _TimeRule,
                out: _Fields) -> None:
    """Add a BODY entry's fields (``kinds.<name>.*``): times, memory_parameter, activation per
    recompute class and each class's extra time."""
    notes = out.notes
    prefix = f"kinds.{name}"
    fwd_given = _time(e, "forward_time", where)
    if t is not None or fwd_given is not None:
        out.put(f"{prefix}.fwd_ms", fwd_given if fwd_given is not None else rule.f(t),  # type: ignore[arg-type]
                "forward_time" if fwd_given is not None else rule.rule_f)
    mp = _num(e, "memory_parameter", where)
    if mp is not None:
        out.put(f"{prefix}.static_mib", mp, "memory_parameter")
    b_none, b_how = _body_bwd(e, "none", t, where, rule)
    if b_none is not None:
        out.put(f"{prefix}.bwd_ms", b_none, b_how)
    mems = {c: _num(e, MEMORY_KEYS[c], where) for c in CLASSES}
    if mems["none"] is not None and mems["none"] > 0:
        out.put(f"{prefix}.act_mib", mems["none"], MEMORY_KEYS["none"])
    else:
        notes.append(f"BODY {name!r}: memory_activation is {'absent' if mems['none'] is None else mems['none']}"
                     f": the balancer then cannot leave a layer un-recomputed (a class exists "
                     f"only when its memory key is > 0); autotune can")
    for c in CLASSES[1:]:
        m = mems[c]
        if m is None:
            continue
        if m <= 0:
            notes.append(f"BODY {name!r}: {MEMORY_KEYS[c]} = {m:g}: the balancer cannot use "
                         f"this recompute class (memory key <= 0); not imported")
            continue
        out.put(f"{prefix}.{c}.act_mib", m, MEMORY_KEYS[c])
        b_c, c_how = _body_bwd(e, c, t, where, rule)
        if "default" in c_how:
            notes.append(f"BODY {name!r}: neither {TIME_KEYS[c]!r} nor {COEF_KEYS[c]!r}: the "
                         f"{c} recompute time is the balancer's default coefficient "
                         f"{DEFAULT_COEF[c]:g} (marked 'old' in its code; measure it)")
        if b_c is not None and b_none is not None:
            out.put(f"{prefix}.{c}.extra_ms", b_c - b_none, f"{c_how} - backward")


def sapp_from_dict(data: Any, *, time_semantics: str = "forward", source: str = "layer file",
                   notes: list[str] | None = None, default_name: str = "sapp") -> SappImport:
    """Map a balancer layer file (parsed JSON) to profile fields (see module docstring).

    ``source="init file"`` allows entries without ``time`` (an init file without ``time_config``).

    Raises:
        ConfigError: no ``layers_description``, an entry without the keys the balancer requires
            (``name``, ``type``, ``nb_layer``, ``time``), an unknown type, a duplicate BODY name,
            no BODY entry, a non-numeric value or a negative time (rule ``sapp``).
    """
    if time_semantics not in TIME_SEMANTICS:
        raise ConfigError(f"must be one of {', '.join(TIME_SEMANTICS)}, got {time_semantics!r}",
                          field="--sapp-time", value=time_semantics, rule="choice")
    out = _Fields(list(notes or []))
    entries = data.get("layers_description") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise _err("expected a 'layers_description' list (the balancer's layer file)",
                   "layers_description")
    rule = _TimeRule(time_semantics == "forward")
    kinds: list[tuple[str, int]] = []
    ends: dict[str, dict[str, float]] = {"head": {}, "tail": {}}
    ends_how: dict[str, dict[str, list[str]]] = {"head": {}, "tail": {}}
    for i, e in enumerate(entries):
        where = f"layers_description[{i}]"
        typ, name, count = _entry_header(e, where, source)
        for k in sorted(k for k in e if k not in _KNOWN_KEYS):
            hint = (" (it reads 'recompute_time ' with a trailing space)" if k == "recompute_time"
                    else "")
            out.notes.append(f"{typ} {name!r}: key {k!r} is not read by the balancer{hint}; ignored")
        t = _time(e, "time", where)
        if typ in ("HEAD", "TAIL"):
            _end_entry(e, typ, name, t, where, rule, ends, ends_how, out.notes)
            continue
        if any(k == name for k, _ in kinds):
            raise _err(f"BODY name {name!r} appears twice (the balancer keys its variables by name)",
                       f"{where}.name", name)
        kinds.append((name, count))
        _body_entry(e, name, t, where, rule, out)
    if not kinds:
        raise _err("no BODY entry (decoder layers) in layers_description", "layers_description")
    for part in ("head", "tail"):
        for f, v in ends[part].items():
            out.put(f"{part}.{f}", v, " + ".join(ends_how[part][f]))
    if isinstance(data, dict) and "stage_const_mem" in data and data["stage_const_mem"] is not None:
        out.put("stage_const_mib", _num(data, "stage_const_mem", "<top>"), "stage_const_mem")  # type: ignore[arg-type]
    name = str(data.get("name", default_name)) if isinstance(data, dict) else default_name
    return SappImport(out.fields, out.how, kinds, name, out.notes, time_semantics)


# --------------------------------------------------------------------------------------------
# init file -> layer file (the balancer's initialize_layer_json)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Stage:
    sid: int
    n: int
    rec: dict[str, int]  # class -> layers (none, select, comm, both, full)
    mem: float


def _ints(v: Any, P: int, where: str) -> list[int]:
    if not isinstance(v, list) or len(v) != P or any(isinstance(x, bool) or not isinstance(x, int)
                                                     for x in v):
        raise _err(f"expected a list of {P} integers (one per stage), got {v!r}", where, v)
    return list(v)


def _offsets(offset: Any, P: int) -> list[list[int]]:
    """``process_offset``: 0, a list of P, or a list of lists (one per dry-run round)."""
    where = "pipeline_config.offset"
    if isinstance(offset, int) and not isinstance(offset, bool) and offset == 0:
        return [[0] * P]
    if isinstance(offset, list) and any(isinstance(x, list) for x in offset):
        return [[0] * P if x == 0 and not isinstance(x, bool) else _ints(x, P, where) for x in offset]
    return [_ints(offset, P, where)]


def _rec_counts(value: Any, P: int, where: str) -> list[int]:
    """``process_rec_config`` for one round: false/0 = none, a list of P counts."""
    if value is None or value is False or (value == 0 and not isinstance(value, bool)):
        return [0] * P
    if value is True:
        raise _err("true is not readable by the balancer's init parser (its process_rec_config "
                   "fails on it); give the per-stage counts", where, value)
    return _ints(value, P, where)


def _pipeline_sizes(data: dict[str, Any]) -> tuple[int, int, list[list[int]]]:
    """(pipeline_num P, num_layer N, offsets per dry-run round) of an init file.

    Raises:
        ConfigError: pipeline_config missing, P or N not a positive integer, P < 2, bad offsets.
    """
    pc = data.get("pipeline_config")
    if not isinstance(pc, dict):
        raise _err("missing pipeline_config (pipeline_num, num_layer, offset)", "pipeline_config")
    P, N = pc.get("pipeline_num"), pc.get("num_layer")
    for key, v in (("pipeline_num", P), ("num_layer", N)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise _err(f"must be a positive integer, got {v!r}", f"pipeline_config.{key}", v)
    assert isinstance(P, int) and isinstance(N, int)
    if P < 2:
        raise _err("the decomposition needs pipeline_num >= 2 (first, last and middle stages)",
                   "pipeline_config.pipeline_num", P)
    return P, N, _offsets(pc.get("offset", 0), P)


def _stage_classes(data: dict[str, Any], P: int, lps: int, offsets: list[list[int]]) -> list[list[dict[str, int]]]:
    """Per dry-run round and stage the layers of each recompute class (none, select, comm, both,
    full; a stage with S select and C comm layers, F full, has both = max(min(S-F, C-F), 0)).

    Raises:
        ConfigError: recompute_config not a mapping, a per-round list of the wrong length, or a
            stage recomputing more layers than it holds.
    """
    rounds = len(offsets)
    rc = data.get("recompute_config") or {}
    if not isinstance(rc, dict):
        raise _err("must be a mapping", "recompute_config", rc)
    classes_per_round: list[list[dict[str, int]]] = []
    for r in range(rounds):
        counts = {}
        for cls, key in _INIT_REC_KEYS.items():
            v = rc.get(key)
            where = f"recompute_config.{key}"
            if rounds > 1 and v is not None:
                if not isinstance(v, list) or len(v) != rounds:
                    raise _err(f"with {rounds} dry-run rounds give one entry per round", where, v)
                v, where = v[r], f"{where}[{r}]"
            counts[cls] = _rec_counts(v, P, where)
        per_stage = []
        for s in range(P):
            n = lps + offsets[r][s]
            F, S, C = counts["full"][s], counts["select"][s], counts["comm"][s]
            both = max(min(S - F, C - F), 0)
            sel, com = max(S - F - both, 0), max(C - F - both, 0)
            none = n - F - both - sel - com
            if none < 0 or n < 0:
                raise _err(f"stage {s} of round {r} has {n} layers but {F} full, {S} select and "
                           f"{C} comm recomputed (more than it holds)", "recompute_config", None)
            per_stage.append({"none": none, "select": sel, "comm": com, "both": both, "full": F})
        classes_per_round.append(per_stage)
    return classes_per_round


def _stage_peaks(data: dict[str, Any], P: int, lps: int, offsets: list[list[int]],
                 classes: list[list[dict[str, int]]], notes: list[str]) -> list[_Stage]:
    """Every stage peak of the init file's ``memory_usage`` (body memories of every round, then the
    head and tail memories with the last round's layout).

    Raises:
        ConfigError: memory_usage missing or malformed, a stage id out of range, a non-number.
    """
    rounds = len(offsets)
    mu = data.get("memory_usage")
    if not isinstance(mu, dict) or not isinstance(mu.get("body_memories"), dict):
        raise _err("missing memory_usage (head_memory, tail_memory, body_memories: stage_id, "
                   "memories)", "memory_usage")
    ids, mems = mu["body_memories"].get("stage_id"), mu["body_memories"].get("memories")
    if rounds == 1:
        ids, mems = [ids], [mems]
    if not isinstance(ids, list) or not isinstance(mems, list) or len(ids) != rounds or len(mems) != rounds:
        raise _err(f"stage_id and memories need one list per dry-run round ({rounds})",
                   "memory_usage.body_memories", None)
    stages: list[_Stage] = []
    for r in range(rounds):
        if (not isinstance(ids[r], list) or not isinstance(mems[r], list) or len(ids[r]) != len(mems[r])):
            raise _err("stage_id and memories must be lists of the same length",
                       "memory_usage.body_memories", None)
        for sid, m in zip(ids[r], mems[r]):
            if isinstance(sid, bool) or not isinstance(sid, int) or not 0 <= sid < P:
                raise _err(f"stage ids must be integers in [0, {P - 1}], got {sid!r}",
                           "memory_usage.body_memories.stage_id", sid)
            stages.append(_Stage(sid, lps + offsets[r][sid], classes[r][sid],
                                 _mem(m, "memory_usage.body_memories.memories")))
    last = rounds - 1  # the balancer places head and tail with the last round's layout
    head = _Stage(0, lps + offsets[last][0], classes[last][0],
                  _mem(mu.get("head_memory"), "memory_usage.head_memory"))
    tail = _Stage(P - 1, lps + offsets[last][P - 1], classes[last][P - 1],
                  _mem(mu.get("tail_memory"), "memory_usage.tail_memory"))
    stages += [head, tail]
    if rounds > 1:
        notes.append(f"init file: head_memory / tail_memory are read with the last round's layout "
                     f"(round {last}), as the balancer's memory_parser does")
    return stages


def _decompose(stages: list[_Stage], P: int, notes: list[str]
               ) -> tuple[list[str], float | None, float, dict[str, float], float, float]:
    """``ComputeMemory``: (classes used, stage constant or None, parameter MiB per layer,
    activation MiB per class, head extra, tail extra) from the stage peaks (see
    :func:`init_to_layer_file`).

    Raises:
        ConfigError: too few stage peaks, equal layer counts when the constant is fitted, or a
            singular system.
    """
    used = ["none"] + [c for c in CLASSES[1:] if any(st.rec[c] > 0 for st in stages)]
    total = len(stages)
    if total < 5:
        raise _err(f"{total} stage peaks: the balancer's ComputeMemory needs at least 5 (first, last "
                   f"and 3 others)", "memory_usage.body_memories", total)
    middle = [st for st in stages if st.sid not in (0, P - 1)]
    rows = np.array([[st.n] + [st.rec[c] * (P - st.sid) for c in used] for st in middle], dtype=float)
    y = np.array([st.mem for st in middle], dtype=float)
    with_const = total >= len(used) + 4
    if total < len(used) + 3:
        raise _err(f"{total} stage peaks for {len(used)} activation classes ({', '.join(used)}): the "
                   f"balancer needs {len(used) + 3} (no stage constant) or at least {len(used) + 4}",
                   "memory_usage.body_memories", total)
    if with_const:
        if len({st.n for st in stages}) == 1:
            raise _err("every stage holds the same number of layers: the balancer refuses to fit the "
                       "stage constant (use offsets, as run_pipeline_balance.py --guide does)",
                       "pipeline_config.offset", None)
        rows = np.hstack([np.ones((len(middle), 1)), rows])
    try:
        if with_const and total > len(used) + 4:
            sol = np.linalg.lstsq(rows, y, rcond=None)[0]
            notes.append(f"init file: {total} stage peaks for {rows.shape[1]} unknowns: least "
                         f"squares, as the balancer does")
        else:
            sol = np.linalg.solve(rows, y)
    except np.linalg.LinAlgError as exc:
        raise _err(f"the middle stages' layer and recompute counts do not determine the memory "
                   f"terms ({exc}); choose offsets / recompute as run_pipeline_balance.py --guide "
                   f"does", "memory_usage.body_memories", None) from None
    sol = list(sol)
    const = sol.pop(0) if with_const else None
    par = sol.pop(0)
    act = dict(zip(used, sol))
    # _compute_memory_head_ / _tail_: the mean over every stage with id 0 (P - 1)
    head_mem = float(np.mean([st.mem - sum(st.rec[c] * act[c] * P for c in used) - st.n * par
                              for st in stages if st.sid == 0]))
    tail_mem = float(np.mean([st.mem - sum(st.rec[c] * act[c] for c in used) - st.n * par
                              for st in stages if st.sid == P - 1]))
    return used, const, par, act, head_mem, tail_mem


def init_to_layer_file(data: dict[str, Any], *, name: str = "model") -> tuple[dict[str, Any], list[str]]:
    """The layer file the balancer writes from an init file (``initialize_layer_json``).

    Memory: the stages' peaks are decomposed as ``ComputeMemory`` does. Every stage that is not
    the first or last gives a row ``M = [const] + n·par + Σ_c layers_c·(P - s)·act_c`` over the
    classes used (none always; select, comm, both, full when some stage recomputes them: a stage
    with S select and C comm layers, F full, has both = max(min(S-F, C-F), 0)). With exactly
    ``#classes + 3`` stage peaks the constant is not fitted (it is absorbed; the balancer's
    ``stage_const_mem`` is then 0), with ``#classes + 4`` it is solved, with more it is a least
    squares fit. The head (tail) extra is the first (last) stage's peak minus its layers at P (1)
    in flight, constant included. All values are truncated to integers, as the balancer does.
    Times: ``time_config.head/body/tail`` (a missing one is left out, with a note).

    Returns:
        ``(layer_file, notes)``.

    Raises:
        ConfigError: a missing or malformed section, fewer than 5 stage peaks, a stage count the
            decomposition cannot use, all stages with the same layer count when the constant is
            fitted, or a singular system (rule ``sapp``).
    """
    notes: list[str] = []
    P, N, offsets = _pipeline_sizes(data)
    lps = int(N / P)
    classes = _stage_classes(data, P, lps, offsets)
    stages = _stage_peaks(data, P, lps, offsets, classes, notes)
    used, const, par, act, head_mem, tail_mem = _decompose(stages, P, notes)
    if const is None:
        notes.append("init file: stage peaks for no stage constant: the balancer sets "
                     "stage_const_mem 0 (the constant is absorbed in the other terms)")
    elif const != 0:
        notes.append(f"init file: the head / tail extras keep the stage constant ({int(const)} MiB), "
                     f"which the balancer adds again on every stage: counted twice on the first "
                     f"and last stage, as the balancer does")
    times = data.get("time_config") if isinstance(data.get("time_config"), dict) else {}
    if not times:
        notes.append("init file: no time_config (the balancer would read profiler traces from "
                     "profiling_config.folder_path): times not imported; add time_config "
                     "{head, body, tail} or --from-trace")
    body: dict[str, Any] = {"name": "BODY", "type": "BODY", "nb_layer": N, "memory_parameter": int(par)}
    for c in used:
        body[MEMORY_KEYS[c]] = int(act[c])
    entries = [{"name": "HEAD", "type": "HEAD", "nb_layer": 1, "memory_parameter": int(head_mem)},
               body,
               {"name": "TAIL", "type": "TAIL", "nb_layer": 1, "memory_parameter": int(tail_mem)}]
    for e, key in zip(entries, ("head", "body", "tail")):
        t = times.get(key)
        if t is not None:
            e["time"] = t
        elif times:
            notes.append(f"init file: time_config.{key} missing: its times are not imported")
    return {"name": name, "stage_const_mem": 0 if const is None else int(const),
            "layers_description": entries}, notes


def _mem(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _err(f"must be a number (MB), got {v!r}", where, v)
    return float(v)
