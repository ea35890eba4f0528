"""What every resource shares: the bounds of numbers the catalog stores, and the error body."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "BIGINT_MAX",
    "INTEGER_MAX",
    "NO_NUL",
    "Problem",
]


#: The catalog's BIGINT columns (steps) and SQL's LIMIT/OFFSET hold signed 64-bit integers;
#: a larger number would reach the database and fail there, so requests are bounded here.
BIGINT_MAX = 2**63 - 1
#: Row ids are INTEGER columns: 32 bits on PostgreSQL.
INTEGER_MAX = 2**31 - 1
#: PostgreSQL text cannot hold NUL: a run name with one would fail in the catalog (a 503).
NO_NUL = r"^[^\x00]*$"


class Problem(BaseModel):
    """An RFC 9457 problem: the body of every error, served as ``application/problem+json``."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int = Field(ge=400, le=599)
    detail: str
    errors: list[dict[str, str]] | None = Field(
        default=None, description="on 422: each invalid input, as its location and message"
    )
    checks: list[str] | None = Field(default=None, description="on /readyz's 503: each failing check")
