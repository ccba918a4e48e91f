"""Profile model: the repository's profiles, canonical round trips, lookup, lock checks and
the precise message of every invalid form."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
from fixtures.lock_strategies import free_text, hex40, hex64, oci_digest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.core.records import record_to_dict
from sparkflake.lock.lock_file import write_lock
from sparkflake.lock.pins import DebPin, Lock, SdistPin, Target, WheelPin
from sparkflake.lock.profile_locks import input_for, load_all_profiles, load_locks, load_profile
from sparkflake.profile.lookup import check_profiles_distinct, find_profiles_dir, list_profiles
from sparkflake.profile.model import (
    CLAIM_STATUSES,
    KNOWN_ROLES,
    PROFILES_DIR_ENV,
    STATUSES,
    Absences,
    Checkpoint,
    CheckpointFile,
    Claim,
    DebianSpec,
    Profile,
    PythonSpec,
    Qualification,
)
from sparkflake.profile.profile_file import (
    dump_profile,
    parse_profile,
    read_profile,
)

pytestmark = pytest.mark.nix_sandbox  # needs nothing but Python: also run by the flake check

REPO_PROFILES = Path(__file__).resolve().parents[3] / "profiles"
DFLASH7_TEXT = (REPO_PROFILES / "glm53-dflash7" / "profile.toml").read_text()
MTP5_TEXT = (REPO_PROFILES / "glm53-mtp5" / "profile.toml").read_text()
SHA = "5f1c3f10d5ace66d4ba584415bbfe42b6ac1a0a9116a3b81dcbe50516ad924b3"


# --------------------------------------------------------------------------- fixtures


def small_lock(*, without: tuple[str, ...] = (), platform: str = "linux/arm64") -> Lock:
    """A lock holding every input the glm53 profiles name, with made-up hashes."""
    def wheel(dist: str, version: str, tag: str = "py3-none-any") -> WheelPin:
        filename = f"{dist.replace('-', '_')}-{version}-{tag}.whl"
        return WheelPin(name=dist, version=version, filename=filename, sha256=SHA, size=1,
                        tags=(tag,), urls=(f"https://files.example/{filename}",))

    pins = [
        wheel("vllm", "0.33.0", "cp38-abi3-manylinux_2_28_aarch64"),
        SdistPin(name="vllm-sdist", version="0.33.0", filename="vllm-0.33.0.tar.gz", sha256=SHA,
                 size=1, urls=("https://files.example/vllm-0.33.0.tar.gz",)),
        wheel("b12x", "1.0"), wheel("sparkcache", "1.0"), wheel("fastsafetensors", "0.1"),
        wheel("nvidia-nccl-cu13", "2.30.7", "py3-none-manylinux_2_18_aarch64"),
        wheel("torch", "2.14.0", "cp311-cp311-manylinux_2_28_aarch64"),
        wheel("nvidia-cuda-nvcc", "13.0.88", "py3-none-manylinux2014_aarch64"),
        wheel("nvidia-cuda-crt", "13.0.88", "py3-none-manylinux2014_aarch64"),
        wheel("nvidia-nvvm", "13.0.88", "py3-none-manylinux2014_aarch64"),
    ]
    for package in ("python3", "libc6", "libstdc++6", "libgcc-s1", "ca-certificates", "tzdata",
                    "libssl3", "libsqlite3-0", "zlib1g", "libibverbs1", "ibverbs-providers",
                    "g++", "python3.11-dev", "dash", "libc-bin"):
        pins.append(DebPin(name=f"{package}:arm64", package=package, version="1.0-1", architecture="arm64",
                           sha256=SHA, size=1, urls=(f"https://deb.example/{package}.deb",)))
    kept = [pin for pin in pins if pin.name not in without]
    return Lock(target=Target(platform, "3.11", "2.36"), inputs=tuple(kept))


def make_profiles_dir(tmp_path: Path, *, lock: Lock | None = None, dflash7: str = DFLASH7_TEXT,
                      mtp5: str | None = MTP5_TEXT) -> Path:
    profiles = tmp_path / "profiles"
    (profiles / "glm53-dflash7").mkdir(parents=True)
    (profiles / "glm53-dflash7" / "profile.toml").write_text(dflash7)
    if mtp5 is not None:
        (profiles / "glm53-mtp5").mkdir()
        (profiles / "glm53-mtp5" / "profile.toml").write_text(mtp5)
    if lock is not None:
        write_lock(profiles / "glm53.lock", lock)
    return profiles


def _error(text: str, shown: str = "profile.toml") -> str:
    with pytest.raises(InputError) as caught:
        parse_profile(text, shown)
    return str(caught.value)


def _replace(old: str, new: str, text: str = DFLASH7_TEXT) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


# --------------------------------------------------------------------------- the repo's profiles


def test_repository_profiles_validate_against_the_shared_lock() -> None:
    profiles = {profile.name: profile for profile in load_all_profiles(REPO_PROFILES)}
    assert {"glm53-dflash7", "glm53-mtp5"} <= set(profiles)
    for name in ("glm53-dflash7", "glm53-mtp5"):
        profile = profiles[name]
        assert profile.locks == ("../glm53.lock",)
        assert profile.lock_paths() == (REPO_PROFILES / "glm53.lock",)
        assert set(KNOWN_ROLES) <= set(profile.inputs)
        if (REPO_PROFILES / "glm53.lock").is_file():
            locks = load_locks(profile)
            assert input_for(profile, "vllm_wheel", locks).kind == "wheel"
            assert input_for(profile, "vllm_source", locks).kind in ("sdist", "git")
            assert input_for(profile, "nccl", locks).version == "2.30.7"  # type: ignore[union-attr]


def test_the_two_glm53_profiles_differ_where_the_seeds_say() -> None:
    dflash7 = load_profile("glm53-dflash7", REPO_PROFILES)
    mtp5 = load_profile("glm53-mtp5", REPO_PROFILES)
    assert dflash7.served_model_name != mtp5.served_model_name
    assert dflash7.cache_root != mtp5.cache_root
    assert dflash7.jit_root != mtp5.jit_root
    assert {dflash7.cache_root, dflash7.jit_root}.isdisjoint({mtp5.cache_root, mtp5.jit_root})
    # same vLLM source, B12X, fast loading and SparkCache
    assert dflash7.inputs == mtp5.inputs
    assert dflash7.python == mtp5.python and dflash7.debian == mtp5.debian
    assert dflash7.runtime["SPECULATIVE_METHOD"] == "dflash" and dflash7.runtime["SPECULATIVE_TOKENS"] == 7
    assert mtp5.runtime["SPECULATIVE_METHOD"] == "mtp" and mtp5.runtime["SPECULATIVE_TOKENS"] == 5


def test_dflash7_records_the_seeds_numbers() -> None:
    profile = load_profile("glm53-dflash7", REPO_PROFILES)
    assert profile.status == "implemented"  # qualified only once evidence binds our digest
    assert profile.qualified.manifest_digest is None
    assert {key: profile.qualified.settings[key] for key in ("TP", "PP", "DCP", "NODE_COUNT")} == {
        "TP": 4, "PP": 1, "DCP": 1, "NODE_COUNT": 4}
    assert profile.qualified.settings["SPECULATIVE_TOKENS"] == 7
    runtime = profile.runtime
    assert (runtime["MAX_MODEL_LEN"], runtime["MAX_NUM_BATCHED_TOKENS"]) == (1048576, 8192)
    assert (runtime["SPARKCACHE_NAMESPACE"], runtime["SPARKCACHE_PUBLICATION"]) == ("manager-pages-v2", "snapshot-v1")
    assert (runtime["KV_CACHE_DTYPE"], runtime["KV_CACHE_GIB"], runtime["CP_KV_INTERLEAVE"]) == ("fp8", 26, 1)
    assert profile.absent.distributions == ("deep_ep",)
    assert {"vllm==0.33.0", "b12x", "sparkcache", "fastsafetensors", "nvidia-nccl-cu13==2.30.7"} <= set(
        profile.python.requirements)
    claims = {claim.name: claim for claim in profile.claims}
    assert (claims["vllm-composition"].rev, claims["vllm-composition"].tree) == (
        "331573d20bd47e78327ed8d8b4d2e6d350bbb1ab", "927f52a0085bcecfd2ba679e5abebe1a62623daf")
    assert (claims["b12x"].rev, claims["b12x"].tree) == (
        "6255090a03b12c3f7d552102a02fac0b542fb8c9", "0bb58d0dcc10e29e00ff9850c0d719fca1aba5ad")
    assert (claims["sparkcache"].rev, claims["sparkcache"].tree, claims["sparkcache"].source_sha256) == (
        "5ec6a9953ad5d39120298bbfc26e95a6fa4b1dc3", "94c236b9dfbf5f70075eb47877fd9caaa5d8c249",
        "bc238f96e550c7ec27d4081dd1f2e741d404aaf5c8572d89ccc5e76812be4d63")
    assert claims["nccl-switchless-library"].sha256 == SHA
    assert claims["sparkcache-cuda-placement-library"].sha256 == (
        "d57509052b73853bcc8e3c3f47bb81748d87b9cbd8d908fc20d4c79a09aa400c")
    image = claims["r8-image"]
    assert image.reference == "ghcr.io/fujitsupolycom/sparkring-glm53-sparkcache"
    assert image.manifest_digest == "sha256:380283a506aeb8f9d486a3c64cd738e44268c3cc21590913ea9e4685869f256a"
    assert image.config_digest == "sha256:b3a13d8003e7de30d7737fd33c8307404e506ba570240819ec7eb4f5c611400f"
    assert all(claim.status == "unverified" for claim in profile.claims)
    assert set(profile.checkpoints) == {"target", "draft"}
    assert profile.checkpoints["draft"].files == ()


def test_mtp5_is_research_only_with_nothing_qualified() -> None:
    profile = load_profile("glm53-mtp5", REPO_PROFILES)
    assert profile.status == "research-only"
    assert profile.qualified.is_empty and not profile.qualified.settings
    assert set(profile.checkpoints) == {"target"}
    assert profile.absent == Absences()


@pytest.mark.parametrize("name", ["glm53-dflash7", "glm53-mtp5"])
def test_repository_profiles_round_trip(name: str) -> None:
    profile = load_profile(name, REPO_PROFILES)
    text = dump_profile(profile)
    parsed = parse_profile(text)
    assert parsed == profile
    assert dump_profile(parsed) == text
    assert tomllib.loads(text) == record_to_dict(profile)


# --------------------------------------------------------------------------- generated profiles

_env_key = st.from_regex(r"[A-Z][A-Z0-9_]{0,15}", fullmatch=True)
_env_value = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=20),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
)
_env_table = st.dictionaries(_env_key, _env_value, max_size=6)
_refused_table = st.dictionaries(
    _env_key, st.dictionaries(st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=8),
                              free_text, min_size=1, max_size=3), max_size=3)
_abs_path = st.from_regex(r"(/[a-z0-9_.-]{1,8}){1,4}", fullmatch=True).filter(
    lambda path: all(part not in (".", "..") for part in path.split("/"))
)
_label_key = st.from_regex(r"(org|io)\.[a-z0-9]{1,8}(\.[a-z0-9]{1,8}){0,2}", fullmatch=True)
_claims = st.one_of(
    st.builds(Claim, name=st.just("g"), kind=st.just("git"), subject=free_text, status=st.sampled_from(CLAIM_STATUSES),
              source=free_text, rev=hex40, tree=hex40, source_sha256=st.one_of(st.none(), hex64)),
    st.builds(Claim, name=st.just("f"), kind=st.just("file"), subject=free_text, status=st.sampled_from(CLAIM_STATUSES),
              source=free_text, sha256=hex64),
    st.builds(Claim, name=st.just("o"), kind=st.just("oci"), subject=free_text, status=st.sampled_from(CLAIM_STATUSES),
              source=free_text, reference=st.just("ghcr.io/a/b"), manifest_digest=oci_digest,
              config_digest=st.one_of(st.none(), oci_digest)),
)
_checkpoint = st.builds(
    Checkpoint,
    description=free_text,
    repository=st.one_of(st.none(), st.just("org/model")),
    architecture=st.one_of(st.none(), st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True)),
    pin=st.one_of(st.none(), st.lists(st.sampled_from(["config.json", "tokenizer.json", "*.safetensors",
                                                        "sub/model.json", "tok?n.*"]), max_size=3, unique=True).map(tuple)),
    files=st.lists(
        st.builds(CheckpointFile, path=st.from_regex(r"[a-z0-9_-]{1,8}(/[a-z0-9_.-]{1,8}){0,2}", fullmatch=True)
                  .filter(lambda p: all(part not in (".", "..") for part in p.split("/"))),
                  sha256=hex64, size=st.integers(0, 2**40)),
        max_size=3, unique_by=lambda entry: entry.path,
    ).map(tuple),
)


@st.composite
def profiles(draw: st.DrawFn) -> Profile:
    cache_root = draw(_abs_path)
    jit_root = draw(_abs_path.filter(lambda path: path != cache_root))
    qualified = draw(st.builds(
        Qualification, settings=_env_table, scope=st.lists(free_text, max_size=2, unique=True).map(tuple),
        limits=st.lists(free_text, max_size=2, unique=True).map(tuple), source=st.one_of(st.none(), free_text),
        manifest_digest=st.one_of(st.none(), oci_digest), config_digest=st.one_of(st.none(), oci_digest)))
    statuses = [status for status in STATUSES if status != "qualified"]
    if qualified.settings and qualified.manifest_digest is not None:
        statuses.append("qualified")
    checkpoints = {"target": draw(_checkpoint)}
    if draw(st.booleans()):
        checkpoints["draft"] = draw(_checkpoint)
    return Profile(
        name=draw(st.from_regex(r"[a-z0-9][a-z0-9-]{0,20}", fullmatch=True)),
        description=draw(free_text),
        status=draw(st.sampled_from(statuses)),
        platform=draw(st.sampled_from(["linux/arm64", "linux/amd64"])),
        served_model_name=draw(st.from_regex(r"[a-z0-9][a-z0-9.-]{0,20}", fullmatch=True)),
        cache_root=cache_root,
        jit_root=jit_root,
        locks=tuple(draw(st.lists(st.from_regex(r"(\.\./)?[a-z0-9]{1,8}\.lock", fullmatch=True), min_size=1, max_size=2, unique=True))),
        inputs=draw(st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True),
                                    st.from_regex(r"[a-z0-9][a-z0-9._+:-]{0,12}", fullmatch=True), min_size=1, max_size=6)),
        python=PythonSpec(requirements=tuple(draw(st.lists(st.sampled_from(
            ["vllm==0.33.0", "b12x", "torch>=2; python_version >= '3.11'", "a[x,y]~=1.2"]), min_size=1, max_size=4, unique=True)))),
        debian=DebianSpec(suite="bookworm", seed=tuple(draw(st.lists(st.sampled_from(
            ["python3", "libc6", "libstdc++6", "tzdata"]), min_size=1, max_size=4, unique=True)))),
        absent=Absences(distributions=tuple(draw(st.lists(st.sampled_from(["deep_ep", "DeepEP", "x.y"]), max_size=2, unique=True)))),
        runtime=draw(_env_table),
        refused=draw(_refused_table),
        qualified=qualified,
        checkpoints=checkpoints,
        labels=draw(st.dictionaries(_label_key, free_text, max_size=3)),
        claims=tuple(draw(st.lists(_claims, max_size=3, unique_by=lambda claim: claim.name))),
    )


@given(profiles())
def test_generated_profiles_round_trip_byte_identical(profile: Profile) -> None:
    text = dump_profile(profile)
    parsed = parse_profile(text)
    assert parsed == profile
    assert dump_profile(parsed) == text


@given(profiles(), st.randoms(use_true_random=False))
def test_table_key_order_does_not_change_the_bytes(profile: Profile, rng) -> None:
    runtime = list(profile.runtime.items())
    rng.shuffle(runtime)
    inputs = list(profile.inputs.items())
    rng.shuffle(inputs)
    from dataclasses import replace

    shuffled = replace(profile, runtime=dict(runtime), inputs=dict(inputs))
    assert shuffled == profile
    assert dump_profile(shuffled) == dump_profile(profile)


# --------------------------------------------------------------------------- invalid forms


def test_truncated_profile_names_line_and_column() -> None:
    cut = DFLASH7_TEXT.index('SPARKCACHE_NAMESPACE = "') + len('SPARKCACHE_NAMESPACE = "man')
    message = _error(DFLASH7_TEXT[:cut])
    line = DFLASH7_TEXT[:cut].count("\n") + 1
    assert message.startswith("profile.toml: invalid TOML: ")
    assert f"(at line {line}, column 28" in message


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ('status = "implemented"', 'status = "experimental"',
         'profile.toml: status: expected one of qualified, implemented, research-only, unsupported, got "experimental"'),
        ('status = "implemented"', 'status = "qualified"',
         "profile.toml: status: qualified needs [qualified] settings and the manifest_digest of the image"),
        ('schema = 1', 'schema = 2', "profile.toml: schema: expected the integer 1, got integer 2"),
        ('schema = 1\n', 'schema = 1\nowner = "me"\n', "profile.toml: owner: unknown key (expected one of: "),
        ('[python]\n', '[python]\nindex = "x"\n', "profile.toml: python.index: unknown key (expected one of: requirements)"),
        ('suite = "bookworm"\n', 'suite = "bookworm"\nmirror = "x"\n', "profile.toml: debian.mirror: unknown key"),
        ('name = "b12x"\nkind = "git"\n', 'name = "b12x"\nkind = "git"\nbranch = "main"\n',
         "profile.toml: claims[1].branch: unknown key"),
        ('cache_root = "/var/lib/sparkflake/cache/glm53-dflash7"', 'cache_root = "var/cache"',
         "profile.toml: cache_root: expected a normalized absolute path (no '..', '//' or trailing '/'), got \"var/cache\""),
        ('cache_root = "/var/lib/sparkflake/cache/glm53-dflash7"', 'cache_root = "/var/lib/../cache"',
         "profile.toml: cache_root: expected a normalized absolute path"),
        ('jit_root = "/var/lib/sparkflake/jit/glm53-dflash7"', 'jit_root = "/var/lib/sparkflake/cache/glm53-dflash7"',
         'profile.toml: jit_root: must differ from cache_root, both are "/var/lib/sparkflake/cache/glm53-dflash7"'),
        ('locks = ["../glm53.lock"]', 'locks = ["/etc/glm53.lock"]',
         'profile.toml: locks[0]: expected a relative path to a .lock file, got "/etc/glm53.lock"'),
        ('locks = ["../glm53.lock"]', "locks = []", "profile.toml: locks: expected at least one element"),
        ('served_model_name = "glm-5.3-flash-dflash7"', "served_model_name = 7",
         "profile.toml: served_model_name: expected a string, got integer 7"),
        ("TP = 4\nPP = 1\nDCP = 1\n# DCP1", "tp = 4\nPP = 1\nDCP = 1\n# DCP1",
         'profile.toml: runtime.tp: expected an UPPER_SNAKE_CASE key, got "tp"'),
        ('KV_CACHE_DTYPE = "fp8"\nKV_CACHE_GIB', 'KV_CACHE_DTYPE = ["fp8"]\nKV_CACHE_GIB',
         "profile.toml: runtime.KV_CACHE_DTYPE: expected a string, integer, float or boolean, got an array"),
        ('KV_CACHE_GIB = 26', '"KV_CACHE_GIB\\n" = 26',
         'profile.toml: runtime."KV_CACHE_GIB\\n": expected an UPPER_SNAKE_CASE key, got "KV_CACHE_GIB\\n"'),
        ('vllm_wheel = "vllm"', '"vllm_wheel\\n" = "vllm"',
         'profile.toml: inputs."vllm_wheel\\n": expected a lowercase role name of [a-z0-9_], got "vllm_wheel\\n"'),
        ('KV_CACHE_GIB = 26', "KV_CACHE_GIB = nan", "profile.toml: runtime.KV_CACHE_GIB: expected a finite number, got float nan"),
        ('KV_CACHE_GIB = 26', "KV_CACHE_GIB = { a = 1 }",
         "profile.toml: runtime.KV_CACHE_GIB: expected a string, integer, float or boolean, got a table"),
        ("[qualified.settings]\nNODE_COUNT = 4", "[qualified.settings]\nnode_count = 4",
         'profile.toml: qualified.settings.node_count: expected an UPPER_SNAKE_CASE key, got "node_count"'),
        ('vllm_wheel = "vllm"', 'vllm_wheel = "VLLM"',
         'profile.toml: inputs.vllm_wheel: expected a lowercase name of [a-z0-9._+:-], starting with [a-z0-9], got "VLLM"'),
        ('vllm_wheel = "vllm"', 'VllmWheel = "vllm"',
         'profile.toml: inputs.VllmWheel: expected a lowercase role name of [a-z0-9_], got "VllmWheel"'),
        ('"vllm==0.33.0",', '"vllm===",', 'profile.toml: python.requirements[0]: not a PEP 508 requirement'),
        ('"libc6",', '"LIBC6",', 'profile.toml: debian.seed[1]: expected a Debian package name, got "LIBC6"'),
        ('distributions = ["deep_ep"]', 'distributions = ["deep ep"]',
         'profile.toml: absent.distributions[0]: expected a Python distribution name, got "deep ep"'),
        ('rev = "6255090a03b12c3f7d552102a02fac0b542fb8c9"', 'rev = "6255090A03B12C3F7D552102A02FAC0B542FB8C9"',
         'profile.toml: claims[1].rev: expected 40 lowercase hex digits, got "6255090A03B12C3F7D552102A02FAC0B542FB8C9"'),
        ('tree = "0bb58d0dcc10e29e00ff9850c0d719fca1aba5ad"\n', "",
         "profile.toml: claims[1].tree: a git claim needs tree"),
        ('status = "unverified"\nsource = "seed PR \'Separate SparkRing subsystems and add GLM-5.3 DCP routes\' (Exact composition)"\nrev = "6255',
         'status = "confirmed"\nsource = "seed PR \'Separate SparkRing subsystems and add GLM-5.3 DCP routes\' (Exact composition)"\nrev = "6255',
         'profile.toml: claims[1].status: expected one of unverified, verified, contradicted, got "confirmed"'),
        ('sha256 = "d57509052b73853bcc8e3c3f47bb81748d87b9cbd8d908fc20d4c79a09aa400c"',
         'sha256 = "d57509052b73853bcc8e3c3f47bb81748d87b9cbd8d908fc20d4c79a09aa400c"\nrev = "6255090a03b12c3f7d552102a02fac0b542fb8c9"',
         "profile.toml: claims[4].rev: not part of a file claim"),
        ('manifest_digest = "sha256:380283a506aeb8f9d486a3c64cd738e44268c3cc21590913ea9e4685869f256a"',
         'manifest_digest = "380283a506aeb8f9d486a3c64cd738e44268c3cc21590913ea9e4685869f256a"',
         'profile.toml: claims[5].manifest_digest: expected "sha256:" and 64 lowercase hex digits, got "380283a5'),
        ('name = "b12x"\nkind = "git"', 'name = "vllm-composition"\nkind = "git"',
         'profile.toml: claims[1].name: duplicate claim name "vllm-composition"'),
        ("[checkpoints.draft]\n", "[checkpoints.teacher]\n",
         "profile.toml: checkpoints.teacher: unknown key (expected one of: draft, target)"),
        ('"org.opencontainers.image.title" = "glm53-dflash7"', '"Title" = "glm53-dflash7"',
         'profile.toml: labels.Title: expected a reverse-DNS label key like org.opencontainers.image.title, got "Title"'),
        ('platform = "linux/arm64"', 'platform = "arm64"', 'profile.toml: platform: expected an OCI platform like "linux/arm64", got "arm64"'),
        ("[refused.DCP]\n", "[refused.dcp]\n",
         'profile.toml: refused.dcp: expected an UPPER_SNAKE_CASE key, got "dcp"'),
        ('[refused.MOE_BACKEND]\ntriton = "', '[refused.MOE_BACKEND]\ntriton = 1\nx = "',
         "profile.toml: refused.MOE_BACKEND.triton: expected a string"),
        ("[refused.MOE_BACKEND]\ntriton = ", "[refused.MOE_BACKEND]\n[refused.X]\ntriton = ",
         "profile.toml: refused.MOE_BACKEND: expected at least one refused value"),
    ],
)
def test_invalid_profiles_name_the_place(old: str, new: str, expected: str) -> None:
    message = _error(_replace(old, new))
    assert message.startswith(expected), message


@pytest.mark.parametrize(
    ("pin", "expected"),
    [
        ('["../config.json"]', 'checkpoints.draft.pin[0]: expected a normalized relative path, got "../config.json"'),
        ('["weights/*.safetensors"]',
         'checkpoints.draft.pin[0]: a pattern matches top-level names only, got "weights/*.safetensors"'),
        ('["config.json", "config.json"]', 'checkpoints.draft.pin[1]: duplicate pattern "config.json"'),
        ('"config.json"', 'checkpoints.draft.pin: expected an array of strings, got "config.json"'),
    ],
)
def test_checkpoint_pin_lists_are_checked(pin: str, expected: str) -> None:
    text = _replace('pin = ["config.json", "*.safetensors"]', f"pin = {pin}")
    assert _error(text) == f"profile.toml: {expected}"


def test_checkpoint_architectures_are_class_names() -> None:
    text = _replace('architecture = "DFlash2DraftModel"', 'architecture = "DFlash2 DraftModel"')
    assert _error(text) == ('profile.toml: checkpoints.draft.architecture: expected a model class name like '
                            'Glm5NextForCausalLM, got "DFlash2 DraftModel"')


def test_checkpoint_file_paths_must_be_relative_and_normalized() -> None:
    text = _replace('pin = ["config.json", "*.safetensors"]\nfiles = []',
                    f'pin = ["config.json", "*.safetensors"]\nfiles = [{{ path = "../x", sha256 = "{SHA}", size = 1 }}]')
    assert _error(text) == (
        'profile.toml: checkpoints.draft.files[0].path: expected a normalized relative path, got "../x"'
    )
    text = _replace('pin = ["config.json", "*.safetensors"]\nfiles = []',
                    f'pin = ["config.json", "*.safetensors"]\nfiles = [{{ path = "model.safetensors", sha256 = "{SHA}", size = -1 }}]')
    assert _error(text) == (
        "profile.toml: checkpoints.draft.files[0].size: expected a non-negative integer, got integer -1"
    )


def test_missing_required_keys_and_tables() -> None:
    assert _error(_replace('served_model_name = "glm-5.3-flash-dflash7"\n', "")) == (
        "profile.toml: served_model_name: missing required key")
    assert _error(DFLASH7_TEXT.split("[python]")[0]) == "profile.toml: python: missing required key"


# --------------------------------------------------------------------------- against locks


def test_roles_and_seed_are_checked_against_an_existing_lock(tmp_path: Path) -> None:
    profiles = make_profiles_dir(tmp_path, lock=small_lock())
    assert load_profile("glm53-dflash7", profiles).name == "glm53-dflash7"

    profiles = make_profiles_dir(tmp_path / "b", lock=small_lock(without=("torch",)))
    with pytest.raises(InputError) as caught:
        load_profile("glm53-dflash7", profiles)
    assert str(caught.value) == (
        f'{profiles}/glm53-dflash7/profile.toml: inputs.torch: no input named "torch" in ../glm53.lock'
    )

    profiles = make_profiles_dir(tmp_path / "c", lock=small_lock(without=("tzdata:arm64",)))
    with pytest.raises(InputError) as caught:
        load_profile("glm53-mtp5", profiles)
    assert str(caught.value) == (
        f'{profiles}/glm53-mtp5/profile.toml: debian.seed[5]: package "tzdata" has no deb input in ../glm53.lock'
    )

    profiles = make_profiles_dir(tmp_path / "d", lock=small_lock(platform="linux/amd64"))
    with pytest.raises(InputError, match=r'platform: "linux/arm64" but \.\./glm53\.lock is locked for "linux/amd64"'):
        load_profile("glm53-mtp5", profiles)


def test_a_missing_lock_is_not_an_error_until_it_is_needed(tmp_path: Path) -> None:
    profiles = make_profiles_dir(tmp_path)
    profile = load_profile("glm53-dflash7", profiles)
    with pytest.raises(InputError, match=r"glm53\.lock: cannot read a TOML file: No such file or directory"):
        load_locks(profile)


def test_an_invalid_lock_is_reported_with_its_own_path(tmp_path: Path) -> None:
    profiles = make_profiles_dir(tmp_path, lock=small_lock())
    lock_path = profiles / "glm53.lock"
    lock_path.write_text(lock_path.read_text().replace("size = 1", "size = -1", 1))
    with pytest.raises(InputError) as caught:
        load_profile("glm53-dflash7", profiles)
    assert str(caught.value) == f"{lock_path}: inputs[0].size: expected a non-negative integer, got integer -1"


def test_input_for_resolves_a_role() -> None:
    profile = parse_profile(DFLASH7_TEXT)
    lock = small_lock()
    assert input_for(profile, "vllm_source", [lock]).name == "vllm-sdist"
    with pytest.raises(InputError, match=r"inputs\.draft: no such role"):
        input_for(profile, "draft", [lock])
    with pytest.raises(InputError, match=r'inputs\.torch: no input named "torch"'):
        input_for(profile, "torch", [small_lock(without=("torch",))])


# --------------------------------------------------------------------------- side by side


def test_profiles_may_not_share_names_or_roots(tmp_path: Path) -> None:
    same_name = MTP5_TEXT.replace('served_model_name = "glm-5.3-flash-mtp5"', 'served_model_name = "glm-5.3-flash-dflash7"')
    profiles = make_profiles_dir(tmp_path, mtp5=same_name)
    with pytest.raises(InputError) as caught:
        load_all_profiles(profiles)
    assert str(caught.value) == (
        f'{profiles}/glm53-mtp5/profile.toml: served_model_name: "glm-5.3-flash-dflash7" is also used by '
        f"{profiles}/glm53-dflash7/profile.toml"
    )
    nested = MTP5_TEXT.replace('jit_root = "/var/lib/sparkflake/jit/glm53-mtp5"',
                               'jit_root = "/var/lib/sparkflake/cache/glm53-dflash7/jit"')
    profiles = make_profiles_dir(tmp_path / "nested", mtp5=nested)
    with pytest.raises(InputError, match=r'glm53-mtp5/profile\.toml: jit_root: "/var/lib/sparkflake/cache/glm53-dflash7/jit" overlaps cache_root'):
        load_all_profiles(profiles)
    dflash7, mtp5 = parse_profile(DFLASH7_TEXT), parse_profile(MTP5_TEXT)
    check_profiles_distinct([dflash7, mtp5])


def test_profile_name_must_be_its_directory(tmp_path: Path) -> None:
    folder = tmp_path / "other"
    folder.mkdir()
    (folder / "profile.toml").write_text(DFLASH7_TEXT)
    with pytest.raises(InputError) as caught:
        read_profile(folder / "profile.toml")
    assert str(caught.value) == f'{folder}/profile.toml: name: expected the directory\'s name "other", got "glm53-dflash7"'


# --------------------------------------------------------------------------- lookup


def test_lookup_by_argument_env_and_upward_search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profiles = make_profiles_dir(tmp_path / "checkout")
    assert load_profile("glm53-mtp5", profiles).path == profiles / "glm53-mtp5" / "profile.toml"
    monkeypatch.setenv(PROFILES_DIR_ENV, str(profiles))
    monkeypatch.chdir(tmp_path)
    assert find_profiles_dir() == profiles
    assert load_profile("glm53-mtp5").name == "glm53-mtp5"
    monkeypatch.delenv(PROFILES_DIR_ENV)
    deep = tmp_path / "checkout" / "python" / "src"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert find_profiles_dir() == profiles.resolve()
    assert list_profiles(find_profiles_dir()) == ["glm53-dflash7", "glm53-mtp5"]
    # paths work from anywhere: a file, or the profile's directory
    assert load_profile(str(profiles / "glm53-dflash7")).name == "glm53-dflash7"
    assert load_profile(profiles / "glm53-dflash7" / "profile.toml").name == "glm53-dflash7"


def test_lookup_failures_say_where_they_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROFILES_DIR_ENV, raising=False)
    empty = tmp_path / "nowhere"
    empty.mkdir()
    monkeypatch.chdir(empty)
    # an installation without bundled profiles (the Nix package has them: see below)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "prefix"))
    with pytest.raises(InputError, match=r"no profiles directory found: set SPARKFLAKE_PROFILES_DIR") as caught:
        load_profile("glm53-dflash7")
    assert f"and {tmp_path}/prefix/share/sparkflake/profiles)" in str(caught.value)
    profiles = make_profiles_dir(tmp_path / "x")
    with pytest.raises(InputError) as caught:
        load_profile("glm53-nope", profiles)
    assert str(caught.value) == f"no profile named 'glm53-nope' in {profiles} (profiles: glm53-dflash7, glm53-mtp5)"
    with pytest.raises(InputError, match=r"no such profile file"):
        load_profile(str(tmp_path / "absent" / "profile.toml"))
    with pytest.raises(InputError, match=r"not a profile name"):
        load_profile("Bad Name", profiles)
    monkeypatch.setenv(PROFILES_DIR_ENV, str(tmp_path / "missing"))
    with pytest.raises(InputError, match=r"SPARKFLAKE_PROFILES_DIR=.*missing: not a directory"):
        find_profiles_dir()


# --------------------------------------------------------------------------- fuzz


@given(st.integers(0, len(DFLASH7_TEXT)), st.text(max_size=6), st.integers(0, 40))
def test_mutated_profiles_never_escape_as_tracebacks(at: int, insert: str, delete: int) -> None:
    text = DFLASH7_TEXT[:at] + insert + DFLASH7_TEXT[at + delete :]
    try:
        profile = parse_profile(text, "fuzz.toml")
    except InputError as error:
        assert str(error).startswith("fuzz.toml: ")
        return
    assert parse_profile(dump_profile(profile)) == profile



_strange = st.one_of(
    st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False), st.text(max_size=8),
    st.lists(st.text(max_size=3), max_size=2), st.lists(st.integers(0, 2), max_size=2),
    st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2),
    st.lists(st.dictionaries(st.sampled_from(["name", "kind", "path", "x"]), st.text(max_size=3), max_size=2),
             min_size=1, max_size=2),
)


def _value_paths(node: object, prefix: tuple = ()) -> list[tuple]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found.extend(_value_paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(_value_paths(value, (*prefix, index)))
    return found


@given(st.sampled_from([DFLASH7_TEXT, MTP5_TEXT]), st.data())
def test_structural_mutations_give_input_errors(text: str, data: st.DataObject) -> None:
    from sparkflake.core import canonical_toml

    document = tomllib.loads(text)
    path = data.draw(st.sampled_from(_value_paths(document)))
    parent = document
    for step in path[:-1]:
        parent = parent[step]
    if data.draw(st.booleans()):
        del parent[path[-1]]
    else:
        parent[path[-1]] = data.draw(_strange)
    try:
        mutated = canonical_toml.dumps(document)
    except TypeError:
        return
    try:
        profile = parse_profile(mutated, "fuzz.toml")
    except InputError as error:
        assert str(error).startswith("fuzz.toml: ")
        return
    assert parse_profile(dump_profile(profile)) == profile


def test_profiles_bundled_with_the_installation_are_found_from_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PROFILES_DIR_ENV, raising=False)
    make_profiles_dir(tmp_path / "prefix" / "share" / "sparkflake")
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "prefix"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert find_profiles_dir() == tmp_path / "prefix" / "share" / "sparkflake" / "profiles"
    assert load_profile("glm53-dflash7").name == "glm53-dflash7"
