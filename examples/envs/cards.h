/* Cards: a two-player trading card game with strict action masks, written with jaxlab's env SDK as a
 * user would write it (`jaxlab train cards` finds this header on the env path; cards.toml beside it
 * is its config layer).
 *
 * RULES. Two seats, each with `life` (20) life and a deck of `deck_size` (20) cards built anew every
 * game from the 39-card pool below (cards_pool) along a mana curve (cards_curve: weights per cost, at
 * most 2 copies of a card). A coin decides who goes first; the first seat starts with 3 cards in
 * hand, the second with 4. A turn: the seat's maximum mana grows by 1 (to at most 10) and refills,
 * its creatures ready, it draws a card (from an empty deck it takes fatigue damage instead: 1, then
 * 2, 3, ...; a card drawn into a full hand of 8 burns), then it makes moves until it ends its turn:
 *   - play a card from its hand, paying its cost in mana: a creature enters its board (at most 5;
 *     it cannot attack this turn unless it has haste) and does its on-play effect, if any; a spell
 *     does its effect, at a target where it needs one (damage and drain: the enemy face or an enemy
 *     creature; heal: the own face or an own creature; buff: an own creature; destroy: an enemy
 *     creature);
 *   - attack with a ready creature (attack > 0, has not attacked this turn, not played this turn or
 *     has haste) at the enemy face or an enemy creature. Blocking: the enemy's guard creatures block
 *     an attacker (all of them a walking attacker, only flying guards a flying one); an attacker with
 *     blockers must attack one of them, else it attacks what it likes. Creature combat is
 *     simultaneous: each deals its attack to the other;
 *   - end its turn.
 * Keywords: haste (attacks the turn it is played), guard (blocks, above), flying (blocked only by
 * flying guards), lifesteal (damage it deals heals its owner), deathtouch (any damage it deals to a
 * creature kills it), shield (the first damage it would take is absorbed and the shield is gone).
 * Life never exceeds `life`. A seat at 0 life or less loses (both at once: a draw); when turn
 * `max_turns` (40, both seats' turns counted) has ended the game is a draw.
 *
 * ACTIONS: Discrete(135), every concrete move, with an action mask of the legal ones:
 *   0                    end the turn (for a seat not on turn: pass, its only legal move)
 *   1 + 13*i + t         play hand card i (0..7) at target t:
 *                          t = 0 no target (creatures, draw, area, summon)   1 own face
 *                          2 + j own creature j (0..4)    7 enemy face    8 + j enemy creature j
 *   105 + 6*j + k        attack with own creature j (0..4) at k: 0 the enemy face, 1 + m enemy creature m
 * Boards and hands are packed from slot 0 (a card played or a creature dying shifts the later ones).
 *
 * OBSERVATION float32[334], from the observing seat's side ("own" = that seat):
 *   [0, 14)     life own, enemy (/ life); mana own, max mana own, max mana enemy (/ 10); hand size
 *               own, enemy (/ 8); deck size own, enemy (/ deck_size); fatigue own, enemy (/ 10);
 *               turn / max_turns; 1 if this seat is on turn; 1 if it went first
 *   [14, 214)   own hand, 8 slots x 25: present, cost/10, is creature, is spell, attack/10,
 *               health/10, keywords (haste, guard, flying, lifesteal, deathtouch, shield), effect
 *               one-hot (damage, heal, buff, destroy, area, draw, summon, drain, hit face, heal
 *               face), amount a/10, buff health b/10, playable now (some play of it is legal)
 *   [214, 274)  own board, 5 slots x 12: present, attack/10, health/10, max health/10, keywords (6,
 *               shield while it holds), ready to attack now, cost/10
 *   [274, 334)  enemy board, 5 slots x 12, the same (ready: 0)
 *
 * OPPONENTS (`opponent`, a number since env parameters are numbers): 0 random (a uniform legal
 * move), 1 greedy (the legal move whose result scores best by cards_value, one move ahead; it ends
 * its turn when no move improves the score), 2 self: both seats are agents (agents_per_env 2, agent a
 * plays seat a, one shared policy); the seat not on turn has exactly one legal move, pass (0), so
 * strict masks hold. With 0 or 1 the env has one agent, seat 0 (the coin decides whether it goes
 * first), and the opponent's moves are played inside the step (and inside reset when it goes first).
 * Reward: +1 for a win, -1 for a loss, 0 otherwise; the game's end is terminal for every agent (a
 * draw at the turn limit is an outcome of the game, not a truncation). `shaping` (0 by default) adds
 * shaping x the change in (own life - enemy life) / life over each step (lives counted from 0): a
 * potential-based dense reward whose sum over a game is shaping x the final life margin / life.
 *
 * STRICTNESS (`strict` 1, the default). Besides jaxlab's strict masks (an action outside the mask
 * never reaches the env), the engine checks itself: every move it receives must be executable by the
 * rules (cards_move_error, written apart from the mask builder cards_legal_moves); after every move
 * its invariants must hold (cards_invariants); and every mask it writes, for an agent or for its own
 * scripted opponent, must allow at least one move and only executable ones (`strict` 2: exactly the
 * executable ones, a check of all 135 moves per mask, for fuzzing). A violation fails the step (a
 * negative return: CENV_ERR_ENV, Python RuntimeError) with a message naming the game, the turn, the
 * seat and the move (the `error` option); a violation found in reset fails the next step. With
 * `strict` 0 a move the rules forbid is counted in illegal_attempts and ends the turn (or passes)
 * instead, and masks are not checked; broken invariants always fail. `fault` plants a mask bug, for
 * the tests that show these checks fire.
 *
 * STATISTICS per agent-episode: episode_return, episode_length (the agent's steps), win_rate,
 * draw_rate, game_length (turns played), illegal_attempts (0 when strict), first_win_rate (the game was
 * won by the seat that went first, whichever that was). In self play both seats are agents of one
 * policy, so the game is zero-sum between them: episode_return averages to exactly 0 and win_rate to
 * (1 - draw_rate) / 2 whatever the policy plays (seat 0's return alone is only noise around 0, the coin
 * deciding who goes first); first_win_rate, draw_rate and game_length are what change with its play,
 * and `jaxlab eval cards --checkpoint RUN --env.opponent greedy` measures its strength.
 *
 * set_state (a test hook) takes a whole position, see cards_set_state. render draws the position and
 * the events of the last step as a game log (`jaxlab eval cards --render`).
 */
#ifndef CARDS_H
#define CARDS_H

#include <stdarg.h>

#include "core.h"

#define CARDS_HAND 8
#define CARDS_BOARD 5
#define CARDS_DECK_MAX 30
#define CARDS_MANA_MAX 10
#define CARDS_FIRST_HAND 3 /* the second seat draws one more */
#define CARDS_TARGETS 13
#define CARDS_T_NONE 0
#define CARDS_T_OWN_FACE 1
#define CARDS_T_OWN 2 /* + creature slot */
#define CARDS_T_FOE_FACE 7
#define CARDS_T_FOE 8 /* + creature slot */
#define CARDS_ACT_PLAY 1
#define CARDS_ACT_ATTACK (CARDS_ACT_PLAY + CARDS_HAND * CARDS_TARGETS) /* 105 */
#define CARDS_ACTIONS (CARDS_ACT_ATTACK + CARDS_BOARD * (1 + CARDS_BOARD)) /* 135 */
#define CARDS_GLOBAL 14
#define CARDS_CARD_F 25
#define CARDS_SLOT_F 12
#define CARDS_OBS (CARDS_GLOBAL + CARDS_HAND * CARDS_CARD_F + 2 * CARDS_BOARD * CARDS_SLOT_F) /* 334 */
#define CARDS_EVENTS 64           /* the render's ring of recent events */
#define CARDS_TURN_MOVES 200      /* a turn with more moves than this is a broken engine */
#define CARDS_ERROR 460

enum { CARDS_RANDOM = 0, CARDS_GREEDY = 1, CARDS_SELF = 2 };

/* keywords (bits) */
#define CARDS_HASTE 1
#define CARDS_GUARD 2
#define CARDS_FLYING 4
#define CARDS_LIFESTEAL 8
#define CARDS_DEATHTOUCH 16
#define CARDS_SHIELD 32
#define CARDS_KEYWORDS 6
static const char *const cards_keyword_names[CARDS_KEYWORDS] = {"haste", "guard", "flying", "lifesteal",
                                                                "deathtouch", "shield"};

