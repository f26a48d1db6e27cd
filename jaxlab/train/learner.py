"""The jitted PPO update: GAE, then update_epochs x minibatches as nested lax.scans, minibatches cut
along the agent axis so every sequence keeps its time order and its start carry.

Segment shapes (T = horizon, A = agents, H = hidden):
    obs [T, A, ...], resets [T, A] bool (obs[t] starts an episode), actions [T, A, ...],
    logp, values, rewards, bootstrap_values [T, A] float32, terminals, truncations [T, A] bool,
    next_values [A], start_carry (c [A, H], h [A, H]): the carry the rollout had before step 0,
    masks [T, A, n] bool or None, active [T, A] bool or None: whether the agent acted in the step (None:
    always; an env with waiting agents reports it, and the loss counts only those steps).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxlab.agent import distributions, ppo
from jaxlab.train.advantages import Advantages


#: The update's metrics (means over the minibatches it ran, the explained variance of the segment, and
#: epochs_run: the epochs it ran, fewer than update_epochs when target_kl stopped it).
METRICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "old_approx_kl", "clip_fraction", "grad_norm",
           "learning_rate", "explained_variance", "epochs_run")


class Segment(NamedTuple):
    obs: jax.Array
    resets: jax.Array
    actions: jax.Array
    logp: jax.Array
    values: jax.Array
    rewards: jax.Array
    terminals: jax.Array
    truncations: jax.Array
    bootstrap_values: jax.Array
    next_values: jax.Array
    start_carry: Any
    masks: Any = None
    active: Any = None


def concat_segments(segments: list[Segment]) -> Segment:
    """S segments of A agents as one of S * A sequences (the agent axis: axis 1 of [T, A, ...] arrays,
    axis 0 of next_values and the carry), each keeping its own start carry and bootstrap values."""
    if len(segments) == 1:
        return segments[0]

    def cat(axis):
        return lambda *xs: None if xs[0] is None else jnp.concatenate(xs, axis=axis)

    first = segments[0]
    fields = {k: cat(1)(*[getattr(s, k) for s in segments]) for k in first._fields
              if k not in ("next_values", "start_carry")}
    return Segment(**fields, next_values=jnp.concatenate([s.next_values for s in segments]),
                   start_carry=jax.tree.map(cat(0), *[s.start_carry for s in segments]))


class TrainState(NamedTuple):
    params: Any
    opt_state: Any
    step: jax.Array         # int32 []: optimizer steps taken (drives the learning-rate schedule)
    total_steps: jax.Array  # int32 []: the run's optimizer steps, the schedule's length (and prio beta's):
                            # an input, not a constant, so that runs of any length share one compiled update


def lr_schedule(learning_rate: float, kind: str, min_lr_ratio: float) -> Callable:
    """schedule(step, total_steps) -> the learning rate (float32 []) at optimizer step ``step`` of a run of
    ``total_steps`` (int32 [] arrays or ints), floored at learning_rate * min_lr_ratio: optax's
    linear_schedule and cosine_decay_schedule over max(total_steps, 1) steps, the same arithmetic, with the
    length an argument that may be traced (optax's take it as a Python constant of the computation)."""
    floor = learning_rate * min_lr_ratio

    def linear(step, total_steps):
        length = jnp.maximum(total_steps, 1)
        fraction = 1 - jnp.clip(step, 0, length) / length
        return (learning_rate - floor) * fraction + floor

    def cosine(step, total_steps):
        length = jnp.maximum(total_steps, 1).astype(jnp.float32)
        cosine_decay = 0.5 * (1 + jnp.cos(jnp.pi * jnp.minimum(step, length) / length))
        return learning_rate * ((1 - min_lr_ratio) * cosine_decay + min_lr_ratio)

    def constant(step, total_steps):
        return jnp.asarray(learning_rate, jnp.float32)

    return {"linear": linear, "cosine": cosine}.get(kind, constant)


def optimizer_over(schedule: Callable, total_steps, max_grad_norm: float) -> optax.GradientTransformation:
    """make_optimizer with the learning rate schedule(count, ``total_steps``) (an lr_schedule; count: the
    optimizer's own step count, which moves with TrainState.step). Its state's structure is the same
    whatever ``total_steps``."""
    return make_optimizer(lambda count: schedule(count, total_steps), max_grad_norm)


def make_optimizer(schedule: Callable, max_grad_norm: float) -> optax.GradientTransformation:
    """Adam with learning rate ``schedule``, after clipping the gradients' global norm to
    ``max_grad_norm``; 0 means no clipping (optax's clip would scale every gradient to zero). Both give
    the same optimizer-state structure (optax.identity and the clip keep an EmptyState), so a run can be
    resumed with the other setting."""
    clip = optax.identity() if max_grad_norm == 0 else optax.clip_by_global_norm(max_grad_norm)
    return optax.chain(clip, optax.adam(schedule, eps=1e-5))


def global_norm(tree) -> jax.Array:
    """The L2 norm of all leaves together (what clip_by_global_norm compares with its bound)."""
    return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in jax.tree.leaves(tree)))


