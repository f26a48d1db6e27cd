/* Drone: a swarm of quadrotors that pick packages up and deliver them, written with jaxlab's env SDK
 * as a user writes an env (`#include "core.h"`; see BUILD.md, "The env contract").
 *
 * THE ARENA. A square room of side `arena_size` metres (walls at x, y = +-arena_size / 2), floor at
 * z = 0, ceiling at z = DRONE_CEILING (6 m). `num_drones` drones (agents) fly in it at once.
 *
 * THE TASK. Each drone carries one package at a time. Its package waits in a pickup zone; flying into
 * the zone picks it up, flying into the package's delivery zone delivers it, and the drone is then
 * given a new package (new pickup and delivery zones). A zone is a sphere of radius `zone_radius`
 * around a point 1 to 3 m above the floor, at least 4 m from the other zone of its package. A
 * delivery is PERFECT when the drone's speed as it enters the delivery zone is below `perfect_speed`.
 *
 * PHYSICS (SI units; every constant below is a #define). Each drone is a rigid body: mass m =
 * DRONE_MASS (1 kg), four motors in an X at arm length L = DRONE_ARM (0.2 m) from the centre, diagonal
 * inertia I = diag(DRONE_IXX, DRONE_IYY, DRONE_IZZ) (0.01, 0.01, 0.02 kg m^2). State: position p and
 * velocity v (world frame, z up), attitude quaternion q = (w, x, y, z) (body to world; R(q) its
 * rotation matrix), angular velocity w (body frame; body x forward, y left, z up).
 *   Motors: action a_i in [-1, 1] (clipped here) is motor i's command; its thrust is
 *     T_i = T_max (a_i + 1) / 2,   T_max = DRONE_THRUST_MAX = 2 m g / 4 (thrust-to-weight 2),
 *   so a_i = 0 is exactly the hover thrust m g / 4 and a_i = -1 no thrust. Motors sit at body
 *   (+d, +d), (-d, +d), (-d, -d), (+d, -d) with d = L / sqrt(2), spinning alternately.
 *   Force (world):  m dv/dt = R(q) (0, 0, T0 + T1 + T2 + T3) - (0, 0, m g) - k_d v
 *                   with g = DRONE_G (9.81 m/s^2) and k_d = `drag` (N s/m).
 *   Torque (body):  tau = (d ((T0 + T1) - (T2 + T3)),  d ((T1 + T2) - (T0 + T3)),
 *                          k_m ((T0 + T2) - (T1 + T3)))    with k_m = DRONE_YAW_TORQUE (0.02 m),
 *                   I dw/dt = tau - w x (I w) - k_w w      with k_w = DRONE_ANGULAR_DRAG (0.02 N m s).
 *   Attitude:       dq/dt = q * (0, w) / 2   (quaternion product), renormalised every step.
 *   Integration: semi-implicit Euler with a fixed step h = DRONE_DT (0.02 s), DRONE_SUBSTEPS (2) per
 *   env step (control at 25 Hz, the action held for both): v += h dv/dt; p += h v (the new v);
 *   w += h dw/dt; q += h q * (0, w) / 2 (the new w), then q /= |q| (1 / |q| by three Newton steps,
 *   no square root, so that the loop vectorises). In free fall without drag this gives
 *   z_n = z_0 - g h^2 n (n + 1) / 2 after n physics steps: the exact z_0 - g t^2 / 2 (t = n h) less
 *   g h t / 2, the integrator's error (tests/test_drone.py checks both by value).
 *
 * EPISODES (per drone; option reset_agent). A drone crashes when its body (a sphere of radius
 * DRONE_RADIUS, 0.15 m) touches the floor, the ceiling or a wall, or comes within 2 DRONE_RADIUS of
 * another drone (both crash). A crash TERMINATES that drone's episode only: the swarm flies on, and
 * the crashed drone RESPAWNS AT ONCE (reset_agent): a new random position 1 to 3 m up, at least 1 m
 * from every other drone, level with a random heading, at rest, with a new package. Every drone's
 * episode is TRUNCATED when it reaches `max_steps` steps of its own (and it respawns the same way).
 * The env's own reset (all drones at once) happens only when every drone ends in the same step.
 *
 * REWARD per drone and step (each weight an env parameter):
 *   reward_progress x (metres gained towards the current target: the pickup zone, or the delivery
 *   zone while carrying) + reward_pickup on a pickup + reward_delivery on a delivery (+ reward_perfect
 *   when it is perfect) - penalty_crash on hitting the floor, ceiling or a wall - penalty_collision
 *   on hitting another drone (a drone that does both in one step counts a collision only).
 *
 * OBSERVATION per drone, float32[16 + 6 K] with K = `neighbors`, in the drone's body frame unless said:
 *   [0:3]   velocity / 5 m/s            [3:6]   angular velocity / 10 rad/s
 *   [6:9]   the world's up vector seen from the body: (0, 0, 1) when level, the tilt otherwise
 *   [9:12]  position in the arena (world): x / (arena_size / 2), y / (arena_size / 2), z / DRONE_CEILING
 *   [12:15] the current target's centre minus the drone's position / 10 m
 *   [15]    1 while carrying a package, else 0
 *   [16 + 6k : 22 + 6k] the k-th nearest other drone within `sense_radius` (nearest first, ties by
 *           index): its position minus this drone's / sense_radius, then its velocity minus this
 *           drone's / 5 m/s; zeros where fewer than K drones are that close.
 *   The neighbour search uses a uniform grid over x-y with cells at least `sense_radius` wide, so
 *   each drone looks at the 3 x 3 cells around its own (`neighbor_grid` 0: all pairs; the same
 *   results, for measuring). Collisions are found in the same pass.
 *
 * ACTION: Box(-1, 1, (4,)): the four motor commands a_0..a_3 (see PHYSICS).
 *
 * STATISTICS (per agent-episode): episode_return, episode_length (env steps), score (packages moved:
 * (pickups + deliveries) / 2, so a delivered package counts 1 and one picked up but not delivered
 * 1/2), deliveries, perfect_deliveries, collision_rate and crash_rate (1 when the episode ended by
 * hitting another drone, resp. the floor, ceiling or a wall; their means are rates), pickups.
 *
 * SPEED: no global state and no rand(): every env owns its cenv_rng; the per-drone state is kept as
 * structure-of-arrays so that the physics loop vectorises (scripts/bench_env.py measures it).
 *
 * HOOKS: render (a text top view), pixels (top and side views, zones and packages, for GIFs),
 * set_state (tests: see drone_set_state). */
