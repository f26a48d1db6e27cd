"""evaluation.play: an unbiased estimate of the return (every agent's first k episodes, started
together, not the first N episodes to end) with the env's statistics over exactly those episodes."""

import re
from pathlib import Path

import numpy as np
import pytest

import jaxlab
from jaxlab.config import load_config
from jaxlab.train.evaluation import play
from jaxlab.train.trainer import Trainer


def trainer_for(env, *flags):
    config, _ = load_config(env, flags=["--vec.num-envs", "8", "--train.bptt-horizon", "8",
                                        "--train.minibatch-size", "16", "--policy.hidden-size", "16",
                                        "--train.total-timesteps", "64", *flags])
    return Trainer(config)


def random_cartpole_mean_length(episodes: int = 20_000) -> float:
    """The mean episode length of CartPole under uniformly random actions, from the env alone."""
    rng = np.random.default_rng(7)
    with jaxlab.make("cartpole", num_envs=episodes, seed=7) as env:
        env.reset()
        length = np.zeros(episodes)
        done = np.zeros(episodes, bool)
        while not done.all():
            _, _, terminals, truncations, _ = env.step(rng.integers(0, 2, episodes, dtype=np.int32))
            length += ~done
            done |= terminals | truncations
    return float(length.mean())


def test_cartpole_return_is_estimated_without_favouring_short_episodes():
    """CartPole's return is its length, so taking the first N episodes to end (the short ones) biases
    the return down. An untrained policy acts nearly uniformly at random: its kept episodes must
    average what random play averages, while the N shortest first episodes fall far below it."""
    reference = random_cartpole_mean_length()
    with trainer_for("cartpole") as trainer:
        result = play(trainer, episodes=128, num_envs=256, deterministic=False, seed=3)
        first_episodes = play(trainer, episodes=256, num_envs=256, deterministic=False, seed=3)
    assert result["episodes"] == 128 and len(result["returns"]) == 128
    np.testing.assert_array_equal(result["returns"], result["lengths"])  # correlated by construction
    assert abs(result["returns"].mean() - reference) < 3.5, (result["returns"].mean(), reference)
    shortest_half = np.sort(first_episodes["lengths"])[:128]  # what "the first 128 to end" would keep
    assert shortest_half.mean() < reference - 6
    # the kept episodes are the first episodes of agents 0..127: the same as in the 256-episode run
    np.testing.assert_array_equal(result["returns"], first_episodes["returns"][:128])
    # the env's own statistics are over exactly the kept episodes
    assert result["episode_return"] == pytest.approx(result["returns"].mean(), rel=1e-6)
    assert result["episode_length"] == pytest.approx(result["lengths"].mean(), rel=1e-6)


def test_every_agent_plays_the_same_number_of_episodes_and_statistics_match():
    with trainer_for("cartpole") as trainer:
        result = play(trainer, episodes=20, num_envs=8, deterministic=False, seed=1)
    assert result["episodes"] == 20  # 8 agents x 2 rounds, then the third episode of agents 0..3
    assert result["episode_length"] == pytest.approx(result["lengths"].mean(), rel=1e-6)


def test_multi_agent_episodes_are_kept_in_whole_envs():
    with trainer_for("target", "--env.agents-per-env", "4", "--env.max-steps", "12", "--vec.num-envs", "2",
                     "--train.minibatch-size", "64") as trainer:
        result = play(trainer, episodes=10, num_envs=3, seed=2)
    # 12 agents: one round, kept in whole envs of 4 agents: 12 >= 10
    assert result["episodes"] == 12 and set(result["lengths"]) == {12.0}
    assert result["episode_return"] == pytest.approx(result["returns"].mean(), rel=1e-5, abs=1e-6)
    with trainer_for("target", "--env.agents-per-env", "4", "--env.max-steps", "12", "--vec.num-envs", "2",
                     "--train.minibatch-size", "64") as trainer:
        result = play(trainer, episodes=14, num_envs=3, seed=2)
    assert result["episodes"] == 16  # a second round for the first env only
    assert result["episode_return"] == pytest.approx(result["returns"].mean(), rel=1e-5, abs=1e-6)


