"""Device memory in the records and on the dashboard (issue 13: "On a GPU the dashboard shows device
memory in use and peak"): a CPU reports none; a device with allocator statistics gives GiB fields."""

from __future__ import annotations

import io

import jax
from rich.console import Console

from jaxlab.observe import dashboard, device_memory

GIB = 1 << 30


class FakeDevice:
    def __init__(self, stats):
        self.stats = stats

    def memory_stats(self):
        if isinstance(self.stats, Exception):
            raise self.stats
        return self.stats


def test_the_cpu_reports_no_memory_so_records_carry_no_fields():
    assert jax.devices()[0].platform == "cpu"
    assert device_memory.memory_fields(jax.local_devices()) == {}
    assert device_memory.describe({"sps": 1.0}) is None


def test_memory_fields_take_the_most_loaded_device_in_gib():
    devices = [FakeDevice({"bytes_in_use": 1 * GIB, "peak_bytes_in_use": 2 * GIB, "bytes_limit": 80 * GIB}),
               FakeDevice({"bytes_in_use": 3 * GIB // 2, "peak_bytes_in_use": 5 * GIB // 2, "bytes_limit": 80 * GIB}),
               FakeDevice(None), FakeDevice(RuntimeError("no statistics"))]
    assert device_memory.memory_fields(devices) == {"device_memory_gib": 1.5, "device_memory_peak_gib": 2.5,
                                                    "device_memory_limit_gib": 80.0}
    assert device_memory.memory_fields([FakeDevice({"bytes_in_use": GIB})]) == {
        "device_memory_gib": 1.0, "device_memory_peak_gib": 1.0}


def record(**extra):
    return {"global_step": 4096, "update": 2, "wall_time": 3.0, "sps": 2000.0, "episodes": 0, "entropy": 0.6,
            "approx_kl": 0.01, "time_env": 1.0, "time_policy": 0.5, "time_copy": 0.1, "time_learn": 1.0,
            "time_other": 0.4, **extra}


INFO = dashboard.RunInfo("cartpole", 1000, "gpu", "h100", "runs/x", 10, 20480, ("episode_return",))


def test_dashboard_and_plain_line_show_memory_only_when_the_record_has_it():
    with_memory = record(**device_memory.memory_fields(
        [FakeDevice({"bytes_in_use": 3 * GIB, "peak_bytes_in_use": 5 * GIB, "bytes_limit": 79 * GIB})]))
    console = Console(file=io.StringIO(), width=160)
    console.print(dashboard.render(with_memory, INFO, []))
    assert "device memory 3.00 GiB in use, peak 5.00 of 79.0 GiB" in console.file.getvalue()
    assert dashboard.plain_line(with_memory, INFO).endswith("mem 3.0 GiB (peak 5.0 of 79.0)")  # not 3.0/5.0
    no_limit = record(device_memory_gib=3.0, device_memory_peak_gib=5.0)
    assert dashboard.plain_line(no_limit, INFO).endswith("mem 3.0 GiB (peak 5.0)")
    console = Console(file=io.StringIO(), width=160)
    console.print(dashboard.render(record(), INFO, []))
    assert "device memory" not in console.file.getvalue()
    assert "mem " not in dashboard.plain_line(record(), INFO)
