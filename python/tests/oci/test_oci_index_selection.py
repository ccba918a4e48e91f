"""The one rule that picks a manifest out of an index (``oci.types.select_index_entry``),
which the layout and archive reader, the registry reader and so the audit all follow."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.oci.types import CLUSTER_PLATFORM, Platform, record_platform, select_index_entry

_PLATFORM_RECORDS = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {"os": st.sampled_from(["linux", "windows", ""]), "architecture": st.sampled_from(["arm64", "amd64", "arm"])},
        optional={"variant": st.sampled_from(["v8", "v7", ""])},
    ),
)
_ENTRIES = st.lists(
    st.builds(lambda n, p: {"digest": f"sha256:{n:064x}", **({"platform": p} if p is not None else {})},
              st.integers(0, 2**64), _PLATFORM_RECORDS),
    min_size=1, max_size=6,
)
_NAMED = st.one_of(
    st.none(),
    st.sampled_from(["linux/arm64", "linux/arm64/v8", "linux/amd64", "linux/arm/v7", "windows/amd64", "nonsense", "a/b/c/d"]),
)


@given(manifests=_ENTRIES, platform=_NAMED)
def test_the_entry_chosen_is_the_first_for_the_platform(manifests, platform):
    if platform is not None:
        try:
            wanted = Platform.parse_any(platform)
        except InputError:
            wanted = None
        for_platform = [m for m in manifests if wanted is not None and wanted.matches(record_platform(m))]
    else:
        for_platform = manifests if len(manifests) == 1 else [
            m for m in manifests if CLUSTER_PLATFORM.matches(record_platform(m))
        ]
    if not for_platform:
        with pytest.raises(InputError) as refused:
            select_index_entry(manifests, platform, "index.json")
        assert refused.value.check_id == ("platform.index" if platform is not None else "image.readable")
        assert "index.json" in refused.value.message
        return
    assert select_index_entry(manifests, platform, "index.json") is for_platform[0]


def test_arm64_without_a_variant_is_the_cluster_platform():
    amd64 = {"platform": {"os": "linux", "architecture": "amd64"}}
    arm64 = {"platform": {"os": "linux", "architecture": "arm64"}}
    assert select_index_entry([amd64, arm64], None, "i") is arm64
    assert select_index_entry([amd64, arm64], "linux/arm64/v8", "i") is arm64
    assert select_index_entry([amd64, arm64], "linux/amd64", "i") is amd64
    with pytest.raises(InputError, match="no manifest for platform linux/s390x"):
        select_index_entry([amd64, arm64], "linux/s390x", "i")
