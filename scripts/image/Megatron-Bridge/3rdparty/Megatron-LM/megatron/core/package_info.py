# Stand-in: the version of megatron-core 2a75ac12 (megatron/core/package_info.py: 0.20.0).
MAJOR = 0
MINOR = 20
PATCH = 0
PRE_RELEASE = ""
VERSION = (MAJOR, MINOR, PATCH, PRE_RELEASE)
__version__ = ".".join(map(str, VERSION[:3])) + "".join(VERSION[3:])
