"""The watchdog (``core/watchdog.py``) that ends a peer gone silent: it fires once the silence
lasts its seconds, not while it is fed, and never after it was stopped."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from sparkflake.core.watchdog import Watchdog


def test_it_fires_once_after_the_silence_and_ends_a_blocked_read():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], stdout=subprocess.PIPE)
    assert process.stdout is not None
    began = time.monotonic()
    with Watchdog(0.5, process.kill) as watchdog:
        assert process.stdout.read() == b""  # blocked until the watchdog ended the writer
    waited = time.monotonic() - began
    assert watchdog.fired and 0.5 <= waited < 10 and process.wait() < 0


def test_feeding_it_keeps_it_quiet_and_stopping_it_ends_the_watch():
    calls: list[float] = []
    watchdog = Watchdog(0.3, lambda: calls.append(time.monotonic()))
    for _ in range(10):  # 1 s of feeding, every 0.1 s: never 0.3 s of silence
        time.sleep(0.1)
        watchdog.feed()
    watchdog.stop()
    time.sleep(0.5)
    assert calls == [] and not watchdog.fired


def test_it_calls_on_silence_exactly_once():
    fired = threading.Event()
    calls: list[int] = []

    def on_silence() -> None:
        calls.append(1)
        fired.set()

    watchdog = Watchdog(0.1, on_silence)
    assert fired.wait(5)
    time.sleep(0.3)
    watchdog.stop()
    assert calls == [1] and watchdog.fired
