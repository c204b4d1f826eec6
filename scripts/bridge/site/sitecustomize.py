"""Run at the start of every interpreter that has this directory on PYTHONPATH (the tests put it
there for processes under the bridge venv, which re-exec themselves: the canary's checks run in a
subprocess): the stand-ins of scripts/bridge/standins.py, and with BRIDGE_LAUNCH_FAKE_GPU set
("NAME:MAJOR:MINOR"), torch.cuda's answers for that GPU; with BRIDGE_LAUNCH_TRAINER=probe, the
training loop's stand-in (probe_trainer.py) in place of Megatron-Bridge's pretrain() and finetune()."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import standins

standins.install()
if os.environ.get("BRIDGE_LAUNCH_FAKE_GPU"):
    standins.fake_gpu(os.environ["BRIDGE_LAUNCH_FAKE_GPU"])
if os.environ.get("BRIDGE_LAUNCH_TRAINER") == "probe":
    import probe_trainer  # noqa: F401 - records the directory the process started in

    standins.install_trainer_probe()
