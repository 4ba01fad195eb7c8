"""Long SIGKILL fault campaign (issue 16): >= 100 SIGKILLs of a live worker, then every output
must be exactly what a file replay of the same input publishes.

1. start one broker on 127.0.0.1: Apache Kafka (``streamdp.broker.KafkaBroker``, one KRaft
   node; the default) or Tansu (``--engine tansu``, ``streamdp.broker.EmbeddedBroker``), and
   create the topics of both seed scenarios (restaurant and hospital in one spec, some bad
   records mixed in; the harness's 10-year lateness and frozen public clock);
2. split the input into ``--slices`` slices at increasing line indices (the cuts). The kills are
   planned in blocks, one block per slice: the block's slice is produced while the worker is
   down (so the restarted worker meets a backlog: a "mid-backlog" kill follows), one kill of the
   block comes right after the operator's close records through the slice's cut instant were
   sent (sent only once the input before the cut was committed by the worker), the others come
   at random moments after the worker became ready ("running") or after a restart, before it is
   ready ("starting"). Delays are drawn from a seeded RNG: 0.2 s to ``--max-delay`` s (0.2 s to
   1 s for the kills after a close or in a backlog). Every kill is a SIGKILL, followed by an
   immediate restart; exit status 75 ("restart me") is restarted by the harness's supervisor;
3. after the last kill: one more worker, wait until every input offset is committed, then check
     - every release key the replay publishes was published, with exactly one value, equal to
       the replay's, and no other release key was published;
     - per consistent key, the latest revision equals the replay's final one (no other keys);
     - every noisy node key was written to the state changelog exactly once (never redrawn);
     - every input offset is committed by the worker's group (lag 0);
     - every worker exit was a SIGKILL of ours or a status-75 exit (restarted), never another
       status; the final worker stops with status 0.
   The reference is ``daemon_harness.replay_outputs_through_cuts`` over the same cuts.

    .venv/bin/python benchmarks/kill_campaign.py [--kills 100] [--engine kafka|tansu]

Prints progress (kill i/N) and a table, writes ``benchmarks/out/kill_campaign.md`` (with the
command line; with ``--write`` the committed ``benchmarks/results/kill_campaign.md``). Exits 1
when any check fails. Worker and broker logs stay in a temporary directory whose path is
printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shlex
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from daemon_harness import (  # noqa: E402  (the tests' harness: a plain module in tests/)
    AnyBroker,
    Scenario,
    Worker,
    close_records,
    collect,
    committed_offsets,
    create_topics,
    has_all,
    lines_as_records,
    make_scenario,
    produce,
    record_counts,
    replay_outputs_through_cuts,
)
from results_dir import add_write_flag, output_dir  # noqa: E402

from streamdp.broker import EmbeddedBroker, KafkaBroker  # noqa: E402
from streamdp.daemon.routing import OutputTopics  # noqa: E402
from streamdp.errors import EXIT_INPUT_GAP  # noqa: E402

PARTITIONS = 2
APP_ID = "app-kill-campaign"
SUFFIX = "kc"
KILLED = -9  # Popen.returncode of a process ended by SIGKILL
Facts = dict[str, Any]  # what the results table shows, by name


class CampaignAbortedError(RuntimeError):
    """The campaign could not go on (a worker never became ready, input never consumed)."""


@dataclass
class Tally:
    kinds: Counter[str] = field(default_factory=Counter)
    exit_statuses: Counter[int] = field(default_factory=Counter)
    supervisor_restarts: int = 0  # restarts after exit status 75, by the harness's supervisor
    kills: int = 0
    closes_sent: int = 0
    in_backlog: int = 0  # kills that left produced input uncommitted (work lost mid-backlog)
    unexpected_exits: list[str] = field(default_factory=list)


def plan_kills(kills: int, slices: int, rng: random.Random) -> list[list[str]]:
    """One block of kill kinds per slice: "backlog" first (its slice was just produced),
    "after-close" at a random later position, the rest "running" or "starting"."""
    if kills < 2 * slices:
        raise ValueError(
            f"--kills {kills} is too few for --slices {slices}: every slice needs 2 kills "
            f"(one in its backlog, one after its close); give --kills >= {2 * slices}"
        )
    blocks = []
    for b in range(slices):
        size = (b + 1) * kills // slices - b * kills // slices
        kinds = [rng.choice(("running", "running", "starting")) for _ in range(size)]
        kinds[0] = "backlog"
        kinds[rng.randrange(1, size)] = "after-close"
        blocks.append(kinds)
    return blocks


def slice_cuts(scenario: Scenario, slices: int) -> list[int]:
    longest = max(len(lines) for lines in scenario.lines.values())
    return [k * longest // slices for k in range(1, slices)]


def wait_committed(
    broker: AnyBroker, counts: dict[str, int], timeout: float
) -> dict[str, dict[int, int | None]]:
    """Wait until the worker group's committed offsets cover ``counts[topic]`` records per
    input topic; raise :class:`CampaignAbortedError` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        committed = {t: committed_offsets(broker, APP_ID, t, range(PARTITIONS)) for t in counts}
        if all(sum(o or 0 for o in committed[t].values()) >= n for t, n in counts.items()):
            return committed
        if time.monotonic() > deadline:
            raise CampaignAbortedError(
                f"input not committed within {timeout:.0f} s: want {counts}, committed {committed}"
            )
        time.sleep(0.5)


