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


def test_a_forked_child_gets_an_error_not_a_hang_and_closes():
    """A fork copies the vector but none of its worker threads: in the child, a step or reset of a
    multi-threaded VecEnv is refused with a message (it waited for ever for the missing workers) and
    close frees it without joining them (it hung too); a one-thread VecEnv steps there as usual."""
    import os
    import time

    with jaxlab.make("cartpole", num_envs=4, seed=1, num_threads=2) as env, \
            jaxlab.make("cartpole", num_envs=4, seed=1, num_threads=1) as single:
        env.reset()
        single.reset()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report through the pipe, never return into pytest
            code = 1
            try:
                messages = []
                for call in (env.step, env.reset):
                    try:
                        call()
                    except RuntimeError as err:
                        messages.append(str(err))
                single.step()
                env.close()
                single.close()
                os.write(write, "\n".join(messages).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        deadline, done = time.monotonic() + 30, (0, 0)
        while time.monotonic() < deadline and done == (0, 0):
            time.sleep(0.05)
            done = os.waitpid(pid, os.WNOHANG)
        if done == (0, 0):
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError("the forked child hung")
        assert os.waitstatus_to_exitcode(done[1]) == 0
        report = os.read(read, 65536).decode()
        os.close(read)
        assert report.count("is a fork of it and has none of them") == 2, report
        assert "cenv_step" in report and "cenv_reset" in report
        env.step()  # the parent's threads are untouched
