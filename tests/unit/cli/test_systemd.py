"""The hardened unit as shipped (``systemd-analyze security``) and ``tierd systemd drop-in``."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tierd.cli.main import main
from tierd.cli.systemd import drop_in, needs
from tierd.config import Config
from tierd.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]
UNIT = REPO / "deploy" / "systemd" / "tierd.service"
#: The exposure score the unit may not exceed (Debian's prometheus.service: 4.0; the old unit: 9.1).
MAX_EXPOSURE = 2.5


def _unit_settings() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def _exposure(unit: Path) -> float:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    result = subprocess.run(
        [analyze, "security", "--offline=yes", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d)", result.stdout)
    assert found is not None, result.stdout + result.stderr
    return float(found[1])


def test_the_unit_scores_at_most_2_5() -> None:
    assert _exposure(UNIT) <= MAX_EXPOSURE


def test_the_unit_keeps_what_tierd_needs() -> None:
    settings = _unit_settings()
    assert settings["Type"] == ["notify"]
    assert settings["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert settings["WatchdogSec"] == ["30"]
    assert settings["Restart"] == ["always"]
    assert settings["RestartPreventExitStatus"] == ["78"]
    assert settings["ProtectSystem"] == ["strict"]
    assert settings["StateDirectory"] == ["tierd"]
    # Reading every job's files, writing every tier, each copy given its source's owner and mode.
    assert set(settings["CapabilityBoundingSet"][0].split()) == {
        "CAP_CHOWN",
        "CAP_DAC_OVERRIDE",
        "CAP_DAC_READ_SEARCH",
        "CAP_FOWNER",
        "CAP_FSETID",
    }
    assert set(settings["RestrictAddressFamilies"][0].split()) >= {"AF_UNIX", "AF_INET", "AF_INET6"}
    assert "RestrictSUIDSGID" not in settings  # a copied setgid directory keeps its bit
    assert "MALLOC_ARENA_MAX=2" in settings["Environment"]  # fewer malloc arenas: lower peak RSS


def _config(tmp_path: Path, **overrides: Any) -> Config:
    data: dict[str, Any] = {
        "catalog": {"url": "sqlite:////var/lib/tierd/catalog.db"},
        "tiers": [
            {"name": "nvme", "kind": "posix", "path": "/mnt/nvme/checkpoints"},
            {"name": "pfs", "kind": "posix", "path": "/lustre/ckpt 100%"},
            {"name": "object", "kind": "s3", "bucket": "bkt", "access_key_id": "k", "secret_access_key": "s"},
        ],
    }
    data.update(overrides)
    return Config(**data)


def test_the_drop_in_makes_every_tier_and_the_catalog_writable(tmp_path: Path) -> None:
    text = drop_in(_config(tmp_path), Path("/etc/tierd/config.yaml"))
    lines = text.splitlines()
    assert lines[lines.index("[Service]") + 1 :] == [
        "# tiers.0.path",
        "ReadWritePaths=/mnt/nvme/checkpoints",
        "# tiers.1.path",
        'ReadWritePaths="/lustre/ckpt 100%%"',
        "# catalog.url",
        "ReadWritePaths=/var/lib/tierd",
    ]
    assert 'RequiresMountsFor=/mnt/nvme/checkpoints "/lustre/ckpt 100%%" /var/lib/tierd' in lines


def test_the_drop_in_names_token_files_restore_roots_and_a_config_elsewhere(tmp_path: Path) -> None:
    tokens = [{"name": "ops", "token_file": "/etc/tierd/ops.token", "role": "admin"}]
    config = _config(tmp_path, api={"tokens": tokens}, restore={"allowed_roots": ["/scratch/restores"]})
    text = drop_in(config, Path("/srv/tierd/config.yaml"))
    assert "# restore.allowed_roots.0\nReadWritePaths=/scratch/restores\n" in text
    assert "# api.tokens.0.token_file\nReadOnlyPaths=/etc/tierd/ops.token\n" in text
    assert "Environment=TIERD_CONFIG=/srv/tierd/config.yaml\n" in text
    assert "# --config\nReadOnlyPaths=/srv/tierd/config.yaml\n" in text
    assert "ProtectHome" not in text
    assert "PrivateTmp" not in text


def test_paths_under_homes_and_tmp_lift_what_would_hide_them(tmp_path: Path) -> None:
    tiers = [
        {"name": "nvme", "kind": "posix", "path": "/home/alice/ckpt"},
        {"name": "pfs", "kind": "posix", "path": "/var/tmp/pfs"},
        {"name": "object", "kind": "s3", "bucket": "ckpt"},  # boto3's shared credentials in /root/.aws
    ]
    text = drop_in(_config(tmp_path, tiers=tiers), Path("/etc/tierd/config.yaml"))
    assert "ProtectHome=tmpfs\n" in text
    assert "PrivateTmp=no\n" in text
    assert "ReadWritePaths=/home/alice/ckpt\nBindPaths=/home/alice/ckpt\n" in text
    assert "ReadOnlyPaths=-/root/.aws\nBindReadOnlyPaths=-/root/.aws\n" in text


def test_an_in_memory_or_postgresql_catalog_needs_no_path(tmp_path: Path) -> None:
    for url in ("sqlite:///:memory:", "postgresql+psycopg://tierd@db/tierd"):
        keys = [need.key for need in needs(_config(tmp_path, catalog={"url": url}))]
        assert keys == ["tiers.0.path", "tiers.1.path"]


def test_a_path_systemd_cannot_take_is_refused_naming_its_key(tmp_path: Path) -> None:
    tiers = [{"name": "nvme", "kind": "posix", "path": "/mnt/nvme\nExecStartPre=/bin/evil"}]
    with pytest.raises(ConfigError, match=r"tiers\.0\.path: .* control character"):
        needs(_config(tmp_path, tiers=tiers))


def test_the_command_prints_the_drop_in(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "tierd.yaml"
    (tmp_path / "nvme").mkdir()
    path.write_text(yaml.safe_dump({"tiers": [{"name": "nvme", "kind": "posix", "path": "nvme"}]}))
    assert main(["systemd", "drop-in", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# Made by `tierd systemd drop-in --config {path}`")
    assert f"# tiers.0.path\nReadWritePaths={tmp_path / 'nvme'}\n" in out
    assert f"# catalog.url\nReadWritePaths={tmp_path / 'var'}\n" in out


def test_the_command_refuses_a_bad_config_with_exit_78(tmp_path: Path) -> None:
    path = tmp_path / "tierd.yaml"
    path.write_text(yaml.safe_dump({"tiers": [{"name": "nvme", "kind": "posix"}]}))
    assert main(["systemd", "drop-in", "--config", str(path)]) == 78


def test_the_unit_with_a_drop_in_still_scores_at_most_2_5(tmp_path: Path) -> None:
    """The unit as a site runs it: the drop-in's settings inlined into one file."""
    tiers = [{"name": "nvme", "kind": "posix", "path": "/home/alice/ckpt"}]
    service = drop_in(_config(tmp_path, tiers=tiers), Path("/etc/tierd/config.yaml")).split("[Service]\n")[1]
    combined = tmp_path / "tierd.service"
    combined.write_text(UNIT.read_text().replace("[Install]", service + "\n[Install]"))
    assert _exposure(combined) <= MAX_EXPOSURE
