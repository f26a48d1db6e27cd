"""The card game of examples/envs/cards.h, built and stepped as a user's env (found by name on the env
path): its rules by value on hand-set positions (set_state), the masks against the rules, the
self-play seat layout, determinism, exact saved states, the strict checks and their messages, the
opponents, the statistics and the render."""

import re
from pathlib import Path

import numpy as np
import pytest

import jaxlab
from jaxlab.env import spaces_of

HEADER = Path(__file__).resolve().parent.parent / "examples" / "envs" / "cards.h"

# The pool, parsed from the header's table: name -> (id, cost, creature, attack, health).
_ROWS = re.findall(r'^\s*\{"([^"]+)",\s*(\d+),\s*([01]),\s*(\d+),\s*(\d+),', HEADER.read_text(), re.MULTILINE)
POOL = {name: (i, int(cost), int(cr), int(atk), int(hp)) for i, (name, cost, cr, atk, hp) in enumerate(_ROWS)}
ID = {name: row[0] for name, row in POOL.items()}
HASTE, GUARD, FLYING, LIFESTEAL, DEATHTOUCH, SHIELD = 1, 2, 4, 8, 16, 32

END = 0
NONE, OWN_FACE, FOE_FACE = 0, 1, 7
ACTIONS, OBS = 135, 334


def own(j):
    return 2 + j


def foe(j):
    return 8 + j


def play(i, target=NONE):
    """The action that plays hand card i at a target (NONE, OWN_FACE, own(j), FOE_FACE, foe(j))."""
    return 1 + 13 * i + target


def attack(j, k=None):
    """The action that attacks with own creature j at the enemy face (k None) or enemy creature k."""
    return 105 + 6 * j + (0 if k is None else 1 + k)


def creature(name, attack=None, health=None, max_health=None, keywords=None, attacked=0, fresh=0):
    """A board creature for position(): the card's own stats unless given."""
    _, _, is_creature, atk, hp = POOL[name]
    assert is_creature, name
    kw = _keywords_of(name) if keywords is None else keywords
    health = hp if health is None else health
    return [ID[name], atk if attack is None else attack, health, max(health, hp) if max_health is None else max_health,
            kw, attacked, fresh]


def _keywords_of(name):
    line = re.search(rf'\{{"{name}",[^\n]*', HEADER.read_text()).group(0)
    words = line.split(",")[5].strip()
    value = 0
    for word, bit in (("HASTE", HASTE), ("GUARD", GUARD), ("FLYING", FLYING), ("LIFESTEAL", LIFESTEAL),
                      ("DEATHTOUCH", DEATHTOUCH), ("SHIELD", SHIELD)):
        value |= bit if f"CARDS_{word}" in words else 0
    return value


def side(life=20, mana=5, max_mana=None, fatigue=0, deck=("Squire",) * 10, hand=(), board=()):
    """One seat of a position(): deck bottom first (its last card is drawn next)."""
    values = [life, mana, mana if max_mana is None else max_mana, fatigue, len(deck), *[ID[c] for c in deck],
              len(hand), *[ID[c] for c in hand], len(board)]
    for c in board:
        values += c
    return values


def position(seat=0, turn=3, first=0, you=None, them=None):
    """The set_state vector of cards.h (cards_set_state documents it)."""
    return [seat, turn, first, *(you or side()), *(them or side())]


def make(num_envs=1, **params):
    return jaxlab.make("cards", num_envs=num_envs, **params)


def at(env, state, index=0):
    env.reset(seed=1)
    env.set_state(index, state)
    return env


def view(obs):
    """The observation of one agent as named numbers (the layout documented in cards.h)."""
    o = np.asarray(obs)
    hand = o[14:214].reshape(8, 25)
    boards = o[214:334].reshape(2, 5, 12)
    return {"life": round(o[0] * 20), "foe_life": round(o[1] * 20), "mana": round(o[2] * 10),
            "max_mana": round(o[3] * 10), "foe_max_mana": round(o[4] * 10), "hand": round(o[5] * 8),
            "foe_hand": round(o[6] * 8), "deck": o[7], "foe_deck": o[8], "fatigue": round(o[9] * 10),
            "foe_fatigue": round(o[10] * 10), "turn": o[11], "on_turn": o[12], "first": o[13],
            "hand_cards": hand, "board": [[(round(s[1] * 10), round(s[2] * 10)) for s in b if s[0]] for b in boards],
            "ready": [bool(s[10]) for s in boards[0] if s[0]], "boards": boards}


