"""Warnings a user needs during a run, each kind said once: a recompile after the first update, a NaN
or infinite loss, SPS falling to half, no episode finished within an update."""

from __future__ import annotations

import math
import statistics

#: A NaN or infinite one stops the run. grad_norm too: gradients that are NaN or infinite in an update's
#: last minibatch turn the params into NaN while that update's losses (computed before the step) are
#: still finite, and its checkpoint would save that state.
LOSSES = ("policy_loss", "value_loss", "entropy", "approx_kl", "grad_norm")


def nonfinite_losses(record: dict) -> list[str]:
    """The loss keys (and grad_norm) of ``record`` that are NaN or infinite."""
    return [k for k in LOSSES if k in record and not math.isfinite(record[k])]


class Alerts:
    """Feed every metrics record to check(); it returns the warnings not said before."""

    def __init__(self, warmup_updates: int = 3, window: int = 20):
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
                       "its last good checkpoint (try a lower train.learning_rate)", out)
        if record["episodes"] == 0:
            self._once("no_episode", f"no episode finished in update {record['update']}, so it has no episode "
                       "statistics: expected when episodes outlast an update, a stuck env otherwise", out)
        if self.updates_seen > self.warmup:
            if len(self.recent_sps) >= 3:
                typical = statistics.median(self.recent_sps)
                if record["sps"] < 0.5 * typical:
                    self._once("slow", f"SPS fell to {record['sps']:,.0f} at update {record['update']}, under half "
                               f"the recent median of {typical:,.0f} (another process on the machine? swapping?)", out)
            self.recent_sps = (self.recent_sps + [record["sps"]])[-self.window:]
        return out
