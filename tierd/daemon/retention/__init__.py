"""Decide which checkpoints to keep on each tier."""