/* effects: of a spell, or a creature's on-play effect (hit face, heal face, draw) */
enum {
    CARDS_FX_NONE = 0,
    CARDS_FX_DAMAGE,    /* a damage to the enemy face or an enemy creature */
    CARDS_FX_HEAL,      /* heal a to the own face or an own creature */
    CARDS_FX_BUFF,      /* an own creature gets +a/+b and the card's keywords */
    CARDS_FX_DESTROY,   /* destroy an enemy creature (shield does not stop it) */
    CARDS_FX_AREA,      /* a damage to every enemy creature */
    CARDS_FX_DRAW,      /* draw a cards */
    CARDS_FX_SUMMON,    /* summon a copies of creature b (as many as fit) */
    CARDS_FX_DRAIN,     /* a damage to the enemy face or an enemy creature; heal the own face by the damage dealt */
    CARDS_FX_HIT_FACE,  /* a damage to the enemy face */
    CARDS_FX_HEAL_FACE, /* heal the own face by a */
    CARDS_FX_COUNT
};

typedef struct {
    const char *name;
    int cost, creature, attack, health, keywords, effect, a, b;
} cards_card;

/* The pool. Tests parse this table (one card per line). */
static const cards_card cards_pool[] = {
    /* name             cost cr atk hp  keywords                          effect               a  b */
    {"Wisp",              0, 1, 1, 1, 0,                                CARDS_FX_NONE,       0, 0},
    {"Squire",            1, 1, 1, 2, 0,                                CARDS_FX_NONE,       0, 0},
    {"Spark Imp",         1, 1, 2, 1, CARDS_HASTE,                      CARDS_FX_NONE,       0, 0},
    {"Shieldbearer",      1, 1, 0, 4, CARDS_GUARD,                      CARDS_FX_NONE,       0, 0},
    {"River Crab",        2, 1, 2, 3, 0,                                CARDS_FX_NONE,       0, 0},
    {"Bat Swarm",         2, 1, 2, 1, CARDS_FLYING,                     CARDS_FX_NONE,       0, 0},
    {"Blood Leech",       2, 1, 1, 3, CARDS_LIFESTEAL,                  CARDS_FX_NONE,       0, 0},
    {"Scout",             2, 1, 3, 2, 0,                                CARDS_FX_NONE,       0, 0},
    {"Viper",             2, 1, 1, 2, CARDS_DEATHTOUCH,                 CARDS_FX_NONE,       0, 0},
    {"Acolyte",           2, 1, 1, 3, 0,                                CARDS_FX_DRAW,       1, 0},
    {"Stone Guard",       3, 1, 2, 5, CARDS_GUARD,                      CARDS_FX_NONE,       0, 0},
    {"Wolf Rider",        3, 1, 3, 1, CARDS_HASTE,                      CARDS_FX_NONE,       0, 0},
    {"Harpy",             3, 1, 3, 2, CARDS_FLYING,                     CARDS_FX_NONE,       0, 0},
    {"Squire Knight",     3, 1, 3, 2, CARDS_SHIELD,                     CARDS_FX_NONE,       0, 0},
    {"Vampire",           3, 1, 2, 4, CARDS_LIFESTEAL,                  CARDS_FX_NONE,       0, 0},
    {"Ogre",              4, 1, 4, 5, 0,                                CARDS_FX_NONE,       0, 0},
    {"Gryphon",           4, 1, 3, 4, CARDS_FLYING,                     CARDS_FX_NONE,       0, 0},
    {"Warden",            4, 1, 3, 6, CARDS_GUARD,                      CARDS_FX_NONE,       0, 0},
    {"Nightstalker",      4, 1, 3, 3, CARDS_DEATHTOUCH,                 CARDS_FX_NONE,       0, 0},
    {"Fire Mage",         4, 1, 3, 3, 0,                                CARDS_FX_HIT_FACE,   2, 0},
    {"Knight",            5, 1, 4, 5, CARDS_GUARD | CARDS_SHIELD,       CARDS_FX_NONE,       0, 0},
    {"Drake",             5, 1, 5, 4, CARDS_FLYING,                     CARDS_FX_NONE,       0, 0},
    {"Troll",             5, 1, 5, 6, 0,                                CARDS_FX_NONE,       0, 0},
    {"Cleric",            5, 1, 3, 5, CARDS_LIFESTEAL,                  CARDS_FX_HEAL_FACE,  4, 0},
    {"Phoenix",           6, 1, 5, 4, CARDS_FLYING | CARDS_HASTE,       CARDS_FX_NONE,       0, 0},
    {"Dragon",            7, 1, 7, 7, CARDS_FLYING,                     CARDS_FX_NONE,       0, 0},
    {"Giant",             8, 1, 8, 8, CARDS_GUARD,                      CARDS_FX_NONE,       0, 0},
    {"Firebolt",          1, 0, 0, 0, 0,                                CARDS_FX_DAMAGE,     2, 0},
    {"Lightning",         3, 0, 0, 0, 0,                                CARDS_FX_DAMAGE,     4, 0},
    {"Fireball",          5, 0, 0, 0, 0,                                CARDS_FX_DAMAGE,     6, 0},
    {"Mend",              1, 0, 0, 0, 0,                                CARDS_FX_HEAL,       4, 0},
    {"Blessing",          2, 0, 0, 0, 0,                                CARDS_FX_BUFF,       2, 2},
    {"Stone Skin",        1, 0, 0, 0, CARDS_GUARD,                      CARDS_FX_BUFF,       0, 3},
    {"Fury",              1, 0, 0, 0, CARDS_HASTE,                      CARDS_FX_BUFF,       2, 0},
    {"Assassinate",       4, 0, 0, 0, 0,                                CARDS_FX_DESTROY,    0, 0},
    {"Flame Wave",        3, 0, 0, 0, 0,                                CARDS_FX_AREA,       2, 0},
    {"Insight",           2, 0, 0, 0, 0,                                CARDS_FX_DRAW,       2, 0},
    {"Call Militia",      3, 0, 0, 0, 0,                                CARDS_FX_SUMMON,     2, 1},
    {"Drain Life",        3, 0, 0, 0, 0,                                CARDS_FX_DRAIN,      3, 0},
};
#define CARDS_POOL ((int)(sizeof(cards_pool) / sizeof(cards_pool[0])))

/* The mana curve: relative weight of each cost when a deck is built. */
static const int cards_curve[9] = {2, 5, 5, 5, 4, 3, 2, 1, 1};

typedef struct {
    float episode_return;
    float episode_length;
    float win_rate;
    float draw_rate;
    float game_length;
    float illegal_attempts;
    float first_win_rate; /* won by the seat that went first: the same for both seats of a game */
} CardsLog;

typedef struct {
    uint8_t card, keywords, attacked, fresh; /* fresh: played this turn */
    int16_t attack, health, max_health;
} CardsCreature;

typedef struct {
    int16_t life, mana, max_mana, fatigue;
    int16_t deck_count, drawn, hand_count, board_count; /* drawn + deck_count == deck_size */
    uint8_t deck[CARDS_DECK_MAX];                        /* deck[deck_count - 1] is drawn next */
    uint8_t hand[CARDS_HAND];
    CardsCreature board[CARDS_BOARD];
} CardsPlayer;

/* A whole position: everything the rules read (no RNG: only deck building and opponents draw). */
typedef struct {
    CardsPlayer p[2];
    int16_t seat;   /* on turn */
    int16_t first;  /* went first */
    int16_t turn;   /* 1-based, both seats' turns counted */
    int16_t over, winner; /* winner: 0, 1, or -1 for a draw */
    int16_t max_life, max_turns, deck_size;
} CardsGame;

/* What happened, for the render's game log. target: a CARDS_T_* code from `seat`'s side. */
enum { CARDS_EV_TURN = 1, CARDS_EV_DRAW, CARDS_EV_BURN, CARDS_EV_FATIGUE, CARDS_EV_PLAY, CARDS_EV_ATTACK,
       CARDS_EV_DEATH, CARDS_EV_OVER, CARDS_EV_GAME };
typedef struct {
    uint8_t kind, seat, card, target, target_card, pad;
    int16_t amount, life;
} CardsEvent;

typedef struct {
    int count; /* events so far (games go on counting: a render after a game's end shows it); event i
                  is at ring[i % CARDS_EVENTS] */
    CardsEvent ring[CARDS_EVENTS];
} CardsEvents;

