"""Tests of the S3 fast path (``tierd.daemon.backends.s3.fast``)."""