def actor_loop_returns(env, actor, rounds: int, reset_carries: bool = True) -> np.ndarray:
    """The returns [rounds * A] of each agent's first ``rounds`` episodes in a loop of one's own, stepping ``env``
    with ``actor``, in order of (round, agent) as play keeps them; ``reset_carries`` False: the mistake of never
    telling the actor which episodes ended."""
    observations, ended = env.reset(), np.ones(env.num_agents, bool)
    returns, running = np.zeros((rounds, env.num_agents)), np.zeros(env.num_agents)
    finished = np.zeros(env.num_agents, np.int64)
    while (finished < rounds).any():
        actions = actor(observations, ended if reset_carries else np.zeros_like(ended), env.action_mask)
        observations, rewards, terminals, truncations, _ = env.step(actions)
        running += rewards
        ended = terminals | truncations
        for agent in np.flatnonzero(ended & (finished < rounds)):
            returns[finished[agent], agent] = running[agent]
        finished += ended
        running[ended] = 0.0
    return returns.reshape(-1)


@pytest.mark.parametrize("env_name", ["cartpole", "lure"])
def test_an_actor_in_ones_own_loop_plays_as_play_does(env_name):
    """Actor, the policy acting in a user's own loop with its LSTM carry kept and started over where an episode
    ended, takes the same deterministic actions as play over several episodes per agent (the same returns, masks
    included); a loop that never says which episodes ended plays otherwise; input of the wrong shape is one error
    naming both shapes."""
    from jaxlab.config import env_args
    from jaxlab.train.evaluation import Actor

    with trainer_for(env_name) as trainer:
        played = play(trainer, episodes=24, num_envs=8, seed=3)["returns"]
        for reset_carries in (True, False) if env_name == "cartpole" else (True,):  # lure's 8 steps end anyway
            with jaxlab.make(env_name, num_envs=8, seed=3, **env_args(trainer.config)) as env:
                ours = actor_loop_returns(env, Actor(trainer, 8), rounds=3, reset_carries=reset_carries)
            assert np.array_equal(ours, played) == reset_carries, (ours, played)
        with jaxlab.make(env_name, num_envs=8, seed=3, **env_args(trainer.config)) as env:
            with pytest.raises(ValueError, match=r"observations of shape \(3, 8\) float32, the policy takes \(8, "):
                Actor(trainer, 8)(np.zeros((3, 8), np.float32), np.zeros(3, bool), env.action_mask)
            if env.action_mask is not None:  # a mask of another width was a traceback from inside JAX
                with pytest.raises(ValueError, match=r"mask of shape \(8, 3\), must be \(8, 4\)"):
                    Actor(trainer, 8)(env.reset(), np.ones(8, bool), np.ones((8, 3), bool))


def test_an_actor_with_waiting_agents_keeps_the_carries_play_keeps(tmp_path):
    """An env whose agents wait for their env's reset (agents_wait: tests/agent_ends.py's relay_wait) flags a
    waiting agent's rows terminal, so play (and training) start its carry over while it waits and when its next
    episode starts. An Actor fed those flags acts as play does; one fed each agent's own ends (what a loop
    counting episodes has) and env.active keeps the same carries, where it used to carry a waiting agent's old
    episode into its next one."""
    import jax

    from agent_ends import build
    from jaxlab.config import env_args
    from jaxlab.train.evaluation import Actor

    library = build(tmp_path)
    with trainer_for("relay_wait", "--env.library", library, "--vec.num-envs", "2", "--train.minibatch-size",
                     "24") as trainer:
        played = []
        play(trainer, steps=20, num_envs=2, seed=3, on_step=lambda t, o, actions, r, e: played.append(actions))
        with jaxlab.make("relay_wait", num_envs=2, seed=3, **env_args(trainer.config)) as env:
            as_play, own = Actor(trainer, env.num_agents), Actor(trainer, env.num_agents)
            observations, flagged, own_ends = env.reset(), np.ones(env.num_agents, bool), np.ones(env.num_agents, bool)
            waits = 0
            for t in range(20):
                active = env.active.copy()
                waits += int((~active).sum())
                actions = as_play(observations, flagged)
                np.testing.assert_array_equal(actions, played[t])
                np.testing.assert_array_equal(own(observations, own_ends, active=active), actions)
                for ours, theirs in zip(jax.tree.leaves(own.carry), jax.tree.leaves(as_play.carry)):
                    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7, err_msg=f"step {t}")
                observations, _, terminals, truncations, _ = env.step(actions)
                flagged = terminals | truncations
                own_ends = flagged & active  # a waiting agent's rows are no episode's end
            assert waits > 0
            with pytest.raises(ValueError, match=r"active of shape \(3,\), must be \(6,\)"):
                own(observations, own_ends, active=np.ones(3, bool))


