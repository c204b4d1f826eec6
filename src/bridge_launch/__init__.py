"""bridge-launch: Megatron-Bridge recipe x cluster profile -> a running, resumable job."""

__version__ = "0.1.0"
