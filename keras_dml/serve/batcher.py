"""An asyncio micro-batcher: concurrent requests answered by one call on a batch.

Requests wait in a queue; a worker takes what is there (up to `max_batch`,
waiting at most `max_wait` seconds for more once the first arrived), runs
`function(items)` in a worker thread, and hands each request its own result.
"""

import asyncio
import collections

__all__ = ["MicroBatcher"]


class MicroBatcher:
    """Batches `submit(item)` calls into `function(list of items) -> list of results`.

    A result that is an exception is raised to its own caller only; an exception
    of the whole call is raised to every caller of the batch. `sizes` counts the
    batches run by their size.
    """

    def __init__(self, function, max_batch=32, max_wait=0.005):
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}.")
        self.function, self.max_batch, self.max_wait = function, max_batch, max_wait
        self.sizes = collections.Counter()
        self._queue = None
        self._worker = None
        self._loop = None

    async def submit(self, item):
        """The result of `item` (an exception result is raised)."""
        loop = asyncio.get_running_loop()
        if self._worker is None or self._loop is not loop:  # first call, or a new loop
            self._queue, self._loop = asyncio.Queue(), loop
            self._worker = loop.create_task(self._run())
        future = loop.create_future()
        await self._queue.put((item, future))
        result = await future
        if isinstance(result, BaseException):
            raise result
        return result

    async def _collect(self):
        batch = [await self._queue.get()]
        deadline = asyncio.get_running_loop().time() + self.max_wait
        while len(batch) < self.max_batch:
            if not self._queue.empty():
                batch.append(self._queue.get_nowait())
                continue
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(self._queue.get(), remaining))
            except asyncio.TimeoutError:
                break
        return batch

    async def _run(self):
        while True:
            batch = await self._collect()
            items = [item for item, _ in batch]
            self.sizes[len(items)] += 1
            try:
                results = await asyncio.to_thread(self.function, items)
            except Exception as error:  # every caller of the batch gets it
                results = [error] * len(items)
            for (_, future), result in zip(batch, results):
                if not future.done():
                    future.set_result(result)

    async def close(self):
        """Stops the worker (pending requests are cancelled)."""
        if self._worker is not None:
            self._worker.cancel()
            self._worker = None