def _take_agents(tree, index):
    """Selects agents ``index`` from a segment: axis 1 of [T, A, ...] arrays, axis 0 of the carry."""
    seg = tree._replace(start_carry=jax.tree.map(lambda x: x[index], tree.start_carry),
                        next_values=tree.next_values[index])
    time_major = {k: jax.tree.map(lambda x: x[:, index], getattr(seg, k))
                  for k in ("obs", "resets", "actions", "logp", "values", "rewards", "terminals",
                            "truncations", "bootstrap_values", "masks", "active") if getattr(seg, k) is not None}
    return seg._replace(**time_major)


#: The metrics that are means over a minibatch's active steps (ppo_loss's weights): averaged over the
#: update's minibatches by those steps' counts.
LOSS_METRICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "old_approx_kl", "clip_fraction")


def active_rows(mb: Segment) -> jax.Array:
    """The number of steps of minibatch ``mb`` (fields [T, A, ...]) in which an agent acted: its
    Segment.active's count, or all T * A steps when it has none."""
    if mb.active is None:
        return jnp.asarray(mb.rewards.size, jnp.float32)
    return mb.active.astype(jnp.float32).sum()


def mean_over_minibatches(metrics: dict, rows: jax.Array, ran: jax.Array | None = None) -> dict:
    """The update's metrics from each minibatch's (``metrics``: name -> [epochs, minibatches]; ``rows``
    [epochs, minibatches]: each one's active steps, active_rows): LOSS_METRICS averaged over the active
    steps of them all (a minibatch in which no agent acted, whose means are 0, counts for nothing; one
    with few active steps counts as few), grad_norm over the minibatches with an active step (a gradient's
    norm is no mean over steps; one of no active step is 0), learning_rate a plain mean. ``ran`` [epochs]
    bool: whether each epoch ran (target_kl stops the rest; their rows are 0 and their learning_rate is
    left out of its mean); None: all did."""
    total = jnp.maximum(rows.sum(), 1.0)
    acted = (rows > 0).astype(jnp.float32)

    def mean(name, values):
        if name in LOSS_METRICS:
            return (values * rows).sum() / total
        if name == "grad_norm":
            return (values * acted).sum() / jnp.maximum(acted.sum(), 1.0)
        if ran is None:
            return jnp.mean(values)
        return jnp.mean(values, where=jnp.broadcast_to(ran[:, None], values.shape))

    return {name: mean(name, values) for name, values in metrics.items()}


def stopping_at_kl(epoch: Callable, target_kl: float) -> Callable:
    """``epoch``: (carry, key) -> (carry, (metrics, rows)), metrics name -> [minibatches] and rows
    [minibatches] (active_rows), as an epoch that stops the update: its carry is (carry, stopped: bool []),
    stopped set once an epoch's approx_kl (averaged over its active steps, as the logged one) exceeds
    ``target_kl``. Each epoch after that keeps the carry as it is (params, optimizer state and step) and
    reports zero metrics and rows, which count for nothing in mean_over_minibatches, and ran: bool []
    whether it ran. A lax.cond: one compile, whichever epochs run."""

    def checked(carry, key):
        inner, stopped = carry

        def skipped(inner):
            shapes = jax.eval_shape(lambda c: epoch(c, key)[1], inner)
            return inner, jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)

        inner, (metrics, rows) = jax.lax.cond(stopped, skipped, lambda c: epoch(c, key), inner)
        kl = mean_over_minibatches({"approx_kl": metrics["approx_kl"]}, rows)["approx_kl"]
        return (inner, stopped | (kl > target_kl)), (metrics, rows, ~stopped)

    return checked


