"""The drone swarm (examples/envs/drone.h), built from its header as a user's env is: a test per physical
law that matters (free fall, drag, hover, torques, symmetric commands, bounds over long random runs),
determinism and exact saved states, per-agent ends (a crash ends one drone only), the task's rewards
and statistics by value, the neighbour search (grid = all pairs), pictures, and the sanitizer build.
The learning test is in tests/test_drone_learning.py; the CLI traps in tests/test_drone_cli.py.

Units are SI: metres, seconds, newtons. The physical constants are the header's #defines, repeated
below as the test's own reference values."""

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import jaxlab
from jaxlab.env import sdk

HEADER = Path(__file__).resolve().parent.parent / "examples" / "envs" / "drone.h"

G, MASS, ARM, IXX, IZZ = 9.81, 1.0, 0.2, 0.01, 0.02
T_MAX = 2 * MASS * G / 4            # N per motor
YAW_TORQUE, ANGULAR_DRAG = 0.02, 0.02
H, SUBSTEPS = 0.02, 2               # physics step (s) and physics steps per env step
CEILING, RADIUS = 6.0, 0.15
VEL, SPIN, TARGET = 5.0, 10.0, 10.0  # observation scales: m/s, rad/s, m per unit
LEVEL = (1.0, 0.0, 0.0, 0.0)
FAR = [(-6.0, -6.0, 2.0), (6.0, -6.0, 2.0), (-6.0, 6.0, 2.0), (6.0, 6.0, 2.0), (0.0, 6.5, 4.0), (0.0, -6.5, 4.0)]


def make(num_drones=4, num_envs=1, seed=0, **params):
    return jaxlab.make("drone", num_envs=num_envs, seed=seed, num_drones=num_drones, **params)


def place(env, drone, pos, vel=(0, 0, 0), quat=LEVEL, omega=(0, 0, 0), pickup=None, deliver=None, carrying=None,
          tick=None, index=0):
    """Sets one drone's state (drone_set_state's layout)."""
    state = [drone, *pos, *vel, *quat, *omega]
    if pickup is not None:
        state += [*pickup, *deliver]
        if carrying is not None:
            state.append(carrying)
            if tick is not None:
                state.append(tick)
    env.set_state(index, state)


def spread(env, n, skip=()):
    """Puts drones [0, n) except ``skip`` far apart, level and at rest (they hover with action 0)."""
    for i in range(n):
        if i not in skip:
            place(env, i, FAR[i % len(FAR)])


def z_of(obs, i):
    return float(obs[i, 11]) * CEILING


def quat_about(axis, angle):
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    return (math.cos(angle / 2), *(math.sin(angle / 2) * axis))


def up_in_body(q):
    w, x, y, z = q
    return np.array([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)])


# ---- physics, law by law ----


def test_free_fall_follows_the_semi_implicit_euler_solution_and_the_law_within_its_stated_error():
    """Zero thrust (every command -1), no drag: after n physics steps of h, z_n = z0 - g h^2 n (n+1) / 2
    exactly (up to float32 rounding), which is the law z0 - g t^2 / 2 (t = n h) less g h t / 2, the
    integrator's error that drone.h states; the vertical speed is g t."""
    with make(num_drones=2, drag=0.0) as env:
        env.reset()
        z0 = 5.0
        place(env, 0, (0.0, 0.0, z0))
        place(env, 1, (6.0, 6.0, 2.0))
        actions = np.zeros((2, 4), np.float32)
        actions[0] = -1.0
        for step in range(1, 13):
            obs = env.step(actions)[0]
            n = SUBSTEPS * step
            t = n * H
            discrete = z0 - G * H * H * n * (n + 1) / 2
            law = z0 - G * t * t / 2
            assert abs(z_of(obs, 0) - discrete) < 2e-5, (step, z_of(obs, 0), discrete)
            assert abs((law - z_of(obs, 0)) - G * H * t / 2) < 2e-5  # the stated error, by value
            assert abs(obs[0, 2] * VEL - (-G * t)) < 1e-5            # body z = world z: level
            np.testing.assert_array_equal(obs[0, [0, 1, 3, 4, 5]], 0.0)  # no sideways motion, no spin
        assert z_of(obs, 1) == pytest.approx(2.0, abs=1e-6)         # the other drone hovers on


