"""The drone lab's commands on the command line, and pictures: the batch trap stops with exit status 2 and
the batch math, the same command with horizon 16 trains (stopped by SIGTERM after its first updates),
no num_envs % num_workers rule; `jaxlab eval ENV --gif` draws drone and cartpole episodes, says which
env cannot draw and which extra is missing."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import jaxlab
from jaxlab.messages import install_extra
from process_output import output_of

LAB = ["--vec.num-envs", "24", "--env.num-drones", "64"]
TINY = ["--vec.num-envs", "2", "--train.bptt-horizon", "8", "--train.minibatch-size", "16", "--policy.hidden-size", "16",
        "--log.dashboard", "none"]


def environment(**extra):
    return {**os.environ, "PYTHONPATH": str(Path(jaxlab.__file__).parents[1]), **extra}


def jaxlab_cli(*args, cwd=None, **env):
    return subprocess.run([sys.executable, "-m", "jaxlab.cli", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env=environment(**env))


def test_the_labs_horizon_64_command_stops_with_exit_2_and_the_batch_math(tmp_path):
    result = jaxlab_cli("train", "drone", *LAB, "--train.bptt-horizon", "64", "--train.total-timesteps", "50000",
                        cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        "jaxlab train: error: train.total_timesteps=50,000 is less than one batch of 98,304 (24 envs x 64 agents x "
        "horizon 64); raise it to at least 98304 or use fewer envs (e.g. --vec.num-envs 12: a batch of 49,152)")
    assert not (tmp_path / "runs").exists()  # refused before anything was made


def test_the_labs_horizon_16_command_trains(tmp_path):
    """The same command with horizon 16: a batch of 24,576, 40 updates; it starts, finishes updates and
    stops cleanly on SIGTERM after the second (the whole 1M steps take minutes on a 2-core CPU)."""
    run = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "jaxlab.cli", "train", "drone", *LAB, "--train.bptt-horizon", "16",
                                "--train.total-timesteps", "1000000", "--run-dir", str(run), "--log.dashboard", "plain"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment(),
                               start_new_session=True)
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while not metrics.is_file() or metrics.read_text().count("\n") < 2:
        assert time.monotonic() < deadline and process.poll() is None, output_of(process)
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert out.startswith("jaxlab train drone: 24 envs x 64 agents x horizon 16 = batch 24,576; 96 minibatches of "
                          "256; 40 updates for 1M steps (983,040 trained: whole batches)"), out
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["global_step"] for r in records[:2]] == [24_576, 49_152]
    assert records[0]["episodes"] > 0 and np.isfinite(records[-1]["policy_loss"])
    assert "stopped by SIGTERM after update" in err


def test_there_is_no_num_envs_modulo_threads_rule():
    result = jaxlab_cli("config", "drone", *LAB, "--vec.num-threads", "5")
    assert result.returncode == 0, result.stderr
    assert "# 24 envs x 64 agents x horizon 32 = batch 49,152" in result.stdout
    runs = []
    for threads in (1, 5):  # 24 envs over 5 threads: uneven chunks, the same results
        with jaxlab.make("drone", num_envs=24, seed=1, num_threads=threads) as env:
            env.reset()
            rng = np.random.default_rng(0)
            runs.append([env.step(rng.uniform(-1, 1, (env.num_agents, 4)).astype(np.float32))[0].copy()
                         for _ in range(20)])
    np.testing.assert_array_equal(np.stack(runs[0]), np.stack(runs[1]))


# ---- pictures ----


def gif_frames(path: Path) -> list[np.ndarray]:
    from PIL import Image

    with Image.open(path) as image:
        frames = []
        for index in range(image.n_frames):
            image.seek(index)
            frames.append(np.asarray(image.convert("RGB")))
    return frames


def near(frames, rgb, tolerance=40):
    return [int((np.abs(f.astype(int) - np.array(rgb)).max(axis=2) <= tolerance).sum()) for f in frames]


@pytest.mark.parametrize("env_name", ["drone", "cartpole"])
def test_eval_draws_an_episode_as_a_gif(tmp_path, env_name):
    extra = ["--env.num-drones", "8"] if env_name == "drone" else []
    trained = jaxlab_cli("train", env_name, *TINY, *extra, "--train.total-timesteps", "256", "--run-dir",
                         str(tmp_path / "run"))
    assert trained.returncode == 0, trained.stderr
    gif = tmp_path / "episode.gif"
    result = jaxlab_cli("eval", env_name, "--checkpoint", str(tmp_path / "run"), "--episodes", "4", "--gif", str(gif),
                        "--gif-frames", "12", "--gif-size", "320x160")
    assert result.returncode == 0, result.stderr
    assert f"pictures of env 0's first episode (320x160) in {gif}" in result.stdout
    frames = gif_frames(gif)
    assert len(frames) >= 3 and frames[0].shape == (160, 320, 3)
    assert any((a != b).any() for a, b in zip(frames, frames[1:]))  # it moves
    if env_name == "drone":
        assert min(near(frames, (0xff, 0x33, 0x33))) > 10            # drone 0, red, in every frame
        assert min(near(frames, (0xf0, 0xf0, 0xf0), 15)) > 20        # and the others
    else:
        assert min(near(frames, (0, 0, 0), 10)) > 200                # the cart and the track
        assert min(near(frames, (0xca, 0x98, 0x65))) > 50            # the pole


def test_identical_pictures_in_a_row_are_one_gif_frame_and_eval_says_how_many_frames(tmp_path):
    """Pillow writes identical pictures in a row as one frame shown longer: eval said '5 pictures ... in x.gif'
    of a GIF of 3 frames. frame_count reads the frames back and eval's line names them when fewer."""
    pytest.importorskip("PIL")
    from PIL import Image

    from jaxlab.cli.train import picture_line
    from jaxlab.observe.gif import frame_count, write_gif

    still, moved = np.zeros((4, 6, 3), np.uint8), np.full((4, 6, 3), 200, np.uint8)
    path = write_gif([still, still, still, moved, still], tmp_path / "x.gif", fps=25)
    assert frame_count(path) == 3
    with Image.open(path) as image:
        assert image.info["duration"] == 120  # the three still pictures, 40 ms each
    assert frame_count(write_gif([still, moved, still], tmp_path / "y.gif")) == 3
    assert picture_line(5, 3, (6, 4), "x.gif") == ("  5 pictures of env 0's first episode (6x4) in x.gif, as 3 GIF "
                                                   "frames (identical pictures in a row are one frame, shown as long "
                                                   "as they all were)")
    assert picture_line(3, 3, (6, 4), "y.gif") == "  3 pictures of env 0's first episode (6x4) in y.gif"
    assert picture_line(1, 1, (6, 4), "z.gif") == "  1 picture of env 0's first episode (6x4) in z.gif"


