"""An S3 tier: any S3-compatible store through aioboto3, with an optional fast path.

``backend`` (the tier), ``writes`` (its writes and server-side copies, verified),
``client`` (the client's public CPU-saving settings, and botocore's data files kept lean),
``leanjson`` (a JSON file parsed keeping some members of one object: ``endpoints.json``), ``errors``
(the one boundary where botocore, aiohttp and awscrt errors become tierd errors),
``multipart`` (multipart uploads and copies, resumable), ``leftovers`` (open
uploads listed by prefix and aborted), ``bodies`` (request bodies
streamed from the budget), ``reads`` (ranged GETs, ``S3Reader``, read-back hashing),
``placement`` (storage class and
encryption, sent on every write), ``holds`` (Object Lock legal holds), ``remove`` (DeleteObjects), ``fast/``
(lean requests, pipelining, endpoint cache: see ``fast.paths`` for when each is used).
"""

from tierd.daemon.backends.s3.backend import S3Backend

__all__ = ["S3Backend"]
