"""Config layering, parsing and the invariants checked before anything runs."""

import re
from dataclasses import fields

import pytest

from jaxlab.config import SECTIONS, ConfigError, check_network, derive_sizes, load_config, to_toml


def test_layers_env_file_then_config_file_then_flags(tmp_path):
    config, sources = load_config("cartpole")
    assert config.train.total_timesteps == 200_000 and sources["train.total_timesteps"] == "configs/envs/cartpole.toml"
    assert config.train.reward_scale == "auto" and sources["train.reward_scale"] == "configs/default.toml"
    assert sources["train.gamma"] == "configs/default.toml"
    override = tmp_path / "mine.toml"
    override.write_text("[train]\nreward_scale = 0.5\ngamma = 0.9\n")
    config, sources = load_config("cartpole", config_file=override, flags=["--train.gamma=0.95"])
    assert config.train.reward_scale == 0.5 and sources["train.reward_scale"] == str(override)
    assert config.train.gamma == 0.95 and sources["train.gamma"] == "command line"


@pytest.mark.parametrize("text, value", [("true", True), ("False", False), ("1", True), ("0", False),
                                         ("yes", True), ("NO", False)])
def test_booleans(text, value):
    config, _ = load_config("cartpole", flags=["--policy.lstm", text])
    assert config.policy.lstm is value


@pytest.mark.parametrize("text", ["1e6", "1_000_000", "1000000", "1.0e6"])
def test_integers(text):
    config, _ = load_config("cartpole", flags=["--train.total-timesteps", text])
    assert config.train.total_timesteps == 1_000_000


@pytest.mark.parametrize("text", ["64,32", "[64, 32]", "64 32", "[64 32]", " 64,  32 "])
def test_a_list_of_integers_takes_commas_or_spaces_between_its_items(tmp_path, text):
    """`--policy.mlp-layers "64 32"` (argparse's nargs habit, quoted) was [6432], one layer 6,432 wide: the spaces
    were dropped before the commas were split."""
    config, _ = load_config("cartpole", flags=["--policy.mlp-layers", text, "--policy.cnn-channels", text])
    assert tuple(config.policy.mlp_layers) == tuple(config.policy.cnn_channels) == (64, 32)
    path = tmp_path / "mine.toml"
    path.write_text(f'[policy]\nmlp_layers = "{text}"\n')
    assert tuple(load_config("cartpole", config_file=path)[0].policy.mlp_layers) == (64, 32)


