"""The S3 fast path: requests tierd signs and frames itself, and botocore made cheaper per request.

``paths`` (which of them a tier uses: its ``fast_path`` setting and endpoint; attaching
them to a client), ``lean`` (PutObject, HeadObject and small GETs signed with awscrt and
sent on the client's own connections), ``pipelined_gets`` (a group's GETs pipelined on one
HTTP/1.1 connection), ``answers`` (framing those answers into their buffers, no I/O),
``endpoints`` (botocore's endpoint resolution cached per bucket). All but ``answers``
reach into botocore's private attributes; each says which, and falls back to botocore.
"""

from tierd.daemon.backends.s3.fast.paths import FastPath, Plan, is_aws_endpoint, plan_for

__all__ = ["FastPath", "Plan", "is_aws_endpoint", "plan_for"]