def legal(env, agent=0):
    return set(np.flatnonzero(env.action_mask[agent]).tolist())


def step(env, *actions):
    return env.step(np.asarray(actions, np.int32))


# ---- the pool and the spaces ----

def test_the_pool_has_at_least_30_distinct_cards_with_every_keyword_spells_and_a_curve():
    assert len(POOL) == len(_ROWS) >= 30 and len(set(POOL)) == len(_ROWS)
    creatures = [n for n, r in POOL.items() if r[2]]
    spells = [n for n, r in POOL.items() if not r[2]]
    assert len(creatures) >= 20 and len(spells) >= 10
    assert all(any(_keywords_of(n) & bit for n in creatures) for bit in (HASTE, GUARD, FLYING, LIFESTEAL, DEATHTOUCH, SHIELD))
    costs = sorted({r[1] for r in POOL.values()})
    assert costs[0] == 0 and costs[-1] >= 7


def test_spaces_depend_on_the_opponent():
    for opponent, agents in ((0, 1), (1, 1), (2, 2)):
        spaces = spaces_of("cards", opponent=opponent)
        assert spaces.agents_per_env == agents and spaces.has_mask and spaces.mask_width == ACTIONS
        assert spaces.observation_space.shape == (OBS,) and spaces.action_space.n == ACTIONS


# ---- the rules, by value ----