@pytest.mark.parametrize("flags, message", [
    (["--train.total-timesteps", "1.5"], r'train.total_timesteps="1.5" is not an integer; write e.g. '
     r"--train.total-timesteps 1000000 \(the default\)"),
    (["--policy.mlp-layers", "abc"], r'policy.mlp_layers\[0\]="abc" is not an integer; write a list of integers, '
                                     r"e.g. \[512, 512\] in TOML or --policy.mlp-layers 512,512"),
    (["--train.gama", "0.9"], r"unknown config key 'train.gama'; did you mean 'train.gamma'"),
    (["--trian.gamma", "0.9"], r"unknown config section \[trian\].*did you mean \[train\]"),
    # a name in capitals got no suggestion: its case kept difflib from finding it
    (["--TRAIN.SEED", "1"], r"^unknown config section \[TRAIN\] in command line; did you mean \[train\]\?$"),
    (["--train.LEARNING-RATE", "1e-3"],
     r"^unknown config key 'train.LEARNING_RATE'; did you mean 'train.learning_rate'\?$"),
    (["--env.MAX-STEPS", "10"], r"^unknown config key 'env.MAX_STEPS'; did you mean 'env.max_steps'\?$"),
    (["--env.delay", "3"], r"unknown config key 'env.delay'"),
    (["--train.learning-rate", "fast"], r'train.learning_rate="fast" is not a number; write e.g. '
     r"--train.learning-rate [0-9.e-]+ \(the default\)"),
    (["--train.gamma"], r"flag --train.gamma needs a value"),
    # a flag followed by another flag has no value: it is not the next flag's name (CleanRL's bare booleans)
    (["--policy.lstm", "--train.seed", "1"], r"^flag --policy.lstm needs a value: --policy.lstm true or "
                                             r"--policy.lstm false \(a flag alone is not read as true\)$"),
    (["--train.seed", "--train.gamma", "0.9"], r"^flag --train.seed needs a value, e.g. --train.seed 0 \(the default\)$"),
    # PufferLib's and CleanRL's names: a key of another section, a section's key with its prefix, a bare name
    (["--train.num-envs", "8"], r"^unknown config key 'train.num_envs'; did you mean 'vec.num_envs'\?$"),
    (["--train.checkpoint-interval", "50"], r"^unknown config key 'train.checkpoint_interval'; did you mean "
                                            r"'checkpoint.interval'\?$"),
    (["--rnn.hidden-size", "64"], r"^unknown config section \[rnn\] in command line; did you mean 'policy.hidden_size'\?$"),
    (["--train.device", "cuda"], r"^unknown config key 'train.device'; jaxlab trains on the devices JAX sees: pick "
                                 r"them with --preset"),
    # PufferLib's keys with no jaxlab name: what jaxlab does instead, not a close name of another meaning
    (["--vec.batch-size", "4"], r"^unknown config key 'vec.batch_size'; PufferLib's vec.batch_size, the envs stepped "
                                r"at a time, is vec.num_envs / vec.groups here \(e.g. --vec.groups 2 .*; the samples "
                                r"per update are train.batch_size$"),
    (["--train.max-minibatch-size", "4096"], r"^unknown config key 'train.max_minibatch_size'; jaxlab takes each "
                                             r"train.minibatch_size in one gradient step, with no accumulation; "
                                             r"remove it$"),
    (["--train.compile", "false"], r"^unknown config key 'train.compile'; XLA always compiles .*; remove it$"),
    (["--train.adam-eps", "1e-8"], r"^unknown config key 'train.adam_eps'; jaxlab's optimizer is Adam .*; remove it$"),
    (["--train.use-rnn", "true"], r"^unknown config key 'train.use_rnn'; did you mean 'policy.lstm'\?$"),
    (["--sweep.method", "Protein"], r"^unknown config section \[sweep\] in command line; a sweep's search space is "
                                    r"a file of its own: `jaxlab sweep ENV --sweep FILE`"),
    (["--base.package", "ocean"], r"^unknown config section \[base\] in command line; PufferLib's \[base\] has no "
                                  r"jaxlab section: the env is ENV on the command line"),
    # CleanRL's names: what jaxlab has instead, not a close name of another meaning (num_minibatches is a count, not
    # train.minibatch_size; clip_vloss is no train.clip_coef), in a section, alone, or in a file outside any section
    (["--train.num-minibatches", "4"], r"^unknown config key 'train.num_minibatches'; CleanRL's num_minibatches is a "
                                       r"count; jaxlab sets each minibatch's size: train.minibatch_size = batch / "
                                       r"num_minibatches \(the batch, .*, a multiple of train.bptt_horizon"),
    (["--num-minibatches", "4"], r"^unexpected argument '--num-minibatches'; CleanRL's num_minibatches is a count"),
    (["--train.clip-vloss", "true"], r"^unknown config key 'train.clip_vloss'; CleanRL's clip_vloss clips the value "
                                     r"change by clip_coef; here train.vf_clip_coef is that range itself \(0: no value "
                                     r"clipping\), e.g. --train.vf-clip-coef 0.2"),
    (["--target-kl", "0.01"], r"^unexpected argument '--target-kl'; did you mean --train.target-kl 0.01\?"),
    (["--ppo.target-kl", "0.01"], r"^unknown config section \[ppo\] in command line; did you mean "
                                  r"'train.target_kl'\?$"),
    (["--train.num-steps", "128"], r"^unknown config key 'train.num_steps'; CleanRL's num_steps, the steps per env "
                                   r"in a rollout, is train.bptt_horizon here$"),
    (["--env-id", "CartPole-v1"], r"^unexpected argument '--env-id'; the env is ENV on the command line"),
    (["--track"], r"^unexpected argument '--track'; CleanRL's track is log.wandb here \(--log.wandb true"),
    (["--cuda", "False"], r"^unexpected argument '--cuda'; jaxlab trains on the devices JAX sees: --preset cpu"),
    (["--no-cuda"], r"^unexpected argument '--no-cuda'; jaxlab trains on the devices JAX sees: --preset cpu"),
    (["--capture-video"], r"^unexpected argument '--capture-video'; `jaxlab eval ENV --checkpoint RUN --gif"),
    (["--exp-name", "cp"], r"^unexpected argument '--exp-name'; CleanRL's exp_name is log.run_name here"),
    # no scaling is 1.0, not the 0.1 the message suggested (a scaling): CleanRL's ppo.py scales no reward
    (["--train.reward-scale", "none"], r'^train.reward_scale="none" is neither auto nor a number; write auto, or a '
                                       r"number that multiplies the rewards \(1.0: as they are, no scaling\)$"),
    (["--wandb"], r"^unexpected argument '--wandb'; did you mean --log.wandb true\?"),
    (["--seed", "1"], r"^unexpected argument '--seed'; did you mean --train.seed 1\?"),
    # the value given is kept: CleanRL's `--norm-adv False` got "did you mean --train.norm-adv true?", its opposite
    (["--norm-adv", "False"], r"^unexpected argument '--norm-adv'; did you mean --train.norm-adv False\?"),
    (["--norm_adv=False"], r"^unexpected argument '--norm_adv=False'; did you mean --train.norm-adv False\?"),
    (["--norm-adv", "--train.seed", "1"], r"^unexpected argument '--norm-adv'; did you mean --train.norm-adv true\?"),
    # tyro's negations, as CleanRL's scripts take false: --train.KEY false (anneal_lr takes booleans too)
    (["--no-anneal-lr"], r"^unexpected argument '--no-anneal-lr'; did you mean --train.anneal-lr false\?"),
    (["--no_norm_adv"], r"^unexpected argument '--no_norm_adv'; did you mean --train.norm-adv false\?"),
    (["--no-clip-vloss"], r"^unexpected argument '--no-clip-vloss'; CleanRL's clip_vloss clips the value change"),
    (["--no-seed"], r"^unexpected argument '--no-seed'; config flags look like --train.seed 1$"),  # no boolean
    # a value the key refuses is not carried over into the hint (`--train.target-kl None` is refused in turn)
    (["--target-kl", "None"], r"^unexpected argument '--target-kl'; it is --train.target-kl, but "
                              r'train.target_kl="None" is not a number; write e.g. --train.target-kl 0.0 \(the '
                              r"default\)$"),
    (["--num-envs", "8.5"], r"^unexpected argument '--num-envs'; it is --vec.num-envs, but vec.num_envs=\"8.5\" is "
                         r"not an integer; write e.g. --vec.num-envs 64 \(the default\)$"),
    (["--num-envs=8.5"], r"^unexpected argument '--num-envs=8.5'; it is --vec.num-envs, but vec.num_envs=\"8.5\" "
                         r"is not an integer"),  # the value's dot: once read as a section flag ([num_envs])
    (["--norm-adv", "maybe"], r"^unexpected argument '--norm-adv'; it is --train.norm-adv, but "
                              r'train.norm_adv="maybe" is not a boolean; use true or false'),
])
def test_bad_flags(flags, message):
    with pytest.raises(ConfigError, match=message):
        load_config("cartpole", flags=flags)


@pytest.mark.parametrize("flags", [["--target-kl", "None"], ["--num-envs", "8.5"], ["--seed=x"], ["--num-envs=8.5"],
                                   ["--target-kl", "0.02"], ["--norm-adv", "False"], ["--wandb"]])
