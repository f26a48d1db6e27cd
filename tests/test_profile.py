"""`jaxlab train --profile DIR --profile-updates A:B`: a profiler trace of exactly those updates."""

import jax
import pytest

from jaxlab.config import load_config
from jaxlab.run.loop import train_run
from jaxlab.run.profile import ProfileUpdates, parse_updates


@pytest.mark.parametrize("text, expected", [("2:3", (2, 3)), ("10:12", (10, 12)), ("5", (5, 5)), (" 1 : 1 ", (1, 1))])
def test_parse_updates(text, expected):
    assert parse_updates(text) == expected


@pytest.mark.parametrize("text", ["3:2", "0:1", "a:b", "2:", "-1:2", ""])
def test_bad_update_ranges_name_the_text_and_the_form(text):
    with pytest.raises(ValueError, match=rf"^--profile-updates {text!r} is not A:B with 1 <= A <= B"):
        parse_updates(text)


class FakeTrainer:
    def __init__(self, update_index=0):
        self.update_index, self.state = update_index, jax.numpy.zeros(())


@pytest.mark.parametrize("first, last, resumed_at, traced", [
    (2, 3, 0, [2, 3]), (1, 1, 0, [1]), (1, 2, 0, [1, 2]), (3, 5, 0, [3, 4, 5]),
    (2, 3, 2, [3]),      # resumed after update 2: update 3 is still traced
    (2, 3, 5, []),       # resumed past the range: nothing
])
def test_the_trace_covers_exactly_the_updates_asked(monkeypatch, tmp_path, first, last, resumed_at, traced):
    events = []
    monkeypatch.setattr(jax.profiler, "start_trace", lambda folder: events.append("start"))
    monkeypatch.setattr(jax.profiler, "stop_trace", lambda: events.append("stop"))
    trainer = FakeTrainer(resumed_at)
    profile = ProfileUpdates(tmp_path, first, last)
    profile.start(trainer)
    inside = []
    for update in range(resumed_at + 1, 8):
        if profile.tracing:  # the trace runs while this update runs
            inside.append(update)
        profile(trainer, {"update": update})
    profile.close(trainer)
    assert inside == traced
    assert events == (["start", "stop"] if traced else [])


@pytest.mark.slow
def test_a_run_with_profile_writes_a_trace(tmp_path):
    config, _ = load_config("cartpole", flags=["--vec.num-envs", "16", "--train.total-timesteps", "1024",
                                               "--log.dashboard", "none"])
    result = train_run(config, tmp_path / "run", profile=ProfileUpdates(tmp_path / "trace", 2, 3))
    assert result.error is None and len(result.records) == 4
    (trace,) = (tmp_path / "trace" / "plugins" / "profile").glob("*/*.xplane.pb")
    assert trace.stat().st_size > 1000
