# Stand-in (scripts/image/Megatron-Bridge): the version of Megatron-Bridge 067f987
# (src/megatron/bridge/package_info.py: MAJOR 0, MINOR 7, PATCH 0; the real file appends
# "+<git short hash>" when the tree is a git checkout; this one is not).
MAJOR = 0
MINOR = 7
PATCH = 0
PRE_RELEASE = ""
VERSION = (MAJOR, MINOR, PATCH, PRE_RELEASE)
__version__ = ".".join(map(str, VERSION[:3])) + "".join(VERSION[3:])
