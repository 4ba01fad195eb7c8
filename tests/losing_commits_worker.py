"""``streamdp worker`` whose commits of one input topic stop reaching the broker while
faust-streaming believes they did: the commit check's true positive for a diverged commit.

The client leaves the topic named in the environment variable ``LOSE_COMMITS`` out of every
commit and reports success, as faust-streaming's aiokafka driver does for a partition it finds
missing from the assignment. faust-streaming's record of its commits moves on (the broker took
the commit, as far as it can tell); the broker's committed offset does not. From outside this
looks as what CI saw once (the broker's committed offset of a partition stayed put while the
worker had processed all of it and sat ready); only the broker's answer
(``streamdp.daemon.watchdog``) shows it. Used by tests/test_daemon_broker.py:

    python tests/losing_commits_worker.py worker --config ... (the flags of ``streamdp worker``)
"""

from __future__ import annotations

import os
import sys
from typing import Any

from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

from streamdp.cli import main

LOST_TOPIC = os.environ["LOSE_COMMITS"]
_commit = AIOKafkaConsumerThread._commit


async def _commit_losing_the_topic(self: AIOKafkaConsumerThread, offsets: Any) -> bool:
    kept = {tp: offset for tp, offset in offsets.items() if tp.topic != LOST_TOPIC}
    if not kept:
        return True
    return bool(await _commit(self, kept))


AIOKafkaConsumerThread._commit = _commit_losing_the_topic  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
