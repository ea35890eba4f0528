"""A POSIX tier: a directory on a local or network file system.

``backend`` (the tier), ``batch`` (small files staged and made durable together),
``copy`` (copy_file_range and the hashing copy loop), ``temp`` (temporary names and their
cleanup), ``errors`` (OSError to tierd errors), ``dirsync`` (shared directory fsyncs),
``fstype`` (which file system a path is on), ``writeback`` (early writeback, syncfs).
"""

from tierd.daemon.backends.posix.backend import PosixBackend

__all__ = ["PosixBackend"]
