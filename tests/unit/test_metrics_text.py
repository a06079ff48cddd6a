"""common/metrics_text.py: counters under the Go client's names, everything else as prometheus_client writes it."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from common import metrics_text
from tests.harness.metricfacts import Exposition


def registry() -> CollectorRegistry:
    r = CollectorRegistry()
    Counter("events", "events by type", ["type"], registry=r).labels(type="Insert").inc(3)
    Counter("jobs_total", "jobs", registry=r).inc()
    Counter("plain", "not listed as bare", registry=r).inc(2)
    Gauge("size_bytes", 'a "gauge"\nwith a backslash \\', ["name"], registry=r).labels(name='a"b\\c\nd').set(7)
    Histogram("latency_seconds", "h", buckets=(0.5, 1.0), registry=r).observe(0.7)
    Histogram("unused_seconds", "labelled, no child yet", ["nodeID"], registry=r)
    r.register(_Custom())
    return r


class _Custom:
    def collect(self) -> list[CounterMetricFamily]:
        return [CounterMetricFamily("custom_count", "a custom collector's counter", value=5)]


def test_a_bare_counter_is_written_under_its_registered_name_as_the_go_client() -> None:
    text = metrics_text.render(registry(), {"events", "custom_count"}).decode()
    assert '# TYPE events counter\nevents{type="Insert"} 3.0\n' in text
    assert "# TYPE custom_count counter\ncustom_count 5.0\n" in text
    assert "events_total" not in text
    assert "custom_count_total" not in text


def test_other_counters_keep_the_total_suffix_and_a_total_name_is_not_doubled() -> None:
    text = metrics_text.render(registry(), {"events"}).decode()
    assert "# TYPE jobs_total counter\njobs_total 1.0\n" in text
    assert "# TYPE plain_total counter\nplain_total 2.0\n" in text
    assert "_total_total" not in text


def test_created_samples_are_dropped_and_histograms_and_gauges_are_as_the_client_writes_them() -> None:
    text = metrics_text.render(registry(), {"events"}).decode()
    assert "_created" not in text
    assert '# TYPE latency_seconds histogram\nlatency_seconds_bucket{le="0.5"} 0.0\n' in text
    assert 'latency_seconds_bucket{le="1.0"} 1.0\nlatency_seconds_bucket{le="+Inf"} 1.0\n' in text
    assert "latency_seconds_count 1.0\nlatency_seconds_sum 0.7\n" in text
    assert "# TYPE unused_seconds histogram\n# HELP" in text  # the family is declared with no sample
    assert '# HELP size_bytes a "gauge"\\nwith a backslash \\\\\n' in text
    assert 'size_bytes{name="a\\"b\\\\c\\nd"} 7.0\n' in text


def test_the_text_parses_back_with_every_value() -> None:
    text = metrics_text.render(registry(), {"events", "custom_count"}).decode()
    e = Exposition.parse(text)
    assert e.types["events"] == "counter"
    assert e.get("events", type="Insert") == 3
    assert e.get("size_bytes", name='a\\"b\\\\c\\nd') == 7  # kept escaped by our reader
    assert len(e.type_lines) == len(set(e.type_lines))
    # prometheus_client's parser reads it too (and names a counter x as x_total, as OpenMetrics does)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["events"].samples[0].value == 3
    assert families["size_bytes"].samples[0].labels == {"name": 'a"b\\c\nd'}