def test_a_flag_without_its_section_gets_a_hint_whose_flags_are_taken(flags):
    """`--target-kl None` got 'did you mean --train.target-kl None?', which was then refused: the flags a hint
    gives (its 'did you mean' or its 'write e.g.') load."""
    with pytest.raises(ConfigError) as caught:
        load_config("cartpole", flags=flags)
    hint = re.search(r"(?:did you mean|write e\.g\.) (--[a-z_.-]+ \S+?)\??(?: \(the default\))?(?:$| config)",
                     str(caught.value))
    assert hint, caught.value
    load_config("cartpole", flags=hint.group(1).split())


@pytest.mark.parametrize("flags, message", [
    (["--train.gamma", "0"], r"train.gamma=0.0 must be in \(0, 1\]"),
    (["--train.gae-lambda", "1.5"], r"train.gae_lambda=1.5 must be in \[0, 1\], e.g. --train.gae-lambda 0.95"),
    (["--train.clip-coef", "0"], r"train.clip_coef=0 would clip every policy change to nothing .* e.g. "
                                 r"--train.clip-coef 0.2 \(the default\), or a large one such as 1e9"),
    (["--train.min-lr-ratio", "1.5"], r"min_lr_ratio=1.5 must be in \[0, 1\] .*e.g. --train.min-lr-ratio 0.0"),
    (["--log.dashboard", "RICH"], r'log.dashboard="RICH" is not known; did you mean "rich"\?'),
    (["--log.wandb", "true", "--log.wandb-tags", "ok," + "x" * 70], r"log.wandb_tags: the tag 'xxxxxxxxxxxxxxxxxxxx'... has 70 characters; "
                                              r"wandb takes at most 64 per tag"),
    (["--log.wandb", "true", "--log.wandb-project", "me/cartpole"], r'^log.wandb_project="me/cartpole" holds /, which '
     r"wandb refuses in a project name; e.g. --log.wandb-entity me --log.wandb-project cartpole$"),
    (["--log.wandb", "true", "--log.wandb-project", "lr:3e-4"], r'^log.wandb_project="lr:3e-4" holds :, .*; e.g. '
     r"--log.wandb-project lr-3e-4$"),
    (["--log.wandb", "true", "--log.wandb-project", "p" * 130],
     r'^log.wandb_project="pppp.*"\.\.\. has 130 characters, wandb takes at most 128; e.g. --log.wandb-project p{128}$'),
    (["--train.learning-rate", "0"], r"train.learning_rate=0.0 must be positive"),
    (["--train.seed", "-3"], r"train.seed=-3 must be an integer in \[0, 2\*\*63\), e.g. --train.seed 0"),
    (["--train.seed", str(2**63)], r"train.seed=9223372036854775808 must be an integer in \[0, 2\*\*63\)"),
    (["--train.clip-coef", "-0.1"], r"train.clip_coef=-0.1 must be >= 0"),
    (["--train.anneal-lr", "step"], r'train.anneal_lr="step" is not a schedule; use one of linear, cosine, none'),
    (["--train.minibatch-size", "100"], r"minibatch_size=100 must be a multiple of train.bptt_horizon=16"),
    (["--train.minibatch-size", "48"], r"minibatch_size=48 must divide the batch of 1,024"),
    (["--train.total-timesteps", "1000"], r"total_timesteps=1,000 is less than one batch of 1,024"),
    # a batch_size given is kept by fewer envs (more segments of fewer agents): lower it instead
    (["--train.total-timesteps", "1500", "--train.batch-size", "2048"],
     r"^train.total_timesteps=1,500 is less than one batch of 2,048 \(64 envs x 1 agent x horizon 16 x 2 segments\); "
     r"raise it to at least 2048 or lower train.batch_size, e.g. --train.batch-size auto \(one segment: 1,024\)$"),
    (["--train.total-timesteps", "1000", "--train.batch-size", "2048"],
     r"total_timesteps=1,000 .* raise it to at least 2048 or use fewer envs and --train.batch-size auto$"),
    # epochs so many that not one update fits the int32 step counter: a total below one batch was no fix
    (["--train.update-epochs", "1e9"], r"^train.update_epochs=1,000,000,000 makes 780,000,000,000 optimizer steps "
     r"\(195 updates x 1,000,000,000 epochs x 4 minibatches\), past the 2\*\*31 - 1 their int32 counter holds; use "
     r"at most --train.update-epochs 2753184$"),
    (["--vec.num-threads", "65", "--vec.num-envs", "128"],
     r"vec.num_threads=65 exceeds min\(vec.num_envs, 64\)=64; use at most 64 threads, e.g. --vec.num-threads 64 "
     r"\(or auto\)$"),
    (["--train.total-timesteps", "1e12"], r"^train.total_timesteps=1,000,000,000,000 makes 7,812,500,000 "
     r"optimizer steps \(976,562,500 updates x 2 epochs x 4 minibatches\), past the 2\*\*31 - 1 their int32 "
     r"counter holds; use at most --train.total-timesteps 274877906943$"),
])
def test_invariants(flags, message):
    config, _ = load_config("cartpole", flags=flags)
    with pytest.raises(ConfigError, match=message):
        derive_sizes(config, agents_per_env=1)


@pytest.mark.parametrize("size, suggested", [(300, 256), (100, 128), (7, 16), (288, 256), (384, 256), (2048, 1024)])
def test_a_refused_minibatch_size_suggests_the_nearest_one_that_is_taken(size, suggested):
    """cartpole's batch is 1,024 at horizon 16. The suggestion for a size that is no multiple of the horizon
    was the multiple below it (288 for 300), which the next check refused for not dividing the batch; and
    one that does not divide the batch got the whole batch (1,024 for 288). It is the nearest size that
    both checks take now."""
    config, _ = load_config("cartpole", flags=["--train.minibatch-size", str(size)])
    with pytest.raises(ConfigError, match=rf"minibatch_size={size} must .*; e.g. --train.minibatch-size {suggested}$"):
        derive_sizes(config, agents_per_env=1)
    config, _ = load_config("cartpole", flags=["--train.minibatch-size", str(suggested)])
    assert derive_sizes(config, agents_per_env=1).minibatch_size == suggested


