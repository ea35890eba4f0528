"""Restore: put a checkpoint back from the nearest tier holding a verified copy (see ``service``)."""
