/* Fuzzes the card game (examples/envs/cards.h) through jaxlab's public C API, built with
 * -fsanitize=address,undefined,float-cast-overflow by tests/test_cards_fuzz.py:
 *
 *   cards_fuzz MOVES
 *
 * 1. Plays random legal moves (uniform over each agent's mask) with strict masks and the engine's
 *    most thorough self-checks on (strict 2: every mask must equal the set of executable moves),
 *    rotating over the three opponents (random, greedy, self; self with 2 C threads), until MOVES
 *    moves were made by agents on turn. Every step must succeed: a step that fails is an engine
 *    violation (printed with the engine's message). Observations must be finite, rewards -1, 0 or 1
 *    and only at a game's end, and in self play the seat not on turn must have exactly one legal
 *    action, pass (0). Every 5,000 steps a saved state is replayed: save, 40 steps,
 *    load, the same 40 actions, and the observations, rewards and masks must repeat byte for byte.
 * 2. Plays uniformly random actions (legal or not) with mask checks off and strict 0: forbidden moves
 *    must be counted in illegal_attempts, never executed.
 * 3. Plays random actions with mask checks off and strict 1: every forbidden move must fail the step
 *    with CENV_ERR_ENV and a message naming the game, turn, seat and move.
 * Prints one summary line; exits 1 at the first problem. */
#define _POSIX_C_SOURCE 200809L
#include "cards.h"
#define CENV_REGISTRY {&cards_spec}
#include "api.c"

#define NUM_ENVS 16
#define REPLAY 40

typedef struct {
    cenv_vec *vec;
    int agents;
    float obs[NUM_ENVS * 2 * CARDS_OBS], final_obs[NUM_ENVS * 2 * CARDS_OBS];
    int32_t actions[NUM_ENVS * 2];
    float rewards[NUM_ENVS * 2];
    uint8_t terminals[NUM_ENVS * 2], truncations[NUM_ENVS * 2], mask[NUM_ENVS * 2 * CARDS_ACTIONS];
} run;

static int open_run(run *r, int opponent, int strict, int threads, uint64_t seed) {
    double params[CENV_COUNT(cards_params)];
    for (int i = 0; i < CENV_COUNT(cards_params); i++) params[i] = cards_params[i].default_value;
    params[0] = opponent;
    params[4] = strict;
    char err[CENV_ERROR_LEN];
    r->vec = cenv_create(0, NUM_ENVS, seed, params, CENV_COUNT(cards_params), threads, err, sizeof(err));
    if (r->vec == NULL) {
        fprintf(stderr, "cenv_create: %s\n", err);
        return 1;
    }
    r->agents = NUM_ENVS * cenv_agents_per_env(r->vec);
    if (cenv_bind(r->vec, r->obs, r->actions, r->rewards, r->terminals, r->truncations, r->mask, r->final_obs,
                  NULL) != 0 ||
        cenv_reset(r->vec, seed, 1) != 0) {
        fprintf(stderr, "bind/reset: %s\n", cenv_error(r->vec));
        return 1;
    }
    return 0;
}

static int legal_action(cenv_rng *rng, const uint8_t *row) {
    int n = 0;
    for (int m = 0; m < CARDS_ACTIONS; m++) n += row[m];
    int pick = cenv_rng_below(rng, n);
    for (int m = 0; m < CARDS_ACTIONS; m++)
        if (row[m] && pick-- == 0) return m;
    return -1;
}