#ifndef JAXLAB_EXAMPLE_DRONE_H
#define JAXLAB_EXAMPLE_DRONE_H

#include <math.h>

#include "core.h" /* from jaxlab's SDK: `jaxlab sdk --include` prints its folder */
#include "draw.h"

#define DRONE_MAX_DRONES 256
#define DRONE_MAX_NEIGHBORS 8
#define DRONE_GRID_MAX_SIDE 32 /* grid cells per side at most */
#define DRONE_OWN_OBS 16
#define DRONE_OBS(k) (DRONE_OWN_OBS + 6 * (k))

#define DRONE_G 9.81f             /* m/s^2 */
#define DRONE_MASS 1.0f           /* kg */
#define DRONE_ARM 0.2f            /* m, centre to motor */
#define DRONE_IXX 0.01f           /* kg m^2 */
#define DRONE_IYY 0.01f
#define DRONE_IZZ 0.02f
#define DRONE_THRUST_MAX (2.0f * DRONE_MASS * DRONE_G / 4.0f) /* N per motor: thrust-to-weight 2 */
#define DRONE_YAW_TORQUE 0.02f    /* m: reaction torque per newton of thrust */
#define DRONE_ANGULAR_DRAG 0.02f  /* N m s */
#define DRONE_DT 0.02f            /* s, one physics step */
#define DRONE_SUBSTEPS 2          /* physics steps per env step */
#define DRONE_RADIUS 0.15f        /* m */
#define DRONE_CEILING 6.0f        /* m */
#define DRONE_SPAWN_GAP 1.0f      /* m between a spawning drone and every other */
#define DRONE_ZONE_GAP 4.0f       /* m between a package's two zones */
#define DRONE_VEL_SCALE 5.0f      /* m/s per observation unit */
#define DRONE_SPIN_SCALE 10.0f    /* rad/s per observation unit */
#define DRONE_TARGET_SCALE 10.0f  /* m per observation unit */

enum { DRONE_FLYING = 0, DRONE_CRASHED = 1, DRONE_COLLIDED = 2 };

/* One float per statistic: the sums over the drones whose episode ends in a step. */
typedef struct {
    float episode_return;
    float episode_length;
    float score;
    float deliveries;
    float perfect_deliveries;
    float collision_rate;
    float crash_rate;
    float pickups;
} DroneLog;

typedef struct {
    float *observations;
    float *actions;
    float *rewards;
    uint8_t *terminals;
    uint8_t *truncations;
    DroneLog log;
    /* config */
    int num_drones;
    int max_steps;
    int neighbors;
    int use_grid;
    float half;          /* arena_size / 2 */
    float inv_half;      /* 2 / arena_size */
    float sense_radius;
    float inv_sense;     /* 1 / sense_radius */
    float zone_radius;
    float perfect_speed;
    float drag;
    float w_progress, w_pickup, w_delivery, w_perfect, w_crash, w_collision;
    int grid_side;       /* cells per side */
    float cell_size;     /* m, >= sense_radius */
    /* per-drone state, structure of arrays */
    float px[DRONE_MAX_DRONES], py[DRONE_MAX_DRONES], pz[DRONE_MAX_DRONES];
    float vx[DRONE_MAX_DRONES], vy[DRONE_MAX_DRONES], vz[DRONE_MAX_DRONES];
    float qw[DRONE_MAX_DRONES], qx[DRONE_MAX_DRONES], qy[DRONE_MAX_DRONES], qz[DRONE_MAX_DRONES];
    float wx[DRONE_MAX_DRONES], wy[DRONE_MAX_DRONES], wz[DRONE_MAX_DRONES];
    float thrust[4][DRONE_MAX_DRONES]; /* N, this step's motor thrusts */
    float pickup[3][DRONE_MAX_DRONES], deliver[3][DRONE_MAX_DRONES]; /* zone centres, m */
    float target_dist[DRONE_MAX_DRONES]; /* m, distance to the current target after the last step */
    uint8_t carrying[DRONE_MAX_DRONES];
    uint8_t status[DRONE_MAX_DRONES];   /* DRONE_FLYING / _CRASHED / _COLLIDED after the last step */
    int tick[DRONE_MAX_DRONES];         /* env steps into the drone's episode */
    float ep_return[DRONE_MAX_DRONES], ep_pickups[DRONE_MAX_DRONES], ep_deliveries[DRONE_MAX_DRONES],
        ep_perfect[DRONE_MAX_DRONES];
    /* the neighbour grid (scratch, rebuilt from the positions every step) */
    int16_t cell_of[DRONE_MAX_DRONES];
    int16_t cell_start[DRONE_GRID_MAX_SIDE * DRONE_GRID_MAX_SIDE + 1];
    int16_t sorted_id[DRONE_MAX_DRONES];  /* drones in cell order, with their positions */
    float sx[DRONE_MAX_DRONES], sy[DRONE_MAX_DRONES], sz[DRONE_MAX_DRONES];
    cenv_rng rng;
} Drone;

