"""``streamdp demo``: the whole daemon live on this machine, with nothing else installed.

Starts the embedded Kafka-protocol broker (Tansu) on 127.0.0.1, creates the topics, starts one
``streamdp worker`` subprocess on ``streamdp/examples/demo.toml``, and runs synthetic producers for
the restaurant and hospital scenarios at a visible pace (one simulated day every ``--pace``
seconds; a few bad records mixed in). It consumes ``streamdp.releases``, ``streamdp.consistent``
and ``streamdp.dead-letter`` and shows the releases live: a redrawn table on a terminal, plain
log lines otherwise. Ctrl-C or SIGTERM (or ``--duration``) stops producers, worker (SIGTERM, then
wait) and broker, and exits 0.

Noise comes from the production OpenDP sampler unless ``--insecure-seed N`` asks for the INSECURE
seeded sampler (reproducible demo noise; the demo labels it as such on every screen).

Process layout: this command runs the session (:mod:`streamdp.demo.session`) as a child process
in a new session, because a terminal's Ctrl-C goes to the whole foreground process group and the
broker would die on it before the worker had stopped. Here Ctrl-C reaches only this front process,
which forwards it to the session as SIGTERM and waits; the session stops everything in order. The
child also dies with this process (``PR_SET_PDEATHSIG``), so nothing is ever orphaned.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from types import FrameType

from streamdp.errors import ConfigError
from streamdp.noise.insecure import check_insecure_seed


def register(parser: argparse.ArgumentParser) -> None:
    """Add the demo's arguments."""
    parser.add_argument(
        "--duration",
        type=float,
        metavar="SECONDS",
        help="stop cleanly after SECONDS of producing (default: run until Ctrl-C)",
    )
    parser.add_argument(
        "--pace",
        type=float,
        default=1.5,
        metavar="SECONDS",
        help="wall-clock seconds per simulated day (default 1.5)",
    )
    parser.add_argument(
        "--web-port",
        type=int,
        help="port of the worker's /metrics and /status (default 6066, or a free port if that one "
        "is taken)",
    )
    parser.add_argument(
        "--insecure-seed",
        type=int,
        metavar="N",
        help="INSECURE seeded noise and reproducible synthetic input (demo values only, never "
        "private; default: the secure OpenDP sampler and new input every run)",
    )
    parser.add_argument(
        "--partitions", type=int, default=2, help="partitions of every topic (default 2)"
    )


def check_args(args: argparse.Namespace) -> None:
    """Raise :class:`ConfigError` naming the first argument that is out of range."""
    if args.pace <= 0:
        raise ConfigError(f"--pace must be > 0 seconds per simulated day, got {args.pace}")
    if args.duration is not None and args.duration <= 0:
        raise ConfigError(f"--duration must be > 0 seconds, got {args.duration}")
    if args.partitions < 1:
        raise ConfigError(f"--partitions must be >= 1, got {args.partitions}")
    check_insecure_seed(args.insecure_seed)
    if args.web_port is not None and not 0 < args.web_port < 65536:
        raise ConfigError(f"--web-port must be a TCP port (1-65535), got {args.web_port}")


def session_argv(args: argparse.Namespace) -> list[str]:
    """The command line of the session child for ``args``."""
    argv = [sys.executable, "-m", "streamdp.demo.session", "--pace", repr(args.pace)]
    argv += ["--partitions", str(args.partitions)]
    if args.duration is not None:
        argv += ["--duration", repr(args.duration)]
    if args.web_port is not None:
        argv += ["--web-port", str(args.web_port)]
    if args.insecure_seed is not None:
        argv += ["--insecure-seed", str(args.insecure_seed)]
    return argv


def run(args: argparse.Namespace) -> int:
    """Run the demo session as a child and wait; returns its exit code (0 after a clean stop)."""
    from streamdp.demo.worker import die_with_parent

    check_args(args)
    child = subprocess.Popen(  # noqa: S603 - our own interpreter and module
        session_argv(args),
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=die_with_parent(),  # noqa: PLW1509 - only calls prctl
    )

    def forward(signum: int, frame: FrameType | None) -> None:  # noqa: ARG001
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
