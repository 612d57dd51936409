"""``Router.serve_metrics(port)``: the router's metrics in the Prometheus text format.

Needs the optional ``prometheus_client`` (``pip install 'loadprobe[prometheus]'``); the rest of
loadprobe.route never imports it. Each scrape reads ``router.metrics()`` afresh.

Usage::

    server, thread = router.serve_metrics(9464)     # http://127.0.0.1:9464/metrics
    server.shutdown()
"""

from __future__ import annotations

from typing import Any

__all__ = ["serve"]


def _collector(router) -> Any:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    class RouterCollector:
        def collect(self):
            m = router.metrics()
            gauges = {
                "queue_len": "requests waiting for a slot", "in_service": "executions in progress",
                "latency_ms": "mean time in service per request over the window, ms",
                "error_rate": "failed share of requests over the window",
                "utilisation": "busy share of the engine's slots over the window",
            }
            for key, text in gauges.items():
                family = GaugeMetricFamily(f"loadprobe_route_engine_{key}", text, labels=["engine"])
                for name, engine in m["engines"].items():
                    if engine[key] is not None:
                        family.add_metric([name], engine[key])
                yield family
            rejects = CounterMetricFamily("loadprobe_route_rejects", "requests rejected", labels=["engine", "reason"])
            for name, engine in m["engines"].items():
                for reason, n in engine["rejected"].items():
                    rejects.add_metric([name, reason], n)
            yield rejects
            abandoned = CounterMetricFamily(
                "loadprobe_route_abandoned_at_close",
                "plain-function executor calls still running when the router closed", labels=["engine", "stage"])
            late = CounterMetricFamily("loadprobe_route_late_results",
                                       "results of abandoned calls that came after the close, dropped",
                                       labels=["engine"])
            for name, engine in m["engines"].items():
                for stage, n in engine["abandoned_at_close"].items():
                    abandoned.add_metric([name, stage], n)
                late.add_metric([name], engine["late_results"])
            yield abandoned
            yield late
            failovers = CounterMetricFamily("loadprobe_route_failovers", "requests moved to the fallback",
                                            labels=["stage"])
            breaker = GaugeMetricFamily("loadprobe_route_breaker_open", "1 while the stage's breaker is not closed",
                                        labels=["stage"])
            for name, stage in m["stages"].items():
                failovers.add_metric([name], stage["failovers"])
                if stage["breaker"] is not None:
                    breaker.add_metric([name], 0 if stage["breaker"] == "closed" else 1)
            yield failovers
            yield breaker
            requests = CounterMetricFamily("loadprobe_route_requests", "requests ended, by outcome",
                                           labels=["outcome"])
            for outcome in ("ok", "rejected", "failed"):
                requests.add_metric([outcome], m["requests"][outcome])
            yield requests

    return RouterCollector()


def serve(router, port: int, addr: str = "127.0.0.1"):
    """Start an HTTP server for ``/metrics`` in a daemon thread; returns prometheus_client's (server, thread)."""
    try:
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError:
        raise ImportError("Router.serve_metrics() needs prometheus_client: pip install 'loadprobe[prometheus]'") from None
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_collector(router))
    return start_http_server(port, addr=addr, registry=registry)
