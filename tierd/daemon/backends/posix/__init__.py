"""A POSIX tier: a directory on a local or network file system.

``backend`` (the tier), ``writes`` (its write path: temporary file, fill, durable, rename),
``reader`` (reading a file), ``directread`` (a big file's chunks read by O_DIRECT unless
cached), ``batch`` (small files staged and made durable together), ``unnamed`` (staged
files with no name, O_TMPFILE, linked into place at the commit),
``copy`` (copy_file_range and the hashing copy loop), ``resume`` (a killed write resumed
from its verified prefix), ``temp`` (temporary names and their cleanup), ``owner`` (the
recorded owner and mode given to what tierd writes), ``remove`` (removing a checkpoint),
``errors`` (OSError to tierd errors), ``dirsync`` (shared directory fsyncs), ``fstype``
(which file system a path is on), ``writeback`` (early writeback, syncfs), ``iomode`` (big
files by O_DIRECT or through the page cache, configured or measured per file system).
"""

from tierd.daemon.backends.posix.backend import PosixBackend

__all__ = ["PosixBackend"]
