"""The suite's one xdist group (tests/conftest.py: MACHINE_LOAD) reaches pytest-xdist's scheduler.

``--dist loadgroup`` keeps a group in one process only if each worker's id of the group's tests
ends in ``@<group>``; pytest 9.2 silently dropped the suffix pytest-xdist 3.8 sets, and the busy-loop
tests ran beside the wall-clock limits (tests/conftest.py: ``_group_suffixes``)."""

from __future__ import annotations

from tests.conftest import MACHINE_LOAD


@MACHINE_LOAD
def test_machine_load_tests_carry_their_group_to_the_scheduler(request):
    if request.config.getoption("loadgroup", default=False):  # an xdist worker under --dist loadgroup
        assert request.node.nodeid.endswith("::test_machine_load_tests_carry_their_group_to_the_scheduler"
                                            "@machine_load")
    else:  # one process (-n 0): nothing to group, the id is the plain one
        assert "@" not in request.node.nodeid


def test_a_test_outside_the_group_keeps_its_id(request):
    assert request.node.nodeid.endswith("::test_a_test_outside_the_group_keeps_its_id")
