/* Target: a multi-agent probe. `agents_per_env` agents in the unit square each chase their own goal,
 * which drifts at constant speed and bounces off the walls. Each step an agent moves by STEP in one of
 * 5 directions (0 stay, 1 +x, 2 -x, 3 +y, 4 -y). Reward: 2.5 x the distance gained on the goal, +1 for
 * reaching it (the goal then jumps to a random place), -0.1 for each other agent closer than
 * TARGET_COLLIDE. Episodes are truncated for every agent at `max_steps`.
 * Observation float32[10] per agent: goal (dx, dy), own (2x-1, 2y-1), and (dx, dy) of the 3 nearest
 * other agents, nearest first, zeros where there are fewer. */
#ifndef CENV_TARGET_H
#define CENV_TARGET_H

#include <math.h>

#include "../core.h"

#define TARGET_MAX_AGENTS 64
#define TARGET_NEIGHBORS 3
#define TARGET_OBS (4 + 2 * TARGET_NEIGHBORS)
#define TARGET_STEP 0.04f
#define TARGET_GOAL_SPEED 0.01f
#define TARGET_REACH 0.05f
#define TARGET_COLLIDE 0.04f
#define TARGET_PROGRESS_SCALE 2.5f

typedef struct {
    float episode_return;
    float episode_length;
    float goals_reached;
    float collisions;
} TargetLog;

typedef struct {
    float x, y;
    float goal_x, goal_y;
    float goal_vx, goal_vy;
    float episode_return;
    float goals_reached;
    float collisions;
} TargetAgent;

typedef struct {
    float *observations;
    int32_t *actions;
    float *rewards;
    uint8_t *terminals;
    uint8_t *truncations;
    TargetLog log;
    int num_agents;
    int max_steps;
    int tick;
    TargetAgent agents[TARGET_MAX_AGENTS];
    cenv_rng rng;
} Target;

static const cenv_param target_params[] = {
    {"agents_per_env", 8, 1, TARGET_MAX_AGENTS, 1, "agents sharing one arena"},
    {"max_steps", 128, 1, 1e9, 1, "steps after which every agent's episode is truncated"},
};
static const char *const target_log_names[] = {"episode_return", "episode_length", "goals_reached",
                                               "collisions"};

static void target_spaces(const double *params, cenv_spaces *out) {
    out->agents_per_env = (int)params[0];
    out->obs_ndim = 1;
    out->obs_shape[0] = TARGET_OBS;
    out->obs_dtype = CENV_DTYPE_FLOAT32;
    out->action_kind = CENV_ACTION_DISCRETE;
    out->action_ndim = 1;
    out->action_nvec[0] = 5;
}

static void target_init(Target *env, const double *params) {
    env->num_agents = (int)params[0];
    env->max_steps = (int)params[1];
}

static float target_unit(Target *env) { return (float)cenv_rng_unit(&env->rng); }

static void target_place_goal(Target *env, TargetAgent *a) {
    a->goal_x = target_unit(env);
    a->goal_y = target_unit(env);
    float angle = 6.2831853f * target_unit(env);
    a->goal_vx = TARGET_GOAL_SPEED * cosf(angle);
    a->goal_vy = TARGET_GOAL_SPEED * sinf(angle);
}

static void target_observe(Target *env) {
    for (int i = 0; i < env->num_agents; i++) {
        const TargetAgent *a = &env->agents[i];
        float *obs = env->observations + (size_t)i * TARGET_OBS;
        obs[0] = a->goal_x - a->x;
        obs[1] = a->goal_y - a->y;
        obs[2] = 2.0f * a->x - 1.0f;
        obs[3] = 2.0f * a->y - 1.0f;
        /* The TARGET_NEIGHBORS nearest others by insertion into a short sorted list. */
        float best_d[TARGET_NEIGHBORS];
        int best_j[TARGET_NEIGHBORS];
        int found = 0;
        for (int j = 0; j < env->num_agents; j++) {
            if (j == i) continue;
            float dx = env->agents[j].x - a->x, dy = env->agents[j].y - a->y;
            float d = dx * dx + dy * dy;
            int k = found < TARGET_NEIGHBORS ? found++ : TARGET_NEIGHBORS;
            while (k > 0 && best_d[k - 1] > d) {
                if (k < TARGET_NEIGHBORS) {
                    best_d[k] = best_d[k - 1];
                    best_j[k] = best_j[k - 1];
                }
                k--;
            }
            if (k < TARGET_NEIGHBORS) {
                best_d[k] = d;
                best_j[k] = j;
            }
        }
        for (int k = 0; k < TARGET_NEIGHBORS; k++) {
            if (k < found) {
                obs[4 + 2 * k] = env->agents[best_j[k]].x - a->x;
                obs[5 + 2 * k] = env->agents[best_j[k]].y - a->y;
            } else {
                obs[4 + 2 * k] = 0.0f;
                obs[5 + 2 * k] = 0.0f;
            }
        }
    }
}

