"""One background thread doing a writer's work items in order (the output writers copy
layer blobs on one while the build goes on). The first failure is kept, the items after
it are skipped, and ``stop`` (idempotent) waits for the thread; the writer raises
``failure`` when it finishes."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

Item = TypeVar("Item")


class BackgroundQueue(Generic[Item]):
    def __init__(self, work: Callable[[Item], object], name: str) -> None:
        self._work = work
        self._queue: queue.Queue[tuple[Item] | None] = queue.Queue()
        self.failure: BaseException | None = None
        self.stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (entry := self._queue.get()) is not None:
            if self.failure is None:
                try:
                    self._work(entry[0])
                except BaseException as exc:  # the writer raises it when it finishes
                    self.failure = exc

    def put(self, item: Item) -> None:
        self._queue.put((item,))

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self._queue.put(None)
            self._thread.join()