static const cenv_param drone_params[] = {
    {"num_drones", 64, 1, DRONE_MAX_DRONES, 1, "drones sharing one arena (agents per env)"},
    {"max_steps", 500, 1, 1e9, 1, "env steps (0.04 s each) after which a drone's episode is truncated"},
    {"arena_size", 16, 4, 200, 0, "side of the square arena in m (walls at +-arena_size/2; ceiling 6 m)"},
    {"neighbors", 4, 0, DRONE_MAX_NEIGHBORS, 1, "K: nearest other drones in each observation"},
    {"sense_radius", 3, 0.5, 100, 0, "m: other drones farther than this are not seen"},
    {"zone_radius", 1, 0.2, 5, 0, "m: radius of the pickup and delivery zones"},
    {"perfect_speed", 1, 0, 100, 0, "m/s: a delivery entering its zone slower than this is perfect"},
    {"drag", 0.3, 0, 10, 0, "linear air drag in N per m/s"},
    {"reward_progress", 1, 0, 100, 0, "reward per metre gained towards the current target"},
    {"reward_pickup", 1, 0, 100, 0, "reward for picking a package up"},
    {"reward_delivery", 2, 0, 100, 0, "reward for delivering a package"},
    {"reward_perfect", 2, 0, 100, 0, "extra reward for a perfect delivery"},
    {"penalty_crash", 2, 0, 100, 0, "penalty for hitting the floor, the ceiling or a wall (ends the episode)"},
    {"penalty_collision", 2, 0, 100, 0, "penalty for hitting another drone (ends both episodes)"},
    {"neighbor_grid", 1, 0, 1, 1, "neighbour search: 1 a uniform grid, 0 all pairs (same results)"},
};
static const char *const drone_log_names[] = {"episode_return", "episode_length", "score", "deliveries",
                                              "perfect_deliveries", "collision_rate", "crash_rate", "pickups"};

static void drone_spaces(const double *params, cenv_spaces *out) {
    out->agents_per_env = (int)params[0];
    out->obs_ndim = 1;
    out->obs_shape[0] = DRONE_OBS((int)params[3]);
    out->obs_dtype = CENV_DTYPE_FLOAT32;
    out->action_kind = CENV_ACTION_CONTINUOUS;
    out->action_ndim = 4;
    for (int i = 0; i < 4; i++) {
        out->action_low[i] = -1.0f;
        out->action_high[i] = 1.0f;
    }
}

static void drone_init(Drone *env, const double *params) {
    env->num_drones = (int)params[0];
    env->max_steps = (int)params[1];
    env->half = (float)(params[2] / 2.0);
    env->neighbors = (int)params[3];
    env->sense_radius = (float)params[4];
    env->inv_half = 1.0f / env->half;
    env->inv_sense = 1.0f / env->sense_radius;
    env->zone_radius = (float)params[5];
    env->perfect_speed = (float)params[6];
    env->drag = (float)params[7];
    env->w_progress = (float)params[8];
    env->w_pickup = (float)params[9];
    env->w_delivery = (float)params[10];
    env->w_perfect = (float)params[11];
    env->w_crash = (float)params[12];
    env->w_collision = (float)params[13];
    env->use_grid = (int)params[14];
    int side = (int)(params[2] / params[4]); /* cells at least sense_radius wide */
    env->grid_side = side < 1 ? 1 : (side > DRONE_GRID_MAX_SIDE ? DRONE_GRID_MAX_SIDE : side);
    env->cell_size = (float)(params[2] / env->grid_side);
}

static float drone_uniform(Drone *env, float lo, float hi) {
    return lo + (hi - lo) * (float)cenv_rng_unit(&env->rng);
}

static float drone_dist(float ax, float ay, float az, float bx, float by, float bz) {
    float dx = ax - bx, dy = ay - by, dz = az - bz;
    return sqrtf(dx * dx + dy * dy + dz * dz);
}

/* ---- the neighbour grid ---- */

static int drone_cell_index(const Drone *env, float v) {
    float c = (v + env->half) / env->cell_size;
    int i = c >= 0.0f ? (int)(c < (float)env->grid_side ? c : (float)env->grid_side) : 0;
    return i >= env->grid_side ? env->grid_side - 1 : i; /* drones beyond a wall: the border cells */
}

/* Counting sort of the drones by cell (row-major over x-y): cell c holds sorted slots
 * [cell_start[c], cell_start[c + 1]), and slot s is drone sorted_id[s] at (sx, sy, sz)[s], so the
 * three cells of a row of the 3 x 3 neighbourhood are one contiguous run of slots. */
