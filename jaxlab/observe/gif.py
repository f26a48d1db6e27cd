"""Animated GIFs of an env's pictures (frames from its C pixels hook, ``VecEnv.pixels``), assembled with
Pillow, an optional extra: ``pip install -e ".[gif]"`` in the jaxlab checkout."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jaxlab.messages import install_extra


class PillowMissing(ImportError):
    """Pillow is not installed; the message says which extra brings it."""


def require_pillow():
    """The PIL.Image module, or PillowMissing naming the extra to install."""
    try:
        from PIL import Image
    except ImportError:
        raise PillowMissing("writing a GIF needs Pillow, which is not installed; install the gif extra: "
                            f"{install_extra('gif')} (or pip install pillow)") from None
    return Image


def write_gif(frames: list[np.ndarray], path: str | Path, fps: float = 25.0) -> Path:
    """Writes ``frames`` (each uint8 [H, W, 3], all the same size) as an animated GIF at ``path`` that
    loops forever, showing ``fps`` frames per second (GIF stores whole hundredths of a second per
    frame, so the delay is rounded to 10 ms, at least 20 ms, at most 655.35 s). ValueError for no
    frames, mixed sizes or an ``fps`` too low for that longest delay; PillowMissing without Pillow."""
    if not frames:
        raise ValueError("write_gif needs at least one frame")
    shapes = {np.shape(f) for f in frames}
    if len(shapes) != 1 or len(next(iter(shapes))) != 3 or next(iter(shapes))[2] != 3:
        raise ValueError(f"GIF frames must all be uint8 [H, W, 3] of one size; got shapes {sorted(shapes)}")
    if not fps > 0:
        raise ValueError(f"fps={fps} must be positive")
    delay = max(20, int(round(100.0 / fps)) * 10)
    if delay > 655_350:  # GIF stores the delay in 16 bits of hundredths of a second
        raise ValueError(f"fps={fps} shows a picture for {delay / 1000:g} s; a GIF shows one for at most 655.35 s")
    Image = require_pillow()
    images = [Image.fromarray(np.ascontiguousarray(f, dtype=np.uint8), "RGB") for f in frames]
    path = Path(path)
    images[0].save(path, save_all=True, append_images=images[1:], duration=delay, loop=0)
    return path


def frame_count(path: str | Path) -> int:
    """The frames of the GIF at ``path``: fewer than the pictures write_gif was given when some in a row
    were identical, since Pillow writes those as one frame shown as long as they all were (an episode's
    still start, or its end standing still). PillowMissing without Pillow."""
    Image = require_pillow()
    with Image.open(path) as image:
        return image.n_frames