def test_linear_drag_decays_speed_geometrically():
    """Hover thrust with a horizontal speed: only drag acts sideways, v_n = v0 (1 - h k / m)^n exactly
    (semi-implicit Euler), which is v0 exp(-k t / m) to within O(h)."""
    k, v0 = 0.5, 3.0
    with make(num_drones=2, drag=k) as env:
        env.reset()
        place(env, 0, (-6.0, 0.0, 2.0), vel=(v0, 0.0, 0.0))
        place(env, 1, (6.0, 6.0, 2.0))
        for step in range(1, 26):
            obs = env.step(np.zeros((2, 4), np.float32))[0]
            n = SUBSTEPS * step
            assert obs[0, 0] * VEL == pytest.approx(v0 * (1 - H * k / MASS) ** n, rel=1e-5)
            assert abs(obs[0, 0] * VEL - v0 * math.exp(-k * n * H / MASS)) < v0 * k * k * n * H * H
            assert z_of(obs, 0) == pytest.approx(2.0, abs=1e-6)  # hover thrust holds it up meanwhile


@pytest.mark.parametrize("yaw", [0.0, 1.1, -2.5])
def test_hover_thrust_holds_altitude_exactly(yaw):
    """Command 0 on every motor is exactly the hover thrust m g / 4: a level drone at rest stays where it
    is (1,000 env steps = 40 s); a command a bit lower sinks, a bit higher climbs."""
    with make(num_drones=3, max_steps=5000) as env:
        env.reset()
        q = quat_about((0, 0, 1), yaw)
        for i, z in enumerate((2.0, 3.0, 4.0)):
            place(env, i, (-4.0 + 4.0 * i, 1.0, z), quat=q)
        actions = np.zeros((3, 4), np.float32)
        actions[1] = -0.01
        actions[2] = +0.01
        start = env.observations.copy()
        for _ in range(50):
            obs = env.step(actions)[0]
        assert z_of(obs, 1) < 2.9 and z_of(obs, 2) > 3.1 + 1.0              # 1% less thrust sinks, more climbs
        actions[:] = 0.0
        for _ in range(950):
            obs, _, terminals, truncations, _ = env.step(actions)
            assert not terminals.any() and not truncations.any()
        assert z_of(obs, 0) == pytest.approx(2.0, abs=1e-5)
        np.testing.assert_array_equal(obs[0, :6], 0.0)                     # at rest, no spin
        np.testing.assert_allclose(obs[0, 6:9], [0, 0, 1], atol=1e-6)      # level
        np.testing.assert_array_equal(obs[0, 9:11], start[0, 9:11])        # not one ulp sideways


def test_symmetric_commands_give_no_rotation_from_any_attitude():
    """Four equal commands make zero torque exactly: from a tilted attitude at rest the angular
    velocity stays exactly 0 and the attitude does not change, whatever the command; the drone
    accelerates along its own z axis only."""
    with make(num_drones=4, drag=0.0) as env:
        env.reset()
        tilt = quat_about((1.0, -0.5, 0.3), 0.4)
        for i in range(4):
            place(env, i, FAR[i], quat=tilt)
        commands = np.array([-1.0, -0.3, 0.2, 0.9], np.float32)
        actions = np.repeat(commands[:, None], 4, axis=1)
        for _ in range(12):
            obs = env.step(actions)[0]
            np.testing.assert_array_equal(obs[:, 3:6], 0.0)
            np.testing.assert_allclose(obs[:, 6:9], np.tile(up_in_body(tilt), (4, 1)), atol=2e-6)
        for i, a in enumerate(commands):  # velocity: thrust along body z, gravity along world -z
            thrust = 4 * T_MAX * (a + 1) / 2 / MASS
            body_up = up_in_body(tilt)
            expected = (thrust * np.array([0, 0, 1.0]) - G * body_up) * SUBSTEPS * 12 * H  # in the body frame
            np.testing.assert_allclose(obs[i, :3] * VEL, expected, atol=2e-4)


