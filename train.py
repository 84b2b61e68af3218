"""DreamerV3 on DeepMind Control: `python train.py [group=preset] [key=value ...]`.

Thin entrypoint: Hydra composes conf/config.yaml and the groups; dreamer.run.app does the rest.
"""
import os
import sys
import tempfile

# First of all: Ctrl-C and SIGTERM are recorded from here on and honoured at safe points. A
# KeyboardInterrupt raised inside a library's import can be swallowed by a broad `except` there
# (seen: a Ctrl-C 1 s into start-up was lost and the run trained on). Not in the collector's
# spawned processes, which import this file as __mp_main__ and must keep ignoring both signals.
from dreamer.run.stop import StopRequest  # noqa: E402  (light: signal, threading)

STOP = StopRequest().install() if __name__ == "__main__" else StopRequest()

from dreamer.runtime import setup  # noqa: E402

setup()  # before torch or a simulator is imported; also in the collector's spawned processes

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from dreamer.config import ConfigError, register_configs, validate_or_exit  # noqa: E402
from dreamer.run.launch import export_slurm_rendezvous  # noqa: E402
from dreamer.config.overrides import check_override_keys  # noqa: E402

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    export_slurm_rendezvous()  # a SLURM task of a multi-task job: one data-parallel rank
    config = validate_or_exit(cfg)  # before torch is imported: a bad override fails in about a second
    from dreamer.run.app import run

    run(config, STOP)  # a stop requested since start-up ends the run before training starts


def other_ranks_write_nothing(args: list[str]) -> list[str]:
    """Under torchrun, ranks other than 0 keep Hydra's files out of the run dir (rank 0's, which
    they adopt: dreamer/run/app.py) and out of the outputs/ tree."""
    if int(os.environ.get("WORLD_SIZE", "1")) == 1 or int(os.environ.get("RANK", "0")) == 0:
        return args
    extra = ["hydra.output_subdir=null", "hydra/job_logging=disabled", "hydra/hydra_logging=disabled"]
    if not any(a.startswith("hydra.run.dir=") for a in args):
        extra.append(f"hydra.run.dir={tempfile.gettempdir()}/dreamer-rank{os.environ['RANK']}-{os.getpid()}")
    return args + [e for e in extra if e.split("=")[0] not in {a.split("=")[0] for a in args}]


if __name__ == "__main__":
    try:
        check_override_keys(sys.argv[1:])  # a mistyped key: name it and list the valid ones
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    sys.argv[1:] = other_ranks_write_nothing(sys.argv[1:])
    main()
