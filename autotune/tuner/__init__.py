"""The search layer (the only place Optuna is imported for tuning).

Named ``tuner`` rather than ``search`` so that the subpackage never shadows the public function
``autotune.search`` (importing a subpackage sets an attribute of that name on its parent).
Modules: problem (batched scoring), params (trial <-> layout), heuristic (seeds, local search),
bounds / exact (lower bound, exact oracle), solve, runner (the Optuna study), space, describe.
"""

from autotune.tuner.progress_bar import quiet_tqdm_auto as _quiet_tqdm_auto

_quiet_tqdm_auto()  # before any Optuna import: no "IProgress not found" warning in Jupyter