def test_differential_thrust_gives_the_torques_of_the_x_layout():
    """Motors at (+d, +d), (-d, +d), (-d, -d), (+d, -d), d = L / sqrt 2, spinning alternately: the left
    pair (0, 1) stronger rolls about +x, the rear pair (1, 2) stronger pitches about +y, the pair 0, 2
    stronger yaws about +z; the angular velocity after one env step (two Euler steps with angular drag)
    matches by value."""
    d = ARM / math.sqrt(2)
    cases = {
        "roll": (np.array([0.5, 0.5, -0.5, -0.5]), 3, IXX),
        "pitch": (np.array([-0.5, 0.5, 0.5, -0.5]), 4, IXX),
        "yaw": (np.array([0.5, -0.5, 0.5, -0.5]), 5, IZZ),
    }
    with make(num_drones=3, drag=0.0) as env:
        env.reset()
        spread(env, 3)
        actions = np.stack([c[0] for c in cases.values()]).astype(np.float32)
        obs = env.step(actions)[0]
        for i, (name, (command, axis, inertia)) in enumerate(cases.items()):
            thrust = T_MAX * (command + 1) / 2
            if name == "roll":
                torque = d * ((thrust[0] + thrust[1]) - (thrust[2] + thrust[3]))
            elif name == "pitch":
                torque = d * ((thrust[1] + thrust[2]) - (thrust[0] + thrust[3]))
            else:
                torque = YAW_TORQUE * ((thrust[0] + thrust[2]) - (thrust[1] + thrust[3]))
            omega = 0.0
            for _ in range(SUBSTEPS):
                omega += H * (torque - ANGULAR_DRAG * omega) / inertia
            assert torque > 0 and obs[i, axis] * SPIN == pytest.approx(omega, rel=1e-5), name
            others = [k for k in (3, 4, 5) if k != axis]
            np.testing.assert_allclose(obs[i, others], 0.0, atol=1e-7)


def test_a_pd_controller_levels_a_tilted_drone_and_holds_altitude():
    """The signs of the whole chain (mixer, torques, attitude integration, observation) by behaviour:
    a PD attitude-and-altitude controller written on the observation alone brings a drone tilted by
    0.5 rad back level and close to its altitude."""
    with make(num_drones=2, drag=0.3, max_steps=5000) as env:
        env.reset()
        place(env, 0, (0.0, 0.0, 3.0), quat=quat_about((1, 1, 0), 0.5))
        place(env, 1, (6.0, 6.0, 2.0))
        obs = env.observations
        for _ in range(250):  # 10 s
            obs = env.step(hover_controller(obs))[0]
        np.testing.assert_allclose(obs[0, 6:9], [0, 0, 1], atol=1e-3)
        assert abs(obs[0, 2] * VEL) < 0.05 and abs(z_of(obs, 0) - 3.0) < 1.0


def hover_controller(obs: np.ndarray) -> np.ndarray:
    """A scripted hover-in-place policy on the observation: hold level (the up vector in the body frame,
    obs[6:9], towards (0, 0, 1)) with rate damping, and hold altitude (no vertical speed). Motor
    commands [A, 4] float32. Undisturbed, level and at rest (as drones spawn) it commands 0 exactly."""
    up, rate, vel = obs[:, 6:9], obs[:, 3:6] * SPIN, obs[:, 0:3] * VEL
    roll = -1.0 * up[:, 1] - 0.15 * rate[:, 0]   # rolled by +phi about body x: up reads (0, sin phi, cos phi)
    pitch = 1.0 * up[:, 0] - 0.15 * rate[:, 1]   # pitched by +theta about body y: up reads (-sin theta, 0, ...)
    yaw = -0.05 * rate[:, 2]
    lift = (1.0 / np.maximum(up[:, 2], 0.5) - 1.0) - 0.3 * vel[:, 2]
    mix = np.stack([lift + roll - pitch + yaw, lift + roll + pitch - yaw,
                    lift - roll + pitch + yaw, lift - roll - pitch - yaw], axis=1)
    return np.clip(mix, -1.0, 1.0).astype(np.float32)