static void drone_build_grid(Drone *env) {
    int n = env->num_drones, cells = env->grid_side * env->grid_side;
    int16_t *start = env->cell_start;
    memset(start, 0, sizeof(int16_t) * (size_t)(cells + 1));
    for (int i = 0; i < n; i++) {
        int c = drone_cell_index(env, env->py[i]) * env->grid_side + drone_cell_index(env, env->px[i]);
        env->cell_of[i] = (int16_t)c;
        start[c + 1]++;
    }
    for (int c = 0; c < cells; c++) start[c + 1] = (int16_t)(start[c + 1] + start[c]);
    int16_t fill[DRONE_GRID_MAX_SIDE * DRONE_GRID_MAX_SIDE];
    memcpy(fill, start, sizeof(int16_t) * (size_t)cells);
    for (int i = 0; i < n; i++) {
        int s = fill[env->cell_of[i]]++;
        env->sorted_id[s] = (int16_t)i;
        env->sx[s] = env->px[i];
        env->sy[s] = env->py[i];
        env->sz[s] = env->pz[i];
    }
}

typedef struct {
    int found;
    int collided;
    int index[DRONE_MAX_NEIGHBORS];
    float d2[DRONE_MAX_NEIGHBORS];
} DroneNear;

/* Candidates of one neighbour search: the other drones within sense_radius (squared distance, id). */
typedef struct {
    int count;
    float d2[DRONE_MAX_DRONES];
    int16_t id[DRONE_MAX_DRONES];
} DroneCandidates;

/* Adds slots [lo, hi) of the arrays (xs, ys, zs) (drone ids[s], or s itself when ids is NULL) that lie
 * within sense_radius of drone i at (x, y, z) to the candidates, without branches (most are out of
 * range: each is written, and counted only when it is in range). */
static void drone_scan(const Drone *env, int i, float x, float y, float z, const float *xs, const float *ys,
                       const float *zs, const int16_t *ids, int lo, int hi, DroneCandidates *out) {
    const float r2 = env->sense_radius * env->sense_radius;
    int m = out->count;
    for (int s = lo; s < hi; s++) {
        float dx = xs[s] - x, dy = ys[s] - y, dz = zs[s] - z;
        float d = dx * dx + dy * dy + dz * dz;
        int j = ids != NULL ? ids[s] : s;
        out->d2[m] = d;
        out->id[m] = (int16_t)j;
        m += (d <= r2) & (j != i);
    }
    out->count = m;
}

/* The K nearest candidates by (squared distance, id), nearest first (insertion into a sorted list of
 * K), and whether one is closer than 2 DRONE_RADIUS (a collision). */
static void drone_select(const Drone *env, const DroneCandidates *c, DroneNear *near) {
    const int k_max = env->neighbors, m = c->count;
    int found = 0, collided = 0;
    for (int a = 0; a < m; a++) {
        float d = c->d2[a];
        int j = c->id[a];
        collided |= d < 4.0f * DRONE_RADIUS * DRONE_RADIUS;
        if (k_max == 0 ||
            (found == k_max && !(d < near->d2[found - 1] || (d == near->d2[found - 1] && j < near->index[found - 1]))))
            continue;
        int k = found < k_max ? found++ : k_max - 1;
        while (k > 0 && (near->d2[k - 1] > d || (near->d2[k - 1] == d && near->index[k - 1] > j))) {
            near->d2[k] = near->d2[k - 1];
            near->index[k] = near->index[k - 1];
            k--;
        }
        near->d2[k] = d;
        near->index[k] = j;
    }
    near->found = found;
    near->collided = collided;
}

/* The neighbours of drone i: through the grid (drone_build_grid from the current positions) or over
 * all pairs; both give the same result. */
static void drone_neighbors(const Drone *env, int i, int grid, DroneNear *near) {
    DroneCandidates candidates;
    candidates.count = 0;
    float x = env->px[i], y = env->py[i], z = env->pz[i];
    if (!grid) {
        drone_scan(env, i, x, y, z, env->px, env->py, env->pz, NULL, 0, env->num_drones, &candidates);
    } else {
        int side = env->grid_side, c = env->cell_of[i], cx = c % side, cy = c / side;
        int x0 = cx > 0 ? cx - 1 : 0, x1 = cx + 1 < side ? cx + 1 : side - 1;
        for (int row = cy - 1; row <= cy + 1; row++) {
            if (row < 0 || row >= side) continue;
            drone_scan(env, i, x, y, z, env->sx, env->sy, env->sz, env->sorted_id, env->cell_start[row * side + x0],
                       env->cell_start[row * side + x1 + 1], &candidates);
        }
    }
    drone_select(env, &candidates, near);
}

/* ---- observations ---- */

/* Drone i's rotation matrix R(q) (body to world), row-major. */
static inline void drone_rotation(const Drone *env, int i, float *r) {
    float w = env->qw[i], a = env->qx[i], b = env->qy[i], c = env->qz[i];
    r[0] = 1.0f - 2.0f * (b * b + c * c);
    r[1] = 2.0f * (a * b - w * c);
    r[2] = 2.0f * (a * c + w * b);
    r[3] = 2.0f * (a * b + w * c);
    r[4] = 1.0f - 2.0f * (a * a + c * c);
    r[5] = 2.0f * (b * c - w * a);
    r[6] = 2.0f * (a * c - w * b);
    r[7] = 2.0f * (b * c + w * a);
    r[8] = 1.0f - 2.0f * (a * a + b * b);
}

/* out = scale R^T (x, y, z): a world vector in the body frame, scaled. */
static inline void drone_to_body(const float *r, float x, float y, float z, float scale, float *out) {
    out[0] = (r[0] * x + r[3] * y + r[6] * z) * scale;
    out[1] = (r[1] * x + r[4] * y + r[7] * z) * scale;
    out[2] = (r[2] * x + r[5] * y + r[8] * z) * scale;
}