@pytest.mark.parametrize("text, message", [
    ("lstm = false\n", r"lstm = false in .*flat.toml is outside any \[section\]; put it under \[policy\] as "
                       r"lstm = false \(policy.lstm\)$"),
    ("max_steps = 100\n", r"put it under \[env\] as max_steps = 100 \(env.max_steps\)$"),
    ("checkpoint_interval = 5\n", r"put it under \[checkpoint\] as interval = 5 \(checkpoint.interval\)$"),
    ('nonsense = "x"\n', r'^nonsense = "x" in .* is outside any \[section\]; put each key under its section'),
    ("num_minibatches = 4\n", r"^num_minibatches = 4 in .* is outside any \[section\]; CleanRL's num_minibatches is "
                              r"a count; jaxlab sets each minibatch's size"),
])
def test_a_config_file_key_outside_every_section_says_where_it_belongs(tmp_path, text, message):
    """A flat file (`lstm = false` above every header) was "unknown config section [lstm]": a key taken for a
    section, with no word of the [policy] it belongs in."""
    path = tmp_path / "flat.toml"
    path.write_text(text + "[train]\nseed = 1\n")
    with pytest.raises(ConfigError, match=message):
        load_config("cartpole", config_file=path)


@pytest.mark.parametrize("text, fix", [
    ("[train]\nanneal_lr = True\n", "; TOML's booleans are lower case: anneal_lr = true"),
    ("[train]\nnorm_adv = False  # CleanRL's\n", "; TOML's booleans are lower case: norm_adv = false"),
    ("[train]\ntarget_kl = None\n", "; TOML has no None: leave target_kl out to keep its default"),
    ("[policy]\nactivation = tanh\n", '; a string needs quotes: activation = "tanh"'),
    ("[train]\nseed = 1\nseed = 2\n", "; seed is given twice in its table: keep one line of it"),
    ("[train]\nseed = 1,\n", ""),  # another mistake: tomllib's message alone
])
def test_a_python_value_or_a_key_twice_in_a_config_file_gets_its_fix(tmp_path, text, fix):
    """A CleanRL user's Python values (True, None, tanh unquoted) and a key given twice got tomllib's "Invalid
    value (at line 2, column 13)" or "Cannot overwrite a value" alone."""
    path = tmp_path / "mine.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config("cartpole", config_file=path)
    assert re.fullmatch(rf"{re.escape(str(path))} is not valid TOML: [^;]* \(at line \d+, column \d+\)"
                        rf"{re.escape(fix)}", str(info.value)), str(info.value)


SECTION_NAMES = "env, vec, policy, train, device, dist, checkpoint, log"


@pytest.mark.parametrize("flags, text, message", [
    (["--train.learnin-rate", "0.1"], "[train]\nlearnin_rate = 0.1\n",
     r"^unknown config key 'train.learnin_rate'{where}; did you mean 'train.learning_rate'\?$"),
    (["--vec.zzz", "1"], "[vec]\nzzz = 1\n",
     r"^unknown config key 'vec.zzz'{where}; valid keys: num_envs, num_threads, groups$"),
    (["--train.qqq", "1"], "[train]\nqqq = 1\n",
     r"^unknown config key 'train.qqq'{where}; valid keys: total_timesteps, batch_size, seed, .*, prio_alpha, prio_beta0$"),
    (["--trian.seed", "1"], "[trian]\nseed = 1\n", r"^unknown config section \[trian\] in {source}; did you mean \[train\]\?$"),
    (["--zzz.qqq", "1"], "[zzz]\nqqq = 1\n",
     rf"^unknown config section \[zzz\] in {{source}}; the sections are {SECTION_NAMES}$"),
])
def test_an_unknown_key_or_section_names_the_close_one_else_the_valid_ones(tmp_path, flags, text, message):
    """A key or section with no close name was refused with nothing to go on for a section ("unknown
    config section [zzz] in command line"): it names the sections now, as an unknown key names its
    section's keys; a close name alone is suggested when there is one. As a flag and in a --config file,
    which an unknown key's message names too (a flag names itself)."""
    path = tmp_path / "typo.toml"
    path.write_text(text)
    for source, kwargs in (("command line", {"flags": flags}), (str(path), {"config_file": path})):
        where = "" if source == "command line" else f" in {re.escape(source)}"
        with pytest.raises(ConfigError, match=message.replace("{source}", re.escape(source)).replace("{where}", where)):
            load_config("cartpole", **kwargs)