def test_energy_speed_spin_and_attitude_stay_bounded_over_long_random_runs():
    """20,000 agent-steps of random and of bang-bang (+-1) commands: every observation finite, the
    attitude a rotation (|up| = 1 to 1e-5: the quaternion stays normalised), speed below the bound
    that drag sets, (4 T_max + m g) / k_d, spin below the bound that angular drag sets,
    tau_max / k_w, and positions inside the arena (a crashed drone respawns at once)."""
    drag = 0.3
    v_max = (4 * T_MAX + MASS * G) / drag
    w_max = 2 * T_MAX * ARM / math.sqrt(2) / ANGULAR_DRAG + 2 * T_MAX * YAW_TORQUE / ANGULAR_DRAG
    rng = np.random.default_rng(0)
    for bang in (False, True):
        with make(num_drones=32, num_envs=2, seed=int(bang), drag=drag) as env:
            env.reset()
            for _ in range(320):
                actions = rng.uniform(-1, 1, (64, 4)).astype(np.float32)
                if bang:
                    actions = np.sign(actions)
                obs, _, terminals, truncations, _ = env.step(actions)
                final = env.final_observations[terminals | truncations]  # the rows written in this step
                for o in (obs, final) if len(final) else (obs,):
                    assert np.isfinite(o).all()
                    assert np.abs(np.linalg.norm(o[:, 6:9], axis=1) - 1).max() < 1e-5
                    assert (np.linalg.norm(o[:, 0:3] * VEL, axis=1) < v_max).all()
                    assert (np.linalg.norm(o[:, 3:6] * SPIN, axis=1) < w_max).all()
                assert (np.abs(obs[:, 9:11]) <= 1.0).all() and ((obs[:, 11] >= 0) & (obs[:, 11] <= 1)).all()


# ---- determinism and saved states ----


def run_random(env, steps, seed=0, record=True):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        obs, rewards, terminals, truncations, info = env.step(rng.uniform(-1.2, 1.2, (env.num_agents, 4)).astype(np.float32))
        if record:
            out.append((obs.copy(), rewards.copy(), terminals.copy(), truncations.copy(),
                        env.final_observations.copy(), dict(info)))
    return out


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for u, v in zip(x[:5], y[:5]):
            np.testing.assert_array_equal(u, v)
        assert x[5] == y[5]


def test_the_same_seed_gives_the_same_flight_whatever_the_thread_count():
    with make(num_drones=16, num_envs=6, seed=3) as one, make(num_drones=16, num_envs=6, seed=3) as again, \
            jaxlab.make("drone", num_envs=6, seed=3, num_threads=2, num_drones=16) as threads, \
            make(num_drones=16, num_envs=6, seed=4) as other:
        runs = []
        for env in (one, again, threads, other):
            env.reset()
            runs.append(run_random(env, 200))
        assert_same(runs[0], runs[1])
        assert_same(runs[0], runs[2])
        assert not np.array_equal(runs[0][0][0], runs[3][0][0])
        assert sum(r[5].get("episodes", 0) for r in runs[0]) > 50  # crashes and respawns happened


def test_a_saved_state_continues_bit_for_bit():
    with make(num_drones=24, num_envs=3, seed=7) as env:
        env.reset()
        run_random(env, 150, seed=1, record=False)
        saved = env.save_state()
        ahead = run_random(env, 150, seed=2)
    with make(num_drones=24, num_envs=3, seed=99) as fresh:
        fresh.load_state(saved)
        assert_same(ahead, run_random(fresh, 150, seed=2))
    with make(num_drones=25, num_envs=3) as other, pytest.raises(ValueError, match="num_drones=24"):
        other.load_state(saved)


# ---- per-agent ends ----