typedef struct {
    float *observations;
    int32_t *actions;
    float *rewards;
    uint8_t *terminals;
    uint8_t *truncations;
    uint8_t *action_mask;
    CardsLog log;
    /* config */
    int opponent, agents, strict, fault;
    float shaping;
    /* state */
    CardsGame g;
    uint32_t games;         /* games started by this env, for messages */
    int32_t moves[2];       /* steps of each agent in this game */
    int32_t illegal[2];     /* moves the rules forbid, per agent (strict 0) */
    float returns[2];       /* each agent's rewards summed over this game (episode_return) */
    int32_t event_mark;     /* events.count when the last step began */
    CardsEvents events;
    int32_t failed;         /* 1: `error` holds why; every step fails until a reset */
    char error[CARDS_ERROR];
    cenv_rng rng;
} Cards;

static const cenv_param cards_params[] = {
    {"opponent", 0, 0, 2, 1, "0 random, 1 greedy, 2 self (both seats are agents: 2 per env, one policy)"},
    {"deck_size", 20, 10, CARDS_DECK_MAX, 1, "cards per deck, built from the pool along a mana curve every game"},
    {"life", 20, 1, 99, 1, "starting (and maximum) life"},
    {"max_turns", 40, 2, 200, 1, "turns (both seats' together) after which the game is a draw"},
    {"strict", 1, 0, 2, 1, "1: a forbidden move, a broken invariant or a mask allowing a forbidden move fails "
                           "the step; 2: also a mask forbidding an allowed move; 0: a forbidden move counts in "
                           "illegal_attempts and ends the turn"},
    {"fault", 0, 0, 2, 1, "test hook: 1 plants a mask bug allowing a forbidden move, 2 one allowing no move"},
    {"shaping", 0, 0, 1, 0, "weight of a dense reward: the change of (own life - enemy life) / life in each step"},
};
static const char *const cards_log_names[] = {"episode_return", "episode_length", "win_rate", "draw_rate",
                                              "game_length", "illegal_attempts", "first_win_rate"};

static void cards_spaces(const double *params, cenv_spaces *out) {
    out->agents_per_env = (int)params[0] == CARDS_SELF ? 2 : 1;
    out->obs_ndim = 1;
    out->obs_shape[0] = CARDS_OBS;
    out->obs_dtype = CENV_DTYPE_FLOAT32;
    out->action_kind = CENV_ACTION_DISCRETE;
    out->action_ndim = 1;
    out->action_nvec[0] = CARDS_ACTIONS;
    out->has_mask = 1;
}

static void cards_init(Cards *env, const double *params) {
    env->opponent = (int)params[0];
    env->agents = env->opponent == CARDS_SELF ? 2 : 1;
    env->g.deck_size = (int16_t)params[1];
    env->g.max_life = (int16_t)params[2];
    env->g.max_turns = (int16_t)params[3];
    env->strict = (int)params[4];
    env->fault = (int)params[5];
    env->shaping = (float)params[6];
}

/* ---- text ---- */

typedef struct {
    char *out;
    int size, used; /* used: what was written or would have been (snprintf-style) */
} cards_text;

__attribute__((format(printf, 2, 3))) static void cards_put(cards_text *t, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    int room = t->size - t->used;
    int n = vsnprintf(room > 0 ? t->out + t->used : NULL, room > 0 ? (size_t)room : 0, fmt, args);
    va_end(args);
    if (n > 0) t->used += n;
}

static void cards_put_creature(cards_text *t, const CardsCreature *c) {
    cards_put(t, "%s %d/%d", cards_pool[c->card].name, c->attack, c->health);
    for (int k = 0; k < CARDS_KEYWORDS; k++)
        if (c->keywords & (1 << k)) cards_put(t, " %s", cards_keyword_names[k]);
}

/* "play hand card 2 (Fireball) at enemy creature 1 (Harpy)", for messages. */
static void cards_put_move(cards_text *t, const CardsGame *g, int seat, int move) {
    const CardsPlayer *me = &g->p[seat], *foe = &g->p[1 - seat];
    if (move == 0) {
        cards_put(t, "%s", seat == g->seat && !g->over ? "end turn" : "pass");
        return;
    }
    if (move < CARDS_ACT_ATTACK) {
        int i = (move - CARDS_ACT_PLAY) / CARDS_TARGETS, target = (move - CARDS_ACT_PLAY) % CARDS_TARGETS;
        cards_put(t, "play hand card %d (%s) ", i, i < me->hand_count ? cards_pool[me->hand[i]].name : "empty");
        if (target == CARDS_T_NONE) {
            cards_put(t, "with no target");
        } else if (target == CARDS_T_OWN_FACE || target == CARDS_T_FOE_FACE) {
            cards_put(t, "at the %s face", target == CARDS_T_OWN_FACE ? "own" : "enemy");
        } else {
            const CardsPlayer *side = target < CARDS_T_FOE_FACE ? me : foe;
            int j = target < CARDS_T_FOE_FACE ? target - CARDS_T_OWN : target - CARDS_T_FOE;
            cards_put(t, "at %s creature %d (%s)", side == me ? "own" : "enemy", j,
                      j < side->board_count ? cards_pool[side->board[j].card].name : "empty");
        }
        return;
    }
    int j = (move - CARDS_ACT_ATTACK) / (1 + CARDS_BOARD), k = (move - CARDS_ACT_ATTACK) % (1 + CARDS_BOARD);
    cards_put(t, "attack with creature %d (%s) at ", j,
              j < me->board_count ? cards_pool[me->board[j].card].name : "empty");
    if (k == 0) {
        cards_put(t, "the enemy face");
    } else {
        cards_put(t, "enemy creature %d (%s)", k - 1,
                  k - 1 < foe->board_count ? cards_pool[foe->board[k - 1].card].name : "empty");
    }
}

/* ---- the rules ---- */

static int cards_ready(const CardsCreature *c) {
    return c->attack > 0 && !c->attacked && (!c->fresh || (c->keywords & CARDS_HASTE));
}

/* Slots (bits) of the foe's creatures that block `attacker`: its guards, only the flying ones for a
 * flying attacker. */
static int cards_blockers(const CardsPlayer *foe, const CardsCreature *attacker) {
    int bits = 0;
    for (int k = 0; k < foe->board_count; k++) {
        const CardsCreature *d = &foe->board[k];
        if ((d->keywords & CARDS_GUARD) && (!(attacker->keywords & CARDS_FLYING) || (d->keywords & CARDS_FLYING)))
            bits |= 1 << k;
    }
    return bits;
}

/* The mask builder: the legal moves of `seat`, enumerated from its cards and creatures. */
static void cards_legal_moves(const CardsGame *g, int seat, uint8_t *mask) {
    memset(mask, 0, CARDS_ACTIONS);
    mask[0] = 1; /* end turn, or pass */
    if (g->over || seat != g->seat) return;
    const CardsPlayer *me = &g->p[seat], *foe = &g->p[1 - seat];
    for (int i = 0; i < me->hand_count; i++) {
        const cards_card *c = &cards_pool[me->hand[i]];
        if (c->cost > me->mana) continue;
        uint8_t *row = mask + CARDS_ACT_PLAY + i * CARDS_TARGETS;
        int own_faces = 0, own_creatures = 0, foe_faces = 0, foe_creatures = 0, untargeted = 0;
        if (c->creature) {
            untargeted = me->board_count < CARDS_BOARD;
        } else if (c->effect == CARDS_FX_DAMAGE || c->effect == CARDS_FX_DRAIN) {
            foe_faces = foe_creatures = 1;
        } else if (c->effect == CARDS_FX_HEAL) {
            own_faces = own_creatures = 1;
        } else if (c->effect == CARDS_FX_BUFF) {
            own_creatures = 1;
        } else if (c->effect == CARDS_FX_DESTROY) {
            foe_creatures = 1;
        } else if (c->effect == CARDS_FX_SUMMON) {
            untargeted = me->board_count < CARDS_BOARD;
        } else {
            untargeted = 1; /* area, draw */
        }
        row[CARDS_T_NONE] = (uint8_t)untargeted;
        row[CARDS_T_OWN_FACE] = (uint8_t)own_faces;
        row[CARDS_T_FOE_FACE] = (uint8_t)foe_faces;
        for (int j = 0; j < me->board_count; j++) row[CARDS_T_OWN + j] = (uint8_t)own_creatures;
        for (int j = 0; j < foe->board_count; j++) row[CARDS_T_FOE + j] = (uint8_t)foe_creatures;
    }
    for (int j = 0; j < me->board_count; j++) {
        const CardsCreature *a = &me->board[j];
        if (!cards_ready(a)) continue;
        uint8_t *row = mask + CARDS_ACT_ATTACK + j * (1 + CARDS_BOARD);
        int blockers = cards_blockers(foe, a);
        row[0] = blockers == 0;
        for (int k = 0; k < foe->board_count; k++) row[1 + k] = blockers == 0 || ((blockers >> k) & 1);
    }
}