static inline const float *drone_target(const Drone *env, int i, float *out) {
    int c = env->carrying[i];
    out[0] = c ? env->deliver[0][i] : env->pickup[0][i];
    out[1] = c ? env->deliver[1][i] : env->pickup[1][i];
    out[2] = c ? env->deliver[2][i] : env->pickup[2][i];
    return out;
}

/* Writes drone i's observation, its neighbours given. */
static void drone_observe(Drone *env, int i, const DroneNear *near) {
    float *obs = env->observations + (size_t)i * (size_t)DRONE_OBS(env->neighbors);
    float r[9], target[3];
    const float x = env->px[i], y = env->py[i], z = env->pz[i], vx = env->vx[i], vy = env->vy[i], vz = env->vz[i];
    drone_rotation(env, i, r);
    drone_to_body(r, vx, vy, vz, 1.0f / DRONE_VEL_SCALE, obs);
    obs[3] = env->wx[i] * (1.0f / DRONE_SPIN_SCALE);
    obs[4] = env->wy[i] * (1.0f / DRONE_SPIN_SCALE);
    obs[5] = env->wz[i] * (1.0f / DRONE_SPIN_SCALE);
    obs[6] = r[6]; /* R^T (0, 0, 1): the third row */
    obs[7] = r[7];
    obs[8] = r[8];
    obs[9] = x * env->inv_half;
    obs[10] = y * env->inv_half;
    obs[11] = z * (1.0f / DRONE_CEILING);
    drone_target(env, i, target);
    drone_to_body(r, target[0] - x, target[1] - y, target[2] - z, 1.0f / DRONE_TARGET_SCALE, obs + 12);
    obs[15] = (float)env->carrying[i];
    float *slot = obs + DRONE_OWN_OBS;
    const float inv_sense = env->inv_sense;
    for (int k = 0; k < env->neighbors; k++, slot += 6) {
        if (k >= near->found) {
            for (int m = 0; m < 6; m++) slot[m] = 0.0f;
            continue;
        }
        int j = near->index[k];
        drone_to_body(r, env->px[j] - x, env->py[j] - y, env->pz[j] - z, inv_sense, slot);
        drone_to_body(r, env->vx[j] - vx, env->vy[j] - vy, env->vz[j] - vz, 1.0f / DRONE_VEL_SCALE, slot + 3);
    }
}

/* Every drone's observation, from the current state. */
static void drone_observe_all(Drone *env) {
    if (env->use_grid) drone_build_grid(env);
    DroneNear near;
    for (int i = 0; i < env->num_drones; i++) {
        drone_neighbors(env, i, env->use_grid, &near);
        drone_observe(env, i, &near);
    }
}

/* ---- spawning ---- */

static void drone_new_package(Drone *env, int i) {
    float margin = env->zone_radius + 0.5f;
    float lo = -env->half + margin, hi = env->half - margin;
    if (hi < lo) lo = hi = 0.0f;
    env->pickup[0][i] = drone_uniform(env, lo, hi);
    env->pickup[1][i] = drone_uniform(env, lo, hi);
    env->pickup[2][i] = drone_uniform(env, 1.0f, 3.0f);
    for (int attempt = 0; attempt < 16; attempt++) {
        env->deliver[0][i] = drone_uniform(env, lo, hi);
        env->deliver[1][i] = drone_uniform(env, lo, hi);
        env->deliver[2][i] = drone_uniform(env, 1.0f, 3.0f);
        if (drone_dist(env->pickup[0][i], env->pickup[1][i], env->pickup[2][i], env->deliver[0][i],
                       env->deliver[1][i], env->deliver[2][i]) >= DRONE_ZONE_GAP)
            break;
    }
    env->carrying[i] = 0;
}

/* Drone i starts a new episode: a free spot (checked against drones [0, others)), level, at rest. */
static void drone_spawn(Drone *env, int i, int others) {
    float lo = -env->half + 1.0f, hi = env->half - 1.0f;
    for (int attempt = 0; attempt < 32; attempt++) {
        env->px[i] = drone_uniform(env, lo, hi);
        env->py[i] = drone_uniform(env, lo, hi);
        env->pz[i] = drone_uniform(env, 1.0f, 3.0f);
        int crowded = 0;
        for (int j = 0; j < others; j++) {
            float dx = env->px[j] - env->px[i], dy = env->py[j] - env->py[i], dz = env->pz[j] - env->pz[i];
            crowded |= (j != i) & (dx * dx + dy * dy + dz * dz < DRONE_SPAWN_GAP * DRONE_SPAWN_GAP);
        }
        if (!crowded) break;
    }
    float yaw = drone_uniform(env, -3.14159265f, 3.14159265f);
    env->qw[i] = cosf(0.5f * yaw);
    env->qx[i] = 0.0f;
    env->qy[i] = 0.0f;
    env->qz[i] = sinf(0.5f * yaw);
    env->vx[i] = env->vy[i] = env->vz[i] = 0.0f;
    env->wx[i] = env->wy[i] = env->wz[i] = 0.0f;
    drone_new_package(env, i);
    float target[3];
    drone_target(env, i, target);
    env->target_dist[i] = drone_dist(env->px[i], env->py[i], env->pz[i], target[0], target[1], target[2]);
    env->status[i] = DRONE_FLYING;
    env->tick[i] = 0;
    env->ep_return[i] = env->ep_pickups[i] = env->ep_deliveries[i] = env->ep_perfect[i] = 0.0f;
}