def test_a_crash_ends_that_drone_only_and_it_respawns_at_once():
    with make(num_drones=4, penalty_crash=2.5) as env:
        env.reset()
        spread(env, 4)
        hover = np.zeros((4, 4), np.float32)
        for _ in range(10):
            env.step(hover)
        place(env, 2, (1.0, 1.0, 0.3), vel=(0.0, 0.0, -4.0))
        obs, rewards, terminals, truncations, info = env.step(hover)
        assert terminals.tolist() == [False, False, True, False] and not truncations.any()
        assert rewards[2] == -2.5 and (rewards[[0, 1, 3]] == 0).all()
        final = env.final_observations[2]
        assert final[11] * CEILING < RADIUS and final[2] * VEL < -3.5      # its last observation: on the floor
        assert 1.0 <= z_of(obs, 2) <= 3.0 and (obs[2, :6] == 0).all()     # respawned: 1-3 m up, at rest
        assert obs[2, 15] == 0.0                                           # with a new package to pick up
        assert info["episodes"] == 1 and info["crash_rate"] == 1.0 and info["collision_rate"] == 0.0
        assert info["episode_length"] == 11.0                              # its own steps (set_state keeps them)
        obs, _, terminals, _, info = env.step(hover)
        assert not terminals.any() and info == {}                          # the swarm flies on


def test_walls_ceiling_and_collisions_end_episodes_and_count_as_such():
    with make(num_drones=6, penalty_crash=2.0, penalty_collision=3.0) as env:
        env.reset()
        spread(env, 6)
        hover = np.zeros((6, 4), np.float32)
        place(env, 0, (7.8, 0.0, 2.0), vel=(2.0, 0.0, 0.0))    # into the wall at x = +8
        place(env, 1, (0.0, -7.8, 2.0), vel=(0.0, -2.0, 0.0))  # into the wall at y = -8
        place(env, 2, (3.0, 3.0, 5.8), vel=(0.0, 0.0, 2.0))    # into the ceiling at 6 m
        place(env, 3, (-2.0, 0.0, 2.0), vel=(2.0, 0.0, 0.0))   # into drone 4
        place(env, 4, (-1.65, 0.0, 2.0), vel=(-2.0, 0.0, 0.0))
        _, rewards, terminals, truncations, info = env.step(hover)
        assert terminals.tolist() == [True, True, True, True, True, False] and not truncations.any()
        assert rewards.tolist() == [-2.0, -2.0, -2.0, -3.0, -3.0, 0.0]
        assert info["episodes"] == 5
        assert info["crash_rate"] == pytest.approx(3 / 5) and info["collision_rate"] == pytest.approx(2 / 5)


def test_every_drone_is_truncated_at_its_own_max_steps():
    with make(num_drones=3, max_steps=40) as env:
        env.reset()
        spread(env, 3)
        hover = np.zeros((3, 4), np.float32)
        for _ in range(10):
            env.step(hover)
        place(env, 1, FAR[1], pickup=(0, 0, 2), deliver=(5, 5, 2), carrying=0, tick=0)  # its clock restarts
        ends = []
        for t in range(11, 81):
            _, _, terminals, truncations, info = env.step(hover)
            assert not terminals.any()
            if truncations.any():
                ends.append((t, truncations.nonzero()[0].tolist(), info["episode_length"]))
        assert ends == [(40, [0, 2], 40.0), (50, [1], 40.0), (80, [0, 2], 40.0)]


# ---- the task: rewards and statistics by value ----


