"""Tests of the storage backends, laid out like ``tierd.daemon.backends``."""
