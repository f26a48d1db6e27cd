"""Text renderings of one agent's step, for `jaxlab eval --render`. An env has a rendering when it is
in RENDERERS; each takes (observation of the agent, the action it took, the reward it got) -> one line.
"""

from __future__ import annotations

import numpy as np


def cartpole(obs: np.ndarray, action, reward: float) -> str:
    """Track from x = -2.4 to 2.4 with the cart [#] where it is, and the pole's lean."""
    x, x_dot, theta, theta_dot = (float(v) for v in obs)
    width = 41
    track = ["-"] * width
    at = int(round((min(max(x, -2.4), 2.4) + 2.4) / 4.8 * (width - 1)))
    track[at] = "#"
    lean = "|" if abs(theta) < 0.02 else ("/" if theta > 0 else "\\")
    push = "->" if int(np.asarray(action).reshape(-1)[0]) == 1 else "<-"
    return (f"|{''.join(track)}| pole {lean}  x {x:+.2f}  v {x_dot:+.2f}  angle {theta:+.3f}  "
            f"spin {theta_dot:+.2f}  push {push}  reward {reward:g}")


def memory(obs: np.ndarray, action, reward: float) -> str:
    """What the agent sees (a cue, a blank or the query) and what it answers."""
    cues = obs[:-1]
    if obs[-1] > 0:
        seen = "query?   "
    elif cues.max() > 0:
        seen = f"cue {int(cues.argmax())}    "
    else:
        seen = "blank    "
    answer = int(np.asarray(action).reshape(-1)[0])
    return f"{seen} action {answer}  reward {reward:g}"


RENDERERS = {"cartpole": cartpole, "memory": memory}
