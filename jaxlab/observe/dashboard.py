"""What a run shows on the terminal: a rich dashboard redrawn at most 4 times a second on a terminal,
or plain one-line summaries (CI, a pipe), or nothing. All reporters take the same calls:
update(record) after each update, warn(message), close(). The dashboard starts no thread (rich's Live
is driven by hand, auto_refresh off), so nothing is left running after close() or Ctrl-C."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

from jaxlab.observe import device_memory

SPLIT = ("env", "policy", "copy", "learn", "other")
SPLIT_NAMES = {"env": "env step", "policy": "policy forward", "copy": "host-device copy", "learn": "learn",
               "other": "other"}
LOSSES = (("policy_loss", "policy"), ("value_loss", "value"), ("entropy", "entropy"), ("approx_kl", "approx KL"),
          ("clip_fraction", "clip frac"), ("explained_variance", "explained var"))


@dataclass
class RunInfo:
    env_name: str
    num_params: int
    device: str
    preset: str
    run_dir: str
    num_updates: int
    total_steps: int
    stat_names: tuple[str, ...]


def clock(seconds: float) -> str:
    """h:mm:ss, or ? when not known (no SPS yet)."""
    if not math.isfinite(seconds):
        return "?"
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def loss_number(value: float) -> str:
    """``value`` with 4 decimals, or 3 significant digits in scientific notation when it is nonzero and below
    1e-3 in size: an approx KL of 3e-6 (CleanRL's learning rates) was "0.0000", which reads as no change."""
    if value == 0 or abs(value) >= 1e-3:
        return f"{value:.4f}"
    return f"{value:.2e}"


def time_split(record: dict) -> list[tuple[str, float, float]]:
    """(name, seconds, percent of wall time) for env, policy, copy, learn, other."""
    wall = max(record.get("wall_time", 0.0), 1e-9)
    return [(SPLIT_NAMES[k], record.get(f"time_{k}", 0.0), 100 * record.get(f"time_{k}", 0.0) / wall) for k in SPLIT]


def eta(record: dict, info: RunInfo) -> float:
    done = record["global_step"]
    return (info.total_steps - done) / record["sps"] if record["sps"] > 0 else float("inf")


def render(record: dict, info: RunInfo, warnings: list[str], start: str | None = None, status: str | None = None):
    """The dashboard for the latest record as a rich renderable (``start``: start_line's words; ``status``:
    a line about the run's end, such as a stop signal's, drawn last)."""
    from rich.columns import Columns
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.text import Text

    head = Text.assemble(("jaxlab ", "bold"), (info.env_name, "bold cyan"),
                         f"  {info.num_params:,} params  {info.device} (preset {info.preset})  run {info.run_dir}")
    progress = Columns([ProgressBar(total=info.total_steps, completed=record["global_step"], width=30),
                        f"step {record['global_step']:,}/{info.total_steps:,}",
                        f"ETA {clock(eta(record, info))}", f"{record['sps']:,.0f} SPS",
                        f"update {record['update']}/{info.num_updates}", f"uptime {clock(record['wall_time'])}"],
                       padding=(0, 2))
    split = numbers_table("time", 2)
    for name, seconds, percent in time_split(record):
        split.add_row(name, f"{seconds:.2f} s", f"{percent:.1f} %")
    losses = numbers_table("losses", 1)
    for key, name in LOSSES:
        if key in record:
            losses.add_row(name, loss_number(record[key]))
    stats = numbers_table(f"episodes ({record['episodes']} in this update)", 1)
    for name in info.stat_names:
        value = record.get(name)
        stats.add_row(name, "-" if value is None else f"{value:.3f}")
    columns = Columns([split, losses, stats], padding=(0, 4))  # side by side, or wrapped on a narrow terminal
    memory = device_memory.describe(record)
    parts = [head] + ([Text(start, style="dim")] if start else []) + [progress]
    parts += ([Text(memory)] if memory else []) + [columns]
    parts += [Text(f"warning: {w}", style="yellow") for w in warnings]
    parts += [Text(status, style="bold")] if status else []
    return Group(*parts)


def numbers_table(title: str, numbers: int):
    """A borderless rich table of a name column and ``numbers`` right-aligned number columns, as wide as its
    title. The numbers never wrap: on a narrow terminal the names wrap or are cut short first (number
    columns that could wrap were cut to "1.…" at 28 columns, hiding the value)."""
    from rich.table import Table

    table = Table(title=title, title_justify="left", box=None, padding=(0, 1), show_header=False,
                  min_width=len(title))
    table.add_column()
    for _ in range(numbers):
        table.add_column(justify="right", no_wrap=True)
    return table


def start_line(record: dict) -> str | None:
    """"first update N.N s after launch; compile cache hit|miss|…" for a process's first record, else None."""
    if "launch_to_first_update_s" not in record:
        return None
    return (f"first update {record['launch_to_first_update_s']:.1f} s after launch; "
            f"compile cache {record['compile_cache']}")


def plain_memory(record: dict) -> str:
    """"3.0 GiB (peak 5.0 of 79.0)": in use, then the peak and the device's limit when known; not "3.0/5.0",
    which reads as 3 of a 5 GiB device."""
    limit = record.get("device_memory_limit_gib")
    of = f" of {limit:.1f}" if limit else ""
    return f"{record['device_memory_gib']:.1f} GiB (peak {record['device_memory_peak_gib']:.1f}{of})"


#: The env's episode statistics that plain_line shows; plain_lines puts the others on lines of their own.
PLAIN_LINE_STATS = 2
#: The widest line plain_lines packs the other statistics into (columns).
PLAIN_WIDTH = 120


def plain_statistics(record: dict, names) -> list[str]:
    """"name value" of each of the episode statistics ``names`` that ``record`` has a value of."""
    return [f"{name} {record[name]:.2f}" for name in names if record.get(name) is not None]


def plain_line(record: dict, info: RunInfo) -> str:
    """One line per report: progress, SPS, the first episode statistics, losses and the time split."""
    episode = "  ".join(plain_statistics(record, info.stat_names[:PLAIN_LINE_STATS]))
    split = " ".join(f"{name.split()[0]} {percent:.0f}%" for name, _, percent in time_split(record))
    memory = f"  mem {plain_memory(record)}" if "device_memory_gib" in record else ""
    return (f"update {record['update']:>5}/{info.num_updates}  step {record['global_step']:>10,}  "
            f"{record['wall_time']:6.1f}s  {record['sps']:>9,.0f} SPS  "
            f"{episode or 'no episode ended'}  entropy {record['entropy']:.3f}  kl {loss_number(record['approx_kl'])}  "
            f"[{split}]{memory}")


def packed(items: list[str], indent: str, width: int) -> list[str]:
    """``items`` two spaces apart on lines of at most ``width`` columns (an item wider than that alone on
    its line), each line starting with ``indent``; no line when there are no items."""
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + 2 + len(item) <= width:
            lines[-1] += "  " + item
        else:
            lines.append(indent + item)
    return lines


def plain_lines(record: dict, info: RunInfo) -> list[str]:
    """A report: plain_line, then the env's other episode statistics (after the first PLAIN_LINE_STATS; an env
    such as cards logs 7) on indented lines of at most PLAIN_WIDTH columns, when the update ended episodes."""
    rest = plain_statistics(record, info.stat_names[PLAIN_LINE_STATS:])
    return [plain_line(record, info)] + packed(rest, "  ", PLAIN_WIDTH)


class PlainReporter:
    """Plain reports (plain_lines) to ``stream``: at most one per ``interval`` seconds, and the last update."""

    def __init__(self, info: RunInfo, interval: float = 1.0, stream=None):
        self.info, self.interval, self.stream = info, interval, stream or sys.stdout
        self.last = -float("inf")

    def update(self, record: dict) -> None:
        start = start_line(record)
        if start is not None:
            print(start, file=self.stream, flush=True)
        if record["update"] < self.info.num_updates and record["wall_time"] - self.last < self.interval:
            return
        self.last = record["wall_time"]
        print("\n".join(plain_lines(record, self.info)), file=self.stream, flush=True)

    def warn(self, message: str) -> None:
        print(f"warning: {message}", file=sys.stderr, flush=True)

    def close(self) -> None:
        pass


class RichDashboard:
    """The live dashboard: redrawn at most ``max_per_second`` times a second and after the last update.
    ``now`` gives the time in seconds (time.monotonic; a test passes its own clock)."""

    def __init__(self, info: RunInfo, console=None, max_per_second: float = 4.0, now=time.monotonic):
        from rich.console import Console
        from rich.live import Live

        self.info = info
        self.console = console or Console()
        self.min_gap = 1.0 / max_per_second
        self.now = now
        self.warnings: list[str] = []
        self.record: dict | None = None
        self.start: str | None = None  # start_line of the first record
        self.last_draw = -float("inf")
        self.draws = 0
        self.dirty = False  # a record or warning arrived since the last draw
        self.status: str | None = None  # a stop signal's line (say_status), drawn last
        self._drawing = False  # a draw is writing (a signal handler's say_status may come in the middle of it)
        self._draw_again = False
        self.live = Live(console=self.console, auto_refresh=False, transient=False)
        self.live.start()

    def update(self, record: dict) -> None:
        self.record = record
        self.start = start_line(record) or self.start
        now = self.now()
        if record["update"] < self.info.num_updates and now - self.last_draw < self.min_gap:
            self.dirty = True
            return
        self._draw(now)

    def warn(self, message: str) -> None:
        self.warnings.append(message)
        if self.record is not None:
            self._draw(self.now())

    def say_status(self, line: str) -> bool:
        """Shows ``line`` (a stop signal's "SIGINT: finishing ...") as the dashboard's last line from now on,
        drawn at once (a signal handler calls it, between any two lines of the run); False when the dashboard
        is not drawn (before the first update, or closed): the caller prints it itself."""
        if self.record is None or not self.live.is_started:
            return False
        self.status = line
        if self._drawing:  # the handler interrupted a draw: that draw draws once more when it ends
            self._draw_again = True
        else:
            self._draw(self.now())
        return True

    def _draw(self, now: float) -> None:
        if self.record is None:
            return
        self._drawing = True
        try:
            self._draw_again = True
            while self._draw_again:
                self._draw_again = False
                self.last_draw = now
                self.draws += 1
                self.dirty = False
                self.live.update(render(self.record, self.info, self.warnings, self.start, self.status),
                                 refresh=True)
        finally:
            self._drawing = False

    def close(self) -> None:
        if self.live.is_started:
            if self.dirty:
                self._draw(self.now())
            self.live.stop()
            if not self.console.is_terminal and self.record is not None:
                self.console.line()  # rich ends the last draw with a newline on a terminal only
            if self.record is None:  # never drawn (the run ended before its first update): said here
                for message in self.warnings:
                    print(f"warning: {message}", file=sys.stderr, flush=True)


class Silent:
    def update(self, record: dict) -> None:
        pass

    def warn(self, message: str) -> None:
        print(f"warning: {message}", file=sys.stderr, flush=True)

    def close(self) -> None:
        pass


def make_reporter(mode: str, info: RunInfo, interval: float = 1.0, stream=None):
    """``mode`` auto (rich on a terminal, plain otherwise), rich, plain or none."""
    stream = stream or sys.stdout
    if mode == "auto":
        mode = "rich" if stream.isatty() else "plain"
    if mode == "rich":
        from rich.console import Console

        return RichDashboard(info, Console(file=stream))
    if mode == "plain":
        return PlainReporter(info, interval, stream)
    return Silent()
