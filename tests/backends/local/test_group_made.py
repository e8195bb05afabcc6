"""No rank goes on before every rank has made the process group (real TCPStore).

A rank whose code ends at once used to exit while its peer still connected the gloo
mesh, and the peer failed with "Connection closed by peer" (twelve tiny jobs at once,
in CI). The ranks now meet on the attempt's rendezvous store after making the group.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import torch.distributed as dist

from alchemist.runtime import worker


def test_a_rank_waits_until_every_rank_made_the_group() -> None:
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    stores = [
        dist.PrefixStore(
            "job/attempt-0",
            dist.TCPStore("127.0.0.1", server.port, is_master=False, timeout=timedelta(seconds=30)),
        )
        for _ in range(2)
    ]
    first = threading.Thread(target=worker._all_ranks_made_the_group, args=(stores[0], 2))
    first.start()
    first.join(timeout=1.0)
    assert first.is_alive(), "rank 0 went on before rank 1 had made the group"
    worker._all_ranks_made_the_group(stores[1], 2)  # the last rank: both go on
    first.join(timeout=30)
    assert not first.is_alive()
    # another attempt (another prefix) meets afresh
    again = dist.PrefixStore("job/attempt-1", stores[0])
    lone = threading.Thread(target=worker._all_ranks_made_the_group, args=(again, 2))
    lone.start()
    lone.join(timeout=1.0)
    assert lone.is_alive()
    worker._all_ranks_made_the_group(dist.PrefixStore("job/attempt-1", stores[1]), 2)
    lone.join(timeout=30)
    assert not lone.is_alive()
