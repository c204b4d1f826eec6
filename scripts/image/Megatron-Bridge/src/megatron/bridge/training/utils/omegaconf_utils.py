"""Stand-in: how Megatron-Bridge applies Hydra-style overrides onto a ConfigContainer.

Follows Megatron-Bridge 067f987 src/megatron/bridge/training/utils/omegaconf_utils.py with Hydra's and
OmegaConf's own code (hydra-core and omegaconf are installed in the image, as in NeMo's):

- process_config_with_overrides (:105-160): the dataclass tree becomes a plain dict (callables left
  out), OmegaConf.create, optional YAML merge, then the CLI overrides, then
  OmegaConf.to_container(resolve=True) and the values set back onto the dataclasses;
- parse_hydra_overrides (:163-187): OmegaConf.set_struct(cfg, True), Hydra's OverridesParser and
  ConfigLoaderImpl._apply_overrides_to_config, so `key=value` on a key the config does not have
  fails ("Could not override ... To append to your config use +..."), `+key` on an existing key
  fails, `~key` deletes; any error is re-raised as OverridesError("Failed to parse Hydra
  overrides: ...");
- _dataclass_to_omegaconf_dict (:230-346) and _apply_overrides (:454-519): fields recurse, unknown
  keys in the result are skipped with a warning, values are set with setattr (no type checks: the
  dict is not a structured config).
Left out: torch.dtype and activation-function conversion, `_target_` instantiation, excluded-callable
restoration (the stand-in's configs hold no callables).
"""
import dataclasses
import logging
from pathlib import Path

from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

logger = logging.getLogger(__name__)


class OverridesError(Exception):
    """Custom exception for Hydra override parsing errors."""


def _to_dict(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_dict(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_dict(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_dict(v) for k, v in value.items()}
    return value


def create_omegaconf_dict_config(config_container):
    return OmegaConf.create(_to_dict(config_container)), {}


def parse_hydra_overrides(cfg: DictConfig, overrides: list) -> DictConfig:
    try:
        OmegaConf.set_struct(cfg, True)
        parser = OverridesParser.create()
        parsed = parser.parse_overrides(overrides=overrides)
        ConfigLoaderImpl._apply_overrides_to_config(overrides=parsed, cfg=cfg)
        return cfg
    except Exception as e:
        raise OverridesError(f"Failed to parse Hydra overrides: {str(e)}") from e


def _apply_overrides(config_obj, overrides_dict: dict) -> None:
    if not dataclasses.is_dataclass(config_obj):
        return
    for key, value in overrides_dict.items():
        if not hasattr(config_obj, key):
            logger.warning(f"Key '{key}' in overrides not found in config object {type(config_obj).__name__}. Skipping.")
            continue
        current = getattr(config_obj, key)
        if dataclasses.is_dataclass(current) and isinstance(value, dict):
            _apply_overrides(current, value)
        else:
            setattr(config_obj, key, value)


def apply_overrides(config_obj, overrides_dict: dict, excluded_fields: dict) -> None:
    _apply_overrides(config_obj, overrides_dict)


def process_config_with_overrides(config, config_filepath: str | None = None, cli_overrides: list | None = None):
    omega_conf, excluded_fields = create_omegaconf_dict_config(config)
    if config_filepath:
        path = Path(config_filepath)
        if not path.exists():
            raise FileNotFoundError(f"Config file not found: {config_filepath}")
        omega_conf = OmegaConf.merge(omega_conf, OmegaConf.load(path))
    if cli_overrides:
        omega_conf = parse_hydra_overrides(omega_conf, cli_overrides)
    final = OmegaConf.to_container(omega_conf, resolve=True)
    apply_overrides(config, final, excluded_fields)
    return config
