"""The search layer (the only place Optuna is imported for tuning).

Named ``tuner`` rather than ``search`` so that the subpackage never shadows the public function
``autotune.search`` (importing a subpackage sets an attribute of that name on its parent).
Modules (imports one way, top to bottom; docs/search.md, "Code layout"): search (the policy),
describe / pareto / runner (dry run, time-memory front, the Optuna study), solve (exact oracle or
propose -> tighten -> improve -> polish -> tighten), heuristic (local searches), moves
(neighbourhoods), fit (recompute fits), bounds / exact (lower bounds, exact oracle), space /
params / storage, inputs / outcome, recompute, problem (batched scoring).
"""

from autotune.tuner.progress_bar import quiet_tqdm_auto as _quiet_tqdm_auto

_quiet_tqdm_auto()  # before any Optuna import: no "IProgress not found" warning in Jupyter
