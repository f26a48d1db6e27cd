"""From a config to the agent's parts: the policy (the built-in ActorCritic or a user's module) and the
normalisation it trains with. Wiring only."""

from __future__ import annotations

from jaxlab.agent.distributions import ActionSpec
from jaxlab.agent.policy import ActorCritic
from jaxlab.config import Config, ConfigError


def make_policy(config: Config, spec: ActionSpec):
    """The policy of ``config``: policy.module's class through ModulePolicy, else the built-in ActorCritic
    with the [policy] keys. ConfigError when the module cannot be loaded or made."""
    p = config.policy
    if p.module:
        from jaxlab.agent.custom import ModulePolicy, load_module_class, make_module

        try:
            cls = load_module_class(p.module)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        try:
            module = make_module(cls, spec, p.hidden_size, config.device.precision)
        except ValueError as err:
            raise ConfigError(f"policy.module={p.module!r}: {err}") from None
        return ModulePolicy(module, spec, p.scan_unroll)
    return ActorCritic(spec, p.hidden_size, p.lstm, p.actor_init_scale, dtype=config.device.precision,
                       scan_unroll=p.scan_unroll, encoder_type=p.encoder, mlp_layers=tuple(p.mlp_layers),
                       activation=p.activation, shared_trunk=p.shared_trunk, critic_init_scale=p.critic_init_scale,
                       cnn_channels=tuple(p.cnn_channels), cnn_kernels=tuple(p.cnn_kernels),
                       cnn_strides=tuple(p.cnn_strides))


def reward_norm_on(config: Config) -> bool:
    """train.reward_scale auto: rewards scaled by the running std of the return (else by the number)."""
    return config.train.reward_scale == "auto"


def learner_reward_scale(config: Config) -> float:
    """The constant the learner multiplies rewards by: 1 when the return scaling has scaled them already."""
    return 1.0 if reward_norm_on(config) else float(config.train.reward_scale)
