"""Stand-in: run_recipe.py's --dataset presets (upstream recipes/utils/dataset_utils.py). None here: a
recipe's own dataset is used, as it is without --dataset upstream."""
DATASET_PRESETS: dict = {}


def build_dataset_config(recipe, name):
    raise ValueError(f"unknown dataset preset {name!r}")


def dataset_train_mode(dataset) -> str | None:
    return None