def test_pickup_delivery_perfect_delivery_rewards_and_statistics():
    params = dict(reward_progress=1.0, reward_pickup=1.5, reward_delivery=2.0, reward_perfect=4.0, penalty_crash=1.0)
    with make(num_drones=2, drag=0.0, **params) as env:
        env.reset()
        place(env, 1, (6.0, 6.0, 2.0))
        hover = np.zeros((2, 4), np.float32)
        # flying into the pickup zone (radius 1 around (0, 0, 2)) at 2 m/s: picked up
        place(env, 0, (1.05, 0.0, 2.0), vel=(-2.0, 0.0, 0.0), pickup=(0, 0, 2), deliver=(-5, 0, 2), carrying=0)
        obs, rewards, *_ = env.step(hover)
        moved = 2.0 * SUBSTEPS * H
        assert obs[0, 15] == 1.0                                           # carrying
        assert rewards[0] == pytest.approx(moved + 1.5, abs=1e-5)          # progress + pickup
        target = obs[0, 12:15] * TARGET                                    # now the delivery zone
        np.testing.assert_allclose(target, [-5 - (1.05 - moved), 0, 0], atol=1e-4)
        # entering the delivery zone slowly: a perfect delivery, then a new package
        place(env, 0, (-3.99, 0.0, 2.0), vel=(-0.5, 0.0, 0.0), pickup=(0, 0, 2), deliver=(-5, 0, 2), carrying=1)
        obs, rewards, *_ = env.step(hover)
        assert rewards[0] == pytest.approx(0.5 * SUBSTEPS * H + 2.0 + 4.0, abs=1e-5)
        assert obs[0, 15] == 0.0
        # and fast: a delivery, not perfect
        place(env, 0, (-3.9, 0.0, 2.0), vel=(-3.0, 0.0, 0.0), pickup=(0, 0, 2), deliver=(-5, 0, 2), carrying=1)
        obs, rewards, *_ = env.step(hover)
        assert rewards[0] == pytest.approx(3.0 * SUBSTEPS * H + 2.0, abs=1e-5)
        # the episode ends in the floor: its statistics add up
        place(env, 0, (0.0, 0.0, 0.2), vel=(0.0, 0.0, -5.0))
        _, rewards, terminals, _, info = env.step(hover)
        assert terminals[0] and rewards[0] == -1.0
        assert info["pickups"] == 1 and info["deliveries"] == 2 and info["perfect_deliveries"] == 1
        assert info["score"] == 1.5                                        # (pickups + deliveries) / 2
        assert info["episode_length"] == 4 and info["crash_rate"] == 1 and info["collision_rate"] == 0
        assert info["episode_return"] == pytest.approx(moved + 1.5 + 0.02 + 6.0 + 0.12 + 2.0 - 1.0, abs=1e-4)


def test_random_flight_statistics_are_consistent():
    with make(num_drones=64, num_envs=4, seed=5) as env:
        env.reset()
        episodes, ended, terminal = 0, 0, 0
        sums = {}
        for obs, rewards, terminals, truncations, final, info in run_random(env, 300):
            ended += int(terminals.sum() + truncations.sum())
            terminal += int(terminals.sum())
            if info:
                episodes += info["episodes"]
                for k, v in info.items():
                    sums[k] = sums.get(k, 0.0) + v * info["episodes"]
        assert episodes == ended > 500
        assert sums["crash_rate"] + sums["collision_rate"] == pytest.approx(terminal, abs=1e-3)
        assert sums["score"] == pytest.approx((sums["pickups"] + sums["deliveries"]) / 2, rel=1e-4)
        assert sums["perfect_deliveries"] <= sums["deliveries"] <= sums["pickups"] + 1e-6


# ---- observations and the neighbour search ----


def test_neighbours_are_the_k_nearest_within_range_in_the_body_frame():
    with make(num_drones=6, neighbors=3, sense_radius=3.0) as env:
        env.reset()
        yaw = quat_about((0, 0, 1), math.pi / 2)  # body x = world y, body y = world -x
        place(env, 0, (0.0, 0.0, 2.0), quat=yaw)
        place(env, 1, (2.0, 0.0, 2.0), vel=(1.0, 0.0, 0.0))   # 2 m away along world x
        place(env, 2, (0.0, 1.0, 2.0))                         # 1 m along world y: nearest
        place(env, 3, (0.0, 0.0, 4.5))                         # 2.5 m up
        place(env, 4, (0.0, -3.5, 2.0))                        # out of range
        place(env, 5, (7.0, 7.0, 2.0))
        obs = env.observations
        nb = obs[0, 16:].reshape(3, 6)
        np.testing.assert_allclose(nb[0], [1 / 3, 0, 0, 0, 0, 0], atol=1e-6)           # drone 2, ahead in the body
        np.testing.assert_allclose(nb[1], [0, -2 / 3, 0, 0, -1 / VEL, 0], atol=1e-6)   # drone 1, to the right
        np.testing.assert_allclose(nb[2], [0, 0, 2.5 / 3, 0, 0, 0], atol=1e-6)         # drone 3, above
        assert (obs[5, 16:] == 0).all()                                                 # alone in its corner


