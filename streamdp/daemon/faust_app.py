"""A standard Faust app module: ``STREAMDP_CONFIG=spec.toml faust -A streamdp.daemon.faust_app
worker -l info``. Settings come from ``STREAMDP_*`` environment variables."""

from __future__ import annotations

from typing import Any

import faust

from streamdp.daemon.app import create_app
from streamdp.daemon.diagnostics import replace_dump_signals_of_every_worker
from streamdp.daemon.gc_tuning import tune_garbage_collector
from streamdp.daemon.settings import DaemonSettings, env_settings
from streamdp.daemon.stop_deadline import STOP_DEADLINE_SECONDS, start_stop_deadline
from streamdp.daemon.topic_check import verify_topics_at_start
from streamdp.daemon.topology import input_topics, required_topics

settings = DaemonSettings(**env_settings(None)).validate()  # type: ignore[arg-type]
app, runtime = create_app(settings)
verify_topics_at_start(
    app, settings, required_topics(runtime.spec, settings), input_topics(runtime.spec)
)
tune_garbage_collector()


def _with_stop_deadline(name: str) -> None:
    # Faust's CLI builds its own Worker: its signal handlers start the stop deadline too
    handler = getattr(faust.Worker, name)

    def on_signal(self: Any) -> None:
        start_stop_deadline(STOP_DEADLINE_SECONDS)
        handler(self)

    setattr(faust.Worker, name, on_signal)


_with_stop_deadline("_on_sigterm")
_with_stop_deadline("_on_sigint")
# Faust's CLI builds its own Worker: the diagnostic dump replaces mode's frame-locals dump there
replace_dump_signals_of_every_worker(faust.Worker, runtime.describe_inputs)
