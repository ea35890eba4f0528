"""Tests of the POSIX backend (``tierd.daemon.backends.posix``)."""