/* Writes the reason a move is forbidden (when `why` is not NULL) and returns 1. */
__attribute__((format(printf, 3, 4))) static int cards_say(char *why, int size, const char *fmt, ...) {
    if (why == NULL) return 1;
    va_list args;
    va_start(args, fmt);
    vsnprintf(why, (size_t)size, fmt, args);
    va_end(args);
    return 1;
}

/* The rules' own check of one move, written apart from the mask builder: 0 when `seat` may make
 * `move` now, else 1 with the reason in `why` (NULL: no reason wanted). */
static int cards_move_error(const CardsGame *g, int seat, int move, char *why, int size) {
    if (move < 0 || move >= CARDS_ACTIONS)
        return cards_say(why, size, "there is no move %d (moves are 0..%d)", move, CARDS_ACTIONS - 1);
    if (move == 0) return 0;
    if (g->over) return cards_say(why, size, "the game is over: the only move is pass (0)");
    if (seat != g->seat)
        return cards_say(why, size, "seat %d is not on turn (seat %d is): its only legal move is pass (0)", seat,
                         g->seat);
    const CardsPlayer *me = &g->p[seat], *foe = &g->p[1 - seat];
    if (move < CARDS_ACT_ATTACK) {
        int i = (move - CARDS_ACT_PLAY) / CARDS_TARGETS, t = (move - CARDS_ACT_PLAY) % CARDS_TARGETS;
        if (i >= me->hand_count)
            return cards_say(why, size, "hand slot %d is empty (the hand holds %d cards)", i, me->hand_count);
        const cards_card *c = &cards_pool[me->hand[i]];
        if (c->cost > me->mana)
            return cards_say(why, size, "%s costs %d mana and the seat has %d", c->name, c->cost, me->mana);
        int foe_creature = t >= CARDS_T_FOE && t - CARDS_T_FOE < foe->board_count;
        int own_creature = t >= CARDS_T_OWN && t < CARDS_T_FOE_FACE && t - CARDS_T_OWN < me->board_count;
        if (c->creature || c->effect == CARDS_FX_SUMMON) {
            if (t != CARDS_T_NONE)
                return cards_say(why, size, "%s takes no target (target 0), not target %d", c->name, t);
            if (me->board_count >= CARDS_BOARD)
                return cards_say(why, size, "the board is full (%d creatures)", CARDS_BOARD);
            return 0;
        }
        switch (c->effect) {
        case CARDS_FX_DAMAGE:
        case CARDS_FX_DRAIN:
            if (t == CARDS_T_FOE_FACE || foe_creature) return 0;
            return cards_say(why, size,
                             "%s needs the enemy face (target 7) or an enemy creature (8..%d), not target %d",
                             c->name, CARDS_T_FOE + foe->board_count - 1, t);
        case CARDS_FX_HEAL:
            if (t == CARDS_T_OWN_FACE || own_creature) return 0;
            return cards_say(why, size, "%s needs the own face (target 1) or an own creature (2..%d), not target %d",
                             c->name, CARDS_T_OWN + me->board_count - 1, t);
        case CARDS_FX_BUFF:
            if (own_creature) return 0;
            return cards_say(why, size, "%s needs an own creature (targets 2..%d), not target %d", c->name,
                             CARDS_T_OWN + me->board_count - 1, t);
        case CARDS_FX_DESTROY:
            if (foe_creature) return 0;
            return cards_say(why, size, "%s needs an enemy creature (targets 8..%d), not target %d", c->name,
                             CARDS_T_FOE + foe->board_count - 1, t);
        default:
            if (t == CARDS_T_NONE) return 0;
            return cards_say(why, size, "%s takes no target (target 0), not target %d", c->name, t);
        }
    }
    int j = (move - CARDS_ACT_ATTACK) / (1 + CARDS_BOARD), k = (move - CARDS_ACT_ATTACK) % (1 + CARDS_BOARD);
    if (j >= me->board_count)
        return cards_say(why, size, "there is no creature in slot %d (the board holds %d)", j, me->board_count);
    const CardsCreature *a = &me->board[j];
    const char *name = cards_pool[a->card].name;
    if (a->attack <= 0) return cards_say(why, size, "%s has no attack", name);
    if (a->attacked) return cards_say(why, size, "%s has attacked this turn already", name);
    if (a->fresh && !(a->keywords & CARDS_HASTE))
        return cards_say(why, size, "%s was played this turn and has no haste", name);
    if (k > 0 && k - 1 >= foe->board_count)
        return cards_say(why, size, "there is no enemy creature in slot %d (the enemy board holds %d)", k - 1,
                         foe->board_count);
    int flying = (a->keywords & CARDS_FLYING) != 0;
    for (int m = 0; m < foe->board_count; m++) {
        const CardsCreature *d = &foe->board[m];
        int blocks = (d->keywords & CARDS_GUARD) && (!flying || (d->keywords & CARDS_FLYING));
        if (!blocks) continue;
        if (k == 0) return cards_say(why, size, "%s %s past the guard %s: it must attack a guard", name,
                                     flying ? "cannot fly" : "cannot walk", cards_pool[d->card].name);
        const CardsCreature *target = &foe->board[k - 1];
        int target_blocks = (target->keywords & CARDS_GUARD) && (!flying || (target->keywords & CARDS_FLYING));
        if (!target_blocks) return cards_say(why, size, "%s must attack a guard (%s) before %s", name,
                                             cards_pool[d->card].name, cards_pool[target->card].name);
        return 0;
    }
    return 0;
}

static void cards_event(CardsEvents *ev, int kind, int seat, int card, int target, int target_card, int amount,
                        int life) {
    if (ev == NULL) return;
    CardsEvent *e = &ev->ring[ev->count % CARDS_EVENTS];
    e->kind = (uint8_t)kind;
    e->seat = (uint8_t)seat;
    e->card = (uint8_t)card;
    e->target = (uint8_t)target;
    e->target_card = (uint8_t)target_card;
    e->pad = 0;
    e->amount = (int16_t)amount;
    e->life = (int16_t)life;
    ev->count++;
}

static void cards_heal_face(CardsGame *g, int seat, int amount) {
    CardsPlayer *p = &g->p[seat];
    p->life = (int16_t)(p->life + amount > g->max_life ? g->max_life : p->life + amount);
}

/* Damage to a creature: returns the damage dealt (0 when its shield absorbed it). */
static int cards_hurt(CardsCreature *c, int amount, int deathtouch) {
    if (amount <= 0) return 0;
    if (c->keywords & CARDS_SHIELD) {
        c->keywords &= (uint8_t)~CARDS_SHIELD;
        return 0;
    }
    c->health = (int16_t)(c->health - amount);
    if (deathtouch && c->health > 0) c->health = 0;
    return amount;
}

static void cards_check_over(CardsGame *g, CardsEvents *ev) {
    if (g->over) return;
    int dead0 = g->p[0].life <= 0, dead1 = g->p[1].life <= 0;
    if (!dead0 && !dead1) return;
    g->over = 1;
    g->winner = (int16_t)(dead0 && dead1 ? -1 : dead0 ? 1 : 0);
    cards_event(ev, CARDS_EV_OVER, g->winner < 0 ? 0 : g->winner, 0, 0, 0, g->winner, 0);
}

static void cards_remove_dead(CardsGame *g, CardsEvents *ev) {
    for (int s = 0; s < 2; s++) {
        CardsPlayer *p = &g->p[s];
        int kept = 0;
        for (int j = 0; j < p->board_count; j++) {
            if (p->board[j].health > 0) {
                p->board[kept++] = p->board[j];
            } else {
                cards_event(ev, CARDS_EV_DEATH, s, p->board[j].card, 0, 0, 0, 0);
            }
        }
        p->board_count = (int16_t)kept;
    }
}

static void cards_draw(CardsGame *g, int seat, CardsEvents *ev) {
    CardsPlayer *p = &g->p[seat];
    if (p->deck_count == 0) {
        p->fatigue++;
        p->life = (int16_t)(p->life - p->fatigue);
        cards_event(ev, CARDS_EV_FATIGUE, seat, 0, 0, 0, p->fatigue, p->life);
        return;
    }
    int card = p->deck[--p->deck_count];
    p->drawn++;
    if (p->hand_count < CARDS_HAND) {
        p->hand[p->hand_count++] = (uint8_t)card;
        cards_event(ev, CARDS_EV_DRAW, seat, card, 0, 0, 0, 0);
    } else {
        cards_event(ev, CARDS_EV_BURN, seat, card, 0, 0, 0, 0);
    }
}

