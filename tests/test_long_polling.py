"""MessageArrivalHub (rmq/broker/long_polling.py): parked pulls and fetches wake on an arrival
notified from the event loop's own thread (the Kafka produce path) or from another thread (the
reput thread), time out with False, and leave no waiter behind when cancelled."""
from __future__ import annotations

import asyncio
import threading

from rmq.broker.long_polling import MessageArrivalHub


def _hub(maxes=None):
    maxes = maxes if maxes is not None else {}
    return MessageArrivalHub(lambda t, q: maxes.get((t, q), 0))


def test_notify_on_the_loop_thread_wakes_only_waiters_below_the_new_end():
    async def main():
        hub = _hub()
        low = asyncio.ensure_future(hub.wait([("T", 0, 0)], 30))
        high = asyncio.ensure_future(hub.wait([("T", 0, 5)], 0.3))   # wants offset 5 or more
        other = asyncio.ensure_future(hub.wait([("T", 1, 0)], 0.3))  # another queue
        await asyncio.sleep(0)
        hub.notify("T", 0, 3)                # queue 0 now ends at 3: only `low` is past its offset
        assert await asyncio.wait_for(low, 5) is True
        assert await high is False and await other is False
        assert hub.active == 0 and not hub._waiters
    asyncio.run(main())


def test_notify_from_another_thread_wakes_the_waiter():
    async def main():
        hub = _hub()
        fut = asyncio.ensure_future(hub.wait([("T", 2, 7), ("U", 0, 0)], 30))
        await asyncio.sleep(0)
        th = threading.Thread(target=hub.notify, args=("U", 0, 1))
        th.start()
        th.join(5)
        assert await asyncio.wait_for(fut, 5) is True
        assert hub.active == 0 and not hub._waiters
    asyncio.run(main())


def test_an_arrival_before_registration_returns_at_once_and_timeouts_say_false():
    async def main():
        hub = _hub({("T", 0): 4})
        assert await asyncio.wait_for(hub.wait([("T", 0, 2)], 30), 5) is True   # already past offset 2
        assert await hub.wait([("T", 0, 4)], 0.05) is False                     # nothing past 4
        assert await hub.wait([("T", 0, 4)], 0) is False
        assert hub.active == 0 and not hub._waiters
    asyncio.run(main())


def test_a_cancelled_wait_leaves_no_waiter_and_a_later_notify_is_harmless():
    async def main():
        hub = _hub()
        fut = asyncio.ensure_future(hub.wait([("T", 0, 0)], 30))
        await asyncio.sleep(0)
        assert hub.active == 1
        fut.cancel()
        await asyncio.gather(fut, return_exceptions=True)
        assert fut.cancelled()
        assert hub.active == 0 and not hub._waiters
        hub.notify("T", 0, 10)
        # the same key parks again and wakes normally
        again = asyncio.ensure_future(hub.wait([("T", 0, 0)], 30))
        await asyncio.sleep(0)
        hub.notify("T", 0, 11)
        assert await asyncio.wait_for(again, 5) is True
    asyncio.run(main())
