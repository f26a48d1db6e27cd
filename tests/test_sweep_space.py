"""Sweeps without training: the search-space file and its checks against the config schema (exit 2,
one line), the objective's window mean and report points, the split of the machine between parallel
trials, following a metrics file, and the samplers on an in-memory study."""

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import ENV_NAMES

from jaxlab.config import ConfigError, load_config, to_toml
from jaxlab.sweep import study as study_lib
from jaxlab.sweep.space import (SweepSpec, apply_params, check_space, default_sweep_file, parse_spec,
                                read_sweep_file)
from jaxlab.sweep.supervisor import param_flags
from jaxlab.sweep.trials import MetricsFollower, plan_slots

GOOD = {"metric": "episode_return", "trials": 4, "train.learning_rate": {"low": 1e-4, "high": 1e-2, "log": True},
        "train.update_epochs": {"low": 1, "high": 4}, "train.bptt_horizon": {"low": 8, "high": 32, "step": 8},
        "policy.hidden_size": {"choices": [32, 64]}, "train.norm_adv": {"choices": [True, False]}}


def spec_of(table, env="cartpole"):
    return parse_spec(table, env, "test.toml")


def error_of(table, env="cartpole", base_flags=()):
    with pytest.raises(ConfigError) as info:
        spec = spec_of(table, env)
        check_space(spec, load_config(env, flags=list(base_flags))[0])
    return str(info.value)


def test_a_good_file_parses_to_typed_distributions(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[sweep]\nmetric = "episode_return"\naverage_last = 0.5\n'
                    '"train.learning_rate" = {low = 1e-4, high = 1e-2, log = true}\n'
                    'train.update_epochs = {low = 1, high = 4}\n'  # a dotted key works like a quoted one
                    '"policy.hidden_size" = {choices = [32, 64]}\n')
    spec = spec_of(read_sweep_file(path))
    kinds = {p.name: (p.kind, p.low, p.high, p.log, p.choices) for p in spec.params}
    assert kinds == {"train.learning_rate": ("float", 1e-4, 1e-2, True, ()),
                     "train.update_epochs": ("int", 1, 4, False, ()),
                     "policy.hidden_size": ("categorical", None, None, False, (32, 64))}
    assert spec.average_last == 0.5 and spec.directions == ["maximize"]
    assert SweepSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec  # as stored in the study


def test_a_key_given_both_quoted_and_dotted_is_refused_not_overwritten(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[sweep]\n"train.learning_rate" = {low = 1e-3, high = 1e-2, log = true}\n'
                    'train.learning_rate = {low = 2e-3, high = 5e-3}\n')
    with pytest.raises(ConfigError) as info:
        read_sweep_file(path)
    assert str(info.value) == (f"sweep file {path} gives 'train.learning_rate' twice (once quoted, once as a dotted "
                               "key or a table); keep one")


def test_a_folder_given_as_the_sweep_file_is_named_a_folder_not_missing(tmp_path):
    with pytest.raises(ConfigError) as info:
        read_sweep_file(tmp_path)
    assert str(info.value) == (f"sweep file {tmp_path} is a folder, not a TOML file; pass --sweep FILE (see "
                               "configs/sweeps/ for examples)")  # it said 'does not exist'


def test_every_env_has_a_default_sweep_file_that_passes_the_checks():
    for env in ENV_NAMES:
        spec = spec_of(read_sweep_file(default_sweep_file(env)), env)
        check_space(spec, load_config(env, preset="cpu")[0])
        assert spec.params, env


@pytest.mark.parametrize("table, expected", [
    ({"train.learning_rat": {"low": 1e-4, "high": 1e-2}}, "unknown sweep key 'train.learning_rat'; did you mean "
                                                          "'train.learning_rate'?"),
    ({"trian.gamma": {"low": 0.9, "high": 0.99}}, "no config section 'trian'; did you mean 'train.gamma'?"),
    # CleanRL's count of minibatches is no minibatch size, the close name it was pointed at
    ({"train.num_minibatches": {"choices": [2, 4]}}, "unknown sweep key 'train.num_minibatches'; CleanRL's "
                                                     "num_minibatches is a count; jaxlab sets each minibatch's size: "
                                                     "train.minibatch_size = batch / num_minibatches"),
    ({"env.max_step": {"low": 10, "high": 20}}, "cartpole has no parameter 'max_step'; did you mean 'env.max_steps'?"),
    ({"train.seed": {"low": 0, "high": 9}}, "'train.seed' cannot be searched: seeds are --seeds S"),
    ({"log.interval": {"low": 1.0, "high": 2.0}}, "'log.interval' cannot be searched: [log] is bookkeeping"),
    ({"dist.num_processes": {"choices": [1, 2]}}, "'dist.num_processes' cannot be searched: [dist] says how a "
                                                  "run's processes meet"),
    ({"train.gamma": {"low": 0.99, "high": 0.9}}, "low = 0.99 must be less than high = 0.9"),
    ({"train.learning_rate": {"low": 0.0, "high": 0.1, "log": True}}, "log = true needs low > 0 (low = 0.0)"),
    ({"train.update_epochs": {"low": 1.5, "high": 4}}, "low = 1.5 must be an integer (train.update_epochs is an "
                                                       "integer key)"),
    ({"train.bptt_horizon": {"low": 8, "high": 30, "step": 8}}, "high - low = 22 must be a multiple of step = 8"),
    ({"train.learning_rate": {"low": 0.001, "high": 0.01, "step": 0.004}}, "high - low = 0.009 must be a multiple "
                                                                            "of step = 0.004, e.g. high = 0.009"),
    ({"train.gamma": {"low": 0.9, "high": 0.99, "step": 0.1}}, "high - low = 0.09 must be a multiple of step = 0.1, "
                                                               "e.g. high = 1"),
    ({"policy.hidden_size": {"choices": [64]}}, "choices = [64] hold one value, so every trial gets it and nothing is "
                                                "searched; list two or more, or set it for every trial with "
                                                "--policy.hidden-size 64 and leave it out of the sweep file"),
    ({"train.norm_adv": {"choices": [False]}}, "--train.norm-adv false and leave it out"),
    ({"policy.lstm": {"low": 0, "high": 1}}, "policy.lstm is a bool key, not a number; give {choices = [...]}"),
    ({"policy.hidden_size": {"choices": [64, "big"]}}, 'policy.hidden_size="big" is not an integer'),
    ({"train.gamma": {"low": 0.9, "high": 1.5}}, "'train.gamma' = 1.5 (in test.toml) gives a config that cannot "
                                                 "run: train.gamma=1.5 must be in (0, 1]"),
    ({"train.minibatch_size": {"choices": [256, 300]}}, "'train.minibatch_size' = 300 (in test.toml) gives a config "
                                                        "that cannot run: train.minibatch_size=300 must be a "
                                                        "multiple of train.bptt_horizon=16"),
    ({"env.max_steps": {"low": 0, "high": 500}}, "'env.max_steps' = 0 (in test.toml) gives a config that cannot run"),
    ({"metric": "charts/episodic_return", "train.gamma": {"low": 0.9, "high": 0.99}}, "sweep metric "
     "'charts/episodic_return' (in test.toml) is not a metric of cartpole runs; did you mean 'episode_return'?"),
    ({"metric": "episode_retrun", "train.gamma": {"low": 0.9, "high": 0.99}}, "sweep metric 'episode_retrun' (in "
                                                                              "test.toml) is not a metric of cartpole "
                                                                              "runs; did you mean 'episode_return'?"),
    ({"objective": "score,cost", "sampler": "cmaes", "train.gamma": {"low": 0.9, "high": 0.99}},
     "sampler cmaes (in test.toml) optimises one objective, not score,cost"),
    ({"pruner": "medain", "train.gamma": {"low": 0.9, "high": 0.99}}, "did you mean 'median'?"),
    ({"averge_last": 0.2, "train.gamma": {"low": 0.9, "high": 0.99}}, "unknown sweep setting 'averge_last' in "
                                                                      "test.toml; did you mean 'average_last'?"),
    ({"goal": "maximize", "train.gamma": {"low": 0.9, "high": 0.99}}, "unknown sweep setting 'goal' in test.toml; "
                                                                      "jaxlab calls 'goal' of PufferLib's and W&B's "
                                                                      "sweeps 'direction'; settings: metric,"),
    ({"method": "bayes", "train.gamma": {"low": 0.9, "high": 0.99}}, "calls 'method' of PufferLib's and W&B's sweeps "
                                                                     "'sampler'"),
    ({"average_last": 0.0, "train.gamma": {"low": 0.9, "high": 0.99}}, "average_last=0.0 (in test.toml) must be "
                                                                       "in (0, 1]"),
    ({"metric": "episode_return"}, "test.toml has no hyperparameter to search"),
    ({"objective": "score,cost", "pruner": "hyperband", "train.gamma": {"low": 0.9, "high": 0.99}},
     "sweep setting pruner=hyperband (in test.toml) cannot prune objective score,cost: Optuna prunes single-objective "
     "studies only; set pruner = \"none\" there, or objective = \"score\""),
    ({"train.learning_rate": {"low": 1e-3, "high": 1e-2, "log": True},
      "train.learning-rate": {"low": 2e-3, "high": 5e-3}},
     "sweep key 'train.learning-rate' (in test.toml) names train.learning_rate, which the file gives already "
     "(float 0.001..0.01 log); keep one"),
])
def test_bad_search_spaces_name_the_key_the_value_and_a_fix(table, expected):
    assert expected in error_of(table)


