"""Stand-in for Megatron-Bridge in bridge-launch's local test image (see README.md at the tree's top).

Upstream's __init__ exports __version__ from package_info (src/megatron/bridge/__init__.py at 067f987)."""
from megatron.bridge.package_info import __version__  # noqa: F401

ORIGIN = "image"
