"""``tierd_build_info``'s revision: the file a build wrote, pip's record of a git install, or unknown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tierd.daemon.metrics import build


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in for the installed package's directory, and no pip record of a git install."""
    folder = tmp_path / "tierd"
    folder.mkdir()
    monkeypatch.setattr(build, "_package", lambda: folder)
    monkeypatch.setattr(build, "_from_pip", lambda: None)
    return folder


def test_the_revision_file_a_build_wrote_is_read(package: Path) -> None:
    (package / "REVISION").write_text("0123456789ABCDEF0123456789abcdef01234567\n")
    assert build.revision() == "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize("text", ["", "main", "0123456 extra", "x" * 40, "0" * 65])
def test_anything_but_a_revision_is_unknown(package: Path, text: str) -> None:
    (package / "REVISION").write_text(text)
    assert build.revision() == "unknown"


def test_no_file_is_unknown(package: Path) -> None:
    assert build.revision() == "unknown"


def test_pip_records_the_commit_of_an_install_from_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PEP 610: ``pip install git+https://...@<rev>`` writes the commit into direct_url.json."""
    site = tmp_path / "site"
    info = site / "tierd-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tierd\nVersion: 0.1.0\n")
    commit = "89abcdef" * 5
    record = {"url": "https://example.org/tierd.git", "vcs_info": {"vcs": "git", "commit_id": commit}}
    (info / "direct_url.json").write_text(json.dumps(record))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(build, "_from_file", lambda: None)
    assert build.revision() == commit
