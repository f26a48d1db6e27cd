"""The probe envs' semantics, by value: multicue (MultiDiscrete actions), spot (uint8 image
observations) and lure (a strict action mask). Their learning tests are in tests/test_learning.py."""

import numpy as np
import pytest

import jaxlab
from jaxlab.env import spaces_of


def cues_of(obs: np.ndarray, nvec) -> np.ndarray:
    """multicue's cues [A, K] from its observations [A, sum(nvec)] (one one-hot block per component)."""
    bounds = np.cumsum(nvec)[:-1]
    return np.stack([block.argmax(axis=1) for block in np.split(obs, bounds, axis=1)], axis=1).astype(np.int32)


# ---- multicue ----------------------------------------------------------------------------------------

def test_multicue_spaces_follow_its_params():
    default = spaces_of("multicue")
    assert str(default.action_space) == "MultiDiscrete([3, 4, 5])"
    assert default.observation_space.shape == (12,) and default.observation_space.dtype == np.float32
    assert not default.has_mask
    other = spaces_of("multicue", components=2, choices=5)
    assert str(other.action_space) == "MultiDiscrete([5, 6])" and other.observation_space.shape == (11,)


def test_multicue_shows_one_hot_cues_and_rewards_the_fraction_of_components_named():
    with jaxlab.make("multicue", num_envs=64, seed=1, length=4) as env:
        nvec = env.action_space.nvec
        obs = env.reset().copy()
        seen = []
        for step in range(4):
            blocks = np.split(obs, np.cumsum(nvec)[:-1], axis=1)
            assert all((b.sum(axis=1) == 1).all() and set(np.unique(b)) == {0.0, 1.0} for b in blocks)
            cues = cues_of(obs, nvec)
            seen.append(cues)
            actions = cues.copy()
            wrong = np.arange(64) % 4  # 0: all right; 1, 2, 3: that many components wrong
            for j in range(3):
                miss = wrong > j
                actions[miss, j] = (cues[miss, j] + 1) % nvec[j]
            obs, rewards, terminals, truncations, info = env.step(actions)
            obs = obs.copy()
            np.testing.assert_allclose(rewards, (3 - wrong) / 3, rtol=1e-6)
            assert not truncations.any() and terminals.all() == (step == 3) and terminals.any() == (step == 3)
        # 16 envs of each kind: success only when all right; matched 1, 2/3, 1/3, 0 of the components
        assert info == pytest.approx({"episodes": 64, "episode_return": 4 * 0.5, "episode_length": 4.0,
                                      "success": 0.25, "matched": 0.5}, rel=1e-6)
        seen = np.concatenate(seen)
        for j, n in enumerate(nvec):  # every cue value of every component shows up
            assert set(seen[:, j].tolist()) == set(range(n))


def test_multicue_renders_its_cues_and_the_last_action():
    with jaxlab.make("multicue", num_envs=1, seed=0) as env:
        obs = env.reset().copy()
        cues = cues_of(obs, env.action_space.nvec)[0]
        assert env.render() == f"cues  {cues[0]} {cues[1]} {cues[2]} | no action yet | step 0 of 8"
        actions = cues[None].copy()
        actions[0, 2] = (cues[2] + 1) % 5
        obs, *_ = env.step(actions)
        new = cues_of(obs, env.action_space.nvec)[0]
        assert env.render() == (f"cues  {new[0]} {new[1]} {new[2]} | last action  {cues[0]} {cues[1]} "
                                f"{actions[0, 2]} (2/3) | step 1 of 8")


# ---- spot ----------------------------------------------------------------------------------------------

def spot_of(image: np.ndarray) -> tuple[int, int]:
    """The (row, column) of the one white pixel of a spot image [H, W, 3]."""
    rows, cols = np.nonzero((image == 255).all(axis=2))
    assert len(rows) == 1
    return int(rows[0]), int(cols[0])


