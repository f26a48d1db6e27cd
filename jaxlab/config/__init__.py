"""Typed run configuration: the schema (schema.py), loading in layers and coercion (layers.py), the
checks and derived sizes (validate.py), the accelerator presets (presets.py), and the memory estimate
against the device's and the host's memory (memory.py). Nothing here imports JAX except
presets.current_devices (and memory.current_limit and memory.out_of_memory_message, through it)."""

from jaxlab.config.layers import (apply_layer, as_layer, build_config, checkpoint_config, coerce, coerce_key,
                                  config_from_toml, configs_dir, env_args, env_kind, load_config,
                                  parse_bool, parse_flags,
                                  preset_names, read_preset, read_toml, to_toml, toml_value, with_layer)
from jaxlab.config.schema import (DASHBOARDS, MATMUL_PRECISIONS, PRECISIONS, SCHEDULE_ALIASES, SCHEDULES,
                                  SECTIONS, CheckpointConfig, Config, ConfigError, DeviceConfig, LogConfig,
                                  PolicyConfig, TrainConfig, VecConfig, field_help)
from jaxlab.config.validate import Sizes, check_choice, check_finite, check_network, derive_sizes

__all__ = ["CheckpointConfig", "Config", "ConfigError", "DASHBOARDS", "DeviceConfig", "LogConfig",
           "MATMUL_PRECISIONS", "PRECISIONS", "PolicyConfig", "SCHEDULE_ALIASES", "SCHEDULES", "SECTIONS",
           "Sizes", "TrainConfig", "VecConfig", "apply_layer", "as_layer", "build_config", "check_choice",
           "checkpoint_config", "check_network",
           "check_finite", "coerce", "coerce_key", "config_from_toml", "configs_dir", "env_args", "env_kind", "derive_sizes",
           "field_help", "load_config", "parse_bool", "parse_flags", "preset_names", "read_preset",
           "read_toml", "to_toml", "toml_value", "with_layer"]