static void target_reset(Target *env) {
    env->tick = 0;
    for (int i = 0; i < env->num_agents; i++) {
        TargetAgent *a = &env->agents[i];
        a->x = target_unit(env);
        a->y = target_unit(env);
        target_place_goal(env, a);
        a->episode_return = 0.0f;
        a->goals_reached = 0.0f;
        a->collisions = 0.0f;
    }
    target_observe(env);
}

static float target_clamp01(float v) { return v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v); }

static float target_distance(const TargetAgent *a) {
    float dx = a->goal_x - a->x, dy = a->goal_y - a->y;
    return sqrtf(dx * dx + dy * dy);
}

static int target_step(Target *env) {
    static const float move_x[5] = {0.0f, 1.0f, -1.0f, 0.0f, 0.0f};
    static const float move_y[5] = {0.0f, 0.0f, 0.0f, 1.0f, -1.0f};
    int n = env->num_agents;
    for (int i = 0; i < n; i++) {
        TargetAgent *a = &env->agents[i];
        float before = target_distance(a);
        int act = env->actions[i];
        a->x = target_clamp01(a->x + TARGET_STEP * move_x[act]);
        a->y = target_clamp01(a->y + TARGET_STEP * move_y[act]);
        float reward = TARGET_PROGRESS_SCALE * (before - target_distance(a));
        if (target_distance(a) < TARGET_REACH) {
            reward += 1.0f;
            a->goals_reached += 1.0f;
            target_place_goal(env, a);
        }
        env->rewards[i] = reward;
    }
    for (int i = 0; i < n; i++) {
        TargetAgent *a = &env->agents[i];
        for (int j = 0; j < n; j++) {
            if (j == i) continue;
            float dx = env->agents[j].x - a->x, dy = env->agents[j].y - a->y;
            if (dx * dx + dy * dy < TARGET_COLLIDE * TARGET_COLLIDE) {
                env->rewards[i] -= 0.1f;
                a->collisions += 1.0f;
            }
        }
        /* Goals drift and bounce off the walls. */
        a->goal_x += a->goal_vx;
        a->goal_y += a->goal_vy;
        if (a->goal_x < 0.0f || a->goal_x > 1.0f) a->goal_vx = -a->goal_vx;
        if (a->goal_y < 0.0f || a->goal_y > 1.0f) a->goal_vy = -a->goal_vy;
        a->goal_x = target_clamp01(a->goal_x);
        a->goal_y = target_clamp01(a->goal_y);
        a->episode_return += env->rewards[i];
    }
    env->tick += 1;
    target_observe(env);
    uint8_t truncated = (uint8_t)(env->tick >= env->max_steps);
    for (int i = 0; i < n; i++) {
        env->terminals[i] = 0;
        env->truncations[i] = truncated;
    }
    if (!truncated) return 0;
    TargetLog sum = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = 0; i < n; i++) {
        sum.episode_return += env->agents[i].episode_return;
        sum.episode_length += (float)env->tick;
        sum.goals_reached += env->agents[i].goals_reached;
        sum.collisions += env->agents[i].collisions;
    }
    env->log = sum;
    return n;
}

CENV_ENV(target, Target, TargetLog, "Multi-agent: each agent chases its own drifting goal")

#endif