@pytest.mark.parametrize("text, message", [
    ("[policy]\nmodule = 3\n", r'^policy.module=3 is not a string; write it in quotes in TOML: module = "3"$'),
    ("[log]\nrun_name = 1.5\n", r'^log.run_name=1.5 is not a string; write it in quotes in TOML: run_name = "1.5"$'),
    ('[log]\nrun_name = ["x"]\n', r'^log.run_name=\["x"\] is not a string; write one in quotes'),
    ('[policy]\nactivation = ["relu"]\n', r'^policy.activation=\["relu"\] is not one of gelu, relu, silu, tanh, elu; '
                                         r'write one in quotes in TOML, e.g. activation = "gelu"$'),
    ("[device]\nprecision = 16\n", r'^device.precision=16 is not one of float32, bfloat16; write one in quotes in '
                                    r'TOML, e.g. precision = "float32"$'),
    ("[train]\nanneal_lr = 2.0\n", r'^train.anneal_lr=2.0 is not one of linear, cosine, none; write one in quotes in '
                                    r'TOML, e.g. anneal_lr = "linear" \(or true for linear, false for none\)$'),
    ("[policy]\nlstm = 2\n", r"^policy.lstm=2 is not a boolean; write lstm = true or false in TOML "
                             r"\(or --policy.lstm true\)$"),
    # a TOML boolean where another kind goes: as the file writes it (true), not as Python does (True)
    ("[train]\nseed = true\n", r"^train.seed=true is not an integer; write e.g. --train.seed 0 \(the default\)$"),
    ("[train]\nlearning_rate = false\n", r"^train.learning_rate=false is not a number; write e.g. "),
    ("[vec]\nnum_threads = false\n", r"^vec.num_threads=false is neither auto nor an integer; write auto or e.g. 2$"),
    ("[policy]\nmlp_layers = [128, true]\n", r"^policy.mlp_layers\[1\]=true is not an integer; write a list"),
    ("[policy]\nmodule = true\n", r'^policy.module=true is not a string; write it in quotes in TOML: module = "true"$'),
    ("[log]\ndashboard = true\n", r'^log.dashboard=true is not one of auto, rich, plain, none; write one in quotes'),
    ("[env]\nmax_steps = true\n", r"^env.max_steps=true is not an integer; write e.g. --env.max-steps 500 "),
])
def test_a_config_file_value_of_the_wrong_kind_gets_a_fix(tmp_path, text, message):
    """A TOML number where a string goes, or a list, or 2 for a boolean, was "policy.module=3 must be a str":
    the value, but no word of how to write it. A key that takes one of a few names gets those names: quoting
    the number (precision = "16", the fix it was given) is refused next."""
    path = tmp_path / "kinds.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config("cartpole", config_file=path)


@pytest.mark.parametrize("env, total, example", [
    ("pendulum", 4096, "--vec.num-envs 256"), ("pendulum", 1500, "--vec.num-envs 64 --train.minibatch-size 1024"),
    ("cartpole", 1000, "--vec.num-envs 32")])
def test_a_run_shorter_than_one_batch_gets_an_env_count_that_fits(env, total, example):
    """"use fewer envs" named no count, and pendulum's 512 envs cut to 64 met the next refusal, its minibatch
    of 2,048 not dividing the batch of 1,024: the message now gives a count (halved until a batch fits) and,
    where needed, a minibatch size; with them the config is taken."""
    config, _ = load_config(env, flags=["--train.total-timesteps", str(total)])
    with pytest.raises(ConfigError, match=rf"or use fewer envs \(e.g. {example}: a batch of [\d,]+\)$"):
        derive_sizes(config, agents_per_env=1)
    config, _ = load_config(env, flags=["--train.total-timesteps", str(total), *example.split()])
    assert derive_sizes(config, agents_per_env=1).batch_size <= total


def test_gae_lambda_zero_is_one_step_td():
    config, _ = load_config("cartpole", flags=["--train.gae-lambda", "0"])
    derive_sizes(config, agents_per_env=1)  # allowed: advantages are one-step TD errors
    assert config.train.gae_lambda == 0.0


def test_the_largest_total_timesteps_named_fits_the_int32_optimizer_step_count():
    """cartpole: batch 1,024, 2 epochs x 4 minibatches = 8 optimizer steps per update."""
    config, _ = load_config("cartpole", flags=["--train.total-timesteps", "274877906943"])
    sizes = derive_sizes(config, agents_per_env=1)
    assert sizes.num_updates * 2 * sizes.num_minibatches == 2**31 - 8 < 2**31
    config, _ = load_config("cartpole", flags=["--train.total-timesteps", "274877906944"])
    with pytest.raises(ConfigError, match=r"makes 2,147,483,648 optimizer steps"):
        derive_sizes(config, agents_per_env=1)


def test_derived_sizes_with_several_agents_per_env():
    config, _ = load_config("target", flags=["--vec.num-envs", "4", "--train.minibatch-size", "256",
                                             "--train.total-timesteps", "10_000"])
    sizes = derive_sizes(config, agents_per_env=8)
    assert (sizes.num_agents, sizes.batch_size, sizes.num_minibatches, sizes.minibatch_agents, sizes.num_updates) \
        == (32, 512, 2, 16, 19)
    assert sizes.describe() == ("4 envs x 8 agents x horizon 16 = batch 512; 2 minibatches of 256; "
                                "19 updates for 10K steps (9,728 trained: whole batches)")


def test_derived_sizes_over_several_processes_say_they_are_all_processes_and_give_each_ones_share():
    """vec.num_envs, the batch and the minibatch count every process's; describe() printed them bare, so a
    reader of process 0's header took 64 envs for each process's. It says 'in all' and each one's share."""
    import dataclasses

    config, _ = load_config("target", flags=["--vec.num-envs", "4", "--train.minibatch-size", "256",
                                             "--train.total-timesteps", "10_000"])
    sizes = derive_sizes(config, agents_per_env=8, processes=2)
    assert sizes.describe() == ("in all over 2 processes: 4 envs x 8 agents x horizon 16 = batch 512; 2 minibatches "
                                "of 256; 19 updates for 10K steps (9,728 trained: whole batches); per process: 2 "
                                "envs, batch 256, minibatches of 128")
    assert dataclasses.replace(sizes, devices=2).describe().endswith("; its agents sharded over 2 devices")
    assert "per process" not in derive_sizes(config, agents_per_env=8, processes=1).describe()


def test_resolved_config_round_trips(tmp_path):
    config, _ = load_config("memory", flags=["--env.num-cues", "6", "--policy.lstm", "no", "--train.ent-coef", "0.01"])
    path = tmp_path / "config.toml"
    path.write_text(to_toml(config))
    assert load_config("memory", config_file=path)[0] == config