static void cards_summon(CardsPlayer *p, int card) {
    const cards_card *c = &cards_pool[card];
    CardsCreature *m = &p->board[p->board_count++];
    m->card = (uint8_t)card;
    m->keywords = (uint8_t)c->keywords;
    m->attacked = 0;
    m->fresh = 1;
    m->attack = (int16_t)c->attack;
    m->health = m->max_health = (int16_t)c->health;
}

static void cards_start_turn(CardsGame *g, int seat, CardsEvents *ev) {
    if (g->turn >= g->max_turns) { /* the last turn has ended: a draw */
        g->over = 1;
        g->winner = -1;
        cards_event(ev, CARDS_EV_OVER, 0, 0, 0, 0, -1, 0);
        return;
    }
    g->seat = (int16_t)seat;
    g->turn++;
    CardsPlayer *p = &g->p[seat];
    if (p->max_mana < CARDS_MANA_MAX) p->max_mana++;
    p->mana = p->max_mana;
    for (int j = 0; j < p->board_count; j++) p->board[j].attacked = p->board[j].fresh = 0;
    cards_event(ev, CARDS_EV_TURN, seat, 0, 0, 0, g->turn, p->life);
    cards_draw(g, seat, ev);
    cards_check_over(g, ev);
}

/* Makes `move` of `seat` (executable: cards_move_error said so). */
static void cards_apply(CardsGame *g, int seat, int move, CardsEvents *ev) {
    if (move == 0) {
        if (seat == g->seat && !g->over) cards_start_turn(g, 1 - seat, ev);
        return;
    }
    CardsPlayer *me = &g->p[seat], *foe = &g->p[1 - seat];
    if (move < CARDS_ACT_ATTACK) {
        int i = (move - CARDS_ACT_PLAY) / CARDS_TARGETS, t = (move - CARDS_ACT_PLAY) % CARDS_TARGETS;
        int card = me->hand[i];
        const cards_card *c = &cards_pool[card];
        me->mana = (int16_t)(me->mana - c->cost);
        for (int k = i + 1; k < me->hand_count; k++) me->hand[k - 1] = me->hand[k];
        me->hand_count--;
        CardsCreature *own = t >= CARDS_T_OWN && t < CARDS_T_FOE_FACE ? &me->board[t - CARDS_T_OWN] : NULL;
        CardsCreature *enemy = t >= CARDS_T_FOE ? &foe->board[t - CARDS_T_FOE] : NULL;
        int target_card = own ? own->card : enemy ? enemy->card : 0;
        cards_event(ev, CARDS_EV_PLAY, seat, card, t, target_card, 0, 0);
        if (c->creature) cards_summon(me, card);
        int dealt = 0;
        switch (c->effect) {
        case CARDS_FX_DAMAGE:
        case CARDS_FX_DRAIN:
            if (enemy != NULL) {
                dealt = cards_hurt(enemy, c->a, 0);
            } else {
                foe->life = (int16_t)(foe->life - c->a);
                dealt = c->a;
            }
            if (c->effect == CARDS_FX_DRAIN) cards_heal_face(g, seat, dealt);
            break;
        case CARDS_FX_HEAL:
            if (own != NULL) {
                own->health = (int16_t)(own->health + c->a > own->max_health ? own->max_health : own->health + c->a);
            } else {
                cards_heal_face(g, seat, c->a);
            }
            break;
        case CARDS_FX_BUFF:
            own->attack = (int16_t)(own->attack + c->a);
            own->health = (int16_t)(own->health + c->b);
            own->max_health = (int16_t)(own->max_health + c->b);
            own->keywords |= (uint8_t)c->keywords;
            break;
        case CARDS_FX_DESTROY:
            enemy->health = 0;
            break;
        case CARDS_FX_AREA:
            for (int k = 0; k < foe->board_count; k++) cards_hurt(&foe->board[k], c->a, 0);
            break;
        case CARDS_FX_DRAW:
            for (int k = 0; k < c->a; k++) cards_draw(g, seat, ev);
            break;
        case CARDS_FX_SUMMON:
            for (int k = 0; k < c->a && me->board_count < CARDS_BOARD; k++) cards_summon(me, c->b);
            break;
        case CARDS_FX_HIT_FACE:
            foe->life = (int16_t)(foe->life - c->a);
            break;
        case CARDS_FX_HEAL_FACE:
            cards_heal_face(g, seat, c->a);
            break;
        default:
            break;
        }
    } else {
        int j = (move - CARDS_ACT_ATTACK) / (1 + CARDS_BOARD), k = (move - CARDS_ACT_ATTACK) % (1 + CARDS_BOARD);
        CardsCreature *a = &me->board[j];
        a->attacked = 1;
        int lifesteal = (a->keywords & CARDS_LIFESTEAL) != 0;
        if (k == 0) {
            foe->life = (int16_t)(foe->life - a->attack);
            if (lifesteal) cards_heal_face(g, seat, a->attack);
            cards_event(ev, CARDS_EV_ATTACK, seat, a->card, CARDS_T_FOE_FACE, 0, a->attack, foe->life);
        } else {
            CardsCreature *d = &foe->board[k - 1];
            int to_defender = cards_hurt(d, a->attack, (a->keywords & CARDS_DEATHTOUCH) != 0);
            int to_attacker = cards_hurt(a, d->attack, (d->keywords & CARDS_DEATHTOUCH) != 0);
            if (lifesteal) cards_heal_face(g, seat, to_defender);
            if (d->keywords & CARDS_LIFESTEAL) cards_heal_face(g, 1 - seat, to_attacker);
            cards_event(ev, CARDS_EV_ATTACK, seat, a->card, CARDS_T_FOE + k - 1, d->card, to_defender, to_attacker);
        }
    }
    cards_remove_dead(g, ev);
    cards_check_over(g, ev);
}

/* The engine's invariants: 0, or 1 with what broke in `why`. */
static int cards_invariants(const CardsGame *g, char *why, int size) {
    for (int s = 0; s < 2; s++) {
        const CardsPlayer *p = &g->p[s];
        if (p->life > g->max_life)
            return cards_say(why, size, "seat %d has %d life, above the maximum %d", s, p->life, g->max_life);
        if (!g->over && p->life <= 0)
            return cards_say(why, size, "seat %d has %d life but the game goes on", s, p->life);
        if (p->max_mana < 0 || p->max_mana > CARDS_MANA_MAX || p->mana < 0 || p->mana > p->max_mana)
            return cards_say(why, size, "seat %d has %d of %d mana (at most %d)", s, p->mana, p->max_mana,
                             CARDS_MANA_MAX);
        if (p->fatigue < 0) return cards_say(why, size, "seat %d has fatigue %d", s, p->fatigue);
        if (p->deck_count < 0 || p->drawn < 0 || p->deck_count + p->drawn != g->deck_size)
            return cards_say(why, size, "seat %d has %d cards in its deck and drew %d, of a deck of %d", s,
                             p->deck_count, p->drawn, g->deck_size);
        for (int k = 0; k < p->deck_count; k++)
            if (p->deck[k] >= CARDS_POOL)
                return cards_say(why, size, "seat %d deck card %d is %d, not a card", s, k, p->deck[k]);
        if (p->hand_count < 0 || p->hand_count > CARDS_HAND)
            return cards_say(why, size, "seat %d holds %d cards", s, p->hand_count);
        for (int k = 0; k < p->hand_count; k++)
            if (p->hand[k] >= CARDS_POOL)
                return cards_say(why, size, "seat %d hand card %d is %d, not a card", s, k, p->hand[k]);
        if (p->board_count < 0 || p->board_count > CARDS_BOARD)
            return cards_say(why, size, "seat %d has %d creatures", s, p->board_count);
        for (int j = 0; j < p->board_count; j++) {
            const CardsCreature *c = &p->board[j];
            if (c->card >= CARDS_POOL || !cards_pool[c->card].creature)
                return cards_say(why, size, "seat %d creature %d is card %d, not a creature", s, j, c->card);
            if (c->health <= 0 || c->health > c->max_health || c->attack < 0 || c->attacked > 1 || c->fresh > 1 ||
                c->keywords >= 64)
                return cards_say(why, size,
                                 "seat %d creature %d (%s) is %d/%d of max %d, attacked %d, fresh %d, keywords %d",
                                 s, j, cards_pool[c->card].name, c->attack, c->health, c->max_health, c->attacked,
                                 c->fresh, c->keywords);
        }
    }
    if (!g->over && (g->seat < 0 || g->seat > 1 || g->turn < 1 || g->turn > g->max_turns))
        return cards_say(why, size, "seat %d is on turn %d of %d", g->seat, g->turn, g->max_turns);
    if (g->over && (g->winner < -1 || g->winner > 1)) return cards_say(why, size, "the winner is %d", g->winner);
    return 0;
}

