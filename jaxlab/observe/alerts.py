"""Warnings a user needs during a run, each kind said once: a recompile after the first update, a NaN
or infinite loss, SPS falling to half, no episode finished for QUIET_STEPS steps per agent."""

from __future__ import annotations

import math
import statistics

#: A NaN or infinite one stops the run. grad_norm too: gradients that are NaN or infinite in an update's
#: last minibatch turn the params into NaN while that update's losses (computed before the step) are
#: still finite, and its checkpoint would save that state.
LOSSES = ("policy_loss", "value_loss", "entropy", "approx_kl", "grad_norm")

#: Steps per agent in a row with no episode finished after which the run is told so (once): past the
#: episodes of jaxlab's own envs (500 steps at most by default), so that an env whose episodes outlast an
#: update (pendulum's 200 steps: 12 updates of 16) is not a warning at the start of every run.
QUIET_STEPS = 1000


def nonfinite_losses(record: dict) -> list[str]:
    """The loss keys (and grad_norm) of ``record`` that are NaN or infinite."""
    return [k for k in LOSSES if k in record and not math.isfinite(record[k])]


class Alerts:
    """Feed every metrics record to check(); it returns the warnings not said before. ``steps_per_update``:
    the steps each agent takes in an update (segments x horizon), to count ``quiet_steps`` by."""

    def __init__(self, steps_per_update: int, warmup_updates: int = 3, window: int = 20,
                 quiet_steps: int = QUIET_STEPS):
        self.steps_per_update, self.quiet_steps = steps_per_update, quiet_steps
        self.quiet_updates: list[int] = []  # the updates since the last one in which an episode finished
        self.said: set[str] = set()
        self.first_compiles: int | None = None
        self.warmup = warmup_updates
        self.recent_sps: list[float] = []
        self.window = window
        self.updates_seen = 0

    def _once(self, kind: str, message: str, out: list[str]) -> None:
        if kind not in self.said:
            self.said.add(kind)
            out.append(message)

    def check(self, record: dict) -> list[str]:
        out: list[str] = []
        self.updates_seen += 1
        if self.first_compiles is None:
            self.first_compiles = record["compiles"]
        elif record["compiles"] > self.first_compiles:
            self._once("recompile", f"recompiled at update {record['update']} ({record['compiles']} traces so "
                       "far, expected no more after the first update): a shape or dtype changed between calls", out)
        bad = nonfinite_losses(record)
        if bad:
            self._once("nan", f"{bad[0]} is {record[bad[0]]} at update {record['update']}: the run stops and keeps "
                       "its last good checkpoint (its error says why: non-finite rewards or observations from the env, "
                       "else try a lower train.learning_rate)", out)
        self._check_episodes(record, out)
        if self.updates_seen > self.warmup:
            if len(self.recent_sps) >= 3:
                typical = statistics.median(self.recent_sps)
                if record["sps"] < 0.5 * typical:
                    self._once("slow", f"SPS fell to {record['sps']:,.0f} at update {record['update']}, under half "
                               f"the recent median of {typical:,.0f} (another process on the machine? swapping?)", out)
            self.recent_sps = (self.recent_sps + [record["sps"]])[-self.window:]
        return out

    def _check_episodes(self, record: dict, out: list[str]) -> None:
        """Says once that no episode finished in the updates since the last that ended one, when they add
        up to quiet_steps steps per agent: a stuck env (one that never ends an episode), or episodes
        that long. Fewer is no news: episodes that outlast an update leave updates without statistics."""
        if record["episodes"]:
            self.quiet_updates = []
            return
        self.quiet_updates.append(record["update"])
        steps = len(self.quiet_updates) * self.steps_per_update
        if steps >= self.quiet_steps:
            first, last = self.quiet_updates[0], self.quiet_updates[-1]
            which, have = (f"update {last}", "it has") if first == last else (f"updates {first}-{last}", "they have")
            self._once("no_episode", f"no episode finished in {which} ({steps:,} steps per agent), so {have} no "
                       "episode statistics: an env that never ends its episodes (stuck), or episodes longer than "
                       "that", out)