def test_an_actor_refuses_a_mask_row_that_allows_no_action_naming_the_agent():
    """A mask row with no legal action made Actor return -1 for that agent, which its docstring did not say and
    which a loop of one's own may take for the last action. It is one error naming the agent now, as a VecEnv
    names it when play or training act -1 there; a waiting agent's empty row (active False) still gets -1."""
    from jaxlab.config import env_args
    from jaxlab.train.evaluation import Actor

    with trainer_for("lure") as trainer:
        with jaxlab.make("lure", num_envs=8, seed=3, **env_args(trainer.config)) as env:
            observations, mask = env.reset(), env.action_mask.copy()
        mask[2] = False
        with pytest.raises(ValueError, match=r"^Actor: agent 2's mask row allows no action \(all False\), so the "
                                             r"policy has none to choose; give every acting agent at least one legal "
                                             r"action \(a waiting agent's row may be empty: pass active=env.active\)$"):
            Actor(trainer, 8)(observations, np.ones(8, bool), mask)
        active = np.ones(8, bool)
        active[2] = False
        actions = Actor(trainer, 8)(observations, np.ones(8, bool), mask, active=active)
        assert actions[2] == -1 and all(mask[agent, action] for agent, action in enumerate(actions) if agent != 2)


def test_an_actor_of_no_agents_or_a_count_that_is_no_whole_number_is_one_error():
    """Actor(trainer, 0) built and its first call ended in a ZeroDivisionError from inside JAX; -1 was numpy's
    'negative dimensions are not allowed', 8.0 and "8" a TypeError that named no argument."""
    from jaxlab.train.evaluation import Actor

    with trainer_for("cartpole") as trainer:
        for count in (0, -1, 8.0, "8", True):
            with pytest.raises(ValueError, match=rf"^Actor: num_agents={re.escape(repr(count))} must be a whole "
                                                 r"number, at least 1 \(the rows of each call's observations"):
                Actor(trainer, count)(np.zeros((1, 4), np.float32), np.ones(1, bool))
        assert Actor(trainer, np.int64(2))(np.zeros((2, 4), np.float32), np.ones(2, bool)).shape == (2,)


def test_play_refuses_counts_below_one():
    """episodes=0 (or a negative count) returned 0 episodes in silence."""
    with trainer_for("memory") as trainer:
        for kwargs in ({"episodes": 0}, {"episodes": -3}, {"steps": 0}, {"episodes": 2, "num_envs": 0}):
            name, value = next((k, v) for k, v in kwargs.items() if v < 1)
            with pytest.raises(ValueError, match=rf"^play: {name}={value} must be at least 1$"):
                play(trainer, **kwargs)


def test_steps_alone_keeps_the_episodes_complete_by_then():
    with trainer_for("memory", "--env.delay", "2") as trainer:  # episodes of 4 steps
        result = play(trainer, steps=10, num_envs=3, seed=0)
    assert result["episodes"] == 6 and set(result["lengths"]) == {4.0}
    assert result["success"] == pytest.approx(result["returns"].mean())


def test_a_run_over_more_devices_than_here_loads_and_plays(tmp_path):
    """device.count=2 saved by a run on two devices: one device here still plays its policy (the
    checkpoint's arrays do not depend on the device count), with the saved params."""
    import dataclasses

    import jax

    from jaxlab.train.evaluation import load_trainer

    assert jax.local_device_count() == 1
    with trainer_for("cartpole") as trainer:
        trainer.config = dataclasses.replace(trainer.config,
                                             device=dataclasses.replace(trainer.config.device, count=2))
        trainer.save_checkpoint(tmp_path / "ck")
        saved = jax.tree.leaves(trainer.state.params)
    with load_trainer(tmp_path / "ck") as loaded:
        for a, b in zip(saved, jax.tree.leaves(loaded.state.params), strict=True):
            np.testing.assert_array_equal(a, b)
        assert play(loaded, episodes=2, num_envs=2)["episodes"] == 2