/* ---- the greedy opponent ---- */

static float cards_creature_value(const CardsCreature *c) {
    float v = 1.5f * (float)c->attack + (float)c->health;
    if (c->keywords & CARDS_GUARD) v += 1.0f;
    if (c->keywords & CARDS_FLYING) v += 1.5f;
    if (c->keywords & CARDS_LIFESTEAL) v += 1.0f;
    if (c->keywords & CARDS_DEATHTOUCH) v += 2.0f;
    if (c->keywords & CARDS_SHIELD) v += 1.5f;
    return v;
}

/* How good the position is for `seat`: life difference, creatures, cards in hand; a won game is
 * worth 10,000. */
static float cards_value(const CardsGame *g, int seat) {
    if (g->over) return g->winner == seat ? 1e4f : g->winner < 0 ? 0.0f : -1e4f;
    const CardsPlayer *me = &g->p[seat], *foe = &g->p[1 - seat];
    float v = (float)(me->life - foe->life) + 0.5f * (float)(me->hand_count - foe->hand_count);
    for (int j = 0; j < me->board_count; j++) v += cards_creature_value(&me->board[j]);
    for (int j = 0; j < foe->board_count; j++) v -= cards_creature_value(&foe->board[j]);
    return v;
}

/* The legal move whose result scores best, or 0 (end turn) when none improves on the position. */
static int cards_greedy_move(const CardsGame *g, int seat, const uint8_t *mask) {
    float best = cards_value(g, seat) + 1e-3f;
    int choice = 0;
    for (int m = 1; m < CARDS_ACTIONS; m++) {
        if (!mask[m]) continue;
        CardsGame next = *g;
        cards_apply(&next, seat, m, NULL);
        float v = cards_value(&next, seat);
        if (v > best) {
            best = v;
            choice = m;
        }
    }
    return choice;
}

static int cards_random_move(cenv_rng *rng, const uint8_t *mask) {
    int n = 0;
    for (int m = 0; m < CARDS_ACTIONS; m++) n += mask[m];
    int pick = cenv_rng_below(rng, n);
    for (int m = 0; m < CARDS_ACTIONS; m++) {
        if (mask[m] && pick-- == 0) return m;
    }
    return 0;
}

/* ---- the env ---- */

static const char *cards_who(const Cards *env, int seat) {
    if (env->agents == 2) return seat == 0 ? "agent 0" : "agent 1";
    if (seat == 0) return "agent 0";
    return env->opponent == CARDS_GREEDY ? "the greedy opponent" : "the random opponent";
}

/* Records a failure: "game G, turn T, seat S (who), move M = what: why"; returns -1. move < 0: no move. */
static int cards_fail(Cards *env, int seat, int move, const char *why) {
    cards_text t = {env->error, (int)sizeof(env->error), 0};
    cards_put(&t, "game %u, turn %d, seat %d (%s)", env->games, env->g.turn, seat, cards_who(env, seat));
    if (move >= 0) {
        cards_put(&t, ", move %d = ", move);
        cards_put_move(&t, &env->g, seat, move);
    }
    cards_put(&t, ": %s", why);
    env->failed = 1;
    return -1;
}

/* The legal moves of `seat` into `row` (with the planted bug of `fault`) and, when strict, the proof
 * that there is one and that each is executable (strict 2: that they are exactly the executable
 * ones). 0, or -1 after recording the failure. */
static int cards_mask(Cards *env, int seat, uint8_t *row, int planted) {
    cards_legal_moves(&env->g, seat, row);
    if (planted && env->fault == 1 && seat == env->g.seat) row[CARDS_ACTIONS - 1 - CARDS_BOARD] = 1;
    if (planted && env->fault == 2) memset(row, 0, CARDS_ACTIONS);
    if (!env->strict) return 0;
    const char *none = "the action mask allows no move (end turn, or pass, is always legal)";
    int any = 0;
    if (env->strict >= 2) {
        for (int m = 0; m < CARDS_ACTIONS; m++) any |= row[m];
        if (!any) return cards_fail(env, seat, -1, none);
    }
    char why[200], message[320];
    for (int m = 0; m < CARDS_ACTIONS; m++) {
        if (!row[m] && env->strict < 2) continue; /* strict 1 proves the allowed moves; 2 every move */
        any |= row[m];
        int forbidden = cards_move_error(&env->g, seat, m, NULL, 0);
        if (row[m] && forbidden) {
            cards_move_error(&env->g, seat, m, why, (int)sizeof(why));
            snprintf(message, sizeof(message), "the action mask allows it but the rules forbid it: %s "
                     "(cards_legal_moves and cards_move_error disagree)", why);
            return cards_fail(env, seat, m, message);
        }
        if (!row[m] && !forbidden)
            return cards_fail(env, seat, m, "the action mask forbids it but the rules allow it "
                                            "(cards_legal_moves and cards_move_error disagree)");
    }
    return any ? 0 : cards_fail(env, seat, -1, none);
}

static int cards_check(Cards *env, int seat, int move) {
    char why[300];
    if (cards_invariants(&env->g, why, (int)sizeof(why))) {
        char message[340];
        snprintf(message, sizeof(message), "after it, an invariant broke: %s", why);
        return cards_fail(env, seat, move, message);
    }
    return 0;
}

/* Plays the scripted opponent (seat 1) until seat 0 is on turn or the game is over. */
static int cards_run_opponent(Cards *env) {
    CardsGame *g = &env->g;
    uint8_t row[CARDS_ACTIONS];
    int moves = 0;
    while (env->agents == 1 && !g->over && g->seat == 1) {
        if (cards_mask(env, 1, row, 0) < 0) return -1;
        int move = env->opponent == CARDS_GREEDY ? cards_greedy_move(g, 1, row) : cards_random_move(&env->rng, row);
        int turn = g->turn;
        cards_apply(g, 1, move, &env->events);
        if (cards_check(env, 1, move) < 0) return -1;
        moves = g->turn == turn ? moves + 1 : 0;
        if (moves > CARDS_TURN_MOVES) return cards_fail(env, 1, move, "the turn did not end after 200 moves");
    }
    return 0;
}

static void cards_observe(Cards *env, int agent, int seat, const uint8_t *row) {
    const CardsGame *g = &env->g;
    const CardsPlayer *me = &g->p[seat], *foe = &g->p[1 - seat];
    float *o = env->observations + (size_t)agent * CARDS_OBS;
    memset(o, 0, sizeof(float) * CARDS_OBS);
    o[0] = (float)me->life / (float)g->max_life;
    o[1] = (float)foe->life / (float)g->max_life;
    o[2] = (float)me->mana / 10.0f;
    o[3] = (float)me->max_mana / 10.0f;
    o[4] = (float)foe->max_mana / 10.0f;
    o[5] = (float)me->hand_count / (float)CARDS_HAND;
    o[6] = (float)foe->hand_count / (float)CARDS_HAND;
    o[7] = (float)me->deck_count / (float)g->deck_size;
    o[8] = (float)foe->deck_count / (float)g->deck_size;
    o[9] = (float)me->fatigue / 10.0f;
    o[10] = (float)foe->fatigue / 10.0f;
    o[11] = (float)g->turn / (float)g->max_turns;
    o[12] = (float)(!g->over && g->seat == seat);
    o[13] = (float)(g->first == seat);
    for (int i = 0; i < me->hand_count; i++) {
        float *f = o + CARDS_GLOBAL + i * CARDS_CARD_F;
        const cards_card *c = &cards_pool[me->hand[i]];
        f[0] = 1.0f;
        f[1] = (float)c->cost / 10.0f;
        f[2] = (float)c->creature;
        f[3] = (float)!c->creature;
        f[4] = (float)(c->creature ? c->attack : c->effect == CARDS_FX_BUFF ? c->a : 0) / 10.0f;
        f[5] = (float)(c->creature ? c->health : c->effect == CARDS_FX_BUFF ? c->b : 0) / 10.0f;
        for (int k = 0; k < CARDS_KEYWORDS; k++) f[6 + k] = (float)((c->keywords >> k) & 1);
        if (c->effect != CARDS_FX_NONE) f[12 + c->effect - 1] = 1.0f;
        f[22] = (float)c->a / 10.0f;
        f[23] = (float)(c->effect == CARDS_FX_BUFF ? c->b : 0) / 10.0f;
        int playable = 0;
        for (int t = 0; t < CARDS_TARGETS; t++) playable |= row[CARDS_ACT_PLAY + i * CARDS_TARGETS + t];
        f[24] = (float)playable;
    }
    for (int side = 0; side < 2; side++) {
        const CardsPlayer *p = side == 0 ? me : foe;
        for (int j = 0; j < p->board_count; j++) {
            float *f = o + CARDS_GLOBAL + CARDS_HAND * CARDS_CARD_F + (side * CARDS_BOARD + j) * CARDS_SLOT_F;
            const CardsCreature *c = &p->board[j];
            f[0] = 1.0f;
            f[1] = (float)c->attack / 10.0f;
            f[2] = (float)c->health / 10.0f;
            f[3] = (float)c->max_health / 10.0f;
            for (int k = 0; k < CARDS_KEYWORDS; k++) f[4 + k] = (float)((c->keywords >> k) & 1);
            f[10] = (float)(side == 0 && g->seat == seat && cards_ready(c));
            f[11] = (float)cards_pool[c->card].cost / 10.0f;
        }
    }
}

