"""Named values of integer env parameters: a help that begins "0 random, 1 greedy, 2 self" makes
`--env.opponent self` and make(..., opponent="self") mean 2."""

import pytest

import jaxlab
from jaxlab.config import ConfigError, load_config
from jaxlab.env.registry import Param


def param(help_text: str, low=0, high=2, is_int=True) -> Param:
    return Param("opponent", 0, low, high, is_int, help_text)


@pytest.mark.parametrize("help_text, low, high, is_int, names", [
    ("0 random, 1 greedy, 2 self (both seats are agents)", 0, 2, True, ("random", "greedy", "self")),
    ("1 easy,1 hard", 1, 2, True, ()),                    # the numbers must run over the range in order
    ("1 easy, 2 hard: the level", 1, 2, True, ("easy", "hard")),
    ("0 random, 1 greedy", 0, 2, True, ()),                # every value of the range must be named
    ("0 random, 1 greedy, 2 self", 0, 2, False, ()),       # only integer parameters
    ("cards per deck", 10, 40, True, ()),
    ("0 off", 0, 0, True, ()),                             # a single value is no choice
])
def test_names_come_from_the_help_only_when_they_name_the_whole_range(help_text, low, high, is_int, names):
    assert param(help_text, low, high, is_int).names == names


def test_value_of_maps_names_and_leaves_numbers():
    p = param("1 easy, 2 hard", 1, 2)
    assert (p.value_of("hard"), p.value_of(" easy "), p.value_of(2), p.value_of("3")) == (2, 1, 2, "3")
    assert (p.value_of("HARD"), p.value_of("Easy")) == (2, 1)  # any case ("Greedy" was refused)
    both = param("0 a, 1 A", 0, 1)
    assert (both.value_of("a"), both.value_of("A"), both.value_of("b")) == (0, 1, "b")  # exact names first


@pytest.mark.slow
def test_the_card_games_opponent_by_name():
    config, _ = load_config("cards", flags=["--env.opponent", "self"])
    assert config.env["opponent"] == 2
    with jaxlab.make("cards", num_envs=2, opponent="self") as env:
        assert env.params["opponent"] == 2 and env.agents_per_env == 2
    with pytest.raises(ConfigError, match=r'^env.opponent="selff" is neither an integer nor one of its names: '
                                          r"random, greedy, self; e.g. --env.opponent self$"):
        load_config("cards", flags=["--env.opponent", "selff"])
    with pytest.raises(TypeError, match=r"must be an integer or one of random, greedy, self"):
        jaxlab.make("cards", num_envs=2, opponent="selff")
