"""Shared fixtures: paths to the project root, the shipped examples and the reference cases.

`shared` is `tests/data`, whose `cases/` folder holds verbatim copies of the steering repo's
`shared/cases/` (a user's clone has no `../shared`).

The suite runs in two processes (pyproject.toml: ``addopts = "-n 2 --dist loadgroup"``, pytest-xdist).
:data:`MACHINE_LOAD` keeps in one process, one after another, the tests that load every core on
purpose (busy-loop "other tenants"), the tests that assert wall-clock limits, and the sweep tests
that time a kill against a running trial (tests/sweep/test_distributed.py, test_failures.py): a
wall-clock limit or a kill is then never timed while the busy loops run. The slow tests start first
(:func:`pytest_collection_modifyitems`), so that no long test starts last and keeps one process
busy while the other has finished."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.tuner.threads import one_blas_thread

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT / "tests" / "data"
EXAMPLES = ROOT / "examples"

# One xdist group (``--dist loadgroup``): these tests run in one process, never two at once.
MACHINE_LOAD = pytest.mark.xdist_group("machine_load")


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own hook (xdist.remote.WorkerInteractor)
def pytest_collection_modifyitems(config, items):
    """The tests marked ``slow`` first (a stable sort: their order, and the others', is kept).
    Each process takes the next test when it has finished one, so the long ones, started first,
    end before the short ones that fill the gaps. Then :func:`_group_suffixes`."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    _group_suffixes(config, items)


def _group_suffixes(config, items) -> None:
    """``--dist loadgroup`` sends the tests of one ``xdist_group`` to one process by a suffix
    ``@name`` on their ids, which each pytest-xdist worker adds as it collects (3.8:
    ``item._nodeid = ...``). pytest 9.2 keeps the id in ``item._id``, so that assignment did
    nothing and the MACHINE_LOAD tests ran in both processes at once (both determinism tests'
    busy loops together, beside the wall-clock limits). Add the suffix where it is missing."""
    if not config.getoption("loadgroup", default=False):  # set on xdist's workers under loadgroup
        return
    for item in items:
        names = {str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                 for m in item.iter_markers("xdist_group")}
        suffix = "@" + "_".join(sorted(names))
        if not names or item.nodeid.endswith(suffix):
            continue
        if hasattr(item, "_id"):  # pytest >= 9.2: a NodeId
            item._id = type(item._id).parse(item.nodeid + suffix)
        else:
            item._nodeid = item.nodeid + suffix


@pytest.fixture(scope="session", autouse=True)
def _one_blas_thread():
    """Each test process uses one BLAS thread, as :func:`autotune.search` does
    (:mod:`autotune.tuner.threads`): the two xdist processes with OpenBLAS's thread per core each
    would put four spinning threads on the machine's two cores."""
    with one_blas_thread():
        yield


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture
def shared() -> Path:
    return SHARED
