"""The files that hold slow tests are collected first, whole, in their own order."""

from __future__ import annotations

import pytest

from tests.fixtures.order import slow_first


class Item:
    """What ``slow_first`` reads of a pytest item: its id and its marks."""

    def __init__(self, nodeid: str, slow: bool = False) -> None:
        self.nodeid = nodeid
        self.slow = slow

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "slow" and self.slow else None


def test_a_file_with_one_slow_test_moves_to_the_front_whole() -> None:
    items = [
        Item("tests/unit/test_a.py::one"),
        Item("tests/unit/test_a.py::two"),
        Item("tests/integration/test_b.py::quick"),
        Item("tests/integration/test_b.py::long", slow=True),
        Item("tests/integration/test_c.py::soak[x]", slow=True),
        Item("tests/unit/test_d.py::three"),
    ]

    ordered = [i.nodeid for i in slow_first(items)]  # type: ignore[arg-type]

    assert ordered == [
        "tests/integration/test_b.py::quick",
        "tests/integration/test_b.py::long",
        "tests/integration/test_c.py::soak[x]",
        "tests/unit/test_a.py::one",
        "tests/unit/test_a.py::two",
        "tests/unit/test_d.py::three",
    ]


def test_the_suite_orders_with_it(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.hasplugin("tests.fixtures.order")
