"""Property: any config built from random flag values either validates or raises ConfigError only, and
whatever validates has every float key finite."""

import math
from dataclasses import fields

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxlab.config import SECTIONS, ConfigError, derive_sizes, load_config

KEYS = [f"{section}.{field}" for section, cls in SECTIONS.items() for field in cls.__dataclass_fields__]
KEYS += ["env.max_steps", "vec.num_envz", "train"]
FLOAT_KEYS = [f"{section}.{f.name}" for section, cls in SECTIONS.items() for f in fields(cls) if f.type == "float"]
NON_FINITE_OR_ZERO = ["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e400", "0", "0.0", "-0.0"]

values = st.one_of(
    st.integers(-10, 5000).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["auto", "true", "no", "", "1e6", "1_024", "bfloat16", "linear", "0x10", "-0", "nan"]),
    st.sampled_from(NON_FINITE_OR_ZERO),
    st.text(max_size=6),
)
# every float key with NaN, infinity or zero (and now and then with an ordinary number)
float_pairs = st.tuples(st.sampled_from(FLOAT_KEYS),
                        st.one_of(st.sampled_from(NON_FINITE_OR_ZERO), st.floats(-2, 2).map(str)))


def check(pairs):
    flags = [item for key, value in pairs for item in (f"--{key}", value)]
    try:
        config, _ = load_config("cartpole", flags=flags)
        sizes = derive_sizes(config, agents_per_env=1)
    except ConfigError as err:
        assert str(err) and "\n" not in str(err)
        return
    for key in FLOAT_KEYS:
        section, name = key.split(".")
        assert math.isfinite(getattr(getattr(config, section), name)), key
    assert sizes.batch_size == sizes.num_minibatches * sizes.minibatch_size
    assert sizes.batch_size % (sizes.num_agents * sizes.horizon) == 0
    assert sizes.num_updates >= 1 and sizes.minibatch_size % sizes.horizon == 0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(KEYS), values), max_size=6))
def test_random_configs_validate_or_raise_config_error(pairs):
    check(pairs)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(float_pairs, min_size=1, max_size=4))
def test_nan_inf_and_zero_in_float_keys_validate_finite_or_raise_config_error(pairs):
    check(pairs)
