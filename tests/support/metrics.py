"""A daemon's /metrics scraped over HTTP and read with prometheus-client's own parser."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    """Each sample by its name and its sorted labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape_if_up(port: int) -> Samples:
    """As `scrape`, or nothing while the daemon is not serving yet: for polling from its start."""
    try:
        return scrape(port)
    except OSError:  # refused, or reset as the server starts
        return {}
