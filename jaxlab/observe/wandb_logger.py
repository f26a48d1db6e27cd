"""Weights & Biases logging, opt-in with --log.wandb true. wandb is imported only here, only when
enabled. With no API key (WANDB_API_KEY or a wandb login) or no network it runs offline and says how
to sync. Any error inside wandb disables it with one warning: a failing logger never stops training."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from jaxlab.config import as_layer
from jaxlab.messages import install_extra

#: The WANDB_MODE values wandb accepts (another one fails wandb.init with a pydantic error); "dryrun" is
#: an old name of offline.
MODES = ("online", "offline", "disabled", "dryrun", "run", "shared")


def server_hosts() -> set[str]:
    """The hosts a wandb login may be for: api.wandb.ai, WANDB_BASE_URL's and the base_url that
    `wandb login --host URL` keeps in wandb's settings file (a self-hosted server's)."""
    import configparser
    from urllib.parse import urlsplit

    urls = ["https://api.wandb.ai", os.environ.get("WANDB_BASE_URL", "")]
    settings = configparser.ConfigParser()
    folder = os.environ.get("WANDB_CONFIG_DIR") or Path.home() / ".config" / "wandb"
    try:
        settings.read(Path(folder) / "settings")
        urls.append(settings.get("default", "base_url", fallback=""))
    except (OSError, configparser.Error):
        pass
    return {urlsplit(url).netloc for url in urls if urlsplit(url).netloc}


def has_credentials() -> bool:
    """Whether wandb has an API key: WANDB_API_KEY, or a netrc entry for one of server_hosts()."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        text = netrc.read_text()
    except OSError:
        return False
    return any(host in text for host in server_hosts())


def offline_fallback_text(mode: str, err: Exception, timeout: float, run_dir: Path) -> str:
    """The warning when wandb.init failed in ``mode`` (no network: it gave up after ``timeout`` seconds) and
    the run logs offline into ``run_dir``/wandb instead."""
    reason = (str(err).strip().splitlines() or [""])[0]
    return (f"wandb could not start {mode} within log.wandb_init_timeout={timeout:g} s ({type(err).__name__}: "
            f"{reason}); went offline: logging into {run_dir / 'wandb'}, sync it later with "
            f"`wandb sync {run_dir / 'wandb'}/offline-run-*`")


class WandbLogger:
    def __init__(self, config, run_dir: Path, warn: Callable[[str], None]):
        self.warn = warn
        self.run = None
        self.mode = os.environ.get("WANDB_MODE") or ("online" if has_credentials() else "offline")
        if self.mode not in MODES:  # wandb.init would fail twice (online, then the offline fallback) on it
            warn(f"WANDB_MODE={self.mode!r} is not a wandb mode ({', '.join(MODES[:3])}); set e.g. "
                 "WANDB_MODE=offline, or unset it; training goes on without wandb")
            return
        try:
            import wandb
        except ImportError:
            warn(f"log.wandb is on but wandb is not installed: {install_extra('wandb')}; training goes on without it")
            return
        except Exception as err:  # noqa: BLE001 - a broken install (protobuf too new: TypeError) must not stop the run
            warn(f"log.wandb is on but wandb fails to import ({type(err).__name__}: {str(err).splitlines()[0]}); "
                 "repair it (pip install -U wandb protobuf); training goes on without it")
            return
        self.wandb = wandb
        log = config.log
        kwargs = dict(project=log.wandb_project, entity=log.wandb_entity or None, group=log.wandb_group or None,
                      tags=[t.strip() for t in log.wandb_tags.split(",") if t.strip()] or None,
                      name=log.run_name or Path(run_dir).name, dir=str(run_dir), reinit="finish_previous",
                      config={"env_name": config.env_name, "preset": config.preset, **as_layer(config)})
        kwargs["settings"] = wandb.Settings(init_timeout=log.wandb_init_timeout)  # its default waits 90 s
        try:
            self.run = wandb.init(mode=self.mode, **kwargs)
        except Exception as err:  # noqa: BLE001 - no network, bad key, ...: fall back to offline
            if self.mode in ("offline", "dryrun"):
                self._fail(err)
                return
            warn(offline_fallback_text(self.mode, err, log.wandb_init_timeout, Path(run_dir)))
            self.mode = "offline"
            try:
                self.run = wandb.init(mode="offline", **kwargs)
            except Exception as err2:  # noqa: BLE001
                self._fail(err2)

    def _fail(self, err: Exception) -> None:
        self.warn(f"wandb failed ({type(err).__name__}: {err}); training goes on without it")
        self.run = None

    def log(self, record: dict) -> None:
        if self.run is None:
            return
        try:
            self.run.log({k: v for k, v in record.items() if v is not None}, step=record["global_step"])
        except Exception as err:  # noqa: BLE001
            self._fail(err)

    def close(self, exit_code: int = 0) -> str | None:
        """Finishes the run (``exit_code`` not 0: wandb marks it failed) and stops wandb's service process;
        returns a line on where the run went."""
        if self.run is None:
            return None
        run, self.run = self.run, None
        directory = getattr(run, "dir", None)
        try:
            run.finish(exit_code=exit_code)
            self.wandb.teardown()
        except Exception as err:  # noqa: BLE001
            self.warn(f"wandb did not finish cleanly ({type(err).__name__}: {err})")
        if self.mode in ("offline", "dryrun") and directory:
            return f"wandb ran offline; sync with `wandb sync {Path(directory).parent}`"
        return None
