"""``streamdp worker`` whose input path loses one fetch: the stall watchdog's true positive.

faust-streaming 0.15 could drop records it had fetched (docs/dev-broker-notes.md, finding 4):
its read offset moved past them and they never reached the worker. This program runs the real
worker with that fault injected once: the first run of records fetched from an input topic named
in the environment variable ``DROP_FIRST_FETCH_OF`` is accepted by the worker's batch queue and
thrown away, so the partition has records, the consumer's position is past them, and none is
ever processed. With nothing produced after them no offset jump reveals the loss; only the stall
watchdog (``--stall-exit``) can. Used by tests/test_kafka_cluster.py:

    python tests/dropping_worker.py worker --config ... (the flags of ``streamdp worker``)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from streamdp.cli import main
from streamdp.daemon import batch_input

DROP_TOPIC = os.environ["DROP_FIRST_FETCH_OF"]
_put = batch_input.BatchQueue.put
_dropped: list[int] = []


async def _put_losing_one_fetch(
    self: batch_input.BatchQueue, run: Sequence[Any], *, generation: int | None = None
) -> bool:
    if not _dropped and run and run[0].topic == DROP_TOPIC:
        _dropped.append(len(run))
        return True  # "queued": the consumer moves its read offset past the records
    return await _put(self, run, generation=generation)


batch_input.BatchQueue.put = _put_losing_one_fetch  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
