"""Per-agent episode ends in the env layer: flags, final observations, respawn or waiting, and
statistics that count agent-episodes, by value (the env is tests/agent_ends.py)."""

import numpy as np
import pytest

import jaxlab
from agent_ends import build


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    return build(tmp_path_factory.mktemp("relay"))


def run(library, name, steps, num_envs=2):
    """Steps ``name`` with zero actions; returns per-step copies of what the env layer reports."""
    out = {k: [] for k in ("obs", "final", "rewards", "terminals", "truncations", "active", "infos")}
    with jaxlab.make(name, num_envs=num_envs, library=library) as env:
        env.reset()
        for _ in range(steps):
            _, rewards, terminals, truncations, info = env.step(np.zeros(env.num_agents, np.int32))
            out["obs"].append(env.observations.copy())
            out["final"].append(env.final_observations.copy())
            out["rewards"].append(rewards.copy())
            out["terminals"].append(terminals.copy())
            out["truncations"].append(truncations.copy())
            out["active"].append(None if env.active is None else env.active.copy())
            out["infos"].append(info)
    return out


def test_agents_that_respawn_end_at_their_own_times(library):
    out = run(library, "relay_respawn", 12)
    for step in range(1, 13):
        ended = [step % (2 * (a + 1)) == 0 for a in range(3)]
        np.testing.assert_array_equal(out["terminals"][step - 1], ended * 2, err_msg=f"step {step}")
        assert not out["truncations"][step - 1].any() and (out["rewards"][step - 1] == 1.0).all()
        for a in range(3):
            finished = step // (2 * (a + 1))
            played = step % (2 * (a + 1))
            np.testing.assert_array_equal(out["obs"][step - 1][[a, 3 + a]], [[a + 1, played, finished]] * 2)
            if ended[a]:  # its last observation before the respawn, the new episode's first in obs
                np.testing.assert_array_equal(out["final"][step - 1][[a, 3 + a]], [[a + 1, 2 * (a + 1), finished]] * 2)
        info = out["infos"][step - 1]
        count = 2 * sum(ended)
        assert info.get("episodes", 0) == count  # agent-episodes
        if count:
            mean = sum(2 * (a + 1) for a in range(3) if ended[a]) / sum(ended)
            assert info["episode_return"] == info["episode_length"] == pytest.approx(mean)
    assert out["active"][0] is None  # respawning envs have no waiting agents


def test_agents_that_wait_sit_out_until_the_env_resets(library):
    out = run(library, "relay_wait", 13)
    # active after each step: whether the agent acts in the next one
    expected_active = {1: [1, 1, 1], 2: [0, 1, 1], 3: [0, 1, 1], 4: [0, 0, 1], 5: [0, 0, 1], 6: [1, 1, 1],
                       7: [1, 1, 1], 8: [0, 1, 1], 12: [1, 1, 1]}
    for step, active in expected_active.items():
        np.testing.assert_array_equal(out["active"][step - 1], active * 2, err_msg=f"step {step}")
    for step in range(1, 13):
        cycle = (step - 1) % 6 + 1
        ending = [cycle == 2 * (a + 1) for a in range(3)]
        waiting = [cycle > 2 * (a + 1) for a in range(3)]
        np.testing.assert_array_equal(out["terminals"][step - 1], [e or w for e, w in zip(ending, waiting)] * 2,
                                      err_msg=f"step {step}")
        np.testing.assert_array_equal(out["rewards"][step - 1], [0.0 if w else 1.0 for w in waiting] * 2)
        for a in range(3):
            if ending[a]:
                np.testing.assert_array_equal(out["final"][step - 1][[a, 3 + a]],
                                              [[a + 1, 2 * (a + 1), (step - 1) // 6 + 1]] * 2)
        info = out["infos"][step - 1]
        assert info.get("episodes", 0) == 2 * sum(ending)  # a waiting agent is not counted again
    # at step 6 the last agent ended and the env reset: every agent starts a new episode
    np.testing.assert_array_equal(out["obs"][5][:, 1], [0.0] * 6)


def test_a_waiting_agent_survives_a_checkpoint(library):
    with jaxlab.make("relay_wait", num_envs=1, library=library) as a, \
            jaxlab.make("relay_wait", num_envs=1, library=library) as b:
        a.reset()
        b.reset()
        zeros = np.zeros(3, np.int32)
        for _ in range(3):
            a.step(zeros)
        b.load_state(a.save_state())  # agent 0 waits
        np.testing.assert_array_equal(b.active, [False, True, True])
        for _ in range(5):
            out_a, out_b = a.step(zeros), b.step(zeros)
            for x, y in zip(out_a[:4], out_b[:4]):
                np.testing.assert_array_equal(x, y)
            np.testing.assert_array_equal(a.active, b.active)


def test_a_step_that_ends_a_waiting_agent_again_is_told_so_not_only_that_its_count_differs(tmp_path):
    """An agents_wait env whose step forgot to skip waiting agents (it flagged and counted them again) was
    told 'its step returned 1 but 0 of its acting agents have a terminal or truncation flag': the flag it
    set was on a waiting agent, which the message did not mention. It now says how many waiting agents
    the step flagged and that a waiting agent must neither end again nor be counted."""
    import agent_ends
    text = agent_ends.header("relay_wait").replace(
        "if (!env->alive[a]) continue;", "if (!env->alive[a]) { env->terminals[a] = 1; ended += 1; continue; }")
    (tmp_path / "relay_wait.h").write_text(text)
    library = str(agent_ends.build_library([tmp_path / "relay_wait.h"], tmp_path / "librelaywait.so"))
    with jaxlab.make("relay_wait", num_envs=1, library=library) as env:
        env.reset()
        env.step(np.zeros(3, np.int32))
        env.step(np.zeros(3, np.int32))  # agent 0 ends and waits
        with pytest.raises(RuntimeError) as err:
            env.step(np.zeros(3, np.int32))  # its step flags agent 0 again and counts it
    message = str(err.value)
    assert "its step returned 1 but 0 of its acting agents have a terminal or truncation flag" in message
    assert "1 of its agents that wait for the env's reset (option agents_wait) have one too" in message
    assert "its step must neither end it again nor count it" in message
