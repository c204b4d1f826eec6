"""Dataset preparation and inspection (Energon shards for the VL recipes).

Nothing heavy is imported here: energon, PIL, submitit and numpy load inside the
functions that need them, so `bridge-launch --help` stays fast."""