def test_default_toml_sets_every_schema_key_to_the_schema_default():
    """configs/default.toml is where a user reads every key's default, and what `jaxlab config` names as
    their source: it lacked device.count and the whole [dist] section, and nothing noticed, since --help and
    load_config fall back to the dataclass defaults for a key it leaves out. Every key of every section is
    in it now, with the schema's value and type (1 is not 1.0 there), and it holds no section of its own."""
    from jaxlab.config import configs_dir, read_toml

    written = read_toml(configs_dir() / "default.toml")
    wrong = []
    for section, cls in SECTIONS.items():
        for field in fields(cls):
            if field.name not in written.get(section, {}):
                wrong.append(f"{section}.{field.name} is missing (schema default {field.default!r})")
                continue
            value = written[section][field.name]
            value = tuple(value) if isinstance(field.default, tuple) and isinstance(value, list) else value
            if value != field.default or type(value) is not type(field.default):
                wrong.append(f"{section}.{field.name} = {value!r}, the schema's default is {field.default!r}")
    assert wrong == []
    assert set(written) == set(SECTIONS)


def write_layers(root, env_name="cartpole"):
    """A configs/ tree where each layer sets train.seed to its own number and one key of its own."""
    (root / "envs").mkdir(parents=True)
    (root / "presets").mkdir()
    (root / "default.toml").write_text("[train]\nseed = 1\ngamma = 0.91\n")
    (root / "envs" / f"{env_name}.toml").write_text("[train]\nseed = 2\ngae_lambda = 0.92\n")
    (root / "presets" / "mine.toml").write_text(
        '[preset]\ndescription = "test"\n\n[train]\nseed = 3\nclip_coef = 0.3\n')


def test_precedence_of_every_layer(tmp_path, monkeypatch):
    import jaxlab.config.layers as config_module

    write_layers(tmp_path / "configs")
    monkeypatch.setattr(config_module, "configs_dir", lambda: tmp_path / "configs")
    file = tmp_path / "run.toml"
    file.write_text("[train]\nseed = 4\nent_coef = 0.04\n")
    expected = [  # (layers used, the seed that wins, its source)
        (dict(), 2, "configs/envs/cartpole.toml"),
        (dict(preset="mine"), 3, "configs/presets/mine.toml"),
        (dict(preset="mine", config_file=file), 4, str(file)),
        (dict(preset="mine", config_file=file, flags=["--train.seed", "5"]), 5, "command line"),
    ]
    for kwargs, seed, source in expected:
        config, sources = load_config("cartpole", **kwargs)
        assert config.train.seed == seed and sources["train.seed"] == source, kwargs
    config, sources = load_config("cartpole", preset="mine", config_file=file, flags=["--train.seed", "5"])
    # every layer's own key survives the layers above it
    assert (config.train.gamma, config.train.gae_lambda, config.train.clip_coef, config.train.ent_coef) \
        == (0.91, 0.92, 0.3, 0.04)
    assert [sources[f"train.{k}"] for k in ("gamma", "gae_lambda", "clip_coef", "ent_coef")] == [
        "configs/default.toml", "configs/envs/cartpole.toml", "configs/presets/mine.toml", str(file)]
    assert config.preset == "mine"


@pytest.mark.parametrize("text, value", [("auto", "auto"), ("AUTO", "auto"), ("2048", 2048), ("2_048", 2048),
                                         ("4e3", 4000)])
def test_batch_size_is_auto_or_an_integer(text, value):
    config, _ = load_config("cartpole", flags=["--train.batch-size", text])
    assert config.train.batch_size == value


def test_auto_batch_is_agents_times_horizon_and_a_multiple_collects_several_segments():
    flags = ["--vec.num-envs", "8", "--train.bptt-horizon", "32", "--train.minibatch-size", "128",
             "--train.total-timesteps", "10_000"]
    config, _ = load_config("target", flags=flags)
    sizes = derive_sizes(config, agents_per_env=4)
    assert (sizes.num_agents, sizes.segments, sizes.batch_size, sizes.num_minibatches, sizes.num_updates) \
        == (32, 1, 1024, 8, 9)
    config, _ = load_config("target", flags=[*flags, "--train.batch-size", "3072"])
    sizes = derive_sizes(config, agents_per_env=4)
    assert (sizes.segments, sizes.batch_size, sizes.num_minibatches, sizes.num_updates) == (3, 3072, 24, 3)
    assert sizes.describe() == ("8 envs x 4 agents x horizon 32 x 3 segments = batch 3,072; "
                                "24 minibatches of 128; 3 updates for 10K steps (9,216 trained: whole batches)")


@pytest.mark.parametrize("flags, message", [
    (["--train.batch-size", "1500"], r"train.batch_size=1,500 must be a positive multiple of 1,024 \(64 envs x "
     r"1 agent x horizon 16\); use auto or e.g. --train.batch-size 1024"),
    (["--train.batch-size", "-1"], r"train.batch_size=-1 must be a positive multiple of 1,024"),
    (["--device.precision", "fp8"], r'device.precision="fp8" is not known; use one of float32, bfloat16'),
    (["--device.precision", "bfloat"], r'did you mean "bfloat16"\?'),
    (["--device.matmul-precision", "low"], r'device.matmul_precision="low" is not known; use one of default, high'),
    (["--device.memory-fraction", "1.5"], r"device.memory_fraction=1.5 must be in \[0, 1\]"),
    (["--log.dashboard", "fancy"], r'log.dashboard="fancy" is not known'),
    (["--checkpoint.keep", "0"], r"checkpoint.keep=0 must be at least 1"),
    (["--checkpoint.minutes", "-1"], r"checkpoint.minutes=-1.0 must be >= 0"),
    (["--vec.num-envs", "0"], r"vec.num_envs=0 must be at least 1; e.g. --vec.num-envs 64 \(the default\)"),
    (["--train.ent-coef", "-0.01"], r"train.ent_coef=-0.01 must be >= 0; e.g. --train.ent-coef 0.0 \(the default\)"),
    (["--train.target-kl", "-0.01"], r"^train.target_kl=-0.01 must be >= 0 \(0: no KL early stop\); e.g. "
                                     r"--train.target-kl 0.015, or 0 to run every epoch$"),
])
def test_more_invariants(flags, message):
    config, _ = load_config("cartpole", flags=flags)
    with pytest.raises(ConfigError, match=message):
        derive_sizes(config, agents_per_env=1)


