"""``search --dry-run`` text: plain YAML-style values (true/false, ``1, 2, 3, 4``, ``not set``), the
free and pinned knobs as indented lines, never Python reprs; ``--format json`` keeps the values."""

from __future__ import annotations

import json

from click.testing import CliRunner

from autotune.commands._dry_text import dry_run_lines, plain
from autotune.commands.tune import search_cmd

EX = "examples/telechat2_115b/train.yaml"

#: The whole text for the shipped TeleChat2 example and the default space, written by hand.
TELECHAT2 = """\
config: examples/telechat2_115b/train.yaml
num_layers: 96
pipeline_stage: 8
micro_batch_num: 8
pipeline_scheduler: 1f1b
pp_interleave_num candidates: 1, 2, 3, 4
pp_interleave_num runnable: 1, 2, 3, 4
recompute kinds (free): full, select, comm
max_abs_offset: not set
free knobs:
  pp_interleave_num: 1, 2, 3, 4
  offset: layers per mini-stage
  recompute kinds: full, select, comm
  recompute granularity: mini_stage
pinned:
  pipeline_scheduler: 1f1b
  recompute_slice_activation: true
  mp_comm_recompute: true
  parallel_optimizer_comm_recompute: false
  micro_batch_num: 8
  select_patterns: MindFormers defaults
  comm_patterns: MindFormers defaults
subproblems: 1
constraints: layers sum to num_layers; first/last mini-stage >= 0 layers, others >= 1; recompute counts \
<= mini-stage layers (first r layers); peak MiB <= 55808.0 per stage; P*V <= num_layers; interleave needs \
micro_batch_num % pipeline_stage == 0; one recompute count per mini-stage
layer_splits: 21501744087785699735641472
space_size_log10: 112.0
layouts_log10_upper: 112.0
enumerable: false
"""


def test_telechat2_dry_run_text_is_plain() -> None:
    r = CliRunner().invoke(search_cmd, [EX, "--dry-run"])
    assert r.exit_code == 0, r.output
    assert r.stdout == TELECHAT2
    for repr_text in ("[", "{", "'", "None", "True", "False"):
        assert repr_text not in r.stdout, repr_text


def test_rich_space_free_knobs_lines() -> None:
    """Both values of a free boolean knob, two schedulers, and pattern sets in brackets with their
    regex backslashes single (a repr doubled them)."""
    r = CliRunner().invoke(search_cmd, [EX, "--dry-run", "--space", "search_spaces/rich.yaml"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    for line in ("max_abs_offset: 4",
                 "  pipeline_scheduler: 1f1b, gpipe",
                 "  recompute_slice_activation: true, false",
                 "  micro_batch_num (global batch fixed): 8",
                 "  select_patterns: [attention_norm\\.norm], [attention_norm\\.norm, ffn_norm\\.norm], "
                 "[attention_norm\\.norm, ffn_norm\\.norm, feed_forward\\.mul]",
                 "pinned:",
                 "  parallel_optimizer_comm_recompute: false",
                 "  comm_patterns: MindFormers defaults"):
        assert line in lines, line


def test_json_keeps_the_values() -> None:
    r = CliRunner().invoke(search_cmd, [EX, "--dry-run", "--format", "json"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert info["max_abs_offset"] is None and info["enumerable"] is False
    assert info["recompute kinds (free)"] == ["full", "select", "comm"]
    assert info["pinned"]["recompute_slice_activation"] is True
    assert '"max_abs_offset": null' in r.stdout


def test_plain_values() -> None:
    assert plain(None) == "none" and plain(None, none="not set") == "not set"
    assert plain(True) == "true" and plain(False) == "false" and plain(0) == "0" and plain(2.5) == "2.5"
    assert plain([]) == "none" and plain([True, False]) == "true, false" and plain((1, 2)) == "1, 2"
    assert plain([["a\\.b"], [], ["c", "d"]]) == "[a\\.b], [], [c, d]"


def test_lines_of_mappings() -> None:
    info = {"max_abs_offset": None, "runnable": [], "free knobs": {"x": [1, 2]}, "pinned": {}, "n": None}
    assert dry_run_lines(info) == ["max_abs_offset: not set", "runnable: none", "free knobs:", "  x: 1, 2",
                                   "pinned: none", "n: none"]