def test_the_grid_neighbour_search_equals_all_pairs():
    """A dense arena (64 drones in 8 m, 96 in 12 m), random commands: the grid and the all-pairs search give
    the same observations, rewards and ends bit for bit."""
    for drones, arena in ((64, 8.0), (96, 12.0)):
        runs = []
        for grid in (1, 0):
            with make(num_drones=drones, num_envs=2, seed=11, arena_size=arena, neighbors=8, sense_radius=2.0,
                      neighbor_grid=grid) as env:
                env.reset()
                runs.append(run_random(env, 120))
        assert_same(*runs)


# ---- pictures ----


def colour_count(frame, rgb, tolerance=30):
    return int((np.abs(frame.astype(int) - np.array(rgb)).max(axis=2) <= tolerance).sum())


def test_pixels_show_the_arena_the_drones_and_move():
    with make(num_drones=8, seed=2) as env:
        env.reset()
        first = env.pixels(0)
        assert first.shape == (240, 480, 3) and first.dtype == np.uint8
        assert colour_count(first, (0xff, 0x33, 0x33)) > 20             # drone 0 in red, in both views
        assert colour_count(first, (0xf0, 0xf0, 0xf0), 10) > 100        # the other drones in white
        assert colour_count(first, (0x33, 0x99, 0xff)) > 50             # drone 0's delivery zone
        for _ in range(10):
            env.step(np.full((8, 4), 0.3, np.float32))                  # everyone climbs
        assert (env.pixels(0) != first).any()
        assert env.pixels(0, 1, 1).shape == (1, 1, 3) and env.pixels(0, 33, 5).shape == (5, 33, 3)
        with pytest.raises(ValueError, match="width=0"):
            env.pixels(0, 0, 10)
        with pytest.raises(ValueError, match="index=3"):
            env.pixels(3)
    with jaxlab.make("memory") as env:
        env.reset()
        assert env.pixels(0) is None


def test_render_is_a_top_view():
    with make(num_drones=3) as env:
        env.reset()
        text = env.render(0)
        assert text.startswith("drone 0: z ") and text.count("\n") == 24
        assert "0" in text.split("\n", 1)[1] and text.count("o") >= 2


def test_render_leaves_out_what_lies_beyond_the_walls_or_is_not_a_number():
    """A drone or zone set far beyond the walls (1e30 m, or 1e300, an infinite float) is not drawn,
    and the frame keeps its shape; converting such a position to a column was undefined behaviour
    (the sanitizer test below renders NaN and infinities too)."""
    with make(num_drones=3) as env:
        env.reset()
        place(env, 0, (0.0, 0.0, 2.0), pickup=(0.0, 0.0, 2.0), deliver=(0.0, 0.0, 2.0), carrying=0)
        place(env, 1, (1e30, -1e30, 2.0), pickup=(-1e300, 1e300, 2.0), deliver=(1e30, 1e30, 2.0), carrying=0)
        place(env, 2, (1e300, 3e9, 2.0), pickup=(-3e9, -1e30, 2.0), deliver=(0.0, 0.0, 2.0), carrying=1)
        lines = env.render(0).split("\n")
        assert lines[0].startswith("drone 0: z 2.00 m") and len(lines) == 25
        assert all(len(line) == 50 and line[0] == line[-1] == "|" for line in lines[1:])
        grid = "".join(line[1:-1] for line in lines[1:])
        assert grid.count("0") == 1 and "o" not in grid and "@" not in grid  # drones 1, 2 are beyond the walls
        assert "p" not in grid and "d" not in grid  # the zones at the centre are under drone 0, the rest beyond
        assert env.pixels(0, 64, 32).shape == (32, 64, 3)


