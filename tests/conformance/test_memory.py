"""Memory stays bounded whatever the object size: peak RSS of a fresh process under 200 MB."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.fixtures.s3servers import S3Server

ROOT = Path(__file__).resolve().parents[2]
SIZE = 384 * 1024 * 1024  # several default-sized (64 MiB, streamed) parts and chunks
RSS_LIMIT_MB = 200


def test_big_copies_stay_under_the_memory_limit(rclone_server: S3Server, tmp_path: Path) -> None:
    bucket = rclone_server.create_bucket()
    argv = [
        sys.executable, "-m", "tests.conformance.memprobe", str(tmp_path), str(SIZE),
        rclone_server.endpoint_url, bucket, rclone_server.access_key_id, rclone_server.secret_access_key,
    ]  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ok"], result
    assert result["peak_rss_mb"] < RSS_LIMIT_MB, result
