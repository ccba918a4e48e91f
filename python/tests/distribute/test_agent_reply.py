"""What the controller takes from a rank agent's reply (``distribute/agent_reply.py``): the last
JSON object on its standard output, and from it only values of the shape it uses. An agent
of another version, or a line nested past the parser, gives no value rather than a
traceback in `service status`, `up`, `down` or a roll back (a hunt over replies such as
``"containers": 1`` found status raising AttributeError)."""

from __future__ import annotations

import json
import re
import signal
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.distribute import ssh
from sparkflake.distribute.agent_reply import (
    AgentReply,
    MalformedReply,
    count_at,
    digest_at,
    flag_at,
    last_json,
    object_at,
    objects_at,
    optional_text_at,
    text_at,
    texts_at,
)
from sparkflake.distribute.ssh import StartedAgent

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=6),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=10)


def test_the_last_object_line_is_the_reply_and_other_lines_are_passed_over():
    text = "\n".join(["log line", "[" * 100_000 + "]" * 100_000, json.dumps({"status": "ok", "n": 1}), "[1]", "9" * 5000])
    assert last_json(text) == {"status": "ok", "n": 1}


@given(st.dictionaries(st.sampled_from(["containers", "container", "container_id", "status", "current"]), JSON))
def test_any_reply_gives_containers_as_objects_and_texts_as_strings(result):
    reply = AgentReply(0, result, "")
    containers = reply.containers
    assert isinstance(containers, list) and all(isinstance(item, dict) for item in containers)
    if isinstance(result.get("containers"), list):
        assert containers == [item for item in result["containers"] if isinstance(item, dict)]
    for key in ("container", "container_id", "status"):
        value = reply.text(key)
        assert value is None or (isinstance(value, str) and value == result[key] and value)


def test_a_reply_of_the_expected_shape_reads_as_written():
    reply = AgentReply(0, {"status": "ok", "container": "c", "container_id": "0" * 64,
                           "containers": [{"name": "c", "running": True}]}, "")
    assert reply.text("status") == "ok" and reply.text("container") == "c"
    assert reply.containers == [{"name": "c", "running": True}]
    assert AgentReply(255, None, "ssh: connect refused").containers == []


AGENT_WRITING_BYTES = (
    "import sys\n"
    "sys.stdout.buffer.write(b'motd \\xff\\xfe\\n' + b'{\"status\": \"ok\", \"n\": 1}\\n'); sys.stdout.flush()\n"
    "sys.stderr.buffer.write(b'warning \\xc3\\x28\\n')\n"
)


def test_an_agent_writing_bytes_that_are_not_utf8_gives_its_reply_not_a_decoding_error():
    # A login banner or a log line in another encoding is not the agent's to control; the
    # reply is still the last JSON object line (before: UnicodeDecodeError from communicate).
    reply = StartedAgent([sys.executable, "-c", AGENT_WRITING_BYTES]).finish()
    assert reply.returncode == 0 and reply.result == {"status": "ok", "n": 1}
    assert reply.stderr == "warning \ufffd(\n"
    first = StartedAgent([sys.executable, "-c", AGENT_WRITING_BYTES]).first_reply()
    assert first.result == {"status": "ok", "n": 1}


def test_an_agent_that_ends_before_its_first_reply_gives_its_status_and_stderr():
    ended = StartedAgent([sys.executable, "-c", "import sys; print('banner'); sys.stderr.write('no such layout\\n'); sys.exit(2)"])
    reply = ended.first_reply()
    assert (reply.returncode, reply.result, reply.describe_failure()) == (2, None, "no such layout")


def test_an_agent_whose_output_has_no_end_is_ended_at_the_reply_limit_with_a_reason(monkeypatch):
    # before: communicate() held all of it (a line without a newline, or lines without end,
    # grew the controller's memory until the agent stopped, if ever)
    monkeypatch.setattr(ssh, "REPLY_LIMIT", 1 << 20)
    for endless in ("os.write(1, b'x' * 65536)", "os.write(1, b'{\"status\": \"ok\"}\\n' * 4096)"):
        agent = StartedAgent([sys.executable, "-c", f"import os\nwhile True: {endless}"])
        reply = agent.finish(timeout=60)
        assert reply.result is None and reply.returncode == -signal.SIGKILL
        assert reply.describe_failure() == f"sparkflake: ended the agent: its output passed {1 << 20} bytes"
        assert agent.process.stdout is not None and agent.process.stdout.closed