def test_opening_hands_and_mana_growing_each_turn_to_ten():
    with make(opponent=2, max_turns=40) as env:
        env.reset(seed=3)
        first = int(view(env.observations[1])["first"])  # seat 1 went first?
        seen = []
        for _ in range(26):
            seat = 0 if view(env.observations[0])["on_turn"] else 1
            v = view(env.observations[seat])
            seen.append((round(v["turn"] * 40), seat, v["mana"], v["max_mana"]))
            step(env, END, END)
    starter = 1 if first else 0
    assert seen[0][1] == starter
    for turn, seat, mana, max_mana in seen:
        assert seat == (starter if turn % 2 == 1 else 1 - starter)
        assert mana == max_mana == min((turn + 1) // 2, 10)


def test_the_first_seat_draws_3_plus_1_and_the_second_4_plus_1():
    with make(opponent=2) as env:
        for seed in range(5):
            env.reset(seed=seed)
            on = 0 if view(env.observations[0])["on_turn"] else 1
            assert view(env.observations[on])["hand"] == 4 and view(env.observations[1 - on])["hand"] == 4
            step(env, END, END)
            assert view(env.observations[1 - on])["hand"] == 5  # 4 dealt, then its first draw


def test_playing_a_creature_pays_mana_and_only_haste_attacks_at_once():
    state = position(you=side(mana=5, hand=["Wolf Rider", "Scout"]), them=side(life=20))
    with at(make(opponent=2), state) as env:
        assert {play(0), play(1)} <= legal(env) and attack(0) not in legal(env)
        step(env, play(0), END)                        # Wolf Rider, 3 mana, haste
        v = view(env.observations[0])
        assert v["mana"] == 2 and v["board"][0] == [(3, 1)] and v["ready"] == [True]
        assert attack(0) in legal(env)
        step(env, play(0), END)                        # Scout (now hand card 0), 2 mana, no haste
        v = view(env.observations[0])
        assert v["mana"] == 0 and v["board"][0] == [(3, 1), (3, 2)] and v["ready"] == [True, False]
        assert attack(0) in legal(env) and attack(1) not in legal(env)
        step(env, attack(0), END)
        assert view(env.observations[0])["foe_life"] == 17 and attack(0) not in legal(env)  # once per turn


def test_a_card_costing_more_than_the_mana_is_not_legal():
    with at(make(opponent=2), position(you=side(mana=2, max_mana=4, hand=["Ogre", "Firebolt"]))) as env:
        assert not any(a in legal(env) for a in range(play(0), play(0) + 13))
        assert legal(env) == {END, play(1, FOE_FACE)}


def test_guard_forces_the_attack_and_the_enemy_face_is_safe_behind_it():
    state = position(you=side(board=[creature("Scout"), creature("Harpy")]),
                     them=side(board=[creature("River Crab"), creature("Stone Guard"), creature("Bat Swarm")]))
    with at(make(opponent=2), state) as env:
        assert {a for a in legal(env) if 105 + 0 <= a < 105 + 6} == {attack(0, 1)}      # the walker: the guard only
        assert {a for a in legal(env) if 111 <= a < 117} == {attack(1), attack(1, 0), attack(1, 1), attack(1, 2)}
        step(env, attack(0, 1), END)                                             # Scout 3/2 into Stone Guard 2/5
        v = view(env.observations[0])
        assert v["board"][0] == [(3, 2)] and v["board"][1] == [(2, 3), (2, 2), (2, 1)]  # Scout died (2 dmg on 2 hp)


def test_flying_passes_walking_guards_but_not_flying_ones():
    flying_guard = creature("Gryphon", keywords=FLYING | GUARD)
    state = position(you=side(board=[creature("Harpy"), creature("Scout")]),
                     them=side(board=[creature("Stone Guard"), flying_guard]))
    with at(make(opponent=2), state) as env:
        assert {a for a in legal(env) if 105 <= a < 111} == {attack(0, 1)}             # flyer: the flying guard
        assert {a for a in legal(env) if 111 <= a < 117} == {attack(1, 0), attack(1, 1)}  # walker: either guard
    state = position(you=side(board=[creature("Harpy")]), them=side(board=[creature("Stone Guard"), creature("Ogre")]))
    with at(make(opponent=2), state) as env:
        assert {a for a in legal(env) if 105 <= a < 111} == {attack(0), attack(0, 0), attack(0, 1)}
        step(env, attack(0), END)
        assert view(env.observations[0])["foe_life"] == 17


def test_lifesteal_heals_its_owner_up_to_the_starting_life():
    state = position(you=side(life=10, board=[creature("Vampire")]), them=side(life=20, board=[]))
    with at(make(opponent=2), state) as env:
        step(env, attack(0), END)
        v = view(env.observations[0])
        assert (v["life"], v["foe_life"]) == (12, 18)
    state = position(you=side(life=19, board=[creature("Vampire")]))
    with at(make(opponent=2), state) as env:
        step(env, attack(0), END)
        assert view(env.observations[0])["life"] == 20
    # a defender with lifesteal heals its owner by the damage it deals back
    state = position(you=side(board=[creature("Ogre")]), them=side(life=10, board=[creature("Blood Leech")]))
    with at(make(opponent=2), state) as env:
        step(env, attack(0, 0), END)
        v = view(env.observations[0])
        assert v["foe_life"] == 11 and v["board"] == [[(4, 4)], []]


def test_deathtouch_kills_and_shield_absorbs_the_first_damage():
    state = position(you=side(board=[creature("Viper"), creature("Scout")]),
                     them=side(board=[creature("Troll"), creature("Squire Knight")]))
    with at(make(opponent=2), state) as env:
        step(env, attack(0, 0), END)              # Viper 1/2 into Troll 5/6: both die
        assert view(env.observations[0])["board"] == [[(3, 2)], [(3, 2)]]
        step(env, attack(0, 0), END)              # Scout 3/2 into Squire Knight 3/2 shield: the shield takes it
        v = view(env.observations[0])
        assert v["board"] == [[], [(3, 2)]] and v["boards"][1, 0, 4 + 5] == 0.0  # shield gone, Scout dead


def test_spells_by_value():
    you = side(life=12, mana=10, hand=["Firebolt", "Lightning", "Mend", "Blessing", "Flame Wave"],
               board=[creature("Squire")])
    them = side(life=20, board=[creature("Ogre"), creature("Scout"), creature("Wisp")])
    with at(make(opponent=2), position(you=you, them=them)) as env:
        step(env, play(0, foe(1)), END)           # Firebolt: 2 at Scout 3/2 -> dies
        v = view(env.observations[0])
        assert v["board"][1] == [(4, 5), (1, 1)] and v["mana"] == 9
        step(env, play(0, FOE_FACE), END)         # Lightning: 4 to the face
        assert view(env.observations[0])["foe_life"] == 16
        step(env, play(0, OWN_FACE), END)         # Mend: +4 life
        assert view(env.observations[0])["life"] == 16
        step(env, play(0, own(0)), END)           # Blessing: Squire 1/2 -> 3/4
        assert view(env.observations[0])["board"][0] == [(3, 4)]
        step(env, play(0), END)                   # Flame Wave: 2 to every enemy creature: Ogre 4/3, Wisp dies
        assert view(env.observations[0])["board"][1] == [(4, 3)]
        assert view(env.observations[0])["mana"] == 0
    you = side(life=12, mana=10, hand=["Assassinate", "Drain Life", "Call Militia"])
    them = side(board=[creature("Knight")])
    with at(make(opponent=2), position(you=you, them=them)) as env:
        step(env, play(0, foe(0)), END)           # Assassinate: destroys, shield or not
        assert view(env.observations[0])["board"][1] == []
        step(env, play(0, FOE_FACE), END)         # Drain Life: 3 to the face, 3 life back
        v = view(env.observations[0])
        assert (v["life"], v["foe_life"]) == (15, 17)
        step(env, play(0), END)                   # Call Militia: two Squires 1/2
        assert view(env.observations[0])["board"][0] == [(1, 2), (1, 2)]
    with at(make(opponent=2), position(you=side(mana=2, hand=["Insight"], deck=["Wisp"] * 5))) as env:
        step(env, play(0), END)                   # Insight: draw 2
        v = view(env.observations[0])
        assert v["hand"] == 2 and v["deck"] == pytest.approx(3 / 20) and v["mana"] == 0


def test_spell_targets_follow_the_effect():
    you = side(mana=10, hand=["Firebolt", "Mend", "Blessing", "Assassinate", "Insight"], board=[creature("Squire")])
    them = side(board=[creature("Ogre"), creature("Stone Guard")])
    with at(make(opponent=2), position(you=you, them=them)) as env:
        moves = legal(env)
    assert {a for a in moves if play(0) <= a < play(1)} == {play(0, FOE_FACE), play(0, foe(0)), play(0, foe(1))}
    assert {a for a in moves if play(1) <= a < play(2)} == {play(1, OWN_FACE), play(1, own(0))}
    assert {a for a in moves if play(2) <= a < play(3)} == {play(2, own(0))}
    assert {a for a in moves if play(3) <= a < play(4)} == {play(3, foe(0)), play(3, foe(1))}
    assert {a for a in moves if play(4) <= a < play(5)} == {play(4)}


def test_a_full_board_takes_no_creature_and_a_full_hand_burns_the_draw():
    full = [creature("Squire")] * 5
    with at(make(opponent=2), position(you=side(hand=["Wisp", "Call Militia"], board=full))) as env:
        assert not ({play(0), play(1)} & legal(env))
    hand = ["Wisp"] * 8
    state = position(seat=1, you=side(hand=hand, deck=["Ogre", "Ogre", "Ogre"]), them=side())
    with at(make(opponent=2), state) as env:
        step(env, END, END)                       # seat 0's turn starts: it draws into a full hand
        v = view(env.observations[0])
        assert v["hand"] == 8 and v["deck"] == pytest.approx(2 / 20)
        assert all(v["hand_cards"][:, 1] == 0.0)  # still eight Wisps (cost 0)


def test_fatigue_grows_each_empty_draw_until_a_seat_dies():
    state = position(seat=0, you=side(life=20), them=side(life=5, deck=[]))
    with at(make(opponent=2), state) as env:
        lives = []
        for _ in range(2):
            step(env, END, END)                   # seat 1 draws from an empty deck
            v = view(env.observations[0])
            lives.append((v["foe_life"], v["foe_fatigue"]))
            step(env, END, END)                   # back to seat 0 (its deck is not empty)
        assert lives == [(4, 1), (2, 2)]
        _, rewards, terminals, truncations, info = step(env, END, END)   # fatigue 3: 2 - 3 < 0
    assert terminals.tolist() == [True, True] and not truncations.any()
    assert rewards.tolist() == [1.0, -1.0]
    assert info["episodes"] == 2 and info["win_rate"] == 0.5 and info["draw_rate"] == 0.0


def test_a_seat_at_0_life_loses_and_the_statistics_count_it():
    state = position(you=side(board=[creature("Scout")]), them=side(life=3))
    with at(make(opponent=0), state) as env:
        _, rewards, terminals, truncations, info = step(env, attack(0))
        assert rewards.tolist() == [1.0] and terminals.tolist() == [True] and not truncations.any()
        assert info == {"episodes": 1, "episode_return": 1.0, "episode_length": 1.0, "win_rate": 1.0,
                        "draw_rate": 0.0, "game_length": 3.0, "illegal_attempts": 0.0, "first_win_rate": 1.0}
        assert view(env.final_observations[0])["foe_life"] == 0 and view(env.observations[0])["turn"] <= 2 / 40


def test_the_turn_limit_is_a_draw():
    state = position(turn=6, you=side(life=20), them=side(life=1))
    with at(make(opponent=2, max_turns=6), state) as env:
        _, rewards, terminals, truncations, info = step(env, END, END)
    assert terminals.tolist() == [True, True] and not truncations.any() and rewards.tolist() == [0.0, 0.0]
    assert info["draw_rate"] == 1.0 and info["win_rate"] == 0.0 and info["game_length"] == 6.0
    assert info["first_win_rate"] == 0.0  # a draw: no seat won


def test_self_play_logs_whether_the_seat_that_went_first_won():
    """In self play both seats are agents of one policy: averaged over them, episode_return is 0 and
    win_rate 1/2 after every decisive game, whatever the policy plays, so the logged return was always 0.
    first_win_rate says whether the seat that went first won (the same for both seats of a game), which
    does depend on the play."""
    for first, turn, expected in ((0, 3, 1.0), (1, 4, 0.0)):
        state = position(turn=turn, first=first, you=side(board=[creature("Scout")]), them=side(life=3))
        with at(make(opponent=2), state) as env:
            _, rewards, terminals, _, info = step(env, attack(0), END)   # seat 0 wins
        assert rewards.tolist() == [1.0, -1.0] and terminals.tolist() == [True, True]
        assert info["episodes"] == 2 and info["episode_return"] == 0.0 and info["win_rate"] == 0.5
        assert info["first_win_rate"] == expected, (first, info)


def test_the_observation_layout():
    you = side(life=15, mana=3, max_mana=7, fatigue=2, deck=["Wisp"] * 4,
               hand=["Harpy", "Blessing"], board=[creature("Knight", attacked=1), creature("Phoenix", fresh=1)])
    them = side(life=9, mana=1, max_mana=6, deck=["Wisp"] * 10, hand=["Wisp"] * 3, board=[creature("Viper")])
    with at(make(opponent=2, max_turns=40), position(seat=0, turn=13, first=1, you=you, them=them)) as env:
        o = env.observations[0]
        assert o[:14].tolist() == pytest.approx([15 / 20, 9 / 20, 0.3, 0.7, 0.6, 2 / 8, 3 / 8, 4 / 20, 10 / 20,
                                                 0.2, 0.0, 13 / 40, 1.0, 0.0])
        harpy, blessing = o[14:39], o[39:64]
        assert harpy.tolist() == pytest.approx([1, 0.3, 1, 0, 0.3, 0.2, 0, 0, 1, 0, 0, 0] + [0] * 10 + [0, 0, 1])
        effect = [0] * 10
        effect[2] = 1  # buff
        assert blessing.tolist() == pytest.approx([1, 0.2, 0, 1, 0.2, 0.2, 0, 0, 0, 0, 0, 0] + effect + [0.2, 0.2, 1])
        assert not o[64:214].any()
        knight, phoenix = o[214:226], o[226:238]
        assert knight.tolist() == pytest.approx([1, 0.4, 0.5, 0.5, 0, 1, 0, 0, 0, 1, 0, 0.5])
        assert phoenix.tolist() == pytest.approx([1, 0.5, 0.4, 0.4, 1, 0, 1, 0, 0, 0, 1, 0.6])
        assert o[274:286].tolist() == pytest.approx([1, 0.1, 0.2, 0.2, 0, 0, 0, 0, 1, 0, 0, 0.2])
        assert not o[238:274].any() and not o[286:].any()
        seat1 = env.observations[1]
        assert seat1[12] == 0.0 and seat1[13] == 1.0 and seat1[0] == pytest.approx(9 / 20)


# ---- masks against the rules ----

def executable(env, agent, action):
    """Whether the engine executes ``action`` of ``agent`` now (strict engine, mask check off): steps it
    from a saved state and restores the state."""
    saved = env.save_state()
    actions = np.zeros(env.num_agents, np.int32)
    actions[agent] = action
    try:
        env.step(actions)
        ok = True
    except RuntimeError as err:
        assert "the rules forbid it" in str(err)
        ok = False
    env.load_state(saved)
    return ok


def test_the_mask_is_exactly_the_set_of_executable_moves():
    rng = np.random.default_rng(0)
    checked = 0
    with make(num_envs=1, opponent=2, seed=5, mask_check="off") as env:
        env.reset()
        for t in range(400):
            if t % 13 == 0:
                for agent in (0, 1):
                    mask = env.action_mask[agent].copy()
                    run = [executable(env, agent, a) for a in range(ACTIONS)]
                    assert run == mask.tolist(), (t, agent)
                    checked += 1
            actions = [rng.choice(np.flatnonzero(env.action_mask[a])) for a in (0, 1)]
            step(env, *actions)
    assert checked >= 60


def test_in_self_play_the_seat_not_on_turn_has_one_legal_move_pass():
    rng = np.random.default_rng(1)
    with make(num_envs=8, opponent=2, seed=2) as env:
        env.reset()
        games = 0
        for _ in range(600):
            on = env.observations[:, 12].reshape(8, 2)
            assert (on.sum(axis=1) == 1).all()                     # exactly one seat of each game on turn
            waiting = env.action_mask[env.observations[:, 12] == 0]
            assert (waiting.sum(axis=1) == 1).all() and waiting[:, 0].all()
            actions = np.array([rng.choice(np.flatnonzero(row)) for row in env.action_mask], np.int32)
            _, _, terminals, _, info = env.step(actions)
            assert (terminals.reshape(8, 2)[:, 0] == terminals.reshape(8, 2)[:, 1]).all()
            games += info.get("episodes", 0) // 2
    assert games > 10


# ---- determinism and saved states ----

def random_play(seed, steps, num_threads=1, opponent=0, action_seed=0):
    rng = np.random.default_rng(action_seed)
    out = []
    with make(num_envs=6, seed=seed, num_threads=num_threads, opponent=opponent) as env:
        env.reset()
        for _ in range(steps):
            noise = rng.random(env.action_mask.shape) * env.action_mask
            obs, rewards, *_ = env.step(noise.argmax(axis=1).astype(np.int32))
            out.append((obs.copy(), rewards.copy(), env.action_mask.copy()))
    return out


@pytest.mark.parametrize("opponent", [0, 1, 2])
def test_the_same_seed_plays_the_same_games(opponent):
    a = random_play(7, 150, opponent=opponent)
    b = random_play(7, 150, num_threads=3, opponent=opponent)
    c = random_play(8, 150, opponent=opponent)
    assert all((x[0] == y[0]).all() and (x[1] == y[1]).all() and (x[2] == y[2]).all() for x, y in zip(a, b))
    assert not all((x[0] == y[0]).all() for x, y in zip(a, c))


def test_a_saved_state_replays_exactly():
    rng = np.random.default_rng(3)
    with make(num_envs=4, opponent=1, seed=4) as env, make(num_envs=4, opponent=1, seed=99) as other:
        env.reset()
        other.reset()

        def run(e, actions=None):
            taken, seen = [], []
            for t in range(120):
                a = actions[t] if actions is not None else np.array(
                    [rng.choice(np.flatnonzero(row)) for row in e.action_mask], np.int32)
                obs, rewards, terminals, _, _ = e.step(a)
                taken.append(a)
                seen.append((obs.copy(), rewards.copy(), terminals.copy(), e.action_mask.copy()))
            return taken, seen

        run(env)
        saved = env.save_state()
        taken, first = run(env)
        other.load_state(saved)                  # another vector, another seed: the state is everything
        _, second = run(other, taken)
        assert all(all((x == y).all() for x, y in zip(f, s)) for f, s in zip(first, second))
        assert (other.save_state()["cenv"] == env.save_state()["cenv"]).all()


def test_set_state_refuses_a_position_that_breaks_the_rules():
    with make(opponent=2) as env:
        env.reset()
        bad = [
            position(you=side(mana=6, max_mana=5)),                               # more mana than the maximum
            position(you=side(life=21)),                                          # above the starting life
            position(you=side(board=[creature("Ogre", health=6, max_health=5)])),  # health above its maximum
            position(you=side(board=[[ID["Firebolt"], 1, 1, 1, 0, 0, 0]])),       # a spell on the board
            position(you=side(hand=["Wisp"] * 9)),                                 # nine cards in hand
            position()[:-1],                                                      # one number short
            position() + [0],                                                     # one too many
            position(turn=41),                                                    # past the turn limit
        ]
        for state in bad:
            with pytest.raises(RuntimeError, match="set_state: env 'cards' rejects"):
                env.set_state(0, state)


# ---- strictness ----

def test_strict_masks_refuse_a_forbidden_action_before_the_engine_sees_it():
    with at(make(opponent=0), position(you=side(hand=["Ogre"], mana=2))) as env:
        with pytest.raises(ValueError) as caught:
            step(env, play(0))
        assert str(caught.value) == ("env 'cards' #0 agent 0 (row 0) at step 0: action 1 is not legal under its "
                                     "mask; legal: 0")


def test_the_engine_refuses_a_forbidden_move_naming_game_turn_seat_and_move():
    with at(make(opponent=0, mask_check="off"), position(turn=5, you=side(hand=["Ogre"], mana=2))) as env:
        with pytest.raises(RuntimeError) as caught:
            step(env, play(0))
    assert str(caught.value).endswith(
        "env 'cards' #0 failed at step 1: game 1, turn 5, seat 0 (agent 0), move 1 = play hand card 0 (Ogre) with "
        "no target: the rules forbid it: Ogre costs 4 mana and the seat has 2")
    with at(make(opponent=2, mask_check="off"), position(seat=1, turn=8)) as env:
        with pytest.raises(RuntimeError, match=r"env 'cards' #0 failed at step 1: game 1, turn 8, seat 0 \(agent 0\), "
                                               r"move 112 = attack with creature 1 \(empty\) at enemy creature 0 "
                                               r"\(empty\): the rules forbid it: seat 0 is not on turn \(seat 1 is\): "
                                               r"its only legal move is pass \(0\)"):
            step(env, attack(1, 0), END)
    guarded = position(you=side(board=[creature("Scout")]), them=side(board=[creature("Warden")]))
    with at(make(opponent=0, mask_check="off"), guarded) as env:
        with pytest.raises(RuntimeError, match="Scout cannot walk past the guard Warden: it must attack a guard"):
            step(env, attack(0))


def test_a_mask_that_allows_a_forbidden_move_fails_the_step():
    with make(opponent=0, fault=1) as env:
        env.reset(seed=0)
        with pytest.raises(RuntimeError) as caught:
            step(env, END)
    message = str(caught.value)
    assert re.search(r"env 'cards' #0 failed at step 1: game 1, turn [12], seat 0 \(agent 0\), move 129 = attack "
                        r"with creature 4 \(empty\) at the enemy face: the action mask allows it but the rules forbid "
                        r"it: there is no creature in slot 4 \(the board holds 0\) \(cards_legal_moves and "
                        r"cards_move_error disagree\)$", message), message


def test_a_mask_that_allows_no_move_is_refused_by_jaxlab_or_else_by_the_engine():
    with make(opponent=0, fault=2) as env:
        env.reset(seed=0)
        with pytest.raises(ValueError, match=r"env 'cards' #0 agent 0 \(row 0\) at step 0: its action mask allows no "
                                             r"action \(the row is all 0\)"):
            step(env, END)
    with make(opponent=2, fault=2, mask_check="off") as env:
        env.reset(seed=0)
        with pytest.raises(RuntimeError, match=r"env 'cards' #0 failed at step 1: game 1, turn 1, seat 0 \(agent 0\): "
                                               r"the action mask allows no move \(end turn, or pass, is always legal\)"):
            step(env, END, END)


def test_lenient_play_counts_forbidden_moves_and_strict_play_has_none():
    rng = np.random.default_rng(0)
    with make(num_envs=16, opponent=0, strict=0, mask_check="off", seed=1) as env:
        env.reset()
        counted = []
        for _ in range(2000):
            _, _, _, _, info = env.step(rng.integers(0, ACTIONS, 16).astype(np.int32))
            if info:
                counted.append(info["illegal_attempts"])
    assert len(counted) > 10 and min(counted) > 0
    with make(num_envs=16, opponent=0, seed=1) as env:
        env.reset()
        for _ in range(1000):
            noise = rng.random(env.action_mask.shape) * env.action_mask
            _, _, _, _, info = env.step(noise.argmax(axis=1).astype(np.int32))
            assert info.get("illegal_attempts", 0.0) == 0.0


# ---- opponents ----

def win_rate(opponent, games=300, seed=0):
    rng = np.random.default_rng(seed)
    wins = ended = 0
    with make(num_envs=32, opponent=opponent, seed=seed) as env:
        env.reset()
        while ended < games:
            noise = rng.random(env.action_mask.shape) * env.action_mask
            _, _, _, _, info = env.step(noise.argmax(axis=1).astype(np.int32))
            if info:
                wins += info["win_rate"] * info["episodes"]
                ended += info["episodes"]
    return wins / ended


def test_random_play_is_even_against_random_and_hopeless_against_greedy():
    assert 0.4 < win_rate(0) < 0.6
    assert win_rate(1) < 0.05


def test_the_greedy_opponent_takes_a_lethal_fireball():
    state = position(seat=1, turn=8, you=side(life=6), them=side(mana=5, hand=["Scout", "Fireball"]))
    with at(make(opponent=1), state) as env:
        _, rewards, terminals, _, info = step(env, END)   # seat 0 is not on turn: it passes
    assert rewards.tolist() == [-1.0] and terminals.tolist() == [True] and info["win_rate"] == 0.0


# ---- render ----

def test_the_render_is_a_readable_game_log():
    state = position(you=side(life=12, hand=["Firebolt", "Ogre"], board=[creature("Scout")]),
                     them=side(life=9, board=[creature("Harpy")]))
    with at(make(opponent=0), state) as env:
        step(env, play(0, foe(0)))
        step(env, attack(0))
        text = env.render(0)
    assert text.splitlines()[:3] == ["game 1, turn 3/40, your move",
                                     "    you attack foe with Scout: 3 damage, foe at 6 life",
                                     "  you: 12 life, mana 4/5, deck 10, hand 1: Ogre (4)"]
    assert "board: [Scout 3/2]" in text and "foe: 6 life" in text and text.endswith("\n  you act:")
    with at(make(opponent=0), position(you=side(board=[creature("Scout")]), them=side(life=3))) as env:
        step(env, attack(0))                      # the winning blow; the next game starts in the same step
        lines = env.render(0).splitlines()
    assert lines[1:4] == ["    you attack foe with Scout: 3 damage, foe at 0 life", "  == you win ==",
                          "  == game 2: " + ("you go first ==" if "you go" in lines[3] else "foe goes first ==")]
    with make(opponent=1, seed=3) as env:
        env.reset()
        log = []
        for _ in range(60):
            log.append(env.render(0))
            step(env, int(np.flatnonzero(env.action_mask[0])[-1]))
    log = "\n".join(log)
    assert "-- turn" in log and " plays " in log and " attack" in log and " life" in log


def test_shaping_rewards_the_change_of_the_life_margin():
    state = position(you=side(life=20, board=[creature("Scout")]), them=side(life=10))
    with at(make(opponent=2, shaping=0.5), state) as env:
        _, rewards, *_ = step(env, attack(0), END)   # the margin goes from 10/20 to 13/20
        assert rewards.tolist() == pytest.approx([0.075, -0.075])
        _, rewards, *_ = step(env, END, END)
        assert rewards.tolist() == [0.0, 0.0]
    with at(make(opponent=0), state) as env:         # 0 by default
        assert step(env, attack(0))[1].tolist() == [0.0]


def test_episode_return_sums_the_shaping_rewards_of_the_whole_game():
    # The margin goes 14/20 (attack) 17/20 (their turn: a Squire, no damage) 17/20 (attack) 20/20 and a win:
    # rewards 0.5 * 3/20, 0, 1 + 0.5 * 3/20; the statistic is their sum, not the last step's 1.075.
    state = position(you=side(board=[creature("Scout")]), them=side(life=6))
    with at(make(opponent=1, shaping=0.5), state) as env:
        rewards = [step(env, attack(0))[1][0], step(env, END)[1][0]]
        _, last, terminals, _, info = step(env, attack(0))
    assert rewards == pytest.approx([0.075, 0.0]) and last.tolist() == pytest.approx([1.075])
    assert terminals.tolist() == [True] and info["episode_return"] == pytest.approx(1.15)


def test_the_env_benchmark_steps_a_masked_env_with_legal_actions():
    from jaxlab.run.bench import env_steps_per_second

    for opponent in (0, 2):
        sps, per_call = env_steps_per_second("cards", 64, 0.05, params={"opponent": opponent})
        assert sps > 0 and per_call > 0   # strict masks: an illegal action would have raised
