"""What the controller takes from a rank agent's reply (``distribute/ssh.py``): the last
JSON object on its standard output, and from it only values of the shape it uses. An agent
of another version, or a line nested past the parser, gives no value rather than a
traceback in `service status`, `up`, `down` or a roll back (a hunt over replies such as
``"containers": 1`` found status raising AttributeError)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from sparkflake.distribute.ssh import AgentReply, last_json

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
