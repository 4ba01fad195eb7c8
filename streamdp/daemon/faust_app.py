"""A standard Faust app module: ``STREAMDP_CONFIG=spec.toml faust -A streamdp.daemon.faust_app
worker -l info``. Settings come from ``STREAMDP_*`` environment variables."""

from __future__ import annotations

from streamdp.daemon.app import create_app
from streamdp.daemon.gc_tuning import tune_garbage_collector
from streamdp.daemon.settings import DaemonSettings, env_settings

settings = DaemonSettings(**env_settings(None)).validate()  # type: ignore[arg-type]
app, runtime = create_app(settings)
tune_garbage_collector()
