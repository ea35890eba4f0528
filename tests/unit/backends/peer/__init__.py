"""Tests of the peer tier (``tierd.daemon.backends.peer``)."""
