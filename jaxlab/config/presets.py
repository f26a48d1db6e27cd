"""Presets (configs/presets/*.toml) on two axes that combine: the card (cpu, gpu, a100, h100: envs,
threads, minibatch, precision, memory; `auto` picks one from the devices) and the workload size (heavy,
beast: network, epochs, learning rate). ``--preset h100,heavy`` layers h100 then heavy; a workload alone
(``--preset heavy``) is auto's card then heavy. A preset file says its axis in ``[preset] axis``
("card", the default, or "workload").

A device is described by ``DeviceInfo(platform, kind, memory_bytes)``; ``select_preset`` is a pure
function of a list of them, so it is tested with simulated device lists. Only ``current_devices`` and
``prepare_backend`` touch JAX, and JAX is imported there and nowhere else in this module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from jaxlab.config.layers import preset_names, read_preset
from jaxlab.config.schema import ConfigError
from jaxlab.config.validate import shown_value
from jaxlab.messages import install_extra, plural

#: Device kinds (substrings of jax's device_kind, upper case) for the big-GPU presets, checked in order.
KIND_PRESETS = (("H100", "h100"), ("H200", "h100"), ("H800", "h100"), ("A100", "a100"), ("A800", "a100"))
GPU_PLATFORMS = ("gpu", "cuda", "rocm")
#: XLA's GPU memory variables: one the user set means jaxlab sets none. XLA_CLIENT_MEM_FRACTION is the
#: newer name of XLA_PYTHON_CLIENT_MEM_FRACTION (jaxlib 0.10 reads both, older ones the second only; with
#: both set the CUDA plugin fails to start and JAX falls back to the CPU), so jaxlab sets the second.
MEMORY_FRACTION_VARS = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")
MEMORY_ENV_VARS = (*MEMORY_FRACTION_VARS, "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_ALLOCATOR")


@dataclass(frozen=True)
class DeviceInfo:
    platform: str            # jax's device.platform: cpu, gpu/cuda, rocm, tpu
    kind: str                # jax's device.device_kind, e.g. "NVIDIA H100 80GB HBM3"
    memory_bytes: int | None  # the device's memory limit when JAX reports one


def select_preset(devices: list[DeviceInfo]) -> tuple[str, str]:
    """(preset name, the reason) that `auto` picks for these devices."""
    if not devices or devices[0].platform == "cpu":
        return "cpu", "JAX sees only CPU devices"
    device = devices[0]
    memory = f", {device.memory_bytes / 2**30:.0f} GiB" if device.memory_bytes else ""
    seen = f"{len(devices)} x {device.kind} ({device.platform}{memory})"
    if device.platform not in GPU_PLATFORMS:
        return "gpu", f"{seen}: no preset for {device.platform}, using the generic gpu preset"
    for needle, name in KIND_PRESETS:
        if needle in device.kind.upper():
            return name, seen
    return "gpu", f"{seen}: not an A100/H100-class card"


def preset_axis(name: str) -> str:
    """"card" or "workload": the axis preset ``name`` belongs to (ConfigError for an unknown name)."""
    info, _ = read_preset(name)
    return info.get("axis", "card")


def split_presets(value: str) -> tuple[str, list[str]]:
    """(the card preset, or "auto"; the workload preset as a list of at most one) of a --preset value such
    as "auto", "h100", "heavy", "h100,heavy" or "a100,beast". ConfigError for an unknown name, two card
    presets, two workload sizes, or a card preset after a workload one."""
    from jaxlab.config.layers import preset_list

    if not preset_list(value) and value != "none":
        raise ConfigError(f"--preset {value!r} names no preset; name one (`jaxlab presets` lists them), e.g. "
                          "--preset auto, or leave the flag out")
    names = preset_list(value) or ["auto"]
    cards, workloads = [], []
    for name in names:
        if name == "auto":
            cards.append(name)
            continue
        axis = preset_axis(name)
        if axis == "card":
            if workloads:
                raise ConfigError(f"--preset {value}: the card preset {name!r} must come before the workload "
                                  f"{plural(len(workloads), 'preset')} {', '.join(workloads)}; write --preset "
                                  f"{','.join([name, *workloads])}")
            cards.append(name)
        else:
            workloads.append(name)
    if len(cards) > 1:
        raise ConfigError(f"--preset {value} names {len(cards)} card presets ({', '.join(cards)}); name at most one "
                          f"card (or auto) and then a workload size, e.g. --preset {cards[-1]},heavy")
    if len(workloads) > 1:
        raise ConfigError(f"--preset {value} names {len(workloads)} workload sizes ({', '.join(workloads)}); name at "
                          f"most one, after the card, e.g. --preset {(cards or ['auto'])[0]},{workloads[-1]}")
    return (cards[0] if cards else "auto"), workloads


def check_preset_fits(name: str, devices: list[DeviceInfo], present=None) -> None:
    """ConfigError when preset ``name`` is for a platform these devices are not (e.g. h100 on a CPU), naming
    how to get that platform: for a CUDA preset on a CPU, JAX's CUDA wheels (the cuda12 extra), and the
    NVIDIA GPU ``present()`` (default nvidia_gpu_present) finds on this machine, if any (the common wrong
    install)."""
    info, _ = read_preset(name)
    platforms = info.get("platforms", [])
    platform = devices[0].platform if devices else "cpu"
    if not platforms or platform in platforms:
        return
    seen = f"JAX sees only {platform} devices here"
    if platform == "cpu" and "cuda" in platforms:
        gpu = (present or nvidia_gpu_present)()
        seen += f", though this machine has {gpu} (JAX installed without its CUDA wheels)" if gpu else ""
        fix = f"for an NVIDIA GPU, install JAX's CUDA wheels: {install_extra('cuda12')} (then `jaxlab presets`)"
    elif platforms == ["cpu"]:
        fix = "JAX_PLATFORMS=cpu makes JAX use the CPU"
    else:
        fix = "install JAX for your accelerator"
    raise ConfigError(f"preset {name!r} is for {'/'.join(platforms)} devices but {seen}; use --preset auto "
                      f"(it picks {select_preset(devices)[0]!r} here), or {fix}")


def current_devices() -> list[DeviceInfo]:
    """This process's own JAX devices (initialises JAX's backend): in a run over several processes the
    first of jax.devices() is process 0's, whose memory another process cannot read."""
    import jax

    devices = []
    for device in jax.local_devices():
        try:
            stats = device.memory_stats() or {}
        except Exception:  # noqa: BLE001 - platforms without memory stats raise various errors
            stats = {}
        devices.append(DeviceInfo(device.platform, device.device_kind, stats.get("bytes_limit")))
    return devices


