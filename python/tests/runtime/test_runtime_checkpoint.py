"""The synthetic target checkpoint's tokenizer (runtime/checkpoint.py): what vLLM's
VllmConfig builds when a reasoning parser is set. That the image's transformers loads it
and vLLM's create_engine_config passes with it is test_runtime_real.py's (every default
case's runtime.engine-config)."""

from __future__ import annotations

import json

from sparkflake.runtime import checkpoint


def test_the_target_mount_holds_the_tokenizer_and_the_draft_mount_does_not(tmp_path):
    binds = checkpoint.prepare(tmp_path, (checkpoint.ContainerMount("/models/target", checkpoint.TARGET),
                                          checkpoint.ContainerMount("/models/draft", checkpoint.DRAFT)))
    target, draft = (host for host, _, _ in binds)
    assert sorted(path.name for path in target.iterdir()) == ["config.json", "tokenizer.json", "tokenizer_config.json"]
    assert sorted(path.name for path in draft.iterdir()) == ["config.json"]
    tokenizer = json.loads((target / "tokenizer.json").read_text())
    vocabulary = tokenizer["model"]["vocab"]
    # every GLM marker the parsers look up, each with its own id, and each an added special token
    assert set(checkpoint.GLM_MARKERS) <= set(vocabulary)
    assert len(set(vocabulary.values())) == len(vocabulary)
    assert {(token["content"], token["id"]) for token in tokenizer["added_tokens"]} == set(vocabulary.items())
    assert tokenizer["model"]["unk_token"] in vocabulary
    config = json.loads((target / "tokenizer_config.json").read_text())
    assert config["eos_token"] in vocabulary and config["model_max_length"] == checkpoint.GLM53_MAX_POSITIONS