def test_spot_shows_one_white_pixel_on_noise_no_brighter_than_its_bound():
    spaces = spaces_of("spot", height=6, width=10)
    assert spaces.observation_space.dtype == np.uint8 and spaces.observation_space.shape == (6, 10, 3)
    assert str(spaces.action_space) == "Discrete(4)"
    for noise in (0, 40):
        with jaxlab.make("spot", num_envs=50, seed=2, height=6, width=10, noise=noise) as env:
            obs = env.reset()
            assert obs.dtype == np.uint8 and obs.shape == (50, 6, 10, 3)
            background = []
            for image in obs:
                row, col = spot_of(image)
                rest = image.astype(int).copy()
                rest[row, col] = -1
                background.append(rest[rest >= 0])
            background = np.concatenate(background)
            assert background.max() == noise and background.min() == 0  # uniform in [0, noise]
            if noise:
                assert abs(background.mean() - noise / 2) < 1.0


@pytest.mark.parametrize("height, width", [(8, 8), (5, 3)])
def test_spot_rewards_the_quadrant_of_the_spot(height, width):
    """Quadrant 0 top-left, 1 top-right, 2 bottom-left, 3 bottom-right; with an odd size the middle
    row or column belongs to the bottom or the right."""
    with jaxlab.make("spot", num_envs=200, seed=3, height=height, width=width, length=3) as env:
        obs = env.reset().copy()
        answers, rows = [], []
        for step in range(3):
            spots = [spot_of(image) for image in obs]
            rows += [r for r, _ in spots]
            answer = np.array([2 * (r >= height // 2) + (c >= width // 2) for r, c in spots], np.int32)
            answers.append(answer)
            actions = answer.copy()
            actions[::2] = (answer[::2] + 1 + step) % 4  # even envs are wrong in every step
            obs, rewards, terminals, truncations, info = env.step(actions)
            obs = obs.copy()
            np.testing.assert_array_equal(rewards, np.arange(200) % 2)
            assert terminals.all() == (step == 2) and not truncations.any()
        assert info == {"episodes": 200, "episode_return": 1.5, "episode_length": 3.0, "success": 0.5}
        assert set(np.concatenate(answers).tolist()) == {0, 1, 2, 3}
        assert set(rows) == set(range(height))  # the middle row of an odd height included


def test_spot_renders_the_image_as_text():
    with jaxlab.make("spot", num_envs=1, seed=4, height=4, width=6, noise=60) as env:
        image = env.reset()[0]
        row, col = spot_of(image)
        lines = env.render().split("\n")
        assert len(lines) == 5 and all(len(line) == 6 for line in lines[:4])
        assert lines[row][col] == "@" and sum(line.count("@") for line in lines[:4]) == 1
        mean = image.astype(int).sum(axis=2) // 3
        expected = np.where(3 * mean <= 60, ".", np.where(3 * mean <= 120, ":", "+"))
        expected[row, col] = "@"
        assert lines[:4] == ["".join(r) for r in expected]
        quadrant = 2 * (row >= 2) + (col >= 3)
        names = ["top-left", "top-right", "bottom-left", "bottom-right"]
        assert lines[4] == f"spot {names[quadrant]} (action {quadrant}) | step 0 of 8"


# ---- lure ----------------------------------------------------------------------------------------------

def test_lure_spaces_and_mask():
    spaces = spaces_of("lure", actions=6)
    assert str(spaces.action_space) == "Discrete(6)" and spaces.observation_space.shape == (12,)
    assert spaces.has_mask and spaces.mask_width == 6
    assert jaxlab.env.env_type("lure").has("mask") and jaxlab.env.env_type("lure").has("render")


def test_lure_payoffs_are_a_permutation_and_only_the_richest_is_ever_illegal():
    levels = np.arange(5) / 4
    with jaxlab.make("lure", num_envs=400, seed=5, actions=5) as env:
        obs = env.reset().copy()
        illegal = []
        for _ in range(5):
            payoffs, legal = obs[:, :5], obs[:, 5:]
            np.testing.assert_allclose(np.sort(payoffs, axis=1), np.broadcast_to(levels, (400, 5)), rtol=1e-6)
            np.testing.assert_array_equal(legal.astype(bool), env.action_mask)  # the mask is on show
            assert set(np.unique(legal)) <= {0.0, 1.0}
            assert (payoffs[legal == 0] == 1.0).all()  # only the lure is ever illegal
            illegal.append((legal == 0).any(axis=1))
            best = np.where(env.action_mask, payoffs, -1).argmax(axis=1).astype(np.int32)
            obs, rewards, *_ = env.step(best)
            expected = np.where(illegal[-1], 0.75, 1.0)
            np.testing.assert_allclose(rewards, expected, rtol=1e-6)
            obs = obs.copy()
    assert abs(np.mean(illegal) - 0.5) < 0.05  # lure_prob 0.5


@pytest.mark.parametrize("lure_prob, illegal", [(0.0, False), (1.0, True)])
def test_lure_prob_zero_and_one(lure_prob, illegal):
    with jaxlab.make("lure", num_envs=100, seed=6, lure_prob=lure_prob) as env:
        env.reset()
        for _ in range(3):
            assert (~env.action_mask.all(axis=1)).all() == illegal and (~env.action_mask.all(axis=1)).any() == illegal
            env.step(env.action_mask.argmax(axis=1).astype(np.int32))


def test_lure_statistics_by_value():
    """Each step the best legal action in even envs, the worst action in odd ones: success 1 and 0,
    returns the best legal return and 0."""
    with jaxlab.make("lure", num_envs=100, seed=7, length=4) as env:
        obs = env.reset().copy()
        best_total = np.zeros(100)
        for step in range(4):
            payoffs = obs[:, :4]
            best = np.where(env.action_mask, payoffs, -1).argmax(axis=1)
            best_total += payoffs[np.arange(100), best]
            actions = np.where(np.arange(100) % 2 == 0, best, payoffs.argmin(axis=1)).astype(np.int32)
            obs, rewards, terminals, truncations, info = env.step(actions)
            obs = obs.copy()
            assert terminals.all() == (step == 3) and not truncations.any()
        assert info == pytest.approx({"episodes": 100, "episode_return": best_total[::2].sum() / 100,
                                      "episode_length": 4.0, "best_return": best_total.mean(), "success": 0.5,
                                      "illegal": 0.0}, rel=1e-6)


def test_lure_strict_mask_refuses_the_lure_and_off_pays_it_and_counts_it():
    def lure_actions(env):
        """The richest action of each agent (the lure, illegal where the mask says so)."""
        return env.observations[:, :4].argmax(axis=1).astype(np.int32)

    with jaxlab.make("lure", num_envs=8, seed=8) as env:
        env.reset()
        agents = np.flatnonzero(~env.action_mask.all(axis=1))
        assert len(agents) > 0
        first = int(agents[0])
        legal = ", ".join(str(a) for a in np.flatnonzero(env.action_mask[first]))
        before = env.save_state()["cenv"]
        with pytest.raises(ValueError) as caught:
            env.step(lure_actions(env))
        assert str(caught.value) == (f"env 'lure' #{first} agent 0 (row {first}) at step 0: action "
                                     f"{lure_actions(env)[first]} is not legal under its mask; legal: {legal}")
        np.testing.assert_array_equal(env.save_state()["cenv"], before)  # nothing was stepped
    with jaxlab.make("lure", num_envs=8, seed=8, mask_check="off", length=3) as env:
        env.reset()
        taken = 0
        for _ in range(3):
            taken += int((~env.action_mask.all(axis=1)).sum())
            _, rewards, _, _, info = env.step(lure_actions(env))
            np.testing.assert_array_equal(rewards, np.ones(8, np.float32))  # the lure pays, legal or not
        assert info["illegal"] * 8 == taken > 0 and info["episode_return"] == 3.0
        assert info["success"] < 1.0 and info["best_return"] < 3.0


def test_lure_renders_payoffs_with_illegal_ones_marked():
    with jaxlab.make("lure", num_envs=1, seed=0, lure_prob=1.0) as env:
        obs = env.reset()[0]
        marks = ["x" if legal == 0 else "" for legal in obs[4:]]
        shown = " ".join(f"{p:.2f}{m}" for p, m in zip(obs[:4], marks))
        assert env.render() == f"payoffs {shown} | step 0 of 8" and env.render().count("x") == 1


def test_the_env_benchmark_steps_lure_despite_its_mask():
    """`jaxlab bench` and scripts/bench_env.py step every env with random actions drawn in advance;
    for lure they would be illegal now and then, so the benchmark turns its mask check off."""
    from jaxlab.run.bench import env_steps_per_second

    steps_per_second, per_call = env_steps_per_second("lure", 64, 0.05)
    assert steps_per_second > 0 and per_call > 0