static void drone_reset(Drone *env) {
    for (int i = 0; i < env->num_drones; i++) drone_spawn(env, i, i);
    drone_observe_all(env);
}

/* Option reset_agent: a drone that crashed (or was truncated) while the others fly on respawns at once.
 * Its neighbours are found over all pairs (the grid holds the positions from before the respawn). */
static void drone_reset_agent(Drone *env, int i) {
    drone_spawn(env, i, env->num_drones);
    DroneNear near;
    drone_neighbors(env, i, 0, &near);
    drone_observe(env, i, &near);
}

/* ---- the step ---- */

/* One physics step of h seconds for every drone (see PHYSICS at the top). */
static void drone_physics(Drone *env, float h) {
    const float d = DRONE_ARM * 0.70710678f, g = DRONE_G, inv_m = 1.0f / DRONE_MASS, kd = env->drag;
    int n = env->num_drones;
    float *restrict px = env->px, *restrict py = env->py, *restrict pz = env->pz;
    float *restrict vx = env->vx, *restrict vy = env->vy, *restrict vz = env->vz;
    float *restrict qw = env->qw, *restrict qx = env->qx, *restrict qy = env->qy, *restrict qz = env->qz;
    float *restrict wx = env->wx, *restrict wy = env->wy, *restrict wz = env->wz;
    const float *restrict t0 = env->thrust[0], *restrict t1 = env->thrust[1];
    const float *restrict t2 = env->thrust[2], *restrict t3 = env->thrust[3];
    for (int i = 0; i < n; i++) {
        float w = qw[i], a = qx[i], b = qy[i], c = qz[i];
        float total = (t0[i] + t1[i]) + (t2[i] + t3[i]);
        /* the body z axis in the world: R(q) (0, 0, 1) */
        float zx = 2.0f * (a * c + w * b), zy = 2.0f * (b * c - w * a), zz = 1.0f - 2.0f * (a * a + b * b);
        vx[i] += h * ((total * zx - kd * vx[i]) * inv_m);
        vy[i] += h * ((total * zy - kd * vy[i]) * inv_m);
        vz[i] += h * ((total * zz - kd * vz[i]) * inv_m - g);
        px[i] += h * vx[i];
        py[i] += h * vy[i];
        pz[i] += h * vz[i];
        float tx = d * ((t0[i] + t1[i]) - (t2[i] + t3[i]));
        float ty = d * ((t1[i] + t2[i]) - (t0[i] + t3[i]));
        float tz = DRONE_YAW_TORQUE * ((t0[i] + t2[i]) - (t1[i] + t3[i]));
        float ox = wx[i], oy = wy[i], oz = wz[i];
        float ax = (tx - (DRONE_IZZ - DRONE_IYY) * oy * oz - DRONE_ANGULAR_DRAG * ox) / DRONE_IXX;
        float ay = (ty - (DRONE_IXX - DRONE_IZZ) * oz * ox - DRONE_ANGULAR_DRAG * oy) / DRONE_IYY;
        float az = (tz - (DRONE_IYY - DRONE_IXX) * ox * oy - DRONE_ANGULAR_DRAG * oz) / DRONE_IZZ;
        ox += h * ax;
        oy += h * ay;
        oz += h * az;
        wx[i] = ox;
        wy[i] = oy;
        wz[i] = oz;
        /* q += h q * (0, w) / 2, then divided by |q|: s = 1 / sqrt(|q|^2) by three Newton steps from 1
         * (float-exact while |q|^2 < 1.5, i.e. |w| < 70 rad/s; angular drag keeps it lower) */
        float hh = 0.5f * h;
        float nw = w + hh * (-a * ox - b * oy - c * oz);
        float na = a + hh * (w * ox + b * oz - c * oy);
        float nb = b + hh * (w * oy + c * ox - a * oz);
        float nc = c + hh * (w * oz + a * oy - b * ox);
        float norm2 = nw * nw + na * na + nb * nb + nc * nc;
        float s = 0.5f * (3.0f - norm2);
        s = s * (1.5f - 0.5f * norm2 * s * s);
        s = s * (1.5f - 0.5f * norm2 * s * s);
        qw[i] = nw * s;
        qx[i] = na * s;
        qy[i] = nb * s;
        qz[i] = nc * s;
    }
}