def make_update(policy, spec: distributions.ActionSpec, schedule: Callable, *, max_grad_norm: float,
                num_minibatches: int, update_epochs: int, gamma: float, lam: float, reward_scale: float,
                clip_coef: float, vf_coef: float, vf_clip_coef: float, ent_coef: float, norm_adv: bool,
                on_trace: Callable[[], None] = lambda: None, advantage: str = "gae", rho_clip: float = 1.0,
                c_clip: float = 1.0, prio_alpha: float = 0.0, prio_beta0: float = 0.2,
                target_kl: float = 0.0) -> Callable:
    """Returns update(state, segment, key) -> (state, metrics), not yet jitted. The optimizer is
    optimizer_over(``schedule``, state.total_steps, ``max_grad_norm``): the run's length comes with the
    state, so one compile serves runs of any length. ``on_trace`` is called each time JAX traces it (so
    each compile can be counted). ``advantage`` ("gae" or "vtrace", with ``rho_clip``, ``c_clip``) and
    ``prio_alpha``, ``prio_beta0`` (annealed over state.total_steps optimizer steps) choose the advantage
    estimator and the minibatch sampling (jaxlab.train.advantages; the defaults are GAE and every
    sequence once per epoch). ``target_kl`` > 0 stops the update's epochs after the first whose approx_kl
    exceeds it (stopping_at_kl; CleanRL's target_kl); 0: every epoch runs, the update as it was without it."""
    estimator = Advantages(advantage, gamma, lam, reward_scale, rho_clip, c_clip, prio_alpha, prio_beta0)

    def loss_fn(params, mb: Segment, advantages, returns, adv_weights):
        _, head, values, log_std = policy.apply(params, mb.start_carry, mb.obs, mb.resets, method="unroll")
        logp, entropy = distributions.log_prob_entropy(spec, head, log_std, mb.actions, mb.masks)
        terms = ppo.ppo_loss(logp, entropy, values, mb.logp, mb.values, advantages, returns,
                             clip_coef=clip_coef, vf_coef=vf_coef, vf_clip_coef=vf_clip_coef,
                             ent_coef=ent_coef, norm_adv=norm_adv, weights=mb.active, adv_weights=adv_weights)
        return terms.total, (terms, logp)

    grad_fn = jax.grad(loss_fn, has_aux=True)

    def update(state: TrainState, segment: Segment, key: jax.Array):
        on_trace()
        num_agents = segment.rewards.shape[1]
        per_minibatch = num_agents // num_minibatches
        optimizer = optimizer_over(schedule, state.total_steps, max_grad_norm)

        def minibatch(carry, inputs):
            state, estimates = carry
            index, advantages, returns, weights = estimator.minibatch(estimates, segment, *inputs, state.step,
                                                                      state.total_steps)
            mb = _take_agents(segment, index)
            grads, (terms, logp) = grad_fn(state.params, mb, advantages, returns, weights)
            updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
            params = optax.apply_updates(state.params, updates)
            metrics = {"policy_loss": terms.policy, "value_loss": terms.value, "entropy": terms.entropy,  # METRICS
                       "approx_kl": terms.approx_kl, "old_approx_kl": terms.old_approx_kl,
                       "clip_fraction": terms.clip_fraction,
                       "grad_norm": global_norm(grads), "learning_rate": schedule(state.step, state.total_steps)}
            estimates = estimator.observe(estimates, index, logp - mb.logp)
            return (state._replace(params=params, opt_state=opt_state, step=state.step + 1), estimates), \
                (metrics, active_rows(mb))

        def epoch(carry, epoch_key):
            order = jax.random.permutation(epoch_key, num_agents).reshape(num_minibatches, per_minibatch)
            keys = jax.vmap(lambda i: jax.random.fold_in(epoch_key, i))(jnp.arange(num_minibatches))
            return jax.lax.scan(minibatch, carry, (order, keys))

        start = estimator.start(segment)
        epoch_keys = jax.random.split(key, update_epochs)
        if target_kl > 0:
            ((state, _), _), (metrics, rows, ran) = jax.lax.scan(stopping_at_kl(epoch, target_kl),
                                                                 ((state, start), jnp.asarray(False)), epoch_keys)
            metrics = mean_over_minibatches(metrics, rows, ran)
            metrics["epochs_run"] = ran.sum()
        else:
            (state, _), (metrics, rows) = jax.lax.scan(epoch, (state, start), epoch_keys)
            metrics = mean_over_minibatches(metrics, rows)
            metrics["epochs_run"] = jnp.asarray(update_epochs, jnp.int32)
        metrics["explained_variance"] = ppo.explained_variance(segment.values, start.returns, segment.active)
        return state, metrics

    return update
