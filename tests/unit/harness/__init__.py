"""Tests of the test harness itself (plugins under tests/fixtures)."""
