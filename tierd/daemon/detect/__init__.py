"""Detect completed checkpoint steps in watched directories."""
