"""``streamdp worker`` whose Kafka client never fetches one input topic: the stall watchdog's
true positive for a partition no fetch has answered for.

The records of the topic named in the environment variable ``NEVER_FETCH`` exist on the broker
but aiokafka's fetcher leaves its partitions out of every fetch request, so the client learns
neither their records nor their end offset (a partition with no fetch answer has no known end:
the view the watchdog read alone would show nothing to wait for). Only the watchdog's question
to the broker (``streamdp.daemon.watchdog``) sees the records. Used by
tests/test_daemon_broker.py:

    python tests/unfetching_worker.py worker --config ... (the flags of ``streamdp worker``)
"""

from __future__ import annotations

import os
import sys
from typing import Any

from aiokafka.consumer.fetcher import Fetcher

from streamdp.cli import main

NEVER_FETCHED = os.environ["NEVER_FETCH"]
_actions_per_node = Fetcher._get_actions_per_node


class _AssignmentWithout:
    """An aiokafka assignment seen without the never-fetched topic's partitions."""

    def __init__(self, assignment: Any) -> None:
        self._assignment = assignment
        self.tps = {tp for tp in assignment.tps if tp.topic != NEVER_FETCHED}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._assignment, name)


def _actions_without_the_topic(self: Fetcher, assignment: Any) -> Any:
    return _actions_per_node(self, _AssignmentWithout(assignment))


Fetcher._get_actions_per_node = _actions_without_the_topic  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