DRONE_RENDER_EXTREMES_C = r"""
#define _POSIX_C_SOURCE 200809L
#include "HEADER"
#define CENV_REGISTRY {&drone_spec}
#include "api.c"
#include <stdlib.h>

/* Renders (text and pixels) drones and zones at NaN, infinities and floats far out of int range, as
 * a set or loaded state may hold them; one drone at the centre must be drawn. */
int main(void) {
    Drone *env = calloc(1, sizeof(Drone));
    uint8_t *rgb = malloc(64 * 32 * 3);
    if (env == NULL || rgb == NULL) return 2;
    const float odd[] = {NAN, -NAN, INFINITY, -INFINITY, 1e30f, -1e30f, 3e9f, -3e9f};
    int n = (int)(sizeof(odd) / sizeof(odd[0]));
    env->num_drones = n + 1;
    env->half = 8.0f;
    env->zone_radius = 1.0f;
    for (int i = 0; i < n; i++) {
        env->px[i] = odd[i];
        env->py[i] = odd[(i + 3) % n];
        env->pz[i] = odd[(i + 5) % n];
        for (int k = 0; k < 3; k++) {
            env->pickup[k][i] = odd[(i + k + 1) % n];
            env->deliver[k][i] = odd[(i + k + 2) % n];
        }
        env->carrying[i] = (uint8_t)(i % 2);
    }
    env->pz[n] = 2.0f; /* drone n at the centre, its zones there too (drawn under it) */
    char text[4096];
    int used = drone_render(env, text, (int)sizeof(text));
    int pixels = drone_pixels(env, rgb, 64, 32);
    printf("%s\n", text);
    free(rgb);
    free(env);
    return used > 0 && used < (int)sizeof(text) && pixels == 0 ? 0 : 1;
}
"""


def test_render_and_pixels_of_nan_and_infinite_positions_under_the_sanitizers(tmp_path):
    source = tmp_path / "drone_extremes.c"
    source.write_text(DRONE_RENDER_EXTREMES_C.replace("HEADER", str(HEADER)))
    binary = sdk._builder().build(tmp_path / "drone_extremes", sanitize=True, shared=False, sources=[source],
                                  include=[sdk.include_dir()], verbose=False)
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=120,
                         env={"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0", "UBSAN_OPTIONS": "print_stacktrace=1"})
    assert run.returncode == 0 and run.stderr == "", run.stdout + run.stderr
    grid = "".join(line[1:-1] for line in run.stdout.splitlines()[1:])
    assert len(grid) == 48 * 24 and grid.count("o") == 1 and set(grid) == {".", "o"}, run.stdout


# ---- the build ----


def test_the_header_builds_warning_clean_and_steps_under_the_sanitizers(tmp_path):
    """jaxlab build-env --sanitize builds it; the C driver cenv/tests/smoke.c, linked with the header the
    way build-env compiles it, steps it 700 times with 1 and 3 threads (random and out-of-range
    commands), saves and loads state and draws pictures of every size under ASan and UBSan."""
    library = tmp_path / "libdrone-asan.so"
    result = subprocess.run([sys.executable, "-m", "jaxlab.cli", "build-env", str(HEADER), "--sanitize", "-o",
                             str(library)], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(Path(jaxlab.__file__).parents[1])})
    assert result.returncode == 0 and library.is_file(), result.stderr
    source = tmp_path / "drone_envs.c"  # what build-env compiles: the header, its registry, api.c
    source.write_text(f'#define _POSIX_C_SOURCE 200809L\n#include "{HEADER}"\n#define CENV_REGISTRY {{&drone_spec}}\n'
                      '#include "api.c"\n')
    binary = sdk._builder().build(tmp_path / "drone_smoke", sanitize=True, shared=False,
                                  sources=[source, sdk.include_dir() / "tests" / "smoke.c"],
                                  include=[sdk.include_dir()], verbose=False)
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=600,
                         env={"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0", "UBSAN_OPTIONS": "print_stacktrace=1"})
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"^drone +\d+ episodes, ok$", run.stdout, re.MULTILINE), run.stdout
    assert "ERROR" not in run.stderr and "runtime error" not in run.stderr


def test_set_state_refuses_what_it_cannot_take():
    with make(num_drones=3) as env:
        env.reset()
        good = [1, 0, 0, 2, 0, 0, 0, *LEVEL, 0, 0, 0]
        for bad in ([3, *good[1:]], [-1, *good[1:]], [0.5, *good[1:]], [1e300, *good[1:]], [1, np.nan, *good[2:]],
                    good[:13], [*good, 0, 0, 2, 5, 5, 2, 0, 1e12]):
            with pytest.raises(RuntimeError, match="rejects"):
                env.set_state(0, bad)
        env.set_state(0, good)
