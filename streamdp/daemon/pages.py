"""The worker's two HTTP pages: ``/metrics`` (Prometheus) and ``/status`` (JSON).

Faust's own routes are off (``web_tables_enabled=False``, ``web_router_enabled=False``): they
would serve table contents, raw partial sums among them. These two pages are all the worker
serves.
"""

from __future__ import annotations

from typing import Any

import faust
from prometheus_client import CONTENT_TYPE_LATEST

from streamdp.daemon.runtime import WorkerRuntime
from streamdp.metrics import StreamdpMetrics

__all__ = ["metrics_response", "serve_pages", "status_response"]


def metrics_response(web: Any, metrics: StreamdpMetrics) -> Any:
    """The Prometheus text exposition of ``metrics``."""
    body = metrics.exposition().decode("utf-8")
    return web.text(body, content_type=CONTENT_TYPE_LATEST.split(";")[0])


def status_response(web: Any, runtime: WorkerRuntime) -> Any:
    """The status view, with status 503 until the worker is ready."""
    # 503 until the state table is restored: readiness probes must not route to a worker
    # that would start a source from empty state
    return web.json(runtime.status(), status=200 if runtime.ready else 503)


def serve_pages(app: faust.App, runtime: WorkerRuntime) -> None:
    """Register ``/metrics`` and ``/status`` on the Faust app ``app``."""

    @app.page("/metrics")
    async def metrics_view(web: Any, request: Any) -> Any:  # noqa: ARG001
        return metrics_response(web, runtime.metrics)

    @app.page("/status")
    async def status_view(web: Any, request: Any) -> Any:  # noqa: ARG001
        return status_response(web, runtime)
