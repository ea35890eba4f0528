"""Prometheus metrics: counters the services bump, gauges read at scrape, and who exports which.

- ``registry``  ``Metrics``: the registry, the counters, the process's own metrics
- ``fleetwide`` the catalog-wide gauges (replicas, recovery point, jobs, ...): the leader's alone
- ``tiers``     each tier's space, disk pressure and scrub progress, from the daemon acting on it
- ``build``     ``tierd_build_info``: the version and the git revision it was built from
"""

from tierd.daemon.metrics.registry import Metrics

__all__ = ["Metrics"]
