"""A VecEnv shared between Python threads: calls take turns (a lock in VecEnv), and C callers that
bypass it get CENV_ERR_BUSY instead of a deadlock in the C thread pool."""

import threading

import numpy as np

import jaxlab
from jaxlab.env import library

STEPS = 2000


def _run_threads(targets, timeout=60.0):
    """Runs each target in a daemon thread; fails (instead of hanging) if one is still running after
    ``timeout`` seconds, and re-raises the first exception a thread raised."""
    errors = []

    def guarded(target):
        try:
            target()
        except BaseException as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=guarded, args=(t,), daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "threads still running: deadlock"
    if errors:
        raise errors[0]


def test_two_threads_stepping_one_vecenv_finish_and_match_sequential_use():
    # Every call steps with the same actions, so 2 x STEPS calls from two threads in any interleaving
    # are the same trajectory as 2 x STEPS calls from one.
    actions = np.tile(np.array([1, 1, 0], dtype=np.int32), 6)[:16]
    with jaxlab.make("cartpole", num_envs=16, seed=3, num_threads=2) as env:
        env.reset()
        infos = {0: [], 1: []}

        def worker(k):
            for _ in range(STEPS):
                info = env.step(actions)[4]
                if info:
                    infos[k].append(info)

        _run_threads([lambda: worker(0), lambda: worker(1)])
        shared_obs = env.observations.copy()
    with jaxlab.make("cartpole", num_envs=16, seed=3, num_threads=2) as env:
        env.reset()
        sequential = [info for info in (env.step(actions)[4] for _ in range(2 * STEPS)) if info]
        np.testing.assert_array_equal(shared_obs, env.observations)
    combined = infos[0] + infos[1]
    assert infos[0] and infos[1] and len(combined) == len(sequential)
    def key(info):
        return info["episodes"], info["episode_return"], info["episode_length"]

    assert sorted(map(key, combined)) == sorted(map(key, sequential))


def test_c_calls_from_two_threads_at_once_get_busy_not_a_hang():
    lib = library.load()
    busy = library.constant("ERR_BUSY")
    with jaxlab.make("target", num_envs=1024, seed=0, num_threads=2) as env:
        env.reset()
        handle = env._handle
        stop = threading.Event()
        seen = {"busy": 0, "bad": []}

        def hammer():
            while not stop.is_set():
                rc = lib.cenv_step(handle)  # bypasses the VecEnv lock on purpose
                if rc < 0 and rc != busy:
                    seen["bad"].append(rc)
                    return

        def probe():
            try:
                for _ in range(100_000):
                    rc = lib.cenv_step(handle)
                    if rc == busy:
                        seen["busy"] += 1
                        return
                    if rc < 0:
                        seen["bad"].append(rc)
                        return
            finally:
                stop.set()

        _run_threads([hammer, probe])
        assert seen["bad"] == [] and seen["busy"] == 1
        env.step()  # still usable


def test_close_from_another_thread_waits_for_the_step():
    with jaxlab.make("target", num_envs=256, seed=0, num_threads=2) as env:
        env.reset()
        done = []

        def stepper():
            for _ in range(50):
                try:
                    env.step()
                except RuntimeError as err:  # closed: fine, as long as nothing crashed
                    assert "is closed" in str(err)
                    break
            done.append(True)

        _run_threads([stepper, env.close])
        assert done == [True] and env.closed
