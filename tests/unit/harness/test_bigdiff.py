"""A failed comparison of megabytes of file bytes is explained in a few lines, at once."""

from __future__ import annotations

import pytest

from tests.fixtures.bigdiff import LIMIT, explain_big, pytest_assertrepr_compare

MiB = 1 << 20


def test_small_values_are_left_to_pytest() -> None:
    assert pytest_assertrepr_compare("==", {"a": b"x"}, {"a": b"y"}) is None
    assert pytest_assertrepr_compare("!=", b"x" * (LIMIT + 1), b"y") is None


def test_two_trees_of_files_name_the_missing_extra_and_changed_files() -> None:
    data = bytes(3 * MiB)
    left = {"a/1": data, "a/2": data, "a/3": data}
    right = {"a/1": data, "a/2": data[:100] + b"\x01" + data[101:], "a/4": data}

    lines = pytest_assertrepr_compare("==", left, right)

    assert lines is not None
    assert lines[0] == "big values differ (dict of 3 keys != dict of 3 keys)"
    assert "left only: 'a/3'" in lines
    assert "right only: 'a/4'" in lines
    assert f"differs at 'a/2': {3 * MiB} vs {3 * MiB} bytes, first differing byte at 100" in lines
    assert not any("a/1" in line for line in lines)


def test_byte_strings_name_the_first_difference_or_the_prefix() -> None:
    data = bytes(LIMIT + 10)
    assert (
        explain_big(data, data[:-1])[1] == f"{LIMIT + 10} vs {LIMIT + 9} bytes, one is a prefix of the other"
    )
    assert explain_big(data, b"\x07" + data[1:])[1].endswith("first differing byte at 0")


def test_the_suite_explains_with_it(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.hasplugin("tests.fixtures.bigdiff")