/* Checks the outputs of one successful step; returns 1 on a problem. */
static int check_outputs(const run *r, int opponent) {
    for (int a = 0; a < r->agents; a++) {
        for (int k = 0; k < CARDS_OBS; k++) {
            if (!isfinite(r->obs[a * CARDS_OBS + k])) {
                fprintf(stderr, "agent %d observation %d is not finite\n", a, k);
                return 1;
            }
        }
        float reward = r->rewards[a];
        if (!(reward == 0.0f || ((reward == 1.0f || reward == -1.0f) && r->terminals[a])) || r->truncations[a]) {
            fprintf(stderr, "agent %d: reward %g, terminal %d, truncation %d\n", a, reward, r->terminals[a],
                    r->truncations[a]);
            return 1;
        }
        const uint8_t *row = r->mask + a * CARDS_ACTIONS;
        int legal = 0;
        for (int m = 0; m < CARDS_ACTIONS; m++) legal += row[m];
        int on_turn = r->obs[a * CARDS_OBS + 12] == 1.0f;
        if (legal == 0 || !row[0] || (opponent == CARDS_SELF && !on_turn && legal != 1)) {
            fprintf(stderr, "agent %d (on turn %d): %d legal actions, pass %s\n", a, on_turn, legal,
                    row[0] ? "legal" : "illegal");
            return 1;
        }
    }
    if (opponent == CARDS_SELF) { /* exactly one seat of each env is on turn */
        for (int e = 0; e < NUM_ENVS; e++) {
            int on = (r->obs[(2 * e) * CARDS_OBS + 12] == 1.0f) + (r->obs[(2 * e + 1) * CARDS_OBS + 12] == 1.0f);
            if (on != 1) {
                fprintf(stderr, "self-play env %d has %d seats on turn\n", e, on);
                return 1;
            }
        }
    }
    return 0;
}

/* Save, REPLAY steps, load, the same steps again: the outputs must repeat byte for byte. */
static int replay(run *r, cenv_rng *rng) {
    int64_t size = cenv_state_size(r->vec);
    unsigned char *state = malloc((size_t)size);
    static float obs[REPLAY][NUM_ENVS * 2 * CARDS_OBS], rewards[REPLAY][NUM_ENVS * 2];
    static uint8_t masks[REPLAY][NUM_ENVS * 2 * CARDS_ACTIONS];
    static int32_t actions[REPLAY][NUM_ENVS * 2];
    float obs0[NUM_ENVS * 2 * CARDS_OBS];
    uint8_t mask0[NUM_ENVS * 2 * CARDS_ACTIONS];
    memcpy(obs0, r->obs, sizeof(obs0));
    memcpy(mask0, r->mask, sizeof(mask0));
    int bad = cenv_save_state(r->vec, state, size) != size;
    for (int t = 0; t < REPLAY && !bad; t++) {
        for (int a = 0; a < r->agents; a++)
            r->actions[a] = actions[t][a] = legal_action(rng, r->mask + a * CARDS_ACTIONS);
        bad |= cenv_step(r->vec) < 0;
        memcpy(obs[t], r->obs, sizeof(obs[t]));
        memcpy(rewards[t], r->rewards, sizeof(rewards[t]));
        memcpy(masks[t], r->mask, sizeof(masks[t]));
    }
    bad |= cenv_load_state(r->vec, state, size) != 0;
    memcpy(r->obs, obs0, sizeof(obs0)); /* the buffers the C side wrote last travel with a saved state */
    memcpy(r->mask, mask0, sizeof(mask0));
    for (int t = 0; t < REPLAY && !bad; t++) {
        memcpy(r->actions, actions[t], sizeof(actions[t]));
        bad |= cenv_step(r->vec) < 0;
        bad |= memcmp(obs[t], r->obs, sizeof(obs[t])) != 0 || memcmp(rewards[t], r->rewards, sizeof(rewards[t])) != 0 ||
               memcmp(masks[t], r->mask, sizeof(masks[t])) != 0;
    }
    free(state);
    if (bad) fprintf(stderr, "a saved state did not replay exactly: %s\n", cenv_error(r->vec));
    return bad;
}

