"""Warnings for recompute keys whose meaning differs in MindFormers releases older than the rules
autotune applies (r1.3 and later: ``--mindformers-version`` 1.5 / 1.7 / 1.8).

Configs from MindFormers' history are read by today's rules. Three keys recompute something
else in the releases those configs came from (each checked in the release's own source), so the
replay and the activation memory autotune predicts for them are not what that release runs; the
config is still read, with a warning that names the key, the release and what it does there:

- ``recompute_config.recompute: true`` with ``select_recompute: true``: r1.2 and later
  (``models/utils.py`` ``set_layer_stage_recompute``, then ``LayerSetting``) recompute every
  layer fully, as autotune reads it; r0.8–r1.1 did full recompute only when ``select_recompute``
  was false (r1.1.0 ``models/utils.py`` ``set_layer_stage_recompute``; r0.8 / r1.0 Llama
  ``layer_compute_dtype``), so there they recompute only the selected operators and keep more
  activation memory.
- ``model.model_config.use_select_recompute: true``: the models that read it (Bloom, last shipped in r1.3.0,
  ``models/bloom/bloom.py`` ``set_parallel_configure_for_layer``; WizardCoder of r1.0–r1.4.0-beta1, ``research/
  wizardcoder/wizardcoder.py``) then skip full recompute and recompute selected attention
  operators; autotune reads ``recompute_config`` only.
- ``model.model_config.no_recompute_layers``: ChatGLM2/3 before r1.3 (r1.1.0 ``research/glm32k``
  ``glm2_transformer.py``) skipped full recompute on the listed layers; no release from r1.3 on
  reads the key (autotune ignores it too).
"""

from __future__ import annotations

from typing import Any

from autotune.config.layer_types import Warning_

CODE = "W_OLDER_RELEASE"


def older_release_warnings(data: dict[str, Any]) -> list[Warning_]:
    """The ``W_OLDER_RELEASE`` warnings of a parsed training YAML (module docstring); empty when
    none of the three keys is set. Never raises: a section that is not a mapping is skipped."""
    warns: list[Warning_] = []
    rc = data.get("recompute_config")
    if isinstance(rc, dict) and rc.get("recompute") is True and rc.get("select_recompute") is True:
        warns.append(Warning_(CODE, "recompute_config.select_recompute",
                              "recompute and select_recompute are both true: from r1.2 on every layer is "
                              "fully recomputed, as autotune reads it; MindFormers r0.8-r1.1 recompute only "
                              "the selected operators then (full recompute only when select_recompute is "
                              "false) and keep more activation memory than autotune predicts; on those "
                              "releases set select_recompute: false for full recompute (on r1.2 and later "
                              "nothing needs to change)"))
    model = data.get("model")
    mc = model.get("model_config") if isinstance(model, dict) else None
    if not isinstance(mc, dict):
        return warns
    if mc.get("use_select_recompute") is True:
        warns.append(Warning_(CODE, "model.model_config.use_select_recompute",
                              "true: the models that read this key (Bloom, last shipped in r1.3.0; "
                              "WizardCoder of r1.0-r1.4.0-beta1) skip full recompute and recompute selected attention "
                              "operators instead; autotune reads "
                              "recompute_config only, so its full recompute, replay time and activation "
                              "memory are not what those models run"))
    if mc.get("no_recompute_layers"):
        warns.append(Warning_(CODE, "model.model_config.no_recompute_layers",
                              f"{mc['no_recompute_layers']!r}: ChatGLM2/3 before r1.3 skipped full recompute on "
                              "these layers; no release from r1.3 on reads the key, and autotune ignores it "
                              "too (those layers are recomputed as recompute_config says)"))
    return warns