@pytest.mark.parametrize("flags, message", [
    (["--train.batch-size", "big"], r'train.batch_size="big" is neither auto nor an integer'),
    (["--log.wandb", "enabled"], r'log.wandb="enabled" is not a boolean; use true or false \(also 1/0, yes/no, on/off\)'),
    (["--device.precison", "float32"], r"did you mean 'device.precision'"),
])
def test_more_bad_flags(flags, message):
    with pytest.raises(ConfigError, match=message):
        load_config("cartpole", flags=flags)


def test_unknown_preset_and_a_config_file_for_another_env(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown preset 'h10'; did you mean 'h100'\?"):
        load_config("cartpole", preset="h10")
    # a preset in another case (the card's own name, NVIDIA H100) got no suggestion; nor did Auto
    for written, meant in (("H100", "h100"), ("GPU", "gpu"), ("Auto", "auto"), ("HEAVY", "heavy")):
        with pytest.raises(ConfigError, match=rf"^unknown preset '{written}'; did you mean '{meant}'\? presets: "):
            load_config("cartpole", preset=written)
    config, _ = load_config("memory")
    path = tmp_path / "memory.toml"
    path.write_text(to_toml(config))
    with pytest.raises(ConfigError, match=r"is a config for env 'memory', not 'cartpole'; run `jaxlab train memory"):
        load_config("cartpole", config_file=path)


def test_every_preset_validates_for_every_env():
    from jaxlab.config import preset_names
    from jaxlab.env import env_types

    import jaxlab

    from jaxlab.config.memory import env_shape
    from jaxlab.config.presets import preset_axis

    assert preset_names() == ["a100", "beast", "cpu", "gpu", "h100", "heavy"]
    cards = [name for name in preset_names() if preset_axis(name) == "card"]
    assert cards == ["a100", "cpu", "gpu", "h100"]
    for env_name in env_types():
        with jaxlab.make(env_name) as probe:
            agents_per_env = probe.agents_per_env
        for card in cards:
            for workload in ("", ",heavy", ",beast"):  # every card with every workload size
                config, sources = load_config(env_name, preset=card + workload)
                derive_sizes(config, agents_per_env)
                check_network(config, env_shape(config).obs_shape)
                assert sources["device.precision"] == f"configs/presets/{card}.toml"
                if workload:
                    assert sources["policy.mlp_layers"] == f"configs/presets/{workload[1:]}.toml"
                    assert config.preset == card + workload


def test_round_trip_keeps_preset_and_explicit_batch(tmp_path):
    config, _ = load_config("target", preset="gpu", flags=["--train.batch-size", "262144",
                                                            "--log.wandb-tags", 'a,"b"', "--log.run-name", "x y"])
    path = tmp_path / "config.toml"
    path.write_text(to_toml(config))
    again, _ = load_config("target", config_file=path)
    assert again == config and again.preset == "gpu" and again.log.wandb_tags == 'a,"b"'


FLOAT_KEYS = [f"{section}.{f.name}" for section, cls in SECTIONS.items() for f in fields(cls)
              if f.type in ("float", "float | str")]


def test_float_keys_are_the_ones_the_review_named():
    for key in ("train.clip_coef", "train.ent_coef", "train.max_grad_norm", "train.min_lr_ratio",
                "checkpoint.minutes", "train.learning_rate", "train.reward_scale", "train.vf_coef"):
        assert key in FLOAT_KEYS


@pytest.mark.parametrize("key", FLOAT_KEYS)
@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e400"])
def test_every_float_key_must_be_finite(key, text):
    config, _ = load_config("cartpole", flags=[f"--{key}", text])
    shown = "nan" if text == "nan" else ("-inf" if text == "-inf" else "inf")
    flag = "--" + key.replace("_", "-")
    with pytest.raises(ConfigError, match=rf"^{key}={shown} is not a finite number; give a number, e.g. {flag} "):
        derive_sizes(config, agents_per_env=1)


def test_a_toml_nan_is_refused_too(tmp_path):
    path = tmp_path / "nan.toml"
    path.write_text("[train]\nvf_coef = nan\n\n[checkpoint]\nminutes = inf\n")
    config, _ = load_config("cartpole", config_file=path)
    with pytest.raises(ConfigError, match=r"train.vf_coef=nan is not a finite number"):
        derive_sizes(config, agents_per_env=1)


def test_max_grad_norm_zero_is_valid_and_documented():
    from jaxlab.config import TrainConfig, field_help

    config, _ = load_config("cartpole", flags=["--train.max-grad-norm", "0"])
    derive_sizes(config, agents_per_env=1)
    assert "0: no clipping" in field_help(TrainConfig)["max_grad_norm"]


@pytest.mark.parametrize("text, schedule", [("False", "none"), ("false", "none"), ("NO", "none"), ("0", "none"),
                                            ("True", "linear"), ("yes", "linear"), ("1", "linear"),
                                            ("Cosine", "cosine"), ("none", "none")])
def test_anneal_lr_takes_booleans_as_pufferlib_writes_them(text, schedule):
    config, _ = load_config("cartpole", flags=["--train.anneal-lr", text])
    assert config.train.anneal_lr == schedule
    derive_sizes(config, agents_per_env=1)


@pytest.mark.parametrize("toml, schedule", [("false", "none"), ("true", "linear"), ('"FALSE"', "none")])
def test_anneal_lr_takes_toml_booleans(tmp_path, toml, schedule):
    path = tmp_path / "run.toml"
    path.write_text(f"[train]\nanneal_lr = {toml}\n")
    config, _ = load_config("cartpole", config_file=path)
    assert config.train.anneal_lr == schedule
    # the resolved config writes the schedule's name, which reads back the same
    again = tmp_path / "again.toml"
    again.write_text(to_toml(config))
    assert load_config("cartpole", config_file=again)[0] == config


def test_anneal_lr_help_names_the_booleans():
    from jaxlab.config import TrainConfig, field_help

    assert "false/no/0/off none" in field_help(TrainConfig)["anneal_lr"]


def test_a_run_length_in_updates_replaces_total_timesteps():
    """jaxlab bench sets the length in updates: cartpole's default total (below a batch of 16,384 envs x
    16) was refused as less than one batch, though bench never used it."""
    config, _ = load_config("cartpole", flags=["--vec.num-envs", "16384", "--train.total-timesteps", "1024",
                                               "--train.minibatch-size", "16384"])
    with pytest.raises(ConfigError, match="less than one batch"):
        derive_sizes(config, agents_per_env=1)
    sizes = derive_sizes(config, agents_per_env=1, updates=3)
    assert (sizes.num_updates, sizes.total_timesteps) == (3, 3 * 16384 * 16)
    with pytest.raises(ConfigError, match=r"^--updates 1999999999 makes 2,000,000,000 updates with the first, "
                                          r"64,000,000,000 optimizer steps \(2 epochs x 16 minibatches each\), .*; "
                                          r"use at most --updates 67108862$"):
        derive_sizes(config, agents_per_env=1, updates=2_000_000_000)
    # the largest --updates it names fits (with the first update), one more does not
    assert derive_sizes(config, agents_per_env=1, updates=67108862 + 1).num_updates == 67108863
    with pytest.raises(ConfigError, match=r"^--updates 67108863 makes "):
        derive_sizes(config, agents_per_env=1, updates=67108863 + 1)


@pytest.mark.parametrize("word, value", [("on", True), ("OFF", False), ("Yes", True), ("0", False)])
def test_booleans_take_on_and_off_as_mask_check_does(word, value):
    """--env.mask-check off worked, but --train.norm-adv off was 'not a boolean'."""
    config, _ = load_config("cartpole", flags=["--train.norm-adv", word, "--log.wandb", word,
                                               "--train.anneal-lr", word])
    assert config.train.norm_adv is value and config.log.wandb is value
    assert config.train.anneal_lr == ("linear" if value else "none")


def test_derived_sizes_of_one_say_the_singular():
    """describe() wrote every count plural: a run of one env, one agent and one update was headed
    '1 envs x 1 agents ...; 1 updates'. Counts of one take the singular noun."""
    config, _ = load_config("target", flags=["--vec.num-envs", "1", "--train.minibatch-size", "16",
                                             "--train.total-timesteps", "16"])
    assert derive_sizes(config, agents_per_env=1).describe() == (
        "1 env x 1 agent x horizon 16 = batch 16; 1 minibatch of 16; 1 update for 16 steps")



def readme_section(title: str) -> str:
    """The text of README.md's section ``title`` (a ### heading), up to the next heading."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    return text.partition(f"### {title}\n")[2].partition("\n#")[0]


def test_the_readmes_cleanrl_table_names_real_keys_and_its_config_is_cleanrls_ppo(tmp_path):
    """README's "From CleanRL or PureJaxRL": every jaxlab key its table names exists, every CleanRL name the
    config refuses with a hint is in it, and its config file gives CleanRL ppo.py's sizes and settings."""
    from jaxlab.config.layers import CLEANRL_NAMES

    section = readme_section("From CleanRL or PureJaxRL")
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| `")]
    known = {f"{name}.{f.name}" for name, cls in SECTIONS.items() for f in fields(cls)}
    for row in rows:
        for key in re.findall(r"`([a-z]+\.[a-z_0-9]+)`", row[1]):
            assert key in known, row
    cleanrl = " ".join(row[0] for row in rows)
    assert all(f"`{name}`" in cleanrl for name in CLEANRL_NAMES), cleanrl
    block = section.partition("```toml\n")[2].partition("```")[0]
    (tmp_path / "cleanrl.toml").write_text(block)
    config, _ = load_config("cartpole", config_file=tmp_path / "cleanrl.toml")
    sizes = derive_sizes(config, agents_per_env=1)
    assert (sizes.batch_size, sizes.num_minibatches, sizes.minibatch_size) == (512, 4, 128)
    assert (config.policy.lstm, list(config.policy.mlp_layers), config.policy.activation) == (False, [64, 64], "tanh")
    assert not config.policy.shared_trunk and config.train.vf_clip_coef == config.train.clip_coef == 0.2
    assert (config.train.update_epochs, config.train.ent_coef, config.train.anneal_lr) == (4, 0.01, "linear")
    assert (config.train.obs_norm, config.train.reward_scale, config.train.seed) == (False, 1.0, 1)
    on_h100, _ = load_config("cartpole", preset="h100", config_file=tmp_path / "cleanrl.toml")  # a GPU's auto
    assert on_h100.device.precision == "float32" and on_h100.vec.num_envs == 4


def test_train_help_names_cleanrls_arguments_where_jaxlab_names_them_otherwise(capsys):
    """`jaxlab train --help`, where a CleanRL user looks first, says which keys hold num_steps, num_minibatches and
    clip_vloss (README, From CleanRL or PureJaxRL, has the whole table)."""
    from jaxlab import cli

    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for flag, cleanrl in [("--train.bptt-horizon", "CleanRL's num_steps"),
                          ("--train.minibatch-size", "CleanRL's batch / num_minibatches"),
                          ("--train.vf-clip-coef", "CleanRL's clip_vloss is this at its clip_coef, 0.2")]:
        line = help_text.partition(flag)[2].partition(" --")[0]
        assert cleanrl in line, (flag, line)