def test_eval_render_prints_the_actions_the_env_applied(tmp_path):
    """`jaxlab eval drone --render` printed the sampled actions as drawn, past [-1, 1]; the env clips them, and
    the frames now show the clipped actions it applied."""
    trained = jaxlab_cli("train", "drone", *TINY, "--env.num-drones", "8", "--train.total-timesteps", "256",
                         "--run-dir", str(tmp_path / "run"))
    assert trained.returncode == 0, trained.stderr
    result = jaxlab_cli("eval", "drone", "--checkpoint", str(tmp_path / "run"), "--episodes", "1", "--render")
    assert result.returncode == 0, result.stderr
    actions = [[float(a) for a in line.split("  action ")[1].split("  reward ")[0].split()]
               for line in result.stdout.splitlines() if "  action " in line]
    assert len(actions) > 5 and all(len(action) == 4 for action in actions)
    assert all(-1 <= a <= 1 for action in actions for a in action)
    assert any(abs(a) == 1 for action in actions for a in action)  # some were sampled past the bounds


def test_pictures_of_cartpole_and_pendulum_follow_their_state():
    for name, states in (("cartpole", ([0.0, 0, 0.0, 0], [1.5, 0, 0.2, 0])), ("pendulum", ([0.0, 0.0], [2.0, 0.0]))):
        with jaxlab.make(name) as env:
            env.reset()
            pictures = []
            for state in states:
                env.set_state(0, state)
                pictures.append(env.pixels(0, 200, 100))
            assert (pictures[0] != pictures[1]).any() and (pictures[0] == 255).mean() > 0.5, name


def test_gif_for_an_env_without_pictures_and_without_pillow_is_one_clear_line(tmp_path):
    trained = jaxlab_cli("train", "memory", *TINY, "--train.total-timesteps", "128", "--run-dir", str(tmp_path / "run"))
    assert trained.returncode == 0, trained.stderr
    result = jaxlab_cli("eval", "memory", "--checkpoint", str(tmp_path / "run"), "--gif", str(tmp_path / "x.gif"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().endswith("env 'memory' draws no pictures (no `pixels` option in its CENV_ENV), so "
                                          "--gif cannot draw it: drop --gif (it has a text log instead: --render or "
                                          "--save-frames FILE), or give the env a pixels hook (see BUILD.md)"), \
        result.stderr
    assert not (tmp_path / "x.gif").exists()
    blocker = tmp_path / "no_pillow" / "PIL"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('Pillow is not installed (a test stands in for it)')\n")
    result = jaxlab_cli("eval", "cartpole", "--checkpoint", str(tmp_path / "nowhere"), "--gif", str(tmp_path / "x.gif"),
                        PYTHONPATH=f"{blocker.parent}{os.pathsep}{Path(jaxlab.__file__).parents[1]}")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "writing a GIF needs Pillow" in result.stderr and install_extra("gif") in result.stderr
    # a --gif-* option without --gif would be ignored: it is refused before anything is loaded
    result = jaxlab_cli("eval", "cartpole", "--checkpoint", str(tmp_path / "nowhere"), "--gif-size", "10x10")
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "jaxlab eval: error: --gif-size only shapes a GIF: add --gif FILE (e.g. --gif episode.gif) or leave it out"]
