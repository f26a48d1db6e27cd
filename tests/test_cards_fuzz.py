"""One million random legal moves of the card game (examples/envs/cards.h) under AddressSanitizer and
UndefinedBehaviorSanitizer, through jaxlab's C API, with the engine's strict self-checks on: no
violation, no sanitizer report (the C driver, tests/cards_fuzz.c, says what else it checks)."""

import re
import subprocess

import pytest

from conftest import ROOT, cenv_build

pytestmark = pytest.mark.slow


def test_a_million_random_legal_moves_under_the_sanitizers(tmp_path):
    driver = tmp_path / "cards_fuzz"
    cenv_build.build(driver, sanitize=True, shared=False, sources=[ROOT / "tests" / "cards_fuzz.c"],
                     include=[ROOT / "cenv", ROOT / "examples" / "envs"], verbose=False)
    result = subprocess.run([str(driver), "1000000"], capture_output=True, text=True, timeout=600,
                            env={"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0", "UBSAN_OPTIONS": "print_stacktrace=1"})
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    assert result.stderr == ""
    found = re.fullmatch(r"cards fuzz: (\d+) legal moves by agents on turn in (\d+) steps, (\d+) games \(agent wins: "
                         r"(\d+) vs random, (\d+) vs greedy, (\d+) self\), (\d+) exact replays, (\d+) forbidden moves "
                         r"counted leniently, (\d+) refused strictly, 0 violations\n", result.stdout)
    assert found, result.stdout
    moves, steps, games, _, _, _, replays, lenient, refused = map(int, found.groups())
    assert moves >= 1_000_000 and games > 10_000 and replays >= 10 and lenient > 0 and refused > 100