/* Every agent's mask row (checked) and observation. 0, or -1 after recording the failure. */
static int cards_write(Cards *env) {
    for (int a = 0; a < env->agents; a++) {
        uint8_t *row = env->action_mask + (size_t)a * CARDS_ACTIONS;
        if (cards_mask(env, a, row, 1) < 0) return -1;
        cards_observe(env, a, a, row);
    }
    return 0;
}

/* A deck of deck_size cards: a cost by the curve (among costs the pool has), then a card of that
 * cost, at most 2 copies of each. */
static void cards_build_deck(Cards *env, CardsPlayer *p) {
    int copies[CARDS_POOL];
    memset(copies, 0, sizeof(copies));
    int weights[9], total = 0;
    for (int cost = 0; cost < 9; cost++) {
        int n = 0;
        for (int c = 0; c < CARDS_POOL; c++) n += cards_pool[c].cost == cost;
        weights[cost] = n > 0 ? cards_curve[cost] : 0;
        total += weights[cost];
    }
    for (int k = 0; k < env->g.deck_size; k++) {
        int card = -1;
        for (int tries = 0; tries < 64 && card < 0; tries++) {
            int w = cenv_rng_below(&env->rng, total), cost = 0;
            while (w >= weights[cost]) w -= weights[cost++];
            int n = 0;
            for (int c = 0; c < CARDS_POOL; c++) n += cards_pool[c].cost == cost;
            int pick = cenv_rng_below(&env->rng, n);
            for (int c = 0; c < CARDS_POOL; c++) {
                if (cards_pool[c].cost == cost && pick-- == 0) {
                    if (copies[c] < 2) card = c;
                    break;
                }
            }
        }
        for (int c = 0; card < 0 && c < CARDS_POOL; c++) /* unreachable with this pool; kept for safety */
            if (copies[c] < 2) card = c;
        copies[card]++;
        p->deck[k] = (uint8_t)card;
    }
    p->deck_count = env->g.deck_size;
}

static void cards_reset(Cards *env) {
    CardsGame *g = &env->g;
    int after_end = g->over; /* the vectorized layer resets after a game's end */
    memset(g->p, 0, sizeof(g->p));
    for (int s = 0; s < 2; s++) {
        g->p[s].life = g->max_life;
        cards_build_deck(env, &g->p[s]);
    }
    g->first = (int16_t)cenv_rng_below(&env->rng, 2);
    g->seat = g->first;
    g->turn = 0;
    g->over = 0;
    g->winner = -1;
    for (int k = 0; k < CARDS_FIRST_HAND; k++) cards_draw(g, g->first, NULL);
    for (int k = 0; k < CARDS_FIRST_HAND + 1; k++) cards_draw(g, 1 - g->first, NULL);
    env->games++;
    env->moves[0] = env->moves[1] = 0;
    env->illegal[0] = env->illegal[1] = 0;
    env->returns[0] = env->returns[1] = 0.0f;
    /* after a game's end the render goes on showing its last step; a reset mid-game starts afresh */
    if (!after_end || env->events.count > 1000000000) env->event_mark = env->events.count;
    if (env->events.count > 1000000000) env->events.count = env->event_mark = 0;
    env->failed = 0;
    env->error[0] = '\0';
    cards_event(&env->events, CARDS_EV_GAME, g->first, 0, 0, 0, (int)(env->games % 30000), 0);
    cards_start_turn(g, g->first, &env->events);
    if (cards_check(env, g->first, -1) == 0 && cards_run_opponent(env) == 0) {
        cards_write(env);
    } else {
        /* the failure is recorded: the next step reports it. Leave well-formed rows behind. */
        for (int a = 0; a < env->agents; a++) {
            memset(env->action_mask + (size_t)a * CARDS_ACTIONS, 0, CARDS_ACTIONS);
            env->action_mask[(size_t)a * CARDS_ACTIONS] = 1;
            memset(env->observations + (size_t)a * CARDS_OBS, 0, sizeof(float) * CARDS_OBS);
        }
    }
}

/* (own life - enemy life) / life, each life counted from 0: the potential of the `shaping` reward. */
static float cards_margin(const CardsGame *g, int seat) {
    int own = g->p[seat].life > 0 ? g->p[seat].life : 0, foe = g->p[1 - seat].life > 0 ? g->p[1 - seat].life : 0;
    return (float)(own - foe) / (float)g->max_life;
}

static int cards_step(Cards *env) {
    if (env->failed) return -1; /* found broken in reset (or set_state): report it now */
    CardsGame *g = &env->g;
    env->event_mark = env->events.count;
    int chosen[2] = {0, 0};
    float margin[2] = {cards_margin(g, 0), cards_margin(g, 1)};
    char why[240];
    for (int a = 0; a < env->agents; a++) {
        int move = env->actions[a];
        env->moves[a]++;
        if (cards_move_error(g, a, move, why, (int)sizeof(why))) {
            if (env->strict) {
                char message[280];
                snprintf(message, sizeof(message), "the rules forbid it: %s", why);
                return cards_fail(env, a, move, message);
            }
            env->illegal[a]++;
            move = 0; /* lenient: a forbidden move ends the turn (or passes) */
        }
        chosen[a] = move;
    }
    if (!g->over) {
        int seat = g->seat, move = seat < env->agents ? chosen[seat] : 0;
        if (seat < env->agents) {
            cards_apply(g, seat, move, &env->events);
            if (cards_check(env, seat, move) < 0) return -1;
        }
        if (cards_run_opponent(env) < 0) return -1;
    }
    int ended = 0;
    memset(&env->log, 0, sizeof(env->log));
    for (int a = 0; a < env->agents; a++) {
        float reward = !g->over || g->winner < 0 ? 0.0f : g->winner == a ? 1.0f : -1.0f;
        reward += env->shaping * (cards_margin(g, a) - margin[a]);
        env->rewards[a] = reward;
        env->returns[a] += reward;
        env->terminals[a] = (uint8_t)g->over;
        env->truncations[a] = 0;
        if (!g->over) continue;
        ended++;
        env->log.episode_return += env->returns[a]; /* the whole game's, shaping included */
        env->log.episode_length += (float)env->moves[a];
        env->log.win_rate += (float)(g->winner == a);
        env->log.draw_rate += (float)(g->winner < 0);
        env->log.game_length += (float)g->turn;
        env->log.illegal_attempts += (float)env->illegal[a];
        env->log.first_win_rate += (float)(g->winner == g->first);
    }
    if (cards_write(env) < 0) return -1;
    return ended;
}

/* Test hook: a whole position, as numbers (every count followed by that many entries):
 *   seat on turn, turn (1..max_turns), first seat,
 *   then for seat 0 and seat 1: life, mana, max_mana, fatigue,
 *     deck_count, its cards (bottom first: the last is drawn next), hand_count, its cards,
 *     board_count, per creature: card, attack, health, max_health, keywords, attacked, fresh.
 * Cards are indices into cards_pool. The game goes on from there (moves and events of the game so far
 * are kept; the cards drawn are deck_size - deck_count). A state that breaks a rule is refused. */
