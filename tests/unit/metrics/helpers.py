"""Reading a registry as Prometheus does: one scrape, parsed."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]


def scrape(registry: CollectorRegistry) -> dict[str, dict[Labels, float]]:
    """Every sample of one scrape: sample name -> sorted labels -> value."""
    out: dict[str, dict[Labels, float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out
