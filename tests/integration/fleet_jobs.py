"""What the fleet tests' training jobs write: a real multi-process DCP save over node-local
tier-0 directories, and DCP-like steps written by hand. torch is imported by the functions that
use it: the serial fleet tests only write steps by hand, and importing torch costs ~5 s of CPU."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path

from tests.fixtures.ranks import run_ranks
from tests.integration.daemon_helpers import write_files

__all__ = ["dcp_metadata", "dcp_save", "shard_name", "write_step"]

#: Floats per rank: 64 KiB shards, well under one S3 part.
SHARD_FLOATS = 16_384


def shard_name(rank: int) -> str:
    """The storage file DCP's FileSystemWriter gives a rank's items (one file per rank)."""
    return f"__{rank}_0.distcp"


def _rank(rank: int, world: int, init_file: str, dirs: Sequence[str], step: int) -> None:
    """One rank: its own tensor, saved with DCP into its node's directory (gloo collectives)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.filesystem import FileSystemWriter
    from torch.distributed.checkpoint.state_dict_saver import save

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.manual_seed(step * 1000 + rank)
    state = {f"rank{rank}": {"weight": torch.randn(SHARD_FLOATS)}}
    path = Path(dirs[rank]) / f"step_{step}"
    path.mkdir(parents=True, exist_ok=True)  # only the coordinator's writer makes its directory
    save(state, storage_writer=FileSystemWriter(path, single_file_per_rank=True))
    dist.barrier()
    dist.destroy_process_group()


def dcp_save(init_file: Path, rank_dirs: Sequence[Path], step: int) -> None:
    """Save ``step`` with one process per rank, rank r into ``rank_dirs[r]/step_{step}``
    (rank 0, the coordinator, also writes ``.metadata`` there); returns when every rank is done.

    The ranks are forked from a forkserver that imported torch once (``tests.fixtures.ranks``):
    spawned, each rank imported torch itself, 8 ranks 70 s of CPU instead of 11.
    """
    dirs = [str(d) for d in rank_dirs]
    run_ranks(_rank, (len(dirs), str(init_file), dirs, step), len(dirs))


def dcp_metadata(shard_sizes: Sequence[int]) -> bytes:
    """A real DCP ``.metadata`` pickle naming rank r's shard ``__r_0.distcp`` of ``shard_sizes[r]``
    bytes (one float32 tensor per rank), as the coordinator writes it after a save."""
    import torch
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata,
        Metadata,
        MetadataIndex,
        TensorProperties,
        TensorStorageMetadata,
    )

    tensors: dict[str, TensorStorageMetadata] = {}
    storage: dict[MetadataIndex, _StorageInfo] = {}
    for rank, size in enumerate(shard_sizes):
        fqn, floats = f"rank{rank}.weight", size // 4
        chunk = ChunkStorageMetadata(offsets=torch.Size([0]), sizes=torch.Size([floats]))
        tensors[fqn] = TensorStorageMetadata(
            TensorProperties(dtype=torch.float32), torch.Size([floats]), [chunk]
        )
        storage[MetadataIndex(fqn, torch.Size([0]), 0)] = _StorageInfo(shard_name(rank), 0, size)
    return pickle.dumps(Metadata(state_dict_metadata=dict(tensors), storage_data=storage))


def write_step(directory: Path, shards: int, shard_bytes: int, *, seed: int = 0) -> dict[str, bytes]:
    """A DCP-like step by hand: ``shards`` shard files, then ``.metadata`` last (the marker)."""
    sizes = {shard_name(r): shard_bytes for r in range(shards)}
    sizes[".metadata"] = 64
    return write_files(directory, sizes, seed=seed)
