"""``restore.allowed_roots``: its default, relative roots, and errors that name the key; the peer tier's
``token_file`` a restore fetches peer copies with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tierd.config import load_config
from tierd.errors import ConfigError
from tierd.keyring import peer_token


def write(tmp_path: Path, **top: Any) -> Path:
    data = {"tiers": [{"name": "nvme", "kind": "posix", "path": "nvme"}], **top}
    path = tmp_path / "tierd.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_default_is_tier0_only(tmp_path: Path) -> None:
    config = load_config(write(tmp_path))
    assert config.restore_roots == [tmp_path / "nvme"]


def test_relative_roots_resolve_against_the_config_file(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, restore={"allowed_roots": ["../scratch", "/abs/restores"]}))
    assert config.restore_roots == [tmp_path.parent / "scratch", Path("/abs/restores")]


@pytest.mark.parametrize(
    ("restore", "message"),
    [
        ({"allowed_roots": []}, "restore.allowed_roots: List should have at least 1 item"),
        ({"allowed_roots": ["/a/../b"]}, "restore.allowed_roots: entry 0: /a/../b has a '..' component"),
        ({"roots": ["/a"]}, "restore.roots: unknown key"),
    ],
)
def test_errors_name_the_key(tmp_path: Path, restore: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, restore=restore))
    assert any(p.startswith(message) for p in caught.value.problems), caught.value.problems


def _peer(tmp_path: Path, mode: int) -> Any:
    token = tmp_path / "peer.token"
    token.write_text("p-token\n")
    token.chmod(mode)
    peer = {"name": "peers", "kind": "peer", "path": str(tmp_path / "peer"), "token_file": str(token)}
    data = {"tiers": [{"name": "nvme", "kind": "posix", "path": "nvme"}, peer]}
    path = tmp_path / "tierd.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path).peer


def test_the_peer_token_a_restore_fetches_with_comes_from_the_peer_tiers_token_file(tmp_path: Path) -> None:
    assert peer_token(_peer(tmp_path, 0o600)) == "p-token"
    assert peer_token(None) is None


def test_a_peer_token_file_every_user_may_read_is_refused_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        peer_token(_peer(tmp_path, 0o644))
    (problem,) = caught.value.problems
    assert problem.startswith("tiers.peers.token_file: every user may read it (mode 644)")
