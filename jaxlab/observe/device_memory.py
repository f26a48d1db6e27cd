"""Accelerator memory for the records and the dashboard, from JAX's own allocator statistics
(``Device.memory_stats()``: bytes_in_use, peak_bytes_in_use, bytes_limit). A CPU reports none, so a
CPU run's records carry no memory fields."""

from __future__ import annotations

from collections.abc import Sequence

GIB = float(1 << 30)


def memory_fields(devices: Sequence) -> dict[str, float]:
    """{"device_memory_gib": in use, "device_memory_peak_gib": peak, "device_memory_limit_gib": limit}
    for the most loaded of ``devices`` (data parallel devices hold the same replicated state, so the
    largest is the one that runs out first); {} when none reports statistics (CPU)."""
    stats = [s for s in (_stats(d) for d in devices) if s and "bytes_in_use" in s]
    if not stats:
        return {}
    top = max(stats, key=lambda s: s.get("peak_bytes_in_use", s["bytes_in_use"]))
    fields = {"device_memory_gib": top["bytes_in_use"] / GIB,
              "device_memory_peak_gib": top.get("peak_bytes_in_use", top["bytes_in_use"]) / GIB}
    if top.get("bytes_limit"):
        fields["device_memory_limit_gib"] = top["bytes_limit"] / GIB
    return fields


def _stats(device) -> dict | None:
    try:
        return device.memory_stats()
    except Exception:  # noqa: BLE001 - a backend without statistics raises instead of returning None
        return None


def describe(record: dict) -> str | None:
    """"device memory 3.2 GiB in use, peak 5.1 of 79.1 GiB" for a record with memory fields, else None."""
    if "device_memory_gib" not in record:
        return None
    limit = record.get("device_memory_limit_gib")
    of = f" of {limit:.1f}" if limit else ""
    return (f"device memory {record['device_memory_gib']:.2f} GiB in use, "
            f"peak {record['device_memory_peak_gib']:.2f}{of} GiB")