@pytest.mark.parametrize("env, space", [
    ("gymnasium:CartPole-v1", '"train.gamma" = {low = 0.9, high = 0.99}'),
    ("HEADER", '"env.max_steps" = {low = 100, high = 500}\n"train.gamma" = {low = 0.9, high = 0.99}'),
])
def test_a_sweep_of_a_python_env_or_an_env_header_checks_its_space_against_that_env(tmp_path, capsys, env, space):
    """`jaxlab sweep gymnasium:CartPole-v1` and `jaxlab sweep path/to/drone.h` (env names `jaxlab sweep --help`
    lists) ended in a ValueError traceback: the space's checks looked the env up among the C envs by the name
    given. They now check it against the env the config resolves (a Python env has no parameters)."""
    from jaxlab import cli

    pytest.importorskip("gymnasium")
    env = env.replace("HEADER", os.path.join(os.path.dirname(__file__), "..", "examples", "envs", "drone.h"))
    path = tmp_path / "space.toml"
    path.write_text(f'[sweep]\nmetric = "episode_length"\n{space}\n')
    sweep = ["sweep", env, "--root", str(tmp_path), "--study", "s", "--trials", "0"]
    assert cli.main([*sweep, "--sweep", str(path)]) == 0
    assert "done: nothing to run" in capsys.readouterr().out
    assert cli.main(sweep) == 0  # resumed: the stored space, checked again
    capsys.readouterr()
    if env.startswith("gymnasium"):
        path.write_text('[sweep]\n"env.max_steps" = {low = 100, high = 500}\n')
        assert cli.main([*sweep[:-3], "t", "--trials", "0", "--sweep", str(path)]) == 2
        assert ("unknown sweep key 'env.max_steps': gymnasium:CartPole-v1 has no parameter 'max_steps'; its "
                "parameters: none") in capsys.readouterr().err


