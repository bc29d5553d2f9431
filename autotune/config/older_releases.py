"""Warnings for recompute keys whose meaning differs in MindFormers releases older than the rules
autotune applies (r1.3 and later: ``--mindformers-version`` 1.5 / 1.7 / 1.8), or in models those
releases shipped (Bloom and WizardCoder, up to r1.5.0-beta1).

Configs from MindFormers' history are read by today's rules. Three keys recompute something
else in the releases (or the models) those configs came from, each checked in the release's own
source, so the replay and the activation memory autotune predicts for them are not what that
release runs; the config is still read, with a warning that names the key, the releases and what
they do with it:

- ``recompute_config.recompute: true`` with any ``select_recompute`` (true, a count list, a
  pattern set): r1.2 and later (``models/utils.py`` ``set_layer_stage_recompute``, then
  ``LayerSetting``) recompute every layer fully, as autotune reads it; in r0.8–r1.1 the Llama
  family, ChatGLM2/3 and TeleChat did full recompute only when ``select_recompute`` was empty
  (r1.1.0 ``models/utils.py`` ``set_layer_stage_recompute``; r0.8 / r1.0 Llama
  ``layer_compute_dtype``), so there they recompute only the selected operators and keep more
  activation memory (GPT-2, GLM, PanguAlpha, T5 and Bloom of those releases recompute fully).
- ``model.model_config.use_select_recompute: true``: Bloom (r0.8 to r1.5.0-beta1,
  ``models/bloom/bloom.py`` ``set_parallel_configure_for_layer``) and WizardCoder (r1.0, r1.1.0,
  r1.4.0-beta1 to r1.5.0-beta1, ``research/wizardcoder/wizardcoder.py``) then skip full recompute
  and recompute selected attention operators; autotune reads ``recompute_config`` only.
- ``model.model_config.no_recompute_layers``: with ``select_recompute`` true, ChatGLM2/3 of r1.0
  and r1.1.0 (``models/glm2/glm2_transformer.py``) recompute no part of the listed layers and
  every other layer fully; no release from r1.2 on acts on the key (autotune ignores it too).
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
    if isinstance(rc, dict) and rc.get("recompute") is True and rc.get("select_recompute"):
        warns.append(Warning_(CODE, "recompute_config.select_recompute",
                              "recompute is true and select_recompute is set: from r1.2 on every layer is "
                              "fully recomputed, as autotune reads it (on r1.2 and later nothing needs to "
                              "change); if this config is from r0.8-r1.1, the Llama family, ChatGLM2/3 and "
                              "TeleChat there recompute only the selected operators (full recompute only "
                              "when select_recompute is empty) and keep more activation memory than "
                              "autotune predicts; on those releases clear select_recompute for full recompute"))
    model = data.get("model")
    mc = model.get("model_config") if isinstance(model, dict) else None
    if not isinstance(mc, dict):
        return warns
    if mc.get("use_select_recompute") is True:
        warns.append(Warning_(CODE, "model.model_config.use_select_recompute",
                              "true: Bloom (r0.8 to r1.5.0-beta1) and WizardCoder (r1.0, r1.1, the r1.4.0 "
                              "and r1.5.0 betas), the models that read this key, skip full recompute and "
                              "recompute selected attention operators instead; autotune reads recompute_config "
                              "only, so its full recompute, replay time and activation memory are not what "
                              "those models run"))
    if mc.get("no_recompute_layers"):
        warns.append(Warning_(CODE, "model.model_config.no_recompute_layers",
                              f"{mc['no_recompute_layers']!r}: with select_recompute true, ChatGLM2/3 of r1.0 and "
                              "r1.1.0 recompute no part of these layers and every other layer fully; no release "
                              "from r1.2 on acts on the key, and autotune ignores it too (the layers are "
                              "recomputed as recompute_config says)"))
    return warns
