"""Run at the start of every interpreter that has this directory on PYTHONPATH (the tests put it
there for processes under the bridge venv, which re-exec themselves: the canary's checks run in a
subprocess): the stand-ins of scripts/bridge/standins.py, and with BRIDGE_LAUNCH_FAKE_GPU set
("NAME:MAJOR:MINOR"), torch.cuda's answers for that GPU."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import standins

standins.install()
if os.environ.get("BRIDGE_LAUNCH_FAKE_GPU"):
    standins.fake_gpu(os.environ["BRIDGE_LAUNCH_FAKE_GPU"])
