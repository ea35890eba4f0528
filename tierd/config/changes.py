"""What a reload may change: the keys two configs differ in, and the config a reload applies.

A running daemon takes a new value of these keys at a reload (SIGHUP); every other key needs a
restart, and a reload keeps its old value (and says so):

- ``api.tokens``: the API's bearer tokens (one swap: a request sees the old set or the new);
- ``log.level``;
- ``retention.dry_run``, and per tier ``tiers.N.retention`` (its rules), ``tiers.N.delete_delay``
  and ``tiers.N.bandwidth_limit``: read by the next pass, plan or copy;
- per tier its prices (``tiers.N.price_per_gb_month``, ``price_per_1000_writes``,
  ``price_per_1000_reads``): the next ``GET /v1/usage`` and scrape of ``/metrics`` use them.

The ``kind: peer`` tier, kept apart from the chain (``Config.peer``), takes the same keys
(``peer.retention``, ``peer.delete_delay``, ``peer.bandwidth_limit``).

A tier's reloadable keys are applied only while the list of tiers (their names and kinds, the
peer tier's among them) is the same: a tier added, removed, renamed or reordered is a restart
(``tiers``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from tierd.config.model import Config
from tierd.config.stores import AnyTier
from tierd.config.tiers import PeerTier

__all__ = ["RELOADABLE_TIER_KEYS", "ConfigChanges", "config_changes"]

#: A tier's keys a reload applies (under ``tiers.N.``).
RELOADABLE_TIER_KEYS = (
    "retention",
    "delete_delay",
    "bandwidth_limit",
    "price_per_gb_month",
    "price_per_1000_writes",
    "price_per_1000_reads",
)
_RELOADABLE = ("api.tokens", "log.level", "retention.dry_run")
T = TypeVar("T", AnyTier, PeerTier)


@dataclass(frozen=True)
class ConfigChanges:
    """The keys a new config changes, split into those a reload applies and those it cannot."""

    #: Keys whose new value the reload applies (``api.tokens``, ``tiers.1.retention.keep_last``).
    applied: tuple[str, ...]
    #: Keys whose new value waits for a restart (the old one stays until then).
    need_restart: tuple[str, ...]
    #: The old config with the new values of ``applied``: what the daemon runs on after the reload.
    config: Config

    @property
    def tokens(self) -> bool:
        """Whether the tokens' configuration changed (names, roles, values or files)."""
        return "api.tokens" in self.applied


def config_changes(old: Config, new: Config) -> ConfigChanges:
    """What reloading ``new`` over a daemon running on ``old`` applies, and what it cannot."""
    changed = _outermost([key for key, _ in _differences(_leaves(old), _leaves(new))])
    same_tiers = _tier_kinds(old) == _tier_kinds(new)
    applied: list[str] = []
    restart: list[str] = []
    for key in changed:
        if _reloadable(key, same_tiers):
            _add(applied, "api.tokens" if key.startswith("api.tokens") else key)
        else:
            _add(restart, "tiers" if key.startswith("tiers.") and not same_tiers else key)
    config = _merged(old, new, same_tiers)
    return ConfigChanges(tuple(applied), tuple(restart), config)


def _reloadable(key: str, same_tiers: bool) -> bool:
    if any(key == k or key.startswith(k + ".") for k in _RELOADABLE):
        return True
    parts = key.split(".")
    in_chain = len(parts) >= 3 and parts[0] == "tiers" and parts[2] in RELOADABLE_TIER_KEYS
    peer = len(parts) >= 2 and parts[0] == "peer" and parts[1] in RELOADABLE_TIER_KEYS
    return same_tiers and (in_chain or peer)


def _add(keys: list[str], key: str) -> None:
    if key not in keys:
        keys.append(key)


def _tier_kinds(config: Config) -> list[tuple[str, str]]:
    kinds: list[tuple[str, str]] = [(t.name, t.kind) for t in config.tiers]
    if config.peer is not None:
        kinds.append((config.peer.name, config.peer.kind))
    return kinds


def _merged(old: Config, new: Config, same_tiers: bool) -> Config:
    """``old`` with the new values of the reloadable keys (all validated as part of ``new``)."""
    update: dict[str, Any] = {
        "api": old.api.model_copy(update={"tokens": new.api.tokens}),
        "log": old.log.model_copy(update={"level": new.log.level}),
        "retention": old.retention.model_copy(update={"dry_run": new.retention.dry_run}),
    }
    if same_tiers:
        update["tiers"] = [_tier_merged(a, b) for a, b in zip(old.tiers, new.tiers, strict=True)]
        if old.peer is not None and new.peer is not None:
            update["peer"] = _tier_merged(old.peer, new.peer)
    return old.model_copy(update=update)


def _tier_merged(old: T, new: T) -> T:
    return old.model_copy(update={key: getattr(new, key) for key in RELOADABLE_TIER_KEYS})


def _leaves(config: Config) -> dict[str, Any]:
    """Every value of ``config`` by its dotted key, as the file names it (``tiers.1.path``)."""
    return dict(_flatten("", config.model_dump(exclude_unset=False)))


def _flatten(prefix: str, value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        if not value:
            yield prefix, value
        for key, item in value.items():
            yield from _flatten(f"{prefix}.{key}" if prefix else str(key), item)
    elif isinstance(value, list):
        yield f"{prefix}.length" if prefix else "length", len(value)
        for index, item in enumerate(value):
            yield from _flatten(f"{prefix}.{index}", item)
    else:
        yield prefix, value


def _outermost(keys: list[str]) -> list[str]:
    """``keys`` without those inside another (a block that appeared is named once, not per key)."""
    named = set(keys)
    return [k for k in keys if not any(k.startswith(other + ".") for other in named)]


def _differences(old: dict[str, Any], new: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """The keys whose value differs (or that only one side has), in the new config's order."""
    for key in [*new, *(k for k in old if k not in new)]:
        if key not in old or key not in new or old[key] != new[key]:
            yield key.removesuffix(".length"), new.get(key)
