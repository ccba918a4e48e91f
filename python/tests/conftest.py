import os

from hypothesis import HealthCheck, settings
from netns_ranks import netns_ranks  # noqa: F401 - session fixture: four ranks in network namespaces

settings.register_profile(
    "ci",
    max_examples=int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile("ci")