@contextlib.contextmanager
def start_broker(engine: str, logs: Path) -> Iterator[AnyBroker]:
    if engine == "tansu":
        with EmbeddedBroker(log_path=logs / "tansu.log", start_timeout=60.0) as tansu:
            yield tansu
    else:
        with KafkaBroker(log_path=logs / "kafka.log", start_timeout=240.0) as kafka:
            yield kafka


def run(args: argparse.Namespace, logs: Path) -> tuple[list[tuple[str, str, bool]], Facts]:
    rng = random.Random(args.seed)
    scenario = make_scenario(
        periods=args.periods, rate=args.rate, bad_fraction=args.bad_fraction, suffix=SUFFIX
    )
    config = logs / "streams.toml"
    config.write_text(scenario.spec_text)
    topics = OutputTopics.in_namespace(f"out-{SUFFIX}")
    cuts = slice_cuts(scenario, args.slices)
    bounds: list[int | None] = [0, *cuts, None]
    expected = replay_outputs_through_cuts(scenario, topics, cuts=cuts)
    blocks = plan_kills(args.kills, args.slices, rng)
    tally = Tally()
    facts: Facts = {
        "records": sum(len(v) for v in scenario.lines.values()),
        "bad_records": sum(1 for v in scenario.lines.values() for ln in v if ln.expect),
        "release_keys": len(expected[topics.releases]),
        "consistent_keys": len(expected[topics.consistent]),
    }
    print(
        f"scenario: {facts['records']} records ({facts['bad_records']} bad) on "
        f"{len(scenario.lines)} topics, {args.slices} slices, cuts {cuts}; the replay "
        f"publishes {facts['release_keys']} release keys, {facts['consistent_keys']} "
        f"consistent keys; logs in {logs}",
        flush=True,
    )

    with start_broker(args.engine, logs) as broker:
        create_topics(broker, scenario, config, PARTITIONS, app_id=APP_ID, topics=topics)
        generation = 0

        def start_worker() -> Worker:
            nonlocal generation
            generation += 1
            return Worker(
                broker, config, app_id=APP_ID, partitions=PARTITIONS,
                data_dir=logs / "data", log_path=logs / "worker.log",
                namespace=topics.releases.rsplit(".", 1)[0], clock=scenario.clock,
                input_path=args.input_path,
            )  # fmt: skip

        def ready(worker: Worker, why: str) -> None:
            try:
                worker.wait_ready(timeout=args.ready_timeout)
            except AssertionError as error:
                raise CampaignAbortedError(f"worker #{generation} ({why}): {error}") from None

        def end(worker: Worker, kind: str) -> None:
            """SIGKILL ``worker`` and record how its process had ended."""
            before = worker.process.poll()
            worker.kill()
            committed = {
                t: committed_offsets(broker, APP_ID, t, range(PARTITIONS)) for t in produced
            }
            pending = sum(
                n - sum(o or 0 for o in committed[t].values()) for t, n in produced.items()
            )
            tally.in_backlog += pending > 0
            code = int(worker.process.returncode)
            tally.supervisor_restarts += worker.restarts
            tally.exit_statuses[code] += 1
            tally.kinds[kind] += 1
            tally.kills += 1
            if code not in (KILLED, EXIT_INPUT_GAP):
                tally.unexpected_exits.append(
                    f"worker #{generation} had exited with status {code} before kill "
                    f"{tally.kills} ({kind}); log tail:\n{worker.log_tail(20)}"
                )
            print(
                f"kill {tally.kills}/{args.kills} {kind:<11} "
                f"(status {code}{', had exited' if before is not None else ''}; "
                f"input uncommitted at the kill {pending}; "
                f"restarts after 75 so far {tally.supervisor_restarts})",
                flush=True,
            )

        started = time.monotonic()
        worker: Worker | None = None
        produced = dict.fromkeys(scenario.lines, 0)  # records produced so far, per input topic
        try:
            for b, kinds in enumerate(blocks):
                start, stop = bounds[b], bounds[b + 1]
                assert start is not None
                produce(broker, lines_as_records(scenario, start=start, stop=stop))
                for t, v in scenario.lines.items():
                    produced[t] = len(v[:stop])
                for kind in kinds:
                    worker = start_worker()
                    if kind == "starting":
                        time.sleep(rng.uniform(0.2, args.max_delay))
                    elif kind == "after-close":
                        ready(worker, kind)
                        counts = {
                            t: len(v) if stop is None else min(stop, len(v))
                            for t, v in scenario.lines.items()
                        }
                        wait_committed(broker, counts, args.consume_timeout)
                        through = scenario.end if stop is None else scenario.cut_instant(stop)
                        produce(broker, close_records(scenario, topics, through))
                        tally.closes_sent += 1
                        time.sleep(rng.uniform(0.2, 1.0))
                    else:
                        ready(worker, kind)
                        high = 1.0 if kind == "backlog" else args.max_delay
                        time.sleep(rng.uniform(0.2, high))
                    end(worker, kind)
                    worker = None
            kill_seconds = time.monotonic() - started
            worker = start_worker()
            ready(worker, "final")
            totals = {t: len(v) for t, v in scenario.lines.items()}
            wait_committed(broker, totals, args.consume_timeout)
            seen = collect(
                broker,
                [topics.releases, topics.consistent],
                has_all(expected),
                timeout=args.consume_timeout,
            )
            # then everything on the output topics (the wait above may stop on a prefix)
            seen = collect(
                broker, [topics.releases, topics.consistent], lambda s: False, timeout=10
            )
            changelog_topic = f"{APP_ID}-state-changelog"
            changelog = collect(broker, [changelog_topic], lambda s: False, timeout=10)
            node_writes = {k: v for k, v in changelog[changelog_topic].items() if "|node|" in k}
            ends = {t: record_counts(broker, t, n) for t, n in totals.items()}
            deadline = time.monotonic() + 60
            while True:
                committed = {t: committed_offsets(broker, APP_ID, t, ends[t]) for t in ends}
                if committed == ends or time.monotonic() > deadline:
                    break
                time.sleep(1.0)
            final_status = worker.stop()
            tally.supervisor_restarts += worker.restarts
            worker = None
        finally:
            if worker is not None:
                worker.kill()
        wall = time.monotonic() - started

    checks = evaluate(expected, seen, topics, node_writes, ends, committed, tally, final_status)
    # for diagnosis: what the replay expected and every value seen, beside the logs
    (logs / "expected.json").write_text(json.dumps(expected, indent=1))
    (logs / "seen.json").write_text(json.dumps(seen, indent=1))
    facts.update(
        kills=tally.kills, kinds=dict(tally.kinds), exit_statuses=dict(tally.exit_statuses),
        supervisor_restarts=tally.supervisor_restarts, closes_sent=tally.closes_sent,
        in_backlog=tally.in_backlog,
        nodes=len(node_writes), node_writes=sum(len(v) for v in node_writes.values()),
        release_writes=sum(len(v) for v in seen[topics.releases].values()),
        consistent_writes=sum(len(v) for v in seen[topics.consistent].values()),
        final_status=final_status, kill_seconds=kill_seconds, wall_seconds=wall,
        unexpected_exits=tally.unexpected_exits,
    )  # fmt: skip
    return checks, facts


