"""Input limits of autotune: every stage does bounded work on any input, or refuses it by a rule.

Each limit is far above any real MindFormers training run and below what would make a command slow
(measured on the project's 2-core machine, ``evaluate`` of a dense model: pipeline_stage 64 ×
pp_interleave_num 4 × 512 micro-batches = 131,072 mini-stage units simulates in 1.9 s of CPU,
262,144 units in 4.7–6.4 s, 1,048,576 units in 13 s and 1 GB). Simulation work grows with the
forward units per stage (V·m·k) faster than linearly (P 4 × V 8 × m 4096 took 6.5 s of CPU,
P 64 × V 4 × m 512 2.0 s, for the same 131,072 units), so both the total and the per-stage units
are bounded; at the limits ``evaluate`` takes at most about 2 s of CPU (measured: P 32 × V 4 ×
m 1024, P 32 × m 4096). The README's "Input limits" table
lists them with their rule codes; a value over a limit is a :class:`~autotune.errors.ConfigError`
naming the field, the value and the rule (exit code 2 on the CLI).

YAML text (every YAML file autotune reads goes through :mod:`autotune.config.safe_yaml`):

- ``MAX_YAML_BYTES``: file size (R_YAML_SIZE). Real MindFormers configs are 2–20 KB.
- ``MAX_YAML_DEPTH``: nesting of mappings and sequences (R_YAML_DEPTH). Real configs nest 4–6 deep;
  MindFormers itself refuses more than 10 nested mappings when it loads a model config
  (``tools/check_rules.py`` ``YAML_MAX_NESTING_DEPTH``, r1.5.0+).
- ``MAX_YAML_NODES``: nodes after alias expansion (R_YAML_ALIAS when aliases cause it, else
  R_YAML_NODES). An "alias bomb" of 9 nested 9-element aliases expands to 4·10^7 nodes from 400
  bytes; real configs have a few hundred nodes.

Training configs (checked by every command, the same rule everywhere):

- ``MAX_NUM_LAYERS`` (layers placed by LayerSetting, MTP included when counted; R_LIMIT_NUM_LAYERS),
- ``MAX_PIPELINE_STAGE`` (R_LIMIT_PIPELINE_STAGE), ``MAX_PP_INTERLEAVE_NUM`` (R_LIMIT_VPP),
- ``MAX_MICRO_BATCH_NUM`` (R_LIMIT_MICRO_BATCH), ``MAX_SEQ_SPLIT_NUM`` (R_LIMIT_SEQ_SPLIT),
- ``MAX_SCHEDULE_UNITS``: pipeline_stage × pp_interleave_num × micro_batch_num × seq_split_num, the
  forward units the event simulation runs (R_LIMIT_SCHEDULE), and ``MAX_STAGE_UNITS``:
  pp_interleave_num × micro_batch_num × seq_split_num, those of one stage (R_LIMIT_SCHEDULE). Issue
  17's largest case (pipeline_stage 64, pp_interleave_num 4, 512 micro-batches) is 131,072 units,
  2,048 per stage.
- ``MAX_INT``: any integer the config reader takes (a model dimension, a parallel degree; R_RANGE).

Select/comm patterns: ``MAX_PATTERNS`` per key and ``MAX_PATTERN_CHARS`` per pattern
(R_LIMIT_PATTERNS), ``REGEX_TIMEOUT_S`` per match and ``PATTERN_BUDGET_S`` per config (see
:mod:`autotune.config.patterns`).
"""

from __future__ import annotations

MAX_YAML_BYTES = 1024 * 1024
MAX_YAML_DEPTH = 32
MAX_YAML_NODES = 100_000

MAX_NUM_LAYERS = 4096
MAX_PIPELINE_STAGE = 256
MAX_PP_INTERLEAVE_NUM = 16
MAX_MICRO_BATCH_NUM = 4096
MAX_SEQ_SPLIT_NUM = 64
MAX_SCHEDULE_UNITS = 131_072
MAX_STAGE_UNITS = 4096
MAX_INT = 2**31 - 1

MAX_PATTERNS = 256
MAX_PATTERN_CHARS = 4096
REGEX_TIMEOUT_S = 1.0
PATTERN_BUDGET_S = 2.0

#: (what, value, rule code) for the README table and the error messages.
TABLE: list[tuple[str, str, str]] = [
    ("YAML file size", f"{MAX_YAML_BYTES} bytes (1 MiB)", "R_YAML_SIZE"),
    ("YAML nesting depth (mappings + sequences)", str(MAX_YAML_DEPTH), "R_YAML_DEPTH"),
    ("YAML nodes after alias expansion", f"{MAX_YAML_NODES:,}", "R_YAML_ALIAS / R_YAML_NODES"),
    ("num_layers (+ MTP layers counted in the split)", str(MAX_NUM_LAYERS), "R_LIMIT_NUM_LAYERS"),
    ("pipeline_stage", str(MAX_PIPELINE_STAGE), "R_LIMIT_PIPELINE_STAGE"),
    ("pp_interleave_num", str(MAX_PP_INTERLEAVE_NUM), "R_LIMIT_VPP"),
    ("micro_batch_num", str(MAX_MICRO_BATCH_NUM), "R_LIMIT_MICRO_BATCH"),
    ("seq_split_num", str(MAX_SEQ_SPLIT_NUM), "R_LIMIT_SEQ_SPLIT"),
    ("pipeline_stage × pp_interleave_num × micro_batch_num × seq_split_num", f"{MAX_SCHEDULE_UNITS:,}",
     "R_LIMIT_SCHEDULE"),
    ("pp_interleave_num × micro_batch_num × seq_split_num (per stage)", f"{MAX_STAGE_UNITS:,}", "R_LIMIT_SCHEDULE"),
    ("any other integer read from the config (model dimensions included)", f"{MAX_INT:,} (int32)", "R_RANGE"),
    ("select/comm patterns per key; characters per pattern", f"{MAX_PATTERNS}; {MAX_PATTERN_CHARS}",
     "R_LIMIT_PATTERNS"),
    ("regex time per pattern match (a select / comm / exclude pattern against a cell or op name, or against "
     "another pattern); per config (one budget per command, each answer remembered)",
     f"{REGEX_TIMEOUT_S:g} s (timeout = no match, as MindFormers r1.6+); {PATTERN_BUDGET_S:g} s",
     "W_PATTERN_TIMEOUT / R_PATTERN_BUDGET"),
]