static int cards_set_state(Cards *env, const double *state, int n) {
    CardsGame g = env->g;
    int at = 0;
#define CARDS_NEXT(lo, hi, dst)                                                          \
    do {                                                                                 \
        if (at >= n || !(state[at] >= (lo) && state[at] <= (hi)) || state[at] != (double)(int)state[at]) return -1; \
        (dst) = (int16_t)state[at++];                                                    \
    } while (0)
    int16_t value;
    CARDS_NEXT(0, 1, g.seat);
    CARDS_NEXT(1, g.max_turns, g.turn);
    CARDS_NEXT(0, 1, g.first);
    for (int s = 0; s < 2; s++) {
        CardsPlayer *p = &g.p[s];
        memset(p, 0, sizeof(*p));
        CARDS_NEXT(1, g.max_life, p->life);
        CARDS_NEXT(0, CARDS_MANA_MAX, p->mana);
        CARDS_NEXT(p->mana, CARDS_MANA_MAX, p->max_mana);
        CARDS_NEXT(0, 1000, p->fatigue);
        CARDS_NEXT(0, g.deck_size, p->deck_count);
        for (int k = 0; k < p->deck_count; k++) {
            CARDS_NEXT(0, CARDS_POOL - 1, value);
            p->deck[k] = (uint8_t)value;
        }
        p->drawn = (int16_t)(g.deck_size - p->deck_count);
        CARDS_NEXT(0, CARDS_HAND, p->hand_count);
        for (int k = 0; k < p->hand_count; k++) {
            CARDS_NEXT(0, CARDS_POOL - 1, value);
            p->hand[k] = (uint8_t)value;
        }
        CARDS_NEXT(0, CARDS_BOARD, p->board_count);
        for (int j = 0; j < p->board_count; j++) {
            CardsCreature *c = &p->board[j];
            CARDS_NEXT(0, CARDS_POOL - 1, value);
            c->card = (uint8_t)value;
            CARDS_NEXT(0, 999, c->attack);
            CARDS_NEXT(1, 999, c->health);
            CARDS_NEXT(c->health, 999, c->max_health);
            CARDS_NEXT(0, 63, value);
            c->keywords = (uint8_t)value;
            CARDS_NEXT(0, 1, value);
            c->attacked = (uint8_t)value;
            CARDS_NEXT(0, 1, value);
            c->fresh = (uint8_t)value;
            if (!cards_pool[c->card].creature) return -1;
        }
    }
#undef CARDS_NEXT
    if (at != n) return -1;
    g.over = 0;
    g.winner = -1;
    char why[300];
    if (cards_invariants(&g, why, (int)sizeof(why))) return -1;
    env->g = g;
    env->events.count = env->event_mark = 0;
    env->failed = 0;
    env->error[0] = '\0';
    cards_write(env); /* a failure (a planted fault) is reported by the next step */
    return 0;
}

static int cards_error(const Cards *env, char *out, int size) {
    return snprintf(out, (size_t)size, "%s", env->failed ? env->error : "no failure recorded");
}

/* ---- render: the position from seat 0's side ("you") and the events of the last step ---- */

/* " at foe", " at foe's Harpy", " on yourself", " on its Scout", or nothing, from the player's side. */
static void cards_put_target(cards_text *t, const CardsEvent *e) {
    int you = e->seat == 0;
    if (e->target == CARDS_T_OWN_FACE) cards_put(t, " on %s", you ? "yourself" : "itself");
    if (e->target >= CARDS_T_OWN && e->target < CARDS_T_FOE_FACE)
        cards_put(t, " on %s %s", you ? "your" : "its", cards_pool[e->target_card].name);
    if (e->target == CARDS_T_FOE_FACE) cards_put(t, " at %s", you ? "foe" : "you");
    if (e->target >= CARDS_T_FOE) cards_put(t, " at %s %s", you ? "foe's" : "your", cards_pool[e->target_card].name);
}

static int cards_render(const Cards *env, char *out, int size) {
    cards_text t = {out, size, 0};
    const CardsGame *g = &env->g;
    static const char *const side[2] = {"you", "foe"};
    cards_put(&t, "game %u, turn %d/%d, %s%s\n", env->games, g->turn, g->max_turns,
              g->over ? "over" : g->seat == 0 ? "your move" : "foe's move",
              env->agents == 2 ? " (you: seat 0 = agent 0, foe: seat 1 = agent 1)" : "");
    int first = env->event_mark, last = env->events.count;
    if (last - first > CARDS_EVENTS) {
        cards_put(&t, "    ... %d earlier events\n", last - first - CARDS_EVENTS);
        first = last - CARDS_EVENTS;
    }
    for (int i = first; i < last; i++) {
        const CardsEvent *e = &env->events.ring[i % CARDS_EVENTS];
        const char *who = side[e->seat], *other = side[1 - e->seat];
        const char *name = cards_pool[e->card].name;
        switch (e->kind) {
        case CARDS_EV_TURN:
            cards_put(&t, "  -- turn %d: %s turn --\n", e->amount, e->seat == 0 ? "your" : "foe's");
            break;
        case CARDS_EV_DRAW:
            if (e->seat == 0) cards_put(&t, "    you draw %s\n", name);
            break;
        case CARDS_EV_BURN:
            cards_put(&t, "    %s draw%s %s into a full hand: it burns\n", who, e->seat ? "s" : "", name);
            break;
        case CARDS_EV_FATIGUE:
            cards_put(&t, "    %s %s out of cards: fatigue %d, %d life\n", who, e->seat ? "is" : "are", e->amount,
                      e->life);
            break;
        case CARDS_EV_PLAY:
            cards_put(&t, "    %s play%s %s (%d mana", who, e->seat ? "s" : "", name, cards_pool[e->card].cost);
            if (cards_pool[e->card].creature)
                cards_put(&t, ", %d/%d", cards_pool[e->card].attack, cards_pool[e->card].health);
            cards_put(&t, ")");
            cards_put_target(&t, e);
            cards_put(&t, "\n");
            break;
        case CARDS_EV_ATTACK:
            if (e->target == CARDS_T_FOE_FACE) {
                cards_put(&t, "    %s attack%s %s with %s: %d damage, %s at %d life\n", who, e->seat ? "s" : "", other,
                          name, e->amount, other, e->life);
            } else {
                cards_put(&t, "    %s attack%s %s %s with %s: %d damage dealt, %d taken\n", who, e->seat ? "s" : "",
                          e->seat ? "your" : "foe's", cards_pool[e->target_card].name, name, e->amount, e->life);
            }
            break;
        case CARDS_EV_DEATH:
            cards_put(&t, "    %s %s dies\n", e->seat == 0 ? "your" : "foe's", name);
            break;
        case CARDS_EV_GAME:
            cards_put(&t, "  == game %d: %s first ==\n", e->amount, e->seat == 0 ? "you go" : "foe goes");
            break;
        case CARDS_EV_OVER:
            cards_put(&t, "  == %s ==\n", e->amount < 0 ? "a draw" : e->amount == 0 ? "you win" : "foe wins");
            break;
        default:
            break;
        }
    }
    for (int s = 0; s < 2; s++) {
        const CardsPlayer *p = &g->p[s];
        cards_put(&t, "  %s: %d life, mana %d/%d, deck %d, hand %d%s", side[s], p->life, p->mana, p->max_mana,
                  p->deck_count, p->hand_count, s == 0 ? ":" : "");
        for (int i = 0; s == 0 && i < p->hand_count; i++)
            cards_put(&t, "%s %s (%d)", i ? "," : "", cards_pool[p->hand[i]].name, cards_pool[p->hand[i]].cost);
        cards_put(&t, "\n    board:");
        if (p->board_count == 0) cards_put(&t, " empty");
        for (int j = 0; j < p->board_count; j++) {
            cards_put(&t, " [");
            cards_put_creature(&t, &p->board[j]);
            cards_put(&t, "%s]", s == g->seat && !g->over && cards_ready(&p->board[j]) ? " *" : "");
        }
        cards_put(&t, "\n");
    }
    cards_put(&t, "  %s", g->over ? "game over" : g->seat == 0 ? "you act:" : "you pass:");
    return t.used;
}

CENV_ENV(cards, Cards, CardsLog,
         "Two-player trading card game: 39-card pool, strict action masks, random/greedy/self opponents",
         mask, render, set_state, error)

#endif