def evaluate(
    expected: dict[str, dict[str, str]],
    seen: dict[str, dict[str, list[str]]],
    topics: OutputTopics,
    node_writes: dict[str, list[str]],
    ends: dict[str, dict[int, int]],
    committed: dict[str, dict[int, int | None]],
    tally: Tally,
    final_status: int,
) -> list[tuple[str, str, bool]]:
    """(check, detail, passed) for every check of the module docstring's step 3."""
    checks = []
    want, got = expected[topics.releases], seen[topics.releases]
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    several = sorted(k for k, v in got.items() if len(set(v)) != 1)
    differ = sorted(k for k in set(want) & set(got) if set(got[k]) != {want[k]})
    rewrites = sum(len(v) - 1 for v in got.values())
    checks.append((
        "every release key published with exactly one value, equal to the replay's",
        (f"{len(want)} expected, {len(got)} published; missing {len(missing)}, extra "
        f"{len(extra)}, several values {len(several)}, differ {len(differ)} "
        f"(same-value re-publications: {rewrites}){_first(missing + extra + differ)}"),
        not (missing or extra or several or differ),
    ))  # fmt: skip
    want, got = expected[topics.consistent], seen[topics.consistent]
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    differ = sorted(
        k for k in set(want) & set(got)
        if max(got[k], key=lambda v: json.loads(v)["revision"]) != want[k]
    )  # fmt: skip
    checks.append((
        "latest consistent revision per key equals the replay's",
        (f"{len(want)} expected, {len(got)} published; missing {len(missing)}, extra "
        f"{len(extra)}, differ {len(differ)}{_first(missing + extra + differ)}"),
        not (missing or extra or differ),
    ))  # fmt: skip
    rewritten = sorted(k for k, v in node_writes.items() if len(v) != 1)
    checks.append((
        "every noisy node written to the state changelog exactly once",
        (f"{len(node_writes)} node keys, written more than once: {len(rewritten)}"
        f"{_first(rewritten)}"),
        bool(node_writes) and not rewritten,
    ))  # fmt: skip
    checks.append(
        (
            "every input offset committed (lag 0)",
            "; ".join(f"{t}: end {ends[t]}, committed {committed[t]}" for t in ends),
            all(committed[t] == ends[t] for t in ends),
        )
    )
    statuses = ", ".join(f"{c}: {n}" for c, n in sorted(tally.exit_statuses.items()))
    checks.append((
        "every worker exit was our SIGKILL or status 75 (restarted); final stop status 0",
        f"exit statuses at kill time {{{statuses}}}; restarts after status 75: "
        f"{tally.supervisor_restarts}; final stop status {final_status}"
        + "".join(f"\n    {u}" for u in tally.unexpected_exits),
        not tally.unexpected_exits and final_status == 0,
    ))  # fmt: skip
    return checks


