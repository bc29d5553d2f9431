"""Import the layer description files of MindFormers' old ``toolkit/pipeline_balance`` (SAPP).

A SAPP layer file (its readme, cost-model reference §3.4) is JSON::

    {"name": "llama2_70b_prof",
     "pre_defined_layer": {"LlamaEmbedding": 0, "LlamaRMSNorm": -1},
     "auto_partition_layer": {"LLamaDecodeLayer": 80},
     "layers_description": [
        {"name": "LlamaEmbedding", "type": "HEAD", "time": 4.58, "nb_layer": 1, "memory_parameter": 1245.8},
        {"name": "LLamaDecodeLayer", "type": "BODY", "time": 1.31, "nb_layer": 80,
         "memory_parameter": 1947.3, "memory_activation": 440.3, "memory_recompute": 16.2, ...},
        {"name": "LlamaRMSNorm", "type": "TAIL", "time": 0.74, "nb_layer": 1, "memory_parameter": 3127.6}]}

Mapping (per micro-batch; SAPP times are taken as ms, memories as MiB):

============================  =============================================================
SAPP key                      profile field
============================  =============================================================
BODY ``memory_parameter``     ``kinds.<name>.static_mib``
``memory_activation``         ``kinds.<name>.act_mib``
``memory_select_rec``         ``kinds.<name>.select.act_mib``
``memory_select_comm``        ``kinds.<name>.comm.act_mib``
``memory_both_comm_select``   ``kinds.<name>.both.act_mib``
``memory_recompute``          ``kinds.<name>.full.act_mib``
``time``                      forward + backward: ``fwd_ms`` = ``forward_time`` if given else
                              time/3, ``bwd_ms`` = ``backward_time`` if given else time - fwd
                              (SAPP's b = 2f rule)
``<cls>_time``                backward time under that recompute: ``extra_ms`` = it - bwd_ms
``<cls>_coef``                relative backward increase: ``extra_ms`` = coef · bwd_ms
(neither, memory given)       SAPP's default coefficients select 0.04, comm 0.125, both 0.165,
                              full 0.5 (marked "old" in SAPP; re-measure)
HEAD / TAIL                   ``head.*`` / ``tail.*`` (``memory_parameter`` -> static_mib,
                              ``memory_activation`` -> act_mib, time split as above)
============================  =============================================================

Each imported field's provenance says whether it was read or derived (and from which key).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.config.training import read_json
from autotune.errors import ConfigError

SAPP_MEMORY_KEYS = {"none": "memory_activation", "select": "memory_select_rec",
                    "comm": "memory_select_comm", "both": "memory_both_comm_select",
                    "full": "memory_recompute"}
SAPP_TIME_KEYS = {"select": "select_rec_time", "comm": "select_comm_time",
                  "both": "both_comm_select_time", "full": "recompute_time"}
SAPP_COEF_KEYS = {"select": "select_rec_coef", "comm": "select_comm_coef",
                  "both": "both_comm_select_coef", "full": "recompute_coef"}
SAPP_DEFAULT_COEF = {"select": 0.04, "comm": 0.125, "both": 0.165, "full": 0.5}


@dataclass(frozen=True)
class SappImport:
    """Result of :func:`load_sapp`.

    Attributes:
        fields: profile field path -> value (ms, MiB).
        how: field path -> how it was obtained (``"memory_parameter"``, ``"time/3"``, …).
        layer_kinds: BODY kinds as runs ``[(name, nb_layer), ...]`` in file order.
        name: the file's ``name``.
    """

    fields: dict[str, float]
    how: dict[str, str]
    layer_kinds: list[tuple[str, int]]
    name: str

    def renamed(self, mapping: dict[str, str]) -> "SappImport":
        """Same import with BODY kinds renamed (e.g. ``{"LLamaDecodeLayer": "dense"}``)."""
        def ren(path: str) -> str:
            parts = path.split(".")
            if parts[0] == "kinds" and parts[1] in mapping:
                parts[1] = mapping[parts[1]]
            return ".".join(parts)
        return SappImport({ren(k): v for k, v in self.fields.items()},
                          {ren(k): v for k, v in self.how.items()},
                          [(mapping.get(k, k), c) for k, c in self.layer_kinds], self.name)


def _num(entry: dict[str, Any], key: str, where: str) -> float | None:
    if key not in entry or entry[key] is None:
        return None
    v = entry[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise ConfigError(f"must be a number >= 0, got {v!r}", field=f"{where}.{key}", value=v,
                          rule="sapp")
    return float(v)


def load_sapp(path: str | Path) -> SappImport:
    """Read a SAPP layer description file (see module docstring for the mapping).

    Raises:
        ConfigError: not JSON, no ``layers_description``, an entry without ``type``/``name``, no
            BODY entry, a negative or non-numeric value (rule ``sapp``, field = the JSON path).
    """
    data = read_json(path, rule="sapp")
    entries = data.get("layers_description") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ConfigError("expected a 'layers_description' list", field="layers_description",
                          value=None, rule="sapp")
    auto = data.get("auto_partition_layer") or {}
    fields: dict[str, float] = {}
    how: dict[str, str] = {}
    kinds: list[tuple[str, int]] = []
    for i, e in enumerate(entries):
        where = f"layers_description[{i}]"
        if not isinstance(e, dict) or "type" not in e or "name" not in e:
            raise ConfigError("each entry needs 'name' and 'type' (HEAD, BODY or TAIL)", field=where,
                              value=e, rule="sapp")
        typ = str(e["type"]).upper()
        name = str(e["name"])
        if typ == "BODY":
            prefix = f"kinds.{name}"
            count = auto.get(name, e.get("nb_layer"))
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise ConfigError(f"BODY {name!r} needs an integer nb_layer", field=f"{where}.nb_layer",
                                  value=count, rule="sapp")
            kinds.append((name, count))
        elif typ in ("HEAD", "TAIL"):
            prefix = typ.lower()
        else:
            raise ConfigError(f"type must be HEAD, BODY or TAIL, got {e['type']!r}", field=f"{where}.type",
                              value=e["type"], rule="sapp")

        def put(f: str, v: float, src: str) -> None:
            fields[f"{prefix}.{f}"] = v
            how[f"{prefix}.{f}"] = src

        mp = _num(e, "memory_parameter", where)
        if mp is not None:
            put("static_mib", mp, "memory_parameter")
        act = _num(e, SAPP_MEMORY_KEYS["none"], where)
        if act is not None:
            put("act_mib", act, "memory_activation")
        total = _num(e, "time", where)
        fwd = _num(e, "forward_time", where)
        bwd = _num(e, "backward_time", where)
        if fwd is None and total is not None:
            fwd = (total - bwd) if bwd is not None else total / 3.0
            put("fwd_ms", fwd, "time - backward_time" if bwd is not None else "time/3 (b = 2f)")
        elif fwd is not None:
            put("fwd_ms", fwd, "forward_time")
        if bwd is None and total is not None and fwd is not None:
            bwd = total - fwd
            put("bwd_ms", bwd, "time - forward" if "forward_time" in e else "2·time/3 (b = 2f)")
        elif bwd is not None:
            put("bwd_ms", bwd, "backward_time")
        if typ != "BODY":
            continue
        for cls in ("select", "comm", "both", "full"):
            mem = _num(e, SAPP_MEMORY_KEYS[cls], where)
            if mem is not None:
                put(f"{cls}.act_mib", mem, SAPP_MEMORY_KEYS[cls])
            t_cls = _num(e, SAPP_TIME_KEYS[cls], where)
            coef = _num(e, SAPP_COEF_KEYS[cls], where)
            if t_cls is not None and bwd is not None:
                put(f"{cls}.extra_ms", max(0.0, t_cls - bwd), f"{SAPP_TIME_KEYS[cls]} - backward")
            elif coef is not None and bwd is not None:
                put(f"{cls}.extra_ms", coef * bwd, f"{SAPP_COEF_KEYS[cls]} × backward")
            elif mem is not None and bwd is not None:
                put(f"{cls}.extra_ms", SAPP_DEFAULT_COEF[cls] * bwd,
                    f"SAPP default coefficient {SAPP_DEFAULT_COEF[cls]} × backward")
    if not kinds:
        raise ConfigError("no BODY entry (decoder layers) in layers_description",
                          field="layers_description", value=None, rule="sapp")
    return SappImport(fields, how, kinds, str(data.get("name", Path(path).stem)))
