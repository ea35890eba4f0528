"""``s3.leanjson``: JSON parsed with only some members of one nested object kept."""

from __future__ import annotations

import json
from pathlib import Path

import botocore
import pytest

from tierd.daemon.backends.s3.client import ENDPOINT_SERVICES, lean_endpoints
from tierd.daemon.backends.s3.leanjson import ANY_ITEM, members_kept

DOC = {
    "version": 3,
    "partitions": [
        {"partition": "a", "services": {"s3": {"x": [1, {"y": None}]}, "ec2": {}, "sts": "z"}, "more": [1.5]},
        {"partition": "b", "services": {}},
        {"partition": "c", "services": {"ec2": {"s3": True}}},
    ],
    "tail": {"services": {"ec2": 1}},
}


@pytest.mark.parametrize("indent", [None, 0, 2, "\t"])
def test_only_the_members_kept_of_the_objects_on_the_path_are_left_out(indent: int | str | None) -> None:
    text = json.dumps(DOC, indent=indent)
    kept = members_kept(text, ("partitions", ANY_ITEM, "services"), {"s3", "sts"})
    expected = json.loads(text)
    for partition in expected["partitions"]:
        partition["services"] = {k: v for k, v in partition["services"].items() if k in {"s3", "sts"}}
    assert kept == expected


def test_botocores_endpoints_file_as_the_lean_loader_keeps_it() -> None:
    text = (Path(botocore.__file__).parent / "data" / "endpoints.json").read_text()
    kept = members_kept(text, ("partitions", ANY_ITEM, "services"), ENDPOINT_SERVICES)
    assert kept == lean_endpoints(json.loads(text))
    assert {"s3", "sts"} <= set(kept["partitions"][0]["services"])


@pytest.mark.parametrize(
    "text",
    [
        '{"partitions": [{"services": {"s3": 1}}]',  # ends early
        '{"partitions": [{"services": {"s3": 1,}}]}',  # a trailing comma
        '{"partitions": {"services": {}}}',  # an object where the path says array
        '{"partitions": [["services"]]}',  # an array where it says object
        '{"partitions": []} []',  # extra data
        '{"partitions": [{"services": {s3: 1}}]}',  # a key that is no string
        "",
    ],
)
def test_what_is_not_such_json_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not JSON of the layout partitions/\\*/services"):
        members_kept(text, ("partitions", ANY_ITEM, "services"), {"s3"})
