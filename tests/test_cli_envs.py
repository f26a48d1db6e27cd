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
