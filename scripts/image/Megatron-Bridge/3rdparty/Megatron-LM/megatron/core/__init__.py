"""Stand-in for megatron-core in bridge-launch's local test image (megatron/core/__init__.py exports
__version__ from package_info at 2a75ac12)."""
from megatron.core.package_info import __version__  # noqa: F401

ORIGIN = "image"