int main(int argc, char **argv) {
    long long target = argc > 1 ? atoll(argv[1]) : 1000000;
    cenv_rng rng;
    cenv_rng_seed(&rng, 2024, 0);
    run runs[3];
    for (int o = 0; o < 3; o++)
        if (open_run(&runs[o], o, 2, o == CARDS_SELF ? 2 : 1, 100 + (uint64_t)o)) return 1;
    long long moves = 0, steps = 0, games = 0, replays = 0, wins[3] = {0, 0, 0};
    float stats[sizeof(CardsLog) / sizeof(float)]; /* cenv_log writes every statistic */
    /* 1. strict: random legal moves */
    while (moves < target) {
        for (int o = 0; o < 3 && moves < target; o++) {
            run *r = &runs[o];
            for (int rep = 0; rep < 50; rep++) {
                for (int a = 0; a < r->agents; a++) {
                    r->actions[a] = legal_action(&rng, r->mask + a * CARDS_ACTIONS);
                    moves += r->obs[a * CARDS_OBS + 12] == 1.0f;
                }
                int64_t ended = cenv_step(r->vec);
                steps++;
                if (ended < 0) {
                    fprintf(stderr, "VIOLATION (opponent %d, step %lld): %s\n", o, steps, cenv_error(r->vec));
                    return 1;
                }
                if (check_outputs(r, o)) return 1;
                if (ended > 0) {
                    games += o == CARDS_SELF ? ended / 2 : ended;
                    cenv_log(r->vec, stats);
                    wins[o] += (long long)(stats[2] * (float)ended + 0.5f);
                    if (stats[5] != 0.0f) {
                        fprintf(stderr, "illegal_attempts %g under strict masks\n", stats[5]);
                        return 1;
                    }
                }
                if (steps % 5000 == 0) {
                    if (replay(r, &rng)) return 1;
                    replays++;
                }
            }
        }
    }
    for (int o = 0; o < 3; o++) cenv_close(runs[o].vec);
    /* 2. lenient: any action; forbidden ones are counted, never executed */
    run lenient;
    if (open_run(&lenient, CARDS_RANDOM, 0, 1, 7)) return 1;
    cenv_set_mask_check(lenient.vec, 0);
    double illegal = 0.0;
    for (int t = 0; t < 5000; t++) {
        for (int a = 0; a < lenient.agents; a++) lenient.actions[a] = cenv_rng_below(&rng, CARDS_ACTIONS);
        int64_t ended = cenv_step(lenient.vec);
        if (ended < 0) {
            fprintf(stderr, "lenient step failed: %s\n", cenv_error(lenient.vec));
            return 1;
        }
        if (ended > 0) {
            cenv_log(lenient.vec, stats);
            illegal += stats[5] * (double)ended;
        }
    }
    cenv_close(lenient.vec);
    if (illegal <= 0.0) {
        fprintf(stderr, "lenient play counted no illegal attempts\n");
        return 1;
    }
    /* 3. strict without the mask check: a forbidden move fails the step, naming game, turn, seat, move */
    run strict;
    if (open_run(&strict, CARDS_SELF, 1, 1, 8)) return 1;
    cenv_set_mask_check(strict.vec, 0);
    int refused = 0;
    for (int t = 0; t < 3000; t++) {
        int forbidden = 0, wild = cenv_rng_below(&rng, 8) == 0 ? cenv_rng_below(&rng, strict.agents) : -1;
        for (int a = 0; a < strict.agents; a++) {
            int m = a == wild ? cenv_rng_below(&rng, CARDS_ACTIONS)
                              : legal_action(&rng, strict.mask + a * CARDS_ACTIONS);
            strict.actions[a] = m;
            forbidden |= !strict.mask[a * CARDS_ACTIONS + m];
        }
        int64_t ended = cenv_step(strict.vec);
        if (forbidden != (ended == CENV_ERR_ENV)) {
            fprintf(stderr, "forbidden %d but the step returned %lld: %s\n", forbidden, (long long)ended,
                    cenv_error(strict.vec));
            return 1;
        }
        if (forbidden) {
            const char *message = cenv_error(strict.vec);
            if (strstr(message, "failed at step") == NULL || strstr(message, ": game ") == NULL ||
                strstr(message, ", turn ") == NULL || strstr(message, ", seat ") == NULL ||
                strstr(message, ", move ") == NULL || strstr(message, "the rules forbid it") == NULL) {
                fprintf(stderr, "the refusal does not name game, turn, seat and move: %s\n", message);
                return 1;
            }
            refused++;
            cenv_reset(strict.vec, (uint64_t)t, 1);
        }
    }
    cenv_close(strict.vec);
    printf("cards fuzz: %lld legal moves by agents on turn in %lld steps, %lld games (agent wins: %lld vs random, "
           "%lld vs greedy, %lld self), %lld exact replays, %.0f forbidden moves counted leniently, %d refused "
           "strictly, 0 violations\n",
           moves, steps, games, wins[0], wins[1], wins[2], replays, illegal, refused);
    return 0;
}