def test_a_python_env_with_a_c_twin_sweeps_its_twins_space_and_an_env_without_one_is_told_what_to_do(tmp_path,
                                                                                                      capsys):
    """`jaxlab sweep gymnasium:CartPole-v1` looked for configs/sweeps/gymnasium:CartPole-v1.toml, though the env
    takes cartpole's config defaults; an env without a default space (cards, path/to/drone.h) was told that
    'configs/sweeps/./drone.h.toml does not exist'. The twin's file is the default; the others get one line
    naming the envs that have one and how to write their own."""
    from jaxlab import cli

    assert default_sweep_file("gymnasium:CartPole-v1") == default_sweep_file("cartpole")
    assert default_sweep_file("gymnasium:Pendulum-v1") == default_sweep_file("pendulum")
    pytest.importorskip("gymnasium")
    assert cli.main(["sweep", "gymnasium:CartPole-v1", "--root", str(tmp_path), "--study", "g", "--trials", "0"]) == 0
    assert "train.ent_coef float in [1e-05, 0.03], log" in capsys.readouterr().out  # cartpole.toml's space
    assert cli.main(["sweep", "cards", "--root", str(tmp_path), "--study", "c", "--trials", "0"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "jaxlab sweep: error: cards has no default search space (configs/sweeps/ holds cartpole, lure, memory, "
        "multicue, pendulum, spot, target); write one and pass --sweep FILE, e.g. a copy of "
        "configs/sweeps/cartpole.toml (format in README.md, 'Sweeps')"]


def test_seeds_that_run_past_the_largest_train_seed_are_refused_before_any_trial():
    """--seeds 2 from train.seed 2**63 - 1 started the trial, whose second run failed ('train.seed=...808 must be
    an integer in [0, 2**63)'), and the study held a failed trial; one seed from there is fine."""
    top = ["--train.seed", str(2**63 - 1)]
    assert error_of({**GOOD, "seeds": 2}, base_flags=top) == (
        "sweep setting seeds=2 (in test.toml) runs each trial with train seeds 9223372036854775807 to "
        "9223372036854775808, and the last cannot run: train.seed=9223372036854775808 must be an integer in "
        "[0, 2**63); lower --train.seed or the seeds")
    check_space(spec_of({**GOOD, "seeds": 1}), load_config("cartpole", flags=top)[0])


def test_a_distribution_written_as_pufferlib_or_wandb_write_it_is_told_how_jaxlab_writes_it(tmp_path):
    """[sweep.train.learning_rate] with PufferLib's min, max and distribution (or W&B's values) was flattened into
    keys: 'unknown sweep key 'train.learning_rate.min'; did you mean 'train.learning_rate'?', naming the key the
    user got right. The table is now read as a distribution and the error translates it."""
    path = tmp_path / "puf.toml"
    path.write_text('[sweep]\n[sweep.train.learning_rate]\ndistribution = "log_normal"\nmin = 1e-4\nmax = 1e-2\n'
                    'mean = 1e-3\nscale = "auto"\n')
    with pytest.raises(ConfigError) as info:
        spec_of(read_sweep_file(path))
    assert str(info.value) == (
        "sweep key 'train.learning_rate' (in test.toml) is written as PufferLib or W&B sweeps write a distribution "
        "(distribution, max, mean, min, scale); write it {low = 0.0001, high = 0.01, log = true} (min and max are "
        "low and high; a log distribution is log = true)")
    assert error_of({"train.gamma": {"values": [0.9, 0.99]}}).endswith(
        "write it {choices = [0.9, 0.99]} (W&B's values are jaxlab's choices)")
    assert "write it {low = 0.9, high = 0.99} (min" in error_of({"train.gamma": {"min": 0.9, "max": 0.99}})


def test_a_cnn_encoder_choice_is_checked_against_the_envs_observations_before_any_trial():
    """A cnn choice on vector observations passed the space's checks and failed each trial that drew it, in its
    child process, though every choice is checked on the base config; on an image env it is taken."""
    table = {"policy.encoder": {"choices": ["mlp", "cnn"]}}
    assert ("sweep key 'policy.encoder' = \"cnn\" (in test.toml) gives a config that cannot run: policy.encoder='cnn' "
            "needs image observations [H, W, C] or [H, W], but cartpole's are [4]") in error_of(table)
    spot = ["--policy.cnn-kernels", "3,3", "--policy.cnn-strides", "1,1", "--policy.cnn-channels", "8,8"]
    check_space(spec_of(table, "spot"), load_config("spot", flags=spot)[0])


@pytest.mark.parametrize("overrides, expected", [
    ({"seeds": 0}, "--seeds 0 must be at least 1"),
    ({"sampler": "foo"}, "--sampler foo is not known; use one of tpe, cmaes"),
    ({"pruner": "medain"}, "--pruner medain is not known; did you mean 'median'? use one of median, hyperband, none"),
    ({"objective": "score,cost", "sampler": "cmaes"}, "--sampler cmaes optimises one objective, not --objective "
                                                      "score,cost; use --sampler tpe for the Pareto front, or "
                                                      "--objective score"),
    ({"objective": "score,cost", "pruner": "median"}, "--pruner median cannot prune --objective score,cost: Optuna "
                                                      "prunes single-objective studies only; leave out --pruner (or "
                                                      "give --pruner none), or --objective score to prune"),
])
def test_bad_settings_from_the_command_line_name_their_flag_not_the_file(overrides, expected):
    with pytest.raises(ConfigError) as info:
        parse_spec(GOOD, "cartpole", "test.toml", overrides)
    assert str(info.value) == expected


def test_a_study_resumed_with_another_space_names_the_key_and_both_distributions(tmp_path):
    storage = study_lib.storage_for(None, tmp_path)
    base = to_toml(load_config("cartpole")[0])
    study_lib.open_study("s", storage, spec_of(GOOD), base, "cartpole")
    narrower = {**GOOD, "train.learning_rate": {"low": 1e-3, "high": 1e-2, "log": True}}
    fewer = {k: v for k, v in GOOD.items() if k != "train.norm_adv"}
    more = {**GOOD, "train.gamma": {"low": 0.9, "high": 0.99}}
    for table, change in ((narrower, "train.learning_rate: float 0.0001..0.01 log, not float 0.001..0.01 log"),
                          (fewer, "train.norm_adv: one of [True, False], which the new space lacks"),
                          (more, "no train.gamma, which the new space adds: float 0.9..0.99")):
        with pytest.raises(ConfigError) as info:
            study_lib.open_study("s", storage, spec_of(table), base, "cartpole")
        assert str(info.value).startswith(f"study 's' was created with another search space ({change}); resume it "
                                          "with the same sweep file"), str(info.value)
        assert "Param(" not in str(info.value)


def test_a_bad_sweep_file_exits_2_with_one_line_before_anything_runs(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[sweep]\n"train.gamma" = {low = 0.9, high = 1.5}\n')
    result = subprocess.run([sys.executable, "-m", "jaxlab.cli", "sweep", "cartpole", "--sweep", str(path),
                             "--root", str(tmp_path / "sweeps"), "--study", "s"], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"jaxlab sweep: error: sweep key 'train.gamma' = 1.5 (in {path}) gives a config that cannot run: "
        "train.gamma=1.5 must be in (0, 1], e.g. --train.gamma 0.99 (the default)"]
    assert not (tmp_path / "sweeps" / "s").exists() or not any((tmp_path / "sweeps" / "s").glob("trial-*"))


def test_show_of_a_study_that_does_not_exist_exits_2(tmp_path):
    result = subprocess.run([sys.executable, "-m", "jaxlab.cli", "sweep", "cartpole", "--study", "nope", "--root",
                             str(tmp_path), "--show"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "no study 'nope' in" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_show_of_a_study_without_trials_says_so_without_an_empty_list(tmp_path):
    command = [sys.executable, "-m", "jaxlab.cli", "sweep", "cartpole", "--study", "empty", "--root", str(tmp_path)]
    assert subprocess.run([*command, "--trials", "0"], capture_output=True, timeout=300).returncode == 0
    shown = subprocess.run([*command, "--show"], capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("study empty: 0 trials; episode_return = mean over"), shown.stdout  # was "0 trials ();"


def test_a_study_another_sweep_is_still_creating_is_waited_for_and_an_abandoned_one_is_completed(tmp_path):
    """Two sweeps started together: one creates the study and stores its attributes one at a time; the
    other, finding the study without them (CI once saw a KeyError: 'sweep'), waits for them."""
    import threading

    import optuna

    storage = study_lib.storage_for(None, tmp_path)
    spec = spec_of(GOOD)
    base = to_toml(load_config("cartpole")[0])
    optuna.create_study(study_name="s", storage=storage, directions=spec.directions)  # the creator, mid-way

    def creator_finishes():
        time.sleep(0.5)
        study = optuna.load_study(study_name="s", storage=storage)
        for key, value in (("env_name", "cartpole"), ("base_config", base), ("sweep", spec.to_dict())):
            study.set_user_attr(key, value)

    finisher = threading.Thread(target=creator_finishes)
    finisher.start()
    _, stored, stored_base = study_lib.open_study("s", storage, None, None, "cartpole", wait_s=30)
    finisher.join()
    assert stored == spec and stored_base == base

    # a study whose creator was killed before storing anything: --show cannot use it, a sweep completes it
    optuna.create_study(study_name="t", storage=storage, directions=spec.directions)
    with pytest.raises(ConfigError, match="study 't' was never completed"):
        study_lib.open_study("t", storage, None, None, "cartpole", wait_s=0)
    _, stored, stored_base = study_lib.open_study("t", storage, spec, base, "cartpole", wait_s=0)
    assert stored == spec and stored_base == base
    assert study_lib.open_study("t", storage, None, None, "cartpole", wait_s=0)[1] == spec
    # another sweep file on the completed study is refused as before
    with pytest.raises(ConfigError, match="study 't' was created with"):
        study_lib.open_study("t", storage, spec_of({**GOOD, "trials": 5, "average_last": 0.3}), base, "cartpole")


def test_apply_params_and_the_trial_flags_give_the_same_config():
    """A trial's values reach `jaxlab train` as flags; floats must survive the trip exactly."""
    from jaxlab.config import load_config

    base, _ = load_config("cartpole")
    params = {"train.learning_rate": 0.0012345678901234567, "policy.hidden_size": 64, "train.norm_adv": False,
              "train.anneal_lr": "cosine"}
    direct = apply_params(base, params, seed=7)
    via_flags, _ = load_config("cartpole", flags=[*param_flags(params), "--train.seed", "7"])
    assert to_toml(direct) == to_toml(via_flags)
    assert direct.train.learning_rate == 0.0012345678901234567 and direct.train.seed == 7


def test_a_list_key_is_searched_as_choices_of_lists_that_reach_the_trials_and_survive_the_study(tmp_path):
    """`"policy.mlp_layers" = {choices = [[64], [128, 128]]}` was refused ('must be a number, a string or a
    boolean'), and the same choices as strings ("64", "128,128") made a new study refuse itself: the space kept
    them as tuples, the study stored them as JSON lists, and the two compared unequal ('created with another
    search space'). A list key's choices are now kept as their TOML text, which Optuna takes and the config reads."""
    table = {"policy.mlp_layers": {"choices": [[64], "128,128", []]}}
    spec = spec_of(table)
    assert spec.params[0].choices == ("[64]", "[128, 128]", "[]")
    base = load_config("cartpole")[0]
    check_space(spec, base)
    for choice, layers in zip(spec.params[0].choices, ((64,), (128, 128), ())):
        direct = apply_params(base, {"policy.mlp_layers": choice})
        via_flags = load_config("cartpole", flags=param_flags({"policy.mlp_layers": choice}))[0]
        assert direct.policy.mlp_layers == via_flags.policy.mlp_layers == layers
    storage = study_lib.storage_for(None, tmp_path)
    study_lib.quiet_optuna()
    study_lib.open_study("s", storage, spec, to_toml(base), "cartpole")
    assert study_lib.open_study("s", storage, spec_of(table), to_toml(base), "cartpole")[1] == spec
    assert "choices [[64], \"64\"] repeat a value" in error_of({"policy.mlp_layers": {"choices": [[64], "64"]}})
    assert "choice [64] must be a number" in error_of({"policy.hidden_size": {"choices": [[64], [128]]}})


def test_a_range_of_an_integer_or_auto_key_searches_integers_as_one_of_a_number_or_auto_searches_floats():
    """train.reward_scale (a number or auto) took a range, but train.batch_size (an integer or auto) was refused:
    'train.batch_size is a int | str key, not a number; give {choices = [...]}'."""
    from jaxlab.sweep.space import Param

    spec = spec_of({"train.batch_size": {"low": 1024, "high": 4096, "step": 1024}})
    assert spec.params == (Param("train.batch_size", "int", low=1024, high=4096, step=1024),)
    check_space(spec, load_config("cartpole")[0])
    assert "low = 1500.0 must be an integer (train.batch_size is an integer key)" in error_of(
        {"train.batch_size": {"low": 1.5e3, "high": 4096}})
    assert spec_of({"train.reward_scale": {"low": 0.01, "high": 1.0, "log": True}}).params[0].kind == "float"


def test_window_mean_and_report_points():
    records = [{"global_step": 100 * u, "update": u, "episode_return": None if u == 9 else float(u)}
               for u in range(1, 11)]
    spec = spec_of({**GOOD, "average_last": 0.3})
    # the last 30% of 1,000 steps: steps 800, 900 (None: skipped) and 1,000
    assert study_lib.run_score(records, spec, 1000) == (8.0 + 10.0) / 2
    assert study_lib.window_mean(records, "episode_return", 500, 250) == (3.0 + 4.0 + 5.0) / 3
    assert study_lib.window_mean(records, "episode_return", 900, 50) is None
    # 4 report points at 250, 500, 750 and 1,000 steps
    assert [study_lib.report_step(r, 1000, 4) for r in records] == [0, 0, 1, 1, 2, 2, 2, 3, 3, 4]


def test_window_mean_weights_an_episode_statistic_by_the_episodes_behind_each_record():
    """Each record's episode_return is the mean over the episodes its update ended; the window mean averaged the
    records as equals, so an update that ended 1 episode counted as much as one that ended 3. A trainer metric
    (one value per update) is still the plain mean of its records."""
    def record(step, episodes, episode_return, value_loss):  # the trainer's key order: losses, episodes, statistics
        return {"global_step": step, "update": step // 100, "value_loss": value_loss, "episodes": episodes,
                "episode_return": episode_return}

    records = [record(100, 1, 10.0, 1.0), record(200, 3, 2.0, 2.0), record(300, 0, 100.0, 3.0),
               record(400, 4, 5.0, 4.0)]
    # (1 x 10 + 3 x 2 + 4 x 5) / (1 + 3 + 4) = 36 / 8; the update that ended no episode does not count
    assert study_lib.window_mean(records, "episode_return", 400, 400) == 4.5
    assert study_lib.window_mean(records, "value_loss", 400, 400) == (1.0 + 2.0 + 3.0 + 4.0) / 4
    assert study_lib.window_mean(records, "episode_return", 300, 150) == 2.0  # steps 200 (3 episodes) and 300 (0)
    assert study_lib.window_mean(records, "episode_return", 300, 50) is None  # only step 300: no episode ended
    spec = spec_of({**GOOD, "average_last": 0.75})
    assert study_lib.run_score(records, spec, 400) == (3 * 2.0 + 4 * 5.0) / 7  # steps 200, 300 and 400 of 400


def test_cores_are_split_between_parallel_trials():
    one = plan_slots(1, on_gpu=False, cores=[0, 1, 2, 3], max_threads=2)
    assert (one[0].cores, one[0].num_threads, one[0].env) == (None, 2, {})  # one at a time: the machine as it is
    two = plan_slots(2, on_gpu=False, cores=[0, 1, 2, 3], max_threads=8)
    assert [s.cores for s in two] == [(0, 1), (2, 3)] and [s.num_threads for s in two] == [2, 2]
    assert two[0].env["XLA_FLAGS"] == "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=2"
    three = plan_slots(3, on_gpu=False, cores=[0, 1], max_threads=1)
    assert [s.cores for s in three] == [(0,), (1,), (0,)]
    gpu = plan_slots(4, on_gpu=True, cores=list(range(16)), max_threads=8)
    assert [s.memory_fraction for s in gpu] == [0.225] * 4 and [s.num_threads for s in gpu] == [4] * 4
    assert gpu[0].flags() == ["--vec.num-threads", "4", "--device.memory-fraction", "0.225"]


def test_child_environment_sets_the_memory_fraction_unless_the_user_did():
    from jaxlab.sweep.trials import child_environment

    slot = plan_slots(2, on_gpu=True, cores=[0, 1], max_threads=1)[0]
    assert child_environment(slot, {})["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.45"
    mine = child_environment(slot, {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" not in mine and mine["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    newer = child_environment(slot, {"XLA_CLIENT_MEM_FRACTION": "0.2"})  # both names set: CUDA fails to start
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" not in newer and newer["XLA_CLIENT_MEM_FRACTION"] == "0.2"
    cpu = plan_slots(2, on_gpu=False, cores=[0, 1], max_threads=1)[0]
    flags = child_environment(cpu, {"XLA_FLAGS": "--xla_dump_to=/tmp/x"})["XLA_FLAGS"]
    assert flags.startswith("--xla_dump_to=/tmp/x --xla_cpu_multi_thread_eigen=false")


def test_the_sweep_process_itself_takes_gpu_memory_only_as_it_needs_it(tmp_path, no_xla_memory_env):
    """The supervising process never takes the config's device.memory_fraction (a card preset's 0.45 held
    for the whole sweep beside trials given 0.9 / K each would not fit one GPU): it allocates on demand,
    and the trials' environment is the one from before (each gets its own fraction)."""
    from jaxlab.cli import build_parser
    from jaxlab.cli.sweep import create_or_check

    args, flags = build_parser().parse_known_args(["sweep", "cartpole", "--preset", "cpu", "--study", "m", "--root",
                                                   str(tmp_path), "--device.memory-fraction", "0.5"])
    args.flags = flags
    storage = study_lib.storage_for(None, tmp_path / "m")
    _, _, base_toml, _ = create_or_check(args, "m", storage, {"trials": None, "seeds": None, "sampler": None,
                                                              "pruner": None, "objective": None})
    assert "memory_fraction = 0.5" in base_toml  # the trials' base config keeps it
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" not in os.environ and os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"


def test_metrics_follower_reads_complete_lines_and_rereads_a_truncated_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    follower = MetricsFollower(path)
    assert not follower.poll()  # no file yet
    lines = [json.dumps({"update": u, "global_step": u}) for u in (1, 2, 3)]
    path.write_text(lines[0] + "\n" + lines[1][:5])  # a line being written
    assert follower.poll() and list(follower.records) == [1]
    path.write_text("\n".join(lines) + "\n")
    follower.poll()
    assert [r["update"] for r in follower.ordered()] == [1, 2, 3]
    path.write_text(lines[0] + "\n")  # a resume dropped the records after its checkpoint
    follower.poll()
    assert list(follower.records) == [1]


@pytest.mark.parametrize("sampler", ["tpe", "cmaes"])
def test_samplers_suggest_values_inside_the_space(sampler):
    import optuna

    study_lib.quiet_optuna()
    spec = spec_of({**GOOD, "sampler": sampler, "startup_trials": 2})
    study = optuna.create_study(directions=spec.directions, sampler=study_lib.make_sampler(spec, seed=0))
    for _ in range(6):
        trial = study.ask()
        values = study_lib.suggest(trial, spec)
        assert 1e-4 <= values["train.learning_rate"] <= 1e-2 and values["train.update_epochs"] in range(1, 5)
        assert values["train.bptt_horizon"] in (8, 16, 24, 32) and values["policy.hidden_size"] in (32, 64)
        study.tell(trial, values["train.update_epochs"] + values["train.learning_rate"])
    assert isinstance(study.sampler, optuna.samplers.CmaEsSampler if sampler == "cmaes" else optuna.samplers.TPESampler)


def test_pruners_follow_the_settings():
    import optuna

    hyperband = study_lib.make_pruner(spec_of({**GOOD, "pruner": "hyperband", "reports": 9}))
    assert isinstance(hyperband, optuna.pruners.HyperbandPruner) and hyperband._max_resource == 9
    median = study_lib.make_pruner(spec_of({**GOOD, "reports": 10, "warmup": 0.25, "startup_trials": 3}))
    assert (median._n_warmup_steps, median._n_startup_trials) == (3, 3)  # from report 3 of 10 (30% >= 25%)
    multi = study_lib.make_pruner(spec_of({**GOOD, "objective": "score,cost"}))
    assert isinstance(multi, optuna.pruners.NopPruner)  # Optuna prunes on one value only


def test_values_in_messages_are_cut_by_the_one_shared_helper():
    """jaxlab.messages.short_repr words a value for a message (the Python env adapters' and a resumed
    study's): one line, cut to its width with "..."; both modules use it rather than a copy each."""
    from dataclasses import replace

    import numpy as np

    from jaxlab.env import python_envs
    from jaxlab.messages import short_repr

    assert python_envs.short_repr is short_repr and study_lib.short_repr is short_repr
    assert short_repr(np.zeros((2, 2))) == "array([[0., 0.], [0., 0.]])"  # numpy's line breaks: one line
    assert short_repr("x" * 58) == repr("x" * 58)  # 60 characters: whole
    long = list(range(100))
    assert short_repr(long) == repr(long)[:57] + "..."
    assert short_repr(long, 120) == repr(long)[:117] + "..."
    spec = spec_of(GOOD)  # a resumed study's other value: at most 120 characters of it
    with pytest.raises(ConfigError) as info:
        study_lib.check_same("s", replace(spec, metric="m" * 200), spec, None, "")
    assert f"not '{'m' * 116}...; resume it" in str(info.value)


# summary.json of a trial that a second Ctrl-C (forwarded by its sweep) interrupted in its first compile, as
# `jaxlab train` wrote it (a real one); with ``checkpoint`` the same stop later, after a checkpoint was saved
INTERRUPTED_AT_ONCE = {"updates": 0, "global_step": 0, "wall_time": 0.0, "sps": 0.0, "final": {}, "best": None,
                       "stopped": "SIGINT", "error": "KeyboardInterrupt: ", "checkpoint": None, "resumed_from": None}


def left_running(tmp_path, summary, checkpoints=()):
    """A sweep (not started) over an in-memory study holding trial 0 RUNNING, as a sweep process that ended
    left it, whose one run dir holds ``summary`` (summary.json) and checkpoints/N for each N of ``checkpoints``."""
    import socket

    import optuna

    from jaxlab.sweep.supervisor import Sweep

    study_lib.quiet_optuna()
    spec, base = spec_of(GOOD), load_config("cartpole")[0]
    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    trial.set_user_attr("host", socket.gethostname())
    trial.set_user_attr("study_dir", str(tmp_path.resolve()))
    run_dir = tmp_path / f"trial-0-seed-{base.train.seed}"
    (run_dir / "checkpoints").mkdir(parents=True)
    for update in checkpoints:
        for part in ("state", "meta"):
            (run_dir / "checkpoints" / str(update) / part).mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps({"update": u, "global_step": 512 * u}) + "\n"
                                                   for u in range(1, max(checkpoints, default=0) + 2)))
    (run_dir / "summary.json").write_text(json.dumps(summary))
    said = []
    sweep = Sweep(study, None, spec, base, tmp_path / "base.toml", tmp_path, [], {}, 1, say=said.append)
    return sweep, study, run_dir, said


def test_an_enqueued_value_outside_the_space_is_one_sweep_line_not_a_raw_optuna_warning(tmp_path):
    """A trial enqueued with Optuna's study.enqueue_trial (README: create the study with --trials 0, then enqueue)
    with a value outside the space printed Optuna's UserWarning raw, with its file and line
    ('.../optuna/trial/_trial.py:642: UserWarning: Fixed parameter ...'). It is one line of the sweep now."""
    import warnings

    sweep, study, _, said = left_running(tmp_path, {})
    study.tell(0, 1.0)  # the helper's running trial: done, so the enqueued one comes next
    study.enqueue_trial({"train.learning_rate": 0.5, "train.update_epochs": 2, "train.bptt_horizon": 16,
                         "policy.hidden_size": 32, "train.norm_adv": True})  # all given: a sampled horizon may not fit
    sweep.target = 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a raw warning fails the test
        asked, run = sweep.ask()
    assert asked and run.params["train.learning_rate"] == 0.5
    assert said == ["warning: trial 1: Fixed parameter train.learning_rate with value 0.5 is out of range for "
                    "distribution FloatDistribution(high=0.01, log=True, low=0.0001, step=None). (Optuna runs it "
                    "with that value)"]
    os.close(run.lock_fd)


def test_show_leaves_a_config_file_for_the_pareto_trials_only_not_for_those_an_earlier_show_found(tmp_path):
    """--show of a score,cost study writes pareto-trial-N.toml for each trial of the front, and said 'each Pareto
    trial's config: STUDY/pareto-trial-N.toml'; the files of trials that later trials pushed off the front stayed,
    so the folder named trials as Pareto that were not."""
    import optuna

    from jaxlab.sweep import results

    study_lib.quiet_optuna()
    spec = spec_of({"objective": "score,cost", "pruner": "none", "train.gamma": {"low": 0.9, "high": 0.99}})
    study = optuna.create_study(directions=spec.directions)
    gamma = {"train.gamma": optuna.distributions.FloatDistribution(0.9, 0.99)}
    base = to_toml(load_config("cartpole")[0])

    def add(score, cost):
        study.add_trial(optuna.trial.create_trial(params={"train.gamma": 0.95}, values=[score, cost],
                                                  distributions=gamma))

    add(1.0, 5.0)
    add(2.0, 9.0)
    results.show(study, spec, base, tmp_path, "cartpole", "again")
    assert sorted(p.name for p in tmp_path.glob("pareto-trial-*.toml")) == ["pareto-trial-0.toml",
                                                                            "pareto-trial-1.toml"]
    add(3.0, 4.0)  # better and cheaper than both: the front is trial 2 alone
    results.show(study, spec, base, tmp_path, "cartpole", "again")
    assert sorted(p.name for p in tmp_path.glob("pareto-trial-*.toml")) == ["pareto-trial-2.toml"]


@pytest.mark.parametrize("checkpoints", [(5, 10), ()])
def test_a_trial_a_second_ctrl_c_stopped_at_once_is_continued_by_the_next_sweep_not_failed(tmp_path, checkpoints):
    """A trial stopped at once by a second Ctrl-C records error "KeyboardInterrupt: " beside stopped "SIGINT";
    the next sweep took that for a failure: its run was neither continued nor rerun, the trial never told
    (it stayed RUNNING), and the sweep ended with a traceback (its lock closed twice). It is a stop now: the
    run continues from its newest checkpoint, or, with none, is moved aside and starts again."""
    import optuna

    sweep, study, run_dir, said = left_running(tmp_path, INTERRUPTED_AT_ONCE, checkpoints)
    sweep.adopt()
    assert [t.number for t in sweep.trials] == [0]
    (seed_run,) = sweep.trials[0].runs
    assert (seed_run.state, seed_run.resume, seed_run.error) == ("pending", bool(checkpoints), None)
    assert study.trials[0].state == optuna.trial.TrialState.RUNNING  # not told: it runs on
    if checkpoints:
        assert (run_dir / "summary.json").is_file()  # continued in place, from checkpoints/10
    else:
        assert not run_dir.exists() and len(list((tmp_path / "discarded").iterdir())) == 1
        assert any("had no checkpoint; moved aside" in line for line in said)


def test_an_adopted_trial_whose_run_failed_is_told_failed_once(tmp_path):
    """A run that failed for real (an error, no stop) still fails its trial when a sweep adopts it: told FAIL
    once, with its error (it was left RUNNING, and the sweep died closing the trial's lock a second time)."""
    import optuna

    summary = {**INTERRUPTED_AT_ONCE, "stopped": None, "error": "EnvStepError: the env's step failed"}
    sweep, study, run_dir, said = left_running(tmp_path, summary, (5,))
    sweep.adopt()
    assert sweep.trials == [] and sweep.told == {0: "failed"}
    assert study.trials[0].state == optuna.trial.TrialState.FAIL
    seed = run_dir.name.rsplit("-", 1)[1]
    assert study.trials[0].user_attrs["error"] == f"seed {seed}: {summary['error']}"
    assert said[-1] == f"trial 0 failed: seed {seed}: {summary['error']}"
    assert sweep.step(stopping=True) is False  # nothing left: finishing it again raised OSError (EBADF)


@pytest.mark.parametrize("checkpoints", [(5, 10), ()])
def test_a_run_a_second_sigint_stopped_at_once_is_rerun_by_its_sweep_when_it_saved_no_checkpoint(tmp_path,
                                                                                                   checkpoints):
    """A trial's run that two SIGINTs sent to it (not by its sweep) stopped at once, exit 130, is continued by
    the sweep that runs it, as one stopped by SIGINT: from its newest checkpoint; with none it was resumed
    all the same (`jaxlab train --resume` of a run without a checkpoint: the trial failed); it starts again."""
    from types import SimpleNamespace

    from jaxlab.cli.sweep import stopped_line
    from jaxlab.sweep.trials import Slot

    sweep, _, run_dir, _ = left_running(tmp_path, INTERRUPTED_AT_ONCE, checkpoints)
    run_dir.rename(tmp_path / "elsewhere")  # adopted with no run dir: it starts
    sweep.adopt()
    (run_dir.parent / "elsewhere").rename(run_dir)  # ... and ran, until the SIGINTs
    trial = sweep.trials[0]
    (seed_run,) = trial.runs
    seed_run.state, seed_run.slot, seed_run.process = "running", Slot(0, None, 1, None), SimpleNamespace(returncode=130)
    sweep.reap(trial, seed_run)
    assert (seed_run.state, seed_run.resume, trial.failed) == ("pending", bool(checkpoints), None)
    assert run_dir.exists() == bool(checkpoints)  # without a checkpoint: moved aside, to start afresh
    assert sweep.cut_short == [run_dir.name]  # the sweep's last line does not say it saved a checkpoint
    line = stopped_line("SIGINT", "1 running", sweep.cut_short, "jaxlab sweep cartpole --study s")
    assert line == (f"stopped by SIGINT: 1 running; {run_dir.name} stopped at once (a second Ctrl-C) without a "
                    "checkpoint at the stop: continued from its newest checkpoint, or started again; the other "
                    "running trials saved one; continue with `jaxlab sweep cartpole --study s`")
    assert "every running trial saved a checkpoint" in stopped_line("SIGINT", "1 running", [], "again")


@pytest.mark.parametrize("checkpoints", [(5,), ()])
def test_a_stop_that_caught_a_run_before_its_first_update_is_not_said_to_have_saved_a_checkpoint(tmp_path,
                                                                                              checkpoints):
    """Ctrl-C during a run's start (its compile) ends it with no summary and nothing saved; the sweep's last
    line said 'every running trial saved a checkpoint' all the same. It names that run now."""
    from types import SimpleNamespace

    from jaxlab.cli.sweep import stopped_line
    from jaxlab.sweep.trials import Slot

    sweep, _, run_dir, _ = left_running(tmp_path, INTERRUPTED_AT_ONCE, checkpoints)
    run_dir.rename(tmp_path / "elsewhere")  # adopted with no run dir: it starts
    sweep.adopt()
    (run_dir.parent / "elsewhere").rename(run_dir)
    (run_dir / "summary.json").unlink()  # `jaxlab train: interrupted` before it trained: no summary
    if checkpoints:  # a stop at its next update after a checkpoint: it wrote a summary
        (run_dir / "summary.json").write_text(json.dumps({**INTERRUPTED_AT_ONCE, "error": None}))
    trial = sweep.trials[0]
    (seed_run,) = trial.runs
    seed_run.state, seed_run.slot, seed_run.process = "running", Slot(0, None, 1, None), SimpleNamespace(returncode=130)
    seed_run.stop_reason = "sweep"
    sweep.reap(trial, seed_run)
    assert (seed_run.state, seed_run.resume, sweep.cut_short) == ("stopped", bool(checkpoints), [])
    assert sweep.unstarted == ([] if checkpoints else [run_dir.name])
    line = stopped_line("SIGINT", "1 running", sweep.cut_short, "again", sweep.unstarted)
    if checkpoints:
        assert line == "stopped by SIGINT: 1 running; every running trial saved a checkpoint; continue with `again`"
    else:
        assert line == (f"stopped by SIGINT: 1 running; {run_dir.name} stopped before its first update, with nothing "
                        "to save: started again; the other running trials saved one; continue with `again`")


@pytest.mark.parametrize("first_cores, warned", [(1, False), (2, True)])
def test_a_trial_continued_on_other_cpu_cores_than_it_started_on_is_warned_of(tmp_path, monkeypatch, first_cores,
                                                                             warned):
    """A trial that started pinned to 1 core (--parallel 2 on 2 cores) and was continued by `jaxlab sweep ENV
    --study NAME` (--parallel 1: all cores) trained its second part with other arithmetic, and --show still
    printed `taskset -c 0 jaxlab train ...` as the command that reproduces it, silently. It says so now."""
    import optuna

    from jaxlab.sweep import supervisor
    from jaxlab.sweep.trials import Slot

    summary = {**INTERRUPTED_AT_ONCE, "error": None, "updates": 5, "checkpoint": "checkpoints/5"}
    sweep, study, run_dir, said = left_running(tmp_path, summary, (5,))
    optuna.trial.Trial(study, study.trials[0]._trial_id).set_user_attr("cpu_cores", first_cores)  # as launch did
    sweep.adopt()
    (trial,) = sweep.trials
    monkeypatch.setattr(supervisor, "start", lambda *args: None)  # no process: only what the sweep says
    sweep.launch(trial, trial.runs[0], Slot(0, (0,), 1, None))
    warning = [line for line in said if line.startswith("warning: trial 0 started on")]
    assert warning == ([f"warning: trial 0 started on {first_cores} CPU cores and continues on 1: XLA's results "
                        "depend on the cores it sees, so `--show`'s command will not reproduce this trial exactly; "
                        "continue a study with the --parallel it started with"] if warned else [])
    assert study.trials[0].user_attrs["cpu_cores"] == first_cores  # what --show pins its command to


def test_trials_logging_to_wandb_are_grouped_by_study_unless_the_user_named_a_group():
    """Trials of two studies in one wandb project had no group: they could not be told apart."""
    from jaxlab.config import load_config
    from jaxlab.sweep.trials import wandb_group_flags

    def base(*flags):
        return load_config("cartpole", flags=list(flags))[0]

    assert wandb_group_flags(base("--log.wandb", "true"), "cp-1") == ["--log.wandb-group", "cp-1"]
    assert wandb_group_flags(base("--log.wandb", "true", "--log.wandb-group", "mine"), "cp-1") == []
    assert wandb_group_flags(base(), "cp-1") == []  # no wandb


# a sweep's trial process (jaxlab.sweep.child) whose command gets a Ctrl-C while it still imports (JAX's import
# can turn that KeyboardInterrupt into 'Exception ignored in <function _xla_gc_callback>'), then starts its run
EARLY_SIGINT_TRIAL = """
import os, signal, sys
import jaxlab.cli
import jaxlab.run.signals as signals
from jaxlab.sweep import child

def command(args):
    os.kill(os.getpid(), signal.SIGINT)  # the sweep forwards a Ctrl-C before the run's StopSignals
    with signals.StopSignals() as stop:
        print("received", stop.received)
    return 0

jaxlab.cli.main = command
sys.exit(child.main([str(os.getppid()), "train", "cartpole"]))
"""


def test_a_ctrl_c_forwarded_to_a_trial_still_importing_stops_its_run_instead_of_being_lost():
    """The sweep forwards a Ctrl-C to its trials; one still importing JAX raised KeyboardInterrupt where JAX's
    garbage-collection callback swallowed it, and the trial trained to its end though the sweep said it was
    stopping. The trial process now holds such a SIGINT for its run, which stops at its first update."""
    result = subprocess.run([sys.executable, "-c", EARLY_SIGINT_TRIAL], capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stdout) == (0, "received SIGINT\n"), result.stderr
    assert "finishing this update, then saving a checkpoint" in result.stderr


def test_plot_of_too_few_trials_says_what_optuna_warned_in_its_line_not_as_a_raw_warning(tmp_path):
    """--plot of a study with one complete trial printed Optuna's UserWarning raw, with its file and line
    ('.../optuna/importance/_ped_anova/evaluator.py:289: UserWarning: The number of trials is too small ...')."""
    import warnings

    import optuna

    from jaxlab.sweep import results

    study_lib.quiet_optuna()
    study = optuna.create_study(direction="maximize")
    study.add_trial(optuna.trial.create_trial(params={"train.gamma": 0.95}, value=1.0, distributions={
        "train.gamma": optuna.distributions.FloatDistribution(0.9, 0.99)}))
    spec = spec_of({"train.gamma": {"low": 0.9, "high": 0.99}})
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        lines = results.plot(study, spec, tmp_path, "again")
    assert [str(w.message) for w in shown if "optuna" in w.filename] == []
    assert lines == [f"wrote {tmp_path / 'history.png'}",
                     f"wrote {tmp_path / 'importances.png'} (Optuna: The number of trials is too small to compute "
                     "importances. Parameter importances will be equal.)"]


@pytest.mark.parametrize("updates, pruned", [(8, False), (4, True)])
def test_a_trial_whose_runs_trained_to_their_end_is_not_pruned_on_reports_read_late(tmp_path, updates, pruned):
    """A short run (8 updates in a second) outpaced the sweep's polls: the pruner, asked at report 3 of 10, pruned
    a trial whose run had trained to its end, and the trial was told PRUNED, its score thrown away, though the
    prune stopped nothing (summary: 8 of 8 updates, status pruned). Reports read after the end prune nothing."""
    from types import SimpleNamespace

    import optuna

    from jaxlab.sweep.supervisor import SeedRun, Sweep, TrialRun

    study_lib.quiet_optuna()
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.ThresholdPruner(lower=1e9))
    spec, base = spec_of(GOOD), load_config("cartpole")[0]
    sweep = Sweep(study, None, spec, base, tmp_path / "base.toml", tmp_path, [], {}, 1, say=lambda line: None)
    stopped = []
    seed_run = SeedRun(0, tmp_path / "trial-0-seed-0", state="running",
                       process=SimpleNamespace(poll=lambda: None, send_signal=stopped.append))
    seed_run.run_dir.mkdir()
    (seed_run.run_dir / "metrics.jsonl").write_text("".join(
        json.dumps({"update": u, "global_step": 1024 * u, "episode_return": 20.0}) + "\n"
        for u in range(1, updates + 1)))
    seed_run.follower.poll()
    run = TrialRun(study.ask(), 0, {}, 8 * 1024, [seed_run], lock_fd=-1)
    sweep.report(run)
    assert (run.pruned_at is not None, bool(stopped)) == (pruned, pruned)


@pytest.mark.parametrize("direction, sign", [("maximize", -1.0), ("minimize", 1.0)])
def test_importances_of_a_score_cost_study_rank_good_scores_not_low_ones(tmp_path, direction, sign):
    """For score,cost, importances.png gave Optuna's PED-ANOVA the score as its target, which it ranks low values
    best: a maximised return's importances were those of a low return (Optuna warned so, raw)."""
    import warnings

    import optuna

    from jaxlab.sweep import results

    study_lib.quiet_optuna()
    spec = spec_of({"objective": "score,cost", "direction": direction, "train.gamma": {"low": 0.9, "high": 0.99}})
    study = optuna.create_study(directions=spec.directions)
    for i in range(4):
        study.add_trial(optuna.trial.create_trial(params={"train.gamma": 0.9 + i / 100}, values=[float(i), 1.0 + i],
                                                  distributions={"train.gamma": optuna.distributions.FloatDistribution(
                                                      0.9, 0.99)}))
    target = results.importance_target(spec)
    assert [target(t) for t in study.trials] == [sign * i for i in range(4)]
    assert results.importance_target(spec_of(GOOD)) is None  # one objective: Optuna follows its direction
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        lines = results.plot(study, spec, tmp_path, "again")
    assert not [w for w in shown if "low `target` values" in str(w.message)]
    assert f"wrote {tmp_path / 'importances.png'}" in lines


def test_the_trials_of_a_python_env_get_no_thread_flag_that_warns_in_each_trial(tmp_path, capsys):
    """Every trial of a sweep of gymnasium:CartPole-v1 warned '--vec.num-threads does nothing with env
    gymnasium:CartPole-v1, a Python env' in its output: the sweep gave each trial its slot's C threads as a
    flag, which a Python env (stepped in the calling thread) does not use. A C env's trials keep it."""
    pytest.importorskip("gymnasium")
    from jaxlab import cli
    from jaxlab.sweep.trials import Slot, train_command

    slot = Slot(0, (0,), 2, None)
    for env, threaded in (("gymnasium:CartPole-v1", False), ("cartpole", True)):
        for resume in (False, True):
            args = train_command(env, tmp_path / "run", tmp_path / "base.toml", [], 0, slot, "", resume=resume)
            assert ("--vec.num-threads" in args) == threaded, args
        args = train_command(env, tmp_path / "run", tmp_path / "base.toml", [], 0, slot, "", resume=False)
        flags = args[args.index("--train.seed"):args.index("--run-dir")]  # the config flags after the trial's own
        assert cli.main(["config", env, *flags]) == 0
        assert "does nothing" not in capsys.readouterr().err


def test_plot_that_skips_a_picture_removes_the_one_an_earlier_plot_drew(tmp_path, monkeypatch):
    """--show --plot that skipped importances.png (Optuna could not compute them) left the one an earlier --plot
    drew, which looked current."""
    import optuna
    import optuna.visualization.matplotlib as vis

    from jaxlab.sweep import results

    def cannot(*args, **kwargs):
        raise ValueError("Cannot evaluate parameter importances")

    study_lib.quiet_optuna()
    study = optuna.create_study(direction="maximize")
    study.add_trial(optuna.trial.create_trial(params={"train.gamma": 0.95}, value=1.0, distributions={
        "train.gamma": optuna.distributions.FloatDistribution(0.9, 0.99)}))
    spec = spec_of({"train.gamma": {"low": 0.9, "high": 0.99}})
    (tmp_path / "importances.png").write_bytes(b"an earlier plot")
    monkeypatch.setattr(vis, "plot_param_importances", cannot)
    lines = results.plot(study, spec, tmp_path, "again")
    assert lines[1] == (f"importances.png: skipped (Cannot evaluate parameter importances); removed "
                        f"{tmp_path / 'importances.png'}, an earlier --plot's, which showed the study as it was then")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["history.png"]
    assert results.plot(study, spec, tmp_path, "again")[1] == \
        "importances.png: skipped (Cannot evaluate parameter importances)"


def timed_records(first_update_s: float, update_s: list[float], compiles: int = 3) -> list[dict]:
    """Hand-made metrics.jsonl records of a run: the first update took ``first_update_s`` (JAX's compiles
    included: it holds compile_cache), update k + 2 took ``update_s[k]``."""
    records = [{"update": 1, "wall_time": first_update_s, "compiles": compiles, "compile_cache": "miss"}]
    for seconds in update_s:
        last = records[-1]
        records.append({"update": last["update"] + 1, "wall_time": last["wall_time"] + seconds, "compiles": compiles})
    return records


def test_the_cost_of_a_run_leaves_out_its_compiles_so_the_compile_cache_does_not_change_it():
    """score,cost's cost was the run's last wall_time, JAX's compiles included: the same trial cost 20 s more
    with a cold compile cache than with a warm one. It is now the run's updates times the mean time of an update
    that compiled nothing (a process's first, with compile_cache; one whose compiles count changed)."""
    cold, warm = timed_records(20.5, [0.5] * 9), timed_records(2.5, [0.5] * 9)
    assert study_lib.run_cost(cold) == study_lib.run_cost(warm) == pytest.approx(10 * 0.5)
    resumed = cold[:4] + [{**r, "wall_time": r["wall_time"] + 15.0} for r in cold[4:]]  # update 5 compiled again
    resumed[4]["compile_cache"] = "hit"
    recompiled = [*cold[:6], *({**r, "compiles": 4} for r in cold[6:])]  # update 7 compiled (a new shape)
    recompiled[6:] = [{**r, "wall_time": r["wall_time"] + 8.0} for r in recompiled[6:]]
    assert study_lib.run_cost(resumed) == study_lib.run_cost(recompiled) == pytest.approx(5.0)
    assert study_lib.run_cost(timed_records(7.0, [])) == 7.0 and study_lib.run_cost([]) is None


@pytest.mark.parametrize("space, base, searched", [
    ('"train.update_epochs" = {low = 1, high = 4}', "[train]\nupdate_epochs = 1\ntarget_kl = 0.02\n",
     "train.update_epochs"),
    ('"policy.lstm" = {choices = [true, false]}', "[policy]\nlstm = false\nhidden_size = 64\n", "policy.lstm"),
])
def test_a_base_config_key_that_a_searched_key_turns_on_is_not_named_as_doing_nothing(tmp_path, capsys, space, base,
                                                                                      searched):
    """`jaxlab sweep --config base.toml` whose file set update_epochs 1 and target_kl 0.02, with a sweep file that
    searches train.update_epochs, warned that target_kl does nothing and said to remove its line: the trials of
    2 to 4 epochs use it. A key that a searched key turns off is quiet, as a new study and when resumed."""
    from jaxlab import cli

    (tmp_path / "space.toml").write_text(f"[sweep]\n{space}\n")
    (tmp_path / "base.toml").write_text(base)
    sweep = ["sweep", "cartpole", "--root", str(tmp_path), "--study", "s", "--trials", "0", "--config",
             str(tmp_path / "base.toml")]
    for resumed in (False, True):
        assert cli.main([*sweep, *([] if resumed else ["--sweep", str(tmp_path / "space.toml")])]) == 0
        captured = capsys.readouterr()
        assert "done: nothing to run" in captured.out
        assert "does nothing" not in captured.err, (searched, resumed)
    assert cli.main(["config", "cartpole", "--config", str(tmp_path / "base.toml")]) == 0  # no sweep: it does
    assert "does nothing" in capsys.readouterr().err