static int drone_step(Drone *env) {
    int n = env->num_drones;
    const float *act = env->actions;
    for (int i = 0; i < n; i++) {
        for (int m = 0; m < 4; m++) {
            float a = act[4 * i + m];
            a = a < -1.0f ? -1.0f : (a > 1.0f ? 1.0f : a);
            env->thrust[m][i] = DRONE_THRUST_MAX * (a + 1.0f) * 0.5f;
        }
    }
    for (int s = 0; s < DRONE_SUBSTEPS; s++) drone_physics(env, DRONE_DT);
    if (env->use_grid) drone_build_grid(env);
    memset(&env->log, 0, sizeof(env->log));
    int ended = 0;
    const float half = env->half, zr2 = env->zone_radius * env->zone_radius;
    for (int i = 0; i < n; i++) {
        DroneNear near;
        drone_neighbors(env, i, env->use_grid, &near);
        float x = env->px[i], y = env->py[i], z = env->pz[i];
        int hit = x - DRONE_RADIUS < -half || x + DRONE_RADIUS > half || y - DRONE_RADIUS < -half ||
                  y + DRONE_RADIUS > half || z - DRONE_RADIUS < 0.0f || z + DRONE_RADIUS > DRONE_CEILING ||
                  !(x == x && y == y && z == z);
        int status = near.collided ? DRONE_COLLIDED : (hit ? DRONE_CRASHED : DRONE_FLYING);
        float reward = 0.0f;
        if (status == DRONE_FLYING) {
            float target[3];
            drone_target(env, i, target);
            float dist = drone_dist(x, y, z, target[0], target[1], target[2]);
            reward += env->w_progress * (env->target_dist[i] - dist);
            float dx = x - target[0], dy = y - target[1], dz = z - target[2];
            if (dx * dx + dy * dy + dz * dz <= zr2) {
                if (!env->carrying[i]) {
                    env->carrying[i] = 1;
                    env->ep_pickups[i] += 1.0f;
                    reward += env->w_pickup;
                } else {
                    float v2 = env->vx[i] * env->vx[i] + env->vy[i] * env->vy[i] + env->vz[i] * env->vz[i];
                    reward += env->w_delivery;
                    env->ep_deliveries[i] += 1.0f;
                    if (v2 < env->perfect_speed * env->perfect_speed) {
                        reward += env->w_perfect;
                        env->ep_perfect[i] += 1.0f;
                    }
                    drone_new_package(env, i);
                }
                drone_target(env, i, target);
                dist = drone_dist(x, y, z, target[0], target[1], target[2]);
            }
            env->target_dist[i] = dist;
        } else {
            reward -= status == DRONE_COLLIDED ? env->w_collision : env->w_crash;
        }
        env->status[i] = (uint8_t)status;
        env->tick[i] += 1;
        env->ep_return[i] += reward;
        env->rewards[i] = reward;
        drone_observe(env, i, &near);
        uint8_t terminal = status != DRONE_FLYING;
        uint8_t truncated = !terminal && env->tick[i] >= env->max_steps;
        env->terminals[i] = terminal;
        env->truncations[i] = truncated;
        if (!terminal && !truncated) continue;
        ended++;
        env->log.episode_return += env->ep_return[i];
        env->log.episode_length += (float)env->tick[i];
        env->log.score += 0.5f * (env->ep_pickups[i] + env->ep_deliveries[i]);
        env->log.deliveries += env->ep_deliveries[i];
        env->log.perfect_deliveries += env->ep_perfect[i];
        env->log.collision_rate += status == DRONE_COLLIDED ? 1.0f : 0.0f;
        env->log.crash_rate += status == DRONE_CRASHED ? 1.0f : 0.0f;
        env->log.pickups += env->ep_pickups[i];
    }
    return ended;
}

/* ---- hooks ---- */

/* Test hook. state = (drone, x, y, z, vx, vy, vz, qw, qx, qy, qz, wx, wy, wz) (n = 14): drone's
 * physical state (SI units, world frame but w in the body frame, q = (w, x, y, z) as given);
 * n = 20 adds its package's zones (pickup x, y, z, delivery x, y, z); n = 21 also the carrying flag;
 * n = 22 also its tick (env steps into its episode). Every observation is rewritten. */
static int drone_set_state(Drone *env, const double *state, int n) {
    if (n != 14 && n != 20 && n != 21 && n != 22) return -1;
    for (int k = 0; k < n; k++) {
        if (!isfinite(state[k])) return -1;
    }
    if (!(state[0] >= 0.0 && state[0] < env->num_drones && state[0] == floor(state[0]))) return -1;
    if (n == 22 && !(state[21] >= 0.0 && state[21] <= 1e9)) return -1;
    int i = (int)state[0];
    float *fields[13] = {&env->px[i], &env->py[i], &env->pz[i], &env->vx[i], &env->vy[i], &env->vz[i],
                         &env->qw[i], &env->qx[i], &env->qy[i], &env->qz[i], &env->wx[i], &env->wy[i], &env->wz[i]};
    for (int k = 0; k < 13; k++) *fields[k] = (float)state[1 + k];
    if (n >= 20) {
        for (int k = 0; k < 3; k++) {
            env->pickup[k][i] = (float)state[14 + k];
            env->deliver[k][i] = (float)state[17 + k];
        }
    }
    if (n >= 21) env->carrying[i] = state[20] != 0.0;
    if (n >= 22) env->tick[i] = (int)state[21];
    float target[3];
    drone_target(env, i, target);
    env->target_dist[i] = drone_dist(env->px[i], env->py[i], env->pz[i], target[0], target[1], target[2]);
    drone_observe_all(env);
    return 0;
}

/* The cell of the text view that (offset / span) * cells falls in, truncated, or -1 when that lies
 * outside [0, cells): a position far beyond the walls, infinite or NaN (set_state takes any finite
 * double, and 1e300 is an infinite float; a loaded state holds any float) is not drawn rather than
 * converted to an int, which would be undefined behaviour. */
static int drone_text_cell(float offset, float span, int cells) {
    float f = offset / span * (float)cells;
    return f > -1.0f && f < (float)cells ? (int)f : -1;
}

/* A text top view: the arena as a grid of characters; a drone is 'o' ('@' while carrying; drone 0 is
 * '0' or 'A'), its current target zone 'p' (pickup) or 'd' (delivery). */
