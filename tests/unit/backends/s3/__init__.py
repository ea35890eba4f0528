"""Tests of the S3 backend (``tierd.daemon.backends.s3``), against moto and ``rclone serve s3``."""
