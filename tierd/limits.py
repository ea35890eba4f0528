"""What one checkpoint step may expect, whoever says so: a notify call, or a format's metadata.

Both come from a training job, which may be hostile: a count taken from either is checked
against these before anything is built from it (a list of ranks, of file names).

- ``MAX_WORLD_SIZE`` (2**20 = 1,048,576 ranks): about ten times the largest training jobs run
  today (~100,000 GPUs). DCP writes a shard file per rank, so a step that large would already
  name more files than ``MAX_EXPECTED_FILES``.
- ``MAX_EXPECTED_FILES`` (100,000 files): a step of 8,192 ranks with a dozen files each; at a
  typical 60 bytes a path, the list is ~6 MB, inside the API's 8 MiB body bound.
- ``MAX_FILE_BYTES`` (16 TiB): the largest file a peer may send (ext4's largest file with
  4 KiB blocks); the receiver also checks it against its peer directory's room first.
"""

from __future__ import annotations

__all__ = ["MAX_EXPECTED_FILES", "MAX_FILE_BYTES", "MAX_WORLD_SIZE"]

MAX_WORLD_SIZE = 2**20
MAX_EXPECTED_FILES = 100_000
MAX_FILE_BYTES = 16 * 2**40