static int drone_render(const Drone *env, char *out, int size) {
    enum { W = 48, H = 24 };
    char grid[H][W + 1];
    memset(grid, '.', sizeof(grid));
    for (int r = 0; r < H; r++) grid[r][W] = '\0';
    float span = 2.0f * env->half;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = env->num_drones - 1; i >= 0; i--) {
            float x = env->px[i], y = env->py[i];
            char mark = env->carrying[i] ? (i == 0 ? 'A' : '@') : (i == 0 ? '0' : 'o');
            if (pass == 0) { /* zones first, drones over them */
                x = env->carrying[i] ? env->deliver[0][i] : env->pickup[0][i];
                y = env->carrying[i] ? env->deliver[1][i] : env->pickup[1][i];
                mark = env->carrying[i] ? 'd' : 'p';
            }
            int c = drone_text_cell(x + env->half, span, W), r = drone_text_cell(env->half - y, span, H);
            if (c >= 0 && c < W && r >= 0 && r < H && (pass == 1 || grid[r][c] == '.')) grid[r][c] = mark;
        }
    }
    int used = snprintf(out, (size_t)size, "drone 0: z %.2f m  speed %.2f m/s  %s  step %d\n", env->pz[0],
                        sqrtf(env->vx[0] * env->vx[0] + env->vy[0] * env->vy[0] + env->vz[0] * env->vz[0]),
                        env->carrying[0] ? "carrying" : "empty", env->tick[0]);
    for (int r = 0; r < H; r++) {
        int room = size - used > 0 ? size - used : 0;
        used += snprintf(out + (used < size ? used : size), (size_t)room, "|%s|%s", grid[r], r + 1 < H ? "\n" : "");
    }
    return used;
}

/* Top view (x right, y up) on the left half, side view (x right, z up) on the right: walls, floor and
 * ceiling in grey; drones as white discs (yellow with a brown package while carrying), each with a dim
 * dot at its current target (orange: a pickup zone, blue: a delivery zone); drone 0 in red, with its
 * package's zones drawn to scale as rings and a line to its current target. */
static int drone_pixels(const Drone *env, uint8_t *rgb, int width, int height) {
    cenv_canvas c = cenv_canvas_of(rgb, width, height);
    const uint32_t background = 0x101418, wall = 0x80868c, pickup = 0xff9933, deliver = 0x3399ff;
    const uint32_t dim_pickup = 0x7a4a1f, dim_deliver = 0x1f4a7a;
    const uint32_t drone = 0xf0f0f0, loaded = 0xffd24d, package = 0x8b5a2b, first = 0xff3333;
    cenv_draw_clear(c, background);
    float pane = 0.5f * (float)width, pad = 4.0f;
    float h = env->half;
    cenv_view views[2] = {
        cenv_view_fit(pad, pad, pane - 2.0f * pad, (float)height - 2.0f * pad, -h, -h, h, h),
        cenv_view_fit(pane + pad, pad, pane - 2.0f * pad, (float)height - 2.0f * pad, -h, 0.0f, h, DRONE_CEILING),
    };
    for (int v = 0; v < 2; v++) {
        cenv_view view = views[v];
        float top = v == 0 ? h : DRONE_CEILING, bottom = v == 0 ? -h : 0.0f;
        float x0 = cenv_view_x(view, -h), x1 = cenv_view_x(view, h);
        float y0 = cenv_view_y(view, top), y1 = cenv_view_y(view, bottom);
        cenv_draw_line(c, x0, y0, x1, y0, 1.0f, wall);
        cenv_draw_line(c, x0, y1, x1, y1, v == 0 ? 1.0f : 2.0f, wall);
        cenv_draw_line(c, x0, y0, x0, y1, 1.0f, wall);
        cenv_draw_line(c, x1, y0, x1, y1, 1.0f, wall);
        float body = cenv_view_len(view, DRONE_RADIUS * 1.5f);
        if (body < 1.5f) body = 1.5f;
        float target[3];
        for (int i = env->num_drones - 1; i >= 1; i--) {
            drone_target(env, i, target);
            cenv_draw_disc(c, cenv_view_x(view, target[0]), cenv_view_y(view, target[v == 0 ? 1 : 2]), 1.5f,
                           env->carrying[i] ? dim_deliver : dim_pickup);
        }
        float zone = cenv_view_len(view, env->zone_radius);
        if (!env->carrying[0])
            cenv_draw_ring(c, cenv_view_x(view, env->pickup[0][0]), cenv_view_y(view, env->pickup[v == 0 ? 1 : 2][0]),
                           zone, 2.0f, pickup);
        cenv_draw_ring(c, cenv_view_x(view, env->deliver[0][0]), cenv_view_y(view, env->deliver[v == 0 ? 1 : 2][0]),
                       zone, 2.0f, deliver);
        drone_target(env, 0, target);
        cenv_draw_line(c, cenv_view_x(view, env->px[0]), cenv_view_y(view, v == 0 ? env->py[0] : env->pz[0]),
                       cenv_view_x(view, target[0]), cenv_view_y(view, target[v == 0 ? 1 : 2]), 1.0f, 0x803030);
        for (int i = env->num_drones - 1; i >= 0; i--) {
            float dx = cenv_view_x(view, env->px[i]), dy = cenv_view_y(view, v == 0 ? env->py[i] : env->pz[i]);
            cenv_draw_disc(c, dx, dy, body, i == 0 ? first : (env->carrying[i] ? loaded : drone));
            if (env->carrying[i]) {
                float s = 0.6f * body;
                cenv_draw_rect(c, dx - s, dy - s, dx + s, dy + s, package);
            }
        }
    }
    return 0;
}

CENV_ENV(drone, Drone, DroneLog, "Quadrotor swarm: pick packages up and deliver them (continuous, multi-agent)",
         reset_agent, render, pixels, set_state)

#endif