def prepare_backend(memory_fraction: float | None) -> str:
    """Sets XLA's GPU memory options before JAX's backend starts; returns what it did, for the log.

    ``memory_fraction`` > 0 caps XLA's share of GPU memory. None means not yet known (preset auto, which
    must look at the devices first): preallocation is turned off instead, so that runs take memory as
    they need it and can share a GPU. Variables the user already set are left alone."""
    if any(var in os.environ for var in MEMORY_ENV_VARS):
        return "XLA memory options from the environment"
    if memory_fraction is None:
        os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
        return "GPU memory allocated on demand (preset auto)"
    if memory_fraction > 0:
        os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = str(memory_fraction)
        return f"GPU memory capped at {memory_fraction:.0%}"
    return "XLA's default GPU memory"


def nvidia_gpu_present() -> str | None:
    """"an NVIDIA GPU (driver VERSION)" when the NVIDIA driver is loaded on this machine, else None."""
    version = Path("/proc/driver/nvidia/version")
    if version.is_file():
        try:
            words = version.read_text().split()
        except OSError:
            words = []
        number = next((w for w in words if w[:1].isdigit() and "." in w), None)
        return f"an NVIDIA GPU (driver {number})" if number else "an NVIDIA GPU"
    if any(Path("/dev").glob("nvidia[0-9]*")):
        return "an NVIDIA GPU"
    return None


def unused_gpu_warning(devices: list[DeviceInfo], present=nvidia_gpu_present) -> str | None:
    """The one line for the common wrong install: the machine has an NVIDIA GPU but JAX sees only the
    CPU (JAX installed without its CUDA wheels); None otherwise."""
    if devices and devices[0].platform != "cpu":
        return None
    gpu = present()
    if gpu is None:
        return None
    return (f"this machine has {gpu} but JAX sees only the CPU, so jaxlab runs on the CPU; install JAX's CUDA "
            f"wheels: {install_extra('cuda12')} (or pip install -U \"jax[cuda12]\"), then check with "
            "`jaxlab presets`")


#: /proc/cpuinfo flags of bfloat16 matmul instructions: x86 (AVX512-BF16, AMX) and Arm (BF16).
BFLOAT16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str] | None:
    """The first CPU's feature flags from /proc/cpuinfo ("flags" on x86, "Features" on Arm); None where
    there is no such file (macOS, Windows) or it names none."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return None


def emulated_bfloat16_warning(precision: str, devices: list[DeviceInfo], flags=cpu_flags) -> str | None:
    """The one line for device.precision bfloat16 on a CPU whose flags show no bfloat16 matmul
    instructions; None otherwise (float32, an accelerator, or flags unknown)."""
    if precision != "bfloat16" or (devices and devices[0].platform != "cpu"):
        return None
    known = flags()
    if known is None or known & set(BFLOAT16_CPU_FLAGS):
        return None
    return ("device.precision=bfloat16 on a CPU without bfloat16 matmul instructions (none of "
            f"{', '.join(BFLOAT16_CPU_FLAGS)} in /proc/cpuinfo): it cannot speed up the matmuls here and "
            "rounds them; --device.precision float32 (the cpu preset's) is the better choice on this CPU")


def describe_presets(devices: list[DeviceInfo]) -> str:
    """The table `jaxlab presets` prints: the card presets (marking the one auto picks here), then the
    workload presets, and how they combine."""
    chosen, reason = select_preset(devices)
    lines = []
    for axis, title in (("card", "card presets (one; auto picks it)"), ("workload", "workload sizes (at most one, after the card)")):
        lines.append(f"{title}:")
        for name in preset_names():
            info, layer = read_preset(name)
            if info.get("axis", "card") != axis:
                continue
            mark = "*" if name == chosen else " "
            lines.append(f"{mark} {name:<6} {info.get('description', '')}")
            settings = [f"{section}.{key}={shown_value(value)}" for section, table in layer.items()
                        for key, value in table.items()]
            if "agents" in info:  # see jaxlab.config.layers.with_agents
                settings.insert(0, f"{info['agents']:,} agents (vec.num_envs = agents / the env's agents per env)")
            lines.append(f"         sets {', '.join(settings) if settings else 'nothing'}")
    lines.append(f"auto picks {chosen!r} here: {reason}. Combine a card and workload sizes in order: --preset "
                 f"{chosen},heavy (or --preset heavy: auto's card, then heavy). Each file in configs/presets/ says "
                 "where its numbers come from.")
    return "\n".join(lines)