def test_load_trainer_takes_a_run_dir_as_eval_does(tmp_path):
    """load_trainer("runs/cp"), as `jaxlab eval --checkpoint runs/cp` takes it, failed with "checkpoint
    runs/cp is unreadable: FileNotFoundError: ... meta/metadata", which reads as a damaged checkpoint. A run
    dir or its checkpoints/ now loads the newest usable checkpoint, passing over a damaged newer one."""
    import jax

    from jaxlab.checkpoint import CheckpointError
    from jaxlab.train.evaluation import load_trainer

    run = tmp_path / "run"
    with trainer_for("cartpole") as trainer:
        trainer.save_checkpoint(run / "checkpoints" / "1")
        trainer.evaluate()
        trainer.train()
        trainer.save_checkpoint(run / "checkpoints" / "2")
        saved = jax.tree.leaves(trainer.state.params)
    for path in (run, run / "checkpoints"):
        with load_trainer(path) as loaded:
            assert loaded.update_index == 1
            for a, b in zip(saved, jax.tree.leaves(loaded.state.params), strict=True):
                np.testing.assert_array_equal(a, b)
    (run / "checkpoints" / "2" / "meta" / "metadata").write_text("{")  # damaged: the one before it is loaded
    warnings = []
    with load_trainer(run, warn=warnings.append) as loaded:
        assert loaded.update_index == 0
    assert len(warnings) == 1 and "falling back to an older checkpoint" in warnings[0]
    with pytest.raises(CheckpointError, match=rf"load_trainer {tmp_path / 'nothing'}: no such file or folder"):
        load_trainer(tmp_path / "nothing")


def test_a_compile_cache_folder_that_cannot_be_created_here_falls_back_to_the_default(tmp_path, monkeypatch):
    """device.compile_cache saved as a folder of the training machine (not creatable here): eval plays
    with the default cache and says so, instead of a refusal naming a flag eval does not take."""
    import dataclasses

    from jaxlab.run import compile_cache
    from jaxlab.train.evaluation import load_trainer

    (tmp_path / "file").write_text("")
    with trainer_for("cartpole") as trainer:
        trainer.config = dataclasses.replace(trainer.config, device=dataclasses.replace(
            trainer.config.device, compile_cache=str(tmp_path / "file" / "cache")))
        trainer.save_checkpoint(tmp_path / "ck")
    monkeypatch.setitem(compile_cache._state, "setting", None)  # as in a fresh process: the first Trainer sets it
    warnings = []
    with load_trainer(tmp_path / "ck", warn=warnings.append) as loaded:
        assert loaded.config.device.compile_cache == "auto"
        assert play(loaded, episodes=2, num_envs=2)["episodes"] == 2
    assert len(warnings) == 1 and f"folder {tmp_path / 'file' / 'cache'}" in warnings[0] and "default cache" in warnings[0]


