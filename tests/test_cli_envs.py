"""`jaxlab envs` lists every env with its spaces and parameters."""

from jaxlab.cli import main


def test_envs_lists_spaces_parameters_and_statistics(capsys):
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    assert "cartpole: Gymnasium CartPole-v1" in out
    assert "observation Box(-inf, inf, (4,), float32)  action Discrete(2)" in out
    assert "action Box(-2, 2, (1,), float32)" in out
    assert "--env.num_cues int = 4  in [2, 64]" in out
    assert "Discrete(5), 8 agents per env by default" in out
    assert "statistics: episode_return, episode_length, success" in out


def test_envs_and_find_header_agree_on_the_names_of_headers_on_the_env_path(tmp_path, monkeypatch, capsys):
    """`jaxlab envs` listed every .h on the env path, my-env.h too, with "`jaxlab train my-env` builds it",
    though find_header (so train, config, jaxlab.make) never looks up a name that is not lower-case letters,
    digits and _: "unknown env". One rule now (sdk.is_env_name): envs lists only what find_header finds,
    and names the others with the rule and the fixes, as train does."""
    import pytest

    import jaxlab
    from jaxlab.env import sdk

    for name in ("walker", "my-env", "Walker2"):
        (tmp_path / f"{name}.h").write_text("/* a user's env */\n")
    monkeypatch.setenv("JAXLAB_ENV_PATH", str(tmp_path))
    assert sdk.find_header("walker") == tmp_path / "walker.h"
    assert sdk.find_header("my-env") is None and sdk.find_header("Walker2") is None
    assert [h for h in sdk.headers_on_path().values() if h.parent == tmp_path] == [tmp_path / "walker.h"]
    assert main(["envs"]) == 0
    out, err = capsys.readouterr()
    assert f"walker: {tmp_path / 'walker.h'} (on the env path" in out
    assert "my-env" not in out and "Walker2" not in out
    problem = (f"{tmp_path / 'my-env.h'} on the env path is not found by name: NAME.h is found for env NAME only "
               "when NAME is lower-case letters, digits and _, starting with a letter; rename it (e.g. my_env.h) "
               f"or give its path as ENV (`jaxlab train {tmp_path / 'my-env.h'}`, `jaxlab envs --library "
               f"{tmp_path / 'my-env.h'}`)")
    other = problem.replace("my-env", "Walker2").replace("my_env", "walker2")
    assert err.splitlines() == [f"jaxlab: warning: {other}", f"jaxlab: warning: {problem}"]
    assert main(["envs", "my-env"]) == 2
    assert capsys.readouterr() == ("", f"jaxlab envs: error: {problem}\n")
    with pytest.raises(ValueError) as caught:
        jaxlab.make("my-env")
    assert str(caught.value) == f"unknown env 'my-env': {problem}"


def test_envs_shows_the_agents_and_spaces_training_makes_naming_the_file(tmp_path, monkeypatch, capsys):
    """`jaxlab envs` printed "N agents per env by default" (and the observation) from the C defaults even when
    configs/envs/NAME.toml or the NAME.toml beside a header set the parameter that decides them, so the line
    disagreed with the parameter lines below it and with training. It prints what training makes, naming the
    file and the default, as the parameter lines do."""
    import shutil
    from pathlib import Path

    from jaxlab.config import layers

    configs = tmp_path / "configs"
    shutil.copytree(layers.configs_dir(), configs)
    (configs / "envs" / "target.toml").write_text("[env]\nagents_per_env = 4\n")
    monkeypatch.setattr(layers, "configs_dir", lambda: configs)
    assert main(["envs", "target"]) == 0
    assert "  observation Box(-inf, inf, (10,), float32)  action Discrete(5), 4 agents per env (from " \
           "configs/envs/target.toml; default 8)" in capsys.readouterr().out.splitlines()

    header = tmp_path / "drone.h"
    shutil.copy(Path(__file__).resolve().parents[1] / "examples" / "envs" / "drone.h", header)
    (tmp_path / "drone.toml").write_text("[env]\nnum_drones = 16\nneighbors = 2\n")
    assert main(["envs", "--library", str(header)]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert line.startswith(f"  observation Box(-inf, inf, (28,), float32) (from {tmp_path / 'drone.toml'}; default "
                           "Box(-inf, inf, (40,), float32))  action Box(-1, 1, (4,), float32), 16 agents per env "
                           f"(from {tmp_path / 'drone.toml'}; default 64)"), line


def test_envs_shows_a_python_envs_spaces(capsys):
    """`jaxlab envs gymnasium:CartPole-v1` said "no env 'gymnasium:CartPole-v1' among jaxlab's envs or on
    the env path" (exit 2), though the name works with train, eval, bench and config: a user could not see
    the spaces jaxlab reads from their env. A Python env named is made once and printed as a C env is."""
    import pytest

    pytest.importorskip("gymnasium")
    assert main(["envs", "gymnasium:CartPole-v1", "pendulum"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gymnasium:CartPole-v1: Gymnasium vector env CartPole-v1 (synchronous, same-step "
                          "autoreset)\n  observation Box([-4.8")
    assert "inf], (4,), float32)  action Discrete(2)\n  no --env parameters: a Python env takes its arguments" in out
    assert "statistics: episode_return, episode_length\npendulum: " in out and "cartpole:" not in out
    assert main(["envs", "gymnasium:CartPol-v1"]) == 2
    assert "jaxlab envs: error: unknown Gymnasium env 'CartPol-v1'" in capsys.readouterr().err


def test_an_unknown_names_error_names_an_env_path_entry_that_is_no_folder(tmp_path, monkeypatch, capsys):
    """`jaxlab train zzz` named a JAXLAB_ENV_PATH entry that is no folder (where the user meant their
    envs to be found), but `jaxlab envs zzz` did not: README says an unknown name's error names it."""
    header = tmp_path / "walker.h"
    header.write_text("/* a user's env */\n")
    missing = tmp_path / "nope"
    monkeypatch.setenv("JAXLAB_ENV_PATH", f"{missing}:{header}")
    assert main(["envs", "zzz"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert f"Note: JAXLAB_ENV_PATH holds {missing}, which is no folder (it does not exist)." in err
    assert f"Note: JAXLAB_ENV_PATH holds {header}, a file: it takes folders" in err
