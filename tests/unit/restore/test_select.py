"""Which files a restore takes by rank and by glob, for DCP, DeepSpeed and Megatron layouts."""

from __future__ import annotations

from tierd.daemon.restore.select import select_names

DCP = [".metadata", "__0_0.distcp", "__1_0.distcp", "__2_0.distcp", "__3_0.distcp", "__1_1.distcp"]
DEEPSPEED = [
    "mp_rank_00_model_states.pt",
    "mp_rank_01_model_states.pt",
    *(f"bf16_zero_pp_rank_{d}_mp_rank_{m:02d}_optim_states.pt" for d in range(2) for m in range(2)),
]
MEGATRON = [
    *(f"mp_rank_{tp:02d}_{pp:03d}/model_optim_rng.pt" for tp in range(2) for pp in range(2)),
    "mp_rank_00_000/distrib_optim.pt",
    "common.pt",
]


def test_dcp_rank_takes_its_shards_and_the_metadata() -> None:
    assert select_names(DCP, ranks=[1], globs=None) == [".metadata", "__1_0.distcp", "__1_1.distcp"]
    assert select_names(DCP, ranks=[0, 3], globs=None) == [".metadata", "__0_0.distcp", "__3_0.distcp"]


def test_deepspeed_rank_takes_its_zero_shard_and_its_model_parallel_states() -> None:
    # Two model-parallel ranks vary fastest: global rank 3 is data-parallel 1, model-parallel 1.
    assert select_names(DEEPSPEED, ranks=[3], globs=None) == [
        "mp_rank_01_model_states.pt",
        "bf16_zero_pp_rank_1_mp_rank_01_optim_states.pt",
    ]
    assert select_names(DEEPSPEED, ranks=[0], globs=None) == [
        "mp_rank_00_model_states.pt",
        "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt",
    ]


def test_megatron_rank_takes_its_model_parallel_directory_and_the_shared_files() -> None:
    # TP=2, PP=2: index tp + 2*pp; global rank 5 is index 1 (tp 1, pp 0).
    assert select_names(MEGATRON, ranks=[5], globs=None) == ["mp_rank_01_000/model_optim_rng.pt", "common.pt"]
    assert select_names(MEGATRON, ranks=[2], globs=None) == ["mp_rank_00_001/model_optim_rng.pt", "common.pt"]


def test_other_files_naming_a_rank_belong_to_it() -> None:
    names = ["model_rank_3.pt", "model_rank_4.pt", "config.json"]
    assert select_names(names, ranks=[3], globs=None) == ["model_rank_3.pt", "config.json"]


def test_globs_match_paths_and_base_names_and_narrow_the_ranks() -> None:
    names = ["a/b.pt", "a/c.json", "d.json", *DCP]
    assert select_names(names, ranks=None, globs=["*.json"]) == ["a/c.json", "d.json"]
    assert select_names(names, ranks=None, globs=["a/*"]) == ["a/b.pt", "a/c.json"]
    assert select_names(DCP, ranks=[1], globs=["*.distcp"]) == ["__1_0.distcp", "__1_1.distcp"]
    assert select_names(DCP, ranks=None, globs=None) == DCP