def _first(keys: list[str]) -> str:
    return f" (first: {keys[:3]})" if keys else ""


def render(command: str, engine: str, checks: list[tuple[str, str, bool]], facts: Facts) -> str:
    failed = sum(1 for _, _, ok in checks if not ok)
    broker = (
        "Apache Kafka (streamdp.broker.KafkaBroker, one KRaft node)"
        if engine == "kafka"
        else "Tansu (streamdp.broker.EmbeddedBroker)"
    )
    rows = [
        ("broker", broker + ", 127.0.0.1"),
        ("kills (SIGKILL)", str(facts.get("kills", 0))),
        ("kill moments", ", ".join(f"{k} {n}" for k, n in sorted(facts.get("kinds", {}).items()))),
        ("kills with produced input not yet committed (mid-backlog)",
         str(facts.get("in_backlog", 0))),
        ("restarts after exit status 75", str(facts.get("supervisor_restarts", 0))),
        ("input records (bad among them)",
         f"{facts.get('records', 0)} ({facts.get('bad_records', 0)})"),
        ("close rounds sent", str(facts.get("closes_sent", 0))),
        ("release keys / writes seen",
         f"{facts.get('release_keys', 0)} / {facts.get('release_writes', 0)}"),
        ("consistent keys / writes seen",
         f"{facts.get('consistent_keys', 0)} / {facts.get('consistent_writes', 0)}"),
        ("noisy nodes / changelog writes",
         f"{facts.get('nodes', 0)} / {facts.get('node_writes', 0)}"),
        ("checks passed / failed", f"{len(checks) - failed} / {failed}"),
        ("wall time", (f"{facts.get('wall_seconds', 0):.0f} s (kill phase "
                      f"{facts.get('kill_seconds', 0):.0f} s)")),
    ]  # fmt: skip
    lines = [
        "# Long SIGKILL fault campaign (issue 16)",
        "",
        "Produced by `benchmarks/kill_campaign.py` (see its docstring for the method).",
        "",
        f"    {command}",
        "",
        (f"Run at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on a shared 2-core "
        "machine (other agents running)."),
        "",
        "| quantity | value |",
        "|---|---|",
        *(f"| {name} | {value} |" for name, value in rows),
        "",
        "## Checks",
        "",
        "| check | result | detail |",
        "|---|---|---|",
        *(f"| {name} | {'PASS' if ok else 'FAIL'} | {detail.replace(chr(10), '<br>')} |"
          for name, detail, ok in checks),
        "",
    ]  # fmt: skip
    if facts.get("aborted"):
        lines += ["## Aborted", "", "```", str(facts["aborted"]), "```", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=100, help="SIGKILLs in total")
    parser.add_argument("--engine", choices=("kafka", "tansu"), default="kafka")
    parser.add_argument("--slices", type=int, default=20, help="input slices (cuts + 1)")
    parser.add_argument("--periods", type=int, default=60)
    parser.add_argument("--rate", type=float, default=150, help="events per period and source")
    parser.add_argument("--bad-fraction", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=16, help="seed of the kill moments")
    parser.add_argument("--max-delay", type=float, default=3.0, help="longest delay to a kill")
    parser.add_argument("--input-path", choices=("batch", "stream"), default="batch")
    parser.add_argument("--ready-timeout", type=float, default=120.0)
    parser.add_argument("--consume-timeout", type=float, default=240.0)
    add_write_flag(parser)
    args = parser.parse_args()
    command = shlex.join([".venv/bin/python", "benchmarks/kill_campaign.py", *sys.argv[1:]])
    logs = Path(tempfile.mkdtemp(prefix="kill-campaign-"))
    try:
        checks, facts = run(args, logs)
    except CampaignAbortedError as error:
        checks = [("campaign ran to the end", str(error).splitlines()[0], False)]
        facts = {"aborted": str(error)}
        print(f"ABORTED: {error}", flush=True)
    report = render(command, args.engine, checks, facts)
    print(report)
    target = output_dir(args.write) / "kill_campaign.md"
    target.write_text(report)
    print(f"wrote {target}")
    print(f"logs: {logs}")
    return 1 if any(not ok for _, _, ok in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