def test_eval_on_more_envs_than_memory_holds_is_one_line(tmp_path, capsys):
    from jaxlab import cli

    with trainer_for("cartpole") as trainer:
        trainer.save_checkpoint(tmp_path / "ck")
    # 10**16 envs of 128 bytes: more than any address space, so calloc refuses them on every machine (10**9,
    # 119 GiB, fit a host of 128 GiB, or any with vm.overcommit_memory=1, and the envs' init then touched it all)
    assert cli.main(["eval", "cartpole", "--checkpoint", str(tmp_path / "ck"), "--num-envs", str(10**16)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"jaxlab eval: error: --num-envs {10**16} needs about ") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "play on fewer envs, e.g. --num-envs " in err


def test_eval_refuses_more_envs_than_the_memory_check_allows_naming_the_most_that_fit(tmp_path, capsys, monkeypatch):
    """`jaxlab eval --num-envs N` had no memory check: envs the host cannot hold were created (or failed
    part way). It is checked as train is, before the checkpoint is loaded: exit 2, one line with the
    estimate, the limit and the most envs that fit."""
    from jaxlab import cli
    from jaxlab.config import memory

    with trainer_for("cartpole") as trainer:
        trainer.save_checkpoint(tmp_path / "ck")
        config = trainer.config
    shape = memory.env_shape(config)

    def need(num_envs: int) -> int:  # on a CPU JAX's arrays are host memory too
        est = memory.play_estimate(config, shape, num_envs)
        return est.device_total + est.host_total

    limit = memory.MemoryLimit(device=None, host=need(1000) - 1)
    monkeypatch.setattr(memory, "current_limit", lambda: limit)
    assert cli.main(["eval", "cartpole", "--checkpoint", str(tmp_path / "ck"), "--num-envs", "1000",
                     "--episodes", "2"]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"jaxlab eval: error: --num-envs 1000 needs about {memory.format_bytes(need(1000))} of "
                          f"host memory but {memory.format_bytes(limit.host)} is available (about ") and out == ""
    most = int(err.split("e.g. --num-envs ")[1].split()[0])
    assert need(most) <= limit.host < need(most + 1)
    assert cli.main(["eval", "cartpole", "--checkpoint", str(tmp_path / "ck"), "--num-envs", str(most),
                     "--episodes", "2"]) == 0


def test_eval_counts_the_trainer_it_loads_with_the_runs_vec_num_envs(tmp_path, capsys, monkeypatch):
    """eval loads a Trainer built with the saved run's vec.num_envs (its envs, segment buffers, optimizer),
    whatever --num-envs plays; the memory check counted only the play, so a run of many envs passed it
    where the same policy of a run of few envs needed exactly as much."""
    from jaxlab import cli
    from jaxlab.config import memory

    with trainer_for("cartpole") as few:  # 8 envs
        config = few.config
    with trainer_for("cartpole", "--vec.num-envs", "512", "--train.total-timesteps", "4096") as many:
        many.save_checkpoint(tmp_path / "ck")
    est = memory.play_estimate(config, memory.env_shape(config), 2)
    limit = memory.MemoryLimit(device=None, host=est.device_total + est.host_total)  # what 8 envs' run needs
    monkeypatch.setattr(memory, "current_limit", lambda: limit)
    assert cli.main(["eval", "cartpole", "--checkpoint", str(tmp_path / "ck"), "--num-envs", "2",
                     "--episodes", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxlab eval: error: --num-envs 2 needs about ") and "trainer segment" in err, err


def test_eval_applies_the_runs_memory_fraction_before_jax_starts_as_train_does(tmp_path, capsys, monkeypatch):
    """train caps JAX's GPU memory at device.memory_fraction before JAX starts; eval never did."""
    from jaxlab import cli
    from jaxlab.config import presets

    with trainer_for("cartpole", "--device.memory-fraction", "0.25") as trainer:
        trainer.save_checkpoint(tmp_path / "ck")
    fractions = []
    monkeypatch.setattr(presets, "prepare_backend", fractions.append)
    assert cli.main(["eval", "cartpole", "--checkpoint", str(tmp_path / "ck"), "--episodes", "2"]) == 0
    assert fractions == [0.25]


def test_eval_latest_passes_over_a_damaged_newest_checkpoint(tmp_path, monkeypatch, capsys):
    """--checkpoint latest falls back like a run dir does, instead of stopping at its damaged newest."""
    from jaxlab import cli

    run = tmp_path / "runs" / "cp"
    with trainer_for("cartpole") as trainer:
        (run / "checkpoints").mkdir(parents=True)
        (run / "config.toml").write_text('env_name = "cartpole"\n')
        for step in ("1", "2"):
            trainer.save_checkpoint(run / "checkpoints" / step)
    data = max((p for p in (run / "checkpoints" / "2" / "state").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["eval", "cartpole", "--checkpoint", "latest", "--episodes", "2"]) == 0
    out, err = capsys.readouterr()
    assert "checkpoints/2 is damaged" in err and "falling back to an older checkpoint" in err
    assert f"cartpole from {Path('runs/cp/checkpoints/1')}: 2 episodes" in out


def test_eval_of_a_run_whose_checkpoints_meta_is_damaged_names_the_damaged_file(tmp_path, capsys):
    """A run dir whose one checkpoint's meta/metadata was altered: `jaxlab eval --checkpoint RUN` said only "no
    usable checkpoint in RUN/checkpoints" (the ENV-less lookup of the env swallowed the reason), and the checkpoint
    itself was "unreadable: JSONDecodeError" though its files.json names the file whose bytes changed."""
    from jaxlab import cli

    run = tmp_path / "runs" / "cp"
    with trainer_for("cartpole") as trainer:
        trainer.save_checkpoint(run / "checkpoints" / "1")
    meta = run / "checkpoints" / "1" / "meta" / "metadata"
    meta.write_bytes(b"#" + meta.read_bytes()[1:])
    for target in (run, run / "checkpoints" / "1"):
        assert cli.main(["eval", "--checkpoint", str(target), "--episodes", "2"]) == 2
        err = capsys.readouterr().err
        damage = (f"checkpoint {run / 'checkpoints' / '1'} is damaged: the bytes of meta/metadata changed since it "
                  "was written (CRC-32 mismatch)")
        assert err.count(damage) == 1, err


def test_eval_without_env_plays_the_checkpoints_own_as_train_resume_does(tmp_path, monkeypatch, capsys):
    """`jaxlab eval --checkpoint RUN` was refused by argparse ("the following arguments are required: ENV")
    though the checkpoint names its env, and `jaxlab train --resume RUN` takes it from there."""
    from jaxlab import cli

    run = tmp_path / "runs" / "cp"
    with trainer_for("cartpole") as trainer:
        trainer.save_checkpoint(run / "checkpoints" / "1")
    (run / "config.toml").write_text('env_name = "cartpole"\n')
    assert cli.main(["eval", "--checkpoint", str(run), "--episodes", "2"]) == 0
    assert capsys.readouterr().out.startswith(f"cartpole from {run / 'checkpoints' / '1'}: 2 episodes")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["eval", "--checkpoint", "latest"]) == 2  # the newest run of which env?
    assert ("jaxlab eval: error: --checkpoint latest needs ENV, the env whose newest run to play: e.g. `jaxlab eval "
            "cartpole --checkpoint latest`") in capsys.readouterr().err


def test_eval_plays_a_policy_on_other_env_parameters(tmp_path, capsys):
    """`jaxlab eval` took no --env.* flags: a policy could be played only on the env settings it was trained
    on. It takes them now, as train does: a longer memory delay (an episode is delay + 2 steps), another
    number of agents per env (the policy acts per agent)."""
    from jaxlab import cli

    with trainer_for("memory") as trainer:
        trainer.save_checkpoint(tmp_path / "memory")
    assert cli.main(["eval", "memory", "--checkpoint", str(tmp_path / "memory"), "--episodes", "4",
                     "--env.delay", "20"]) == 0
    out = capsys.readouterr().out
    assert "4 episodes, sampled actions, seed 12345, env.delay = 20\n" in out and "length 22.0 ± 0.0" in out
    with trainer_for("target", "--vec.num-envs", "2", "--train.total-timesteps", "128") as trainer:
        trainer.save_checkpoint(tmp_path / "target")
    assert cli.main(["eval", "target", "--checkpoint", str(tmp_path / "target"), "--episodes", "6",
                     "--env.agents-per-env", "3", "--env.max-steps", "20"]) == 0
    assert "6 episodes" in capsys.readouterr().out


@pytest.mark.parametrize("flags, message", [
    (["--env.num-cues", "6"], r"--env.num-cues 6 changes the observation from \(5,\) float32 to \(7,\) float32 and "
     r"the action from Discrete\(4\) to Discrete\(6\), which the policy was not trained on; eval takes env "
     r"parameters that keep the observation and action shapes \(see `jaxlab envs`\)"),
    (["--env.dealy", "9"], r"unknown config key 'env.dealy'; did you mean 'env.delay'\?"),
    (["--env.zzz", "9"], r"unknown config key 'env.zzz'; memory's parameters: num_cues, delay \(eval also takes "
                         r"--env.mask-check\)$"),  # mask_check was listed as one of memory's parameters
    (["--env.library", "x.h"], r"--env.library: eval plays the checkpoint's env; to play it from another source, "
                               r"give its header as ENV"),
    (["--env.delay", "-1"], r"env 'memory' parameter delay=-1 is out of range: it must be in \[0, 1e\+06\]"),
    (["--train.seed", "3"], r"--train.seed: jaxlab eval takes env parameters only \(--env.KEY VALUE"),
])
def test_eval_refuses_env_flags_the_policy_cannot_play_with_in_one_line(tmp_path, capsys, flags, message):
    from jaxlab import cli

    with trainer_for("memory") as trainer:
        trainer.save_checkpoint(tmp_path / "ck")
    assert cli.main(["eval", "memory", "--checkpoint", str(tmp_path / "ck"), *flags]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert re.fullmatch(rf"jaxlab eval: error: {message}.*\n", err), err


def test_a_checkpoint_whose_header_is_gone_names_the_header_of_that_name_on_the_env_path(tmp_path):
    """A checkpoint of jaxlab's own example env copied from another machine (or from a jaxlab installed at another
    path since) records a header path that is not here: the refusal said `pass its new path as ENV: jaxlab eval
    path/to/cards.h ...`, leaving the user to find where jaxlab keeps cards.h; it names that header now."""
    from jaxlab.cli.common import check_saved_header
    from jaxlab.config import ConfigError
    from jaxlab.env.sdk import find_header

    for name, new_path in (("cards", str(find_header("cards"))), ("nothing_here", "path/to/nothing_here.h")):
        meta = {"env_source": {"library": str(tmp_path / "old_machine" / f"{name}.h")}}
        with pytest.raises(ConfigError) as err:
            check_saved_header(meta, "eval", "--checkpoint CK")
        assert f"pass its new path as ENV: `jaxlab eval {new_path} --checkpoint CK`" in str(err.value)


def test_eval_of_one_episode_says_one_episode(tmp_path, capsys):
    """`jaxlab eval --episodes 1` printed "1 episodes" twice (the first line and the statistics' line)."""
    from jaxlab import cli

    with trainer_for("cartpole") as trainer:
        trainer.save_checkpoint(tmp_path / "ck")
    assert cli.main(["eval", "--checkpoint", str(tmp_path / "ck"), "--episodes", "1"]) == 0
    out = capsys.readouterr().out
    assert f"cartpole from {tmp_path / 'ck'}: 1 episode, sampled actions" in out and "over 1 episode)" in out, out
    assert "1 episodes" not in out


def test_eval_stops_at_its_step_cap_when_no_episode_ends(tmp_path, capsys):
    """`jaxlab eval` of an env whose episodes never end (a step that never sets a terminal or truncation flag)
    played for ever, printing nothing. It now stops after --max-steps steps (default 100,000) and says that no
    episode ended and why that may be, in one line (exit 2). Cartpole's pole cannot fall in 3 steps."""
    from jaxlab import cli

    with trainer_for("cartpole") as trainer:
        trainer.save_checkpoint(tmp_path / "ck")
    assert cli.main(["eval", "--checkpoint", str(tmp_path / "ck"), "--episodes", "4", "--max-steps", "3"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("jaxlab eval: error: only 0 episodes of the 4 asked for ended in --max-steps 3 steps: the "
                           "env's episodes may never end (a step that never sets a terminal or truncation flag, such "
                           "as a missing time limit), or last longer; raise --max-steps for longer ones"), err


def test_eval_says_why_it_played_more_episodes_than_asked(tmp_path, capsys):
    """`jaxlab eval --episodes 3` on envs of 2 agents (here played on 4 agents per env) reported "4 episodes" with no
    word on the 3 asked for; the line says it rounded up to whole envs, naming the agents per env played."""
    from jaxlab import cli

    with trainer_for("target", "--env.agents-per-env", "2", "--vec.num-envs", "2",
                     "--train.minibatch-size", "32") as trainer:
        trainer.save_checkpoint(tmp_path / "ck")
    assert cli.main(["eval", "--checkpoint", str(tmp_path / "ck"), "--episodes", "3", "--env.agents-per-env", "4",
                     "--env.max-steps", "8"]) == 0
    out = capsys.readouterr().out
    assert "4 episodes (--episodes 3 rounded up to whole envs of 4 agents), sampled actions" in out, out
    assert "agents_per_env 4" not in out  # not one of the env's statistics