def test_an_agent_that_writes_no_first_reply_is_ended_after_the_time_out():
    # before: first_reply waited for ever (fan-out's commit agents are asked in a pool that the
    # run then waited on)
    agent = StartedAgent([sys.executable, "-c", "import sys, time; print('banner', flush=True); time.sleep(600)"])
    began = time.monotonic()
    reply = agent.first_reply(timeout=1.0)
    assert time.monotonic() - began < 30
    assert reply.unreachable and reply.describe_failure() == "sparkflake: ended the agent: no reply within 1s"
    assert agent.process.returncode == -signal.SIGKILL


def test_an_agent_past_its_time_out_is_ended_and_reaped():
    agent = StartedAgent([sys.executable, "-c", "import time; time.sleep(600)"])
    reply = agent.finish("input", timeout=0.5)
    assert reply.unreachable and reply.describe_failure() == "sparkflake: ended the agent: timed out after 0.5s"
    assert agent.process.returncode == -signal.SIGKILL


def test_a_chatty_stderr_never_blocks_the_agent_and_only_its_last_lines_are_kept():
    # 8 MiB of stderr before the reply: more than a pipe holds, so an agent nobody drains blocks
    chatty = ("import sys\nfor n in range(100_000): sys.stderr.write(f'warning {n} ' + 'x' * 80 + '\\n')\n"
              "sys.stderr.write('y' * 100_000 + '\\n')\nprint('{\"status\": \"ok\"}')")
    reply = StartedAgent([sys.executable, "-c", chatty]).finish(timeout=60)
    assert reply.returncode == 0 and reply.result == {"status": "ok"}
    lines = reply.stderr.splitlines()
    assert len(lines) == 20 and lines[-2].startswith("warning 99999 ") and lines[-1] == "y" * 4096


def test_input_an_agent_does_not_read_ends_nothing_but_the_write():
    # it exits at once: writing 4 MiB to it gets a broken pipe, its reply is still read
    reply = StartedAgent([sys.executable, "-c", "print('{\"status\": \"refused\"}')"]).finish("z" * (4 << 20))
    assert reply.returncode == 0 and reply.result == {"status": "refused"}


READERS = {
    "count": (count_at, lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 63),
    "flag": (flag_at, lambda v: isinstance(v, bool)),
    "text": (text_at, lambda v: isinstance(v, str) and v != ""),
    "texts": (texts_at, lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v)),
    "object": (object_at, lambda v: isinstance(v, dict)),
    "objects": (objects_at, lambda v: isinstance(v, list) and all(isinstance(i, dict) for i in v)),
    "digest": (digest_at, lambda v: isinstance(v, str) and re.fullmatch(r"sha256:[0-9a-f]{64}", v) is not None),
}


@given(st.sampled_from(sorted(READERS)), JSON | st.integers(min_value=-(2**70), max_value=2**70) | st.just("sha256:" + "0" * 64),
       st.booleans())
def test_a_shape_reader_gives_the_value_when_it_has_the_shape_and_refuses_it_by_path_otherwise(shape, value, present):
    reader, has_shape = READERS[shape]
    document = {"key": value} if present else {}
    try:
        assert reader(document, "key", "rank s1", "$.import") == value
        assert present and has_shape(value)
    except MalformedReply as exc:
        assert not (present and has_shape(value))
        assert exc.message.startswith("rank s1: the agent's reply $.import.key: expected ") and exc.exit_code == 1
        assert exc.message.split(", got ")[1].startswith("nothing" if not present else "null" if value is None else "")


def test_optional_text_is_none_when_missing_or_null_and_refused_otherwise():
    assert optional_text_at({}, "tag", "r") is None and optional_text_at({"tag": None}, "tag", "r") is None
    assert optional_text_at({"tag": "t"}, "tag", "r") == "t"
    with pytest.raises(MalformedReply, match=r"\$.tag: expected a non-empty string, got integer 1"):
        optional_text_at({"tag": 1}, "tag", "r")


def test_nan_and_infinity_lines_are_no_reply():
    assert last_json('{"status": "ok"}\n{"size": NaN}\n{"size": Infinity}') == {"status": "ok"}
