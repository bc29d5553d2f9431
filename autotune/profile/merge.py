"""Merge measured profile fields into a base (usually analytic) profile, with per-field provenance.

A measurement rarely covers a whole profile: a profiler trace gives times, a dry-run fit gives
memory, a SAPP layer file gives what its author filled in. Measured values are given as a flat
mapping of **field paths** to numbers::

    kinds.<kind>.fwd_ms | bwd_ms | act_mib | static_mib | workspace_mib
    kinds.<kind>.<full|select|comm|both>.act_mib | extra_ms | workspace_mib
    head.<field> | tail.<field>            (fwd_ms, bwd_ms, act_mib, static_mib, workspace_mib)
    stage_const_mib | p2p_ms

Later sources win over earlier ones; every leaf field of the result is attributed to the source
that set it (``"analytic"``, ``"trace:<files>"``, ``"dryrun:<files>"``, ``"sapp:<file>"``, or
``"default"`` for a schema default when there is no base). The attribution is written into the
profile's ``sources`` mapping under ``field.<path>`` keys, so it travels with the YAML.

Negative fitted values (noise on a near-zero quantity) are clamped to 0; the clamp is recorded in
the provenance string.

:func:`import_warnings` lists every field a measured import left out (with the value it took and
where that value came from: the base profile, or a schema default) and every clamp, one line per
part; ``autotune profile`` prints them, stores them in the profile's ``warnings`` and, with
``--strict``, refuses to write a profile that has any.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from autotune.errors import ConfigError
from autotune.profile.schema import ModelProfile, profile_from_dict

KIND_FIELDS = ("fwd_ms", "bwd_ms", "act_mib", "static_mib", "workspace_mib")
OPTION_NAMES = ("full", "select", "comm", "both")
OPTION_FIELDS = ("act_mib", "extra_ms", "workspace_mib")
END_FIELDS = ("fwd_ms", "bwd_ms", "act_mib", "static_mib", "workspace_mib")
TOP_FIELDS = ("stage_const_mib", "p2p_ms")
PROVENANCE_PREFIX = "field."


def leaf_fields(profile: ModelProfile) -> dict[str, float]:
    """Every numeric leaf of a profile by field path (see module docstring)."""
    out: dict[str, float] = {}
    for k, kind in profile.kinds.items():
        for f in KIND_FIELDS:
            out[f"kinds.{k}.{f}"] = float(getattr(kind, f))
        for o in OPTION_NAMES:
            opt = getattr(kind, o)
            if opt is not None:
                for f in OPTION_FIELDS:
                    out[f"kinds.{k}.{o}.{f}"] = float(getattr(opt, f))
    for part in ("head", "tail"):
        for f in END_FIELDS:
            out[f"{part}.{f}"] = float(getattr(getattr(profile, part), f))
    for f in TOP_FIELDS:
        out[f] = float(getattr(profile, f))
    return out


def check_field_path(path: str) -> list[str]:
    """The parts of a profile field path (``kinds.dense.fwd_ms``, ``head.static_mib``, ...).

    Raises:
        ConfigError: not a profile field path (rule ``profile_field``, field = the path).
    """
    parts = path.split(".")
    ok = ((len(parts) == 1 and parts[0] in TOP_FIELDS)
          or (len(parts) == 2 and parts[0] in ("head", "tail") and parts[1] in END_FIELDS)
          or (len(parts) == 3 and parts[0] == "kinds" and parts[2] in KIND_FIELDS)
          or (len(parts) == 4 and parts[0] == "kinds" and parts[2] in OPTION_NAMES
              and parts[3] in OPTION_FIELDS))
    if not ok:
        raise ConfigError(f"not a profile field path: {path!r} (e.g. kinds.dense.fwd_ms, "
                          f"kinds.dense.select.act_mib, head.static_mib, stage_const_mib)",
                          field=path, value=None, rule="profile_field")
    return parts


def merge_profile(base: ModelProfile | None, measured: Sequence[tuple[Mapping[str, float], str]], *,
                  layer_kinds: Sequence[tuple[str, int]] | None = None, name: str | None = None,
                  base_label: str = "analytic") -> tuple[ModelProfile, dict[str, str]]:
    """Overlay measured fields on ``base``; return the merged profile and its provenance.

    Args:
        base: the profile supplying every field not measured (None: schema defaults / zeros).
        measured: ``[(fields, source_label), ...]``; fields map paths to values (MiB, ms).
        layer_kinds: decoder layer kinds as runs (default: the base's; required without base).
        name: name of the merged profile (default: ``measured+<base name>``).
        base_label: provenance label of the base's fields.

    Returns:
        ``(profile, provenance)`` where provenance maps every leaf path to its source label; the
        same mapping is stored in ``profile.sources`` under ``field.<path>``.

    Raises:
        ConfigError: an unknown field path, no layer_kinds without a base, or a merged profile that
            violates the schema.
    """
    if base is None and layer_kinds is None:
        raise ConfigError("without a base profile, layer_kinds must be given (e.g. [[dense, 32]])",
                          field="layer_kinds", value=None, rule="profile_layers")
    if base is not None:
        data: dict[str, Any] = base.model_dump(mode="python", exclude_none=True)
        prov = {p: base_label for p in leaf_fields(base)}
    else:
        data = {"kinds": {}, "layer_kinds": []}
        prov = {}
    if layer_kinds is not None:
        data["layer_kinds"] = [(str(k), int(c)) for k, c in layer_kinds]
        for k, _ in layer_kinds:
            if k not in data["kinds"]:
                data["kinds"][k] = {f: 0.0 for f in KIND_FIELDS}
                for f in KIND_FIELDS:
                    prov[f"kinds.{k}.{f}"] = "default"
    for fields, label in measured:
        for path, value in fields.items():
            parts = check_field_path(path)
            val = float(value)
            tag = label
            if val < 0:
                tag = f"{label} (clamped from {val:.4g})"
                val = 0.0
            if parts[0] == "kinds":
                kind = data["kinds"].setdefault(parts[1], {f: 0.0 for f in KIND_FIELDS})
                if parts[1] not in [k for k, _ in data["layer_kinds"]]:
                    raise ConfigError(f"measured kind {parts[1]!r} is not among the layer kinds "
                                      f"{[k for k, _ in data['layer_kinds']]}", field=path,
                                      value=parts[1], rule="profile_layers")
                for f in KIND_FIELDS:
                    if f not in kind:
                        kind[f] = 0.0
                        prov.setdefault(f"kinds.{parts[1]}.{f}", "default")
                if len(parts) == 3:
                    kind[parts[2]] = val
                else:
                    opt = kind.get(parts[2])
                    if opt is None:  # create the option from the effective (fallback) one
                        tmp = profile_from_dict({"kinds": {parts[1]: kind},
                                                 "layer_kinds": [(parts[1], 1)]}).kinds[parts[1]]
                        eff = tmp.option(parts[2])
                        opt = {f: float(getattr(eff, f)) for f in OPTION_FIELDS}
                        for f in OPTION_FIELDS:  # LayerKind.option fallback values
                            prov[f"kinds.{parts[1]}.{parts[2]}.{f}"] = "default"
                        kind[parts[2]] = opt
                    opt[parts[3]] = val
            elif parts[0] in ("head", "tail"):
                data.setdefault(parts[0], {})[parts[1]] = val
            else:
                data[parts[0]] = val
            prov[path] = tag
    data["name"] = name or (f"measured+{base.name}" if base is not None else "measured")
    sources = {k: v for k, v in dict(data.get("sources", {})).items()
               if not k.startswith(PROVENANCE_PREFIX)}
    prof = profile_from_dict({**data, "sources": sources}, source="merged profile")
    full = leaf_fields(prof)
    prov = {p: prov.get(p, "default") for p in full}
    sources.update({PROVENANCE_PREFIX + p: s for p, s in prov.items()})
    return prof.model_copy(update={"sources": sources}), prov


def _unit(f: str) -> str:
    return "ms" if f.endswith("_ms") else "MiB"


def import_warnings(provenance: Mapping[str, str], profile: ModelProfile, *, measured: Sequence[str],
                    base_label: str = "analytic", base_desc: str | None = None) -> list[str]:
    """One line per profile part (``kinds.<k>``, ``kinds.<k>.<option>``, ``head``, ``tail``, top
    level) naming the fields no measured source set, their values and where they came from, plus one
    line per clamped value.

    Args:
        provenance: field path -> source label, as returned by :func:`merge_profile`.
        profile: the merged profile (for the values).
        measured: the measured source labels (e.g. ``["sapp:layers.json"]``), for the text.
        base_label: provenance label of the base profile's fields.
        base_desc: how to name the base in the text (default: ``the <base_label> profile``).

    Returns:
        Lines such as ``"kinds.dense: workspace_mib 386 MiB not in sapp:l.json; taken from the
        analytic profile for ascend-910b"``; empty when every field was measured.
    """
    vals = leaf_fields(profile)
    groups: dict[tuple[str, str], list[str]] = {}
    clamps: list[str] = []
    for path, src in provenance.items():
        if "(clamped from" in src:
            clamps.append(f"{path}: {src.split(' (clamped from ')[1].rstrip(')')} from {src.split(' (')[0]} "
                          f"clamped to 0 (a profile holds no negative value)")
            continue
        if src not in (base_label, "default"):
            continue
        parent, _, leaf = path.rpartition(".")
        groups.setdefault((parent, src), []).append(
            f"{leaf} {vals.get(path, float('nan')):.4g} {_unit(leaf)}")
    what = ", ".join(measured) if measured else "the measured sources"
    base = base_desc or f"the {base_label} profile"
    lines = []
    for (parent, src), items in groups.items():
        if src == base_label:
            origin = f"taken from {base}"
        elif parent.count(".") == 2:  # an option block created from its fallback (LayerKind.option)
            origin = "the option's fallback (missing select/comm: no effect; full: keeps everything)"
        else:
            origin = "0, no base profile (give CONFIG to take it from the analytic profile)"
        lines.append(f"{parent + ': ' if parent else ''}{', '.join(items)} not in {what}; {origin}")
    return lines + clamps


def left_out_fields(provenance: Mapping[str, str], *, base_label: str = "analytic") -> list[str]:
    """Field paths no measured source set (base or default) or that were clamped, sorted."""
    return sorted(p for p, s in provenance.items() if s in (base_label, "default") or "(clamped from" in s)


def provenance_table(provenance: Mapping[str, str], profile: ModelProfile) -> str:
    """Text table: field, value, source (one line per leaf field)."""
    vals = leaf_fields(profile)
    width = max((len(p) for p in provenance), default=10)
    lines = [f"{'field':<{width}} {'value':>12}  source"]
    for p, s in provenance.items():
        lines.append(f"{p:<{width}} {vals.get(p, float('nan')):>12.4g}  {s}")
    return "\n".join(lines)
