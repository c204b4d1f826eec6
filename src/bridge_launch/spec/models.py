"""The model description: one place for a recipe's architecture facts (layers, heads, query
groups, experts, hidden sizes, vocabulary, MTP layers, vision tower, ...), each with its source.

`plan` (memory, FLOPs), plan/rules.py (Megatron's divisibility rules before submit) and
`submit --dry-run` all read it through `facts_for(job)`. The facts live in models.toml; a job's
own model.* values win over the table and say so. Standard library only, so the --dry-run path
never imports megatron-core or torch.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import tomllib

TABLE = "models.toml"

# job config key -> fact name ("attention.num_heads" names a fact inside a group)
CONFIG_KEYS = {
    "model.num_layers": "num_layers",
    "model.hidden_size": "hidden_size",
    "model.ffn_hidden_size": "ffn",
    "model.vocab_size": "vocab_size",
    "model.mtp_num_layers": "mtp_layers",
    "model.share_embeddings_and_output_weights": "tied_embeddings",
    "model.num_attention_heads": "attention.num_heads",
    "model.num_query_groups": "attention.num_query_groups",
    "model.kv_channels": "attention.head_dim",
    "model.num_moe_experts": "moe.num_experts",
    "model.moe_router_topk": "moe.topk",
    "model.moe_ffn_hidden_size": "moe.expert_ffn",
    "model.moe_shared_expert_intermediate_size": "moe.shared_expert_ffn",
    "model.linear_num_key_heads": "gdn.key_heads",
    "model.linear_num_value_heads": "gdn.value_heads",
    "model.linear_key_head_dim": "gdn.key_head_dim",
    "model.linear_value_head_dim": "gdn.value_head_dim",
    "model.linear_conv_kernel_dim": "gdn.conv_kernel",
    "model.mamba_num_heads": "mamba.num_heads",
    "model.mamba_head_dim": "mamba.head_dim",
    "model.mamba_state_dim": "mamba.state_dim",
    "model.mamba_num_groups": "mamba.num_groups",
}
KEY_OF = {fact: key for key, fact in CONFIG_KEYS.items()}
_BOOL_FACTS = {"tied_embeddings"}
MCORE_DEFAULT = "megatron-core TransformerConfig default"


class Fact:
    """One fact: its value, a short source ("models.toml qwen35-35b-a3b [slime] [card]",
    "job config: cli", ...) and the full citations behind the source's tags."""

    __slots__ = ("value", "source", "refs")

    def __init__(self, value, source: str, refs: tuple = ()):
        self.value, self.source, self.refs = value, source, refs

    def __repr__(self) -> str:
        return f"Fact({self.value!r}, {self.source!r})"


class ModelFacts:
    """A job's model: the models.toml entry (or "job config"), its family ("gpt" | "hybrid" |
    None), where the facts come from, and the facts by name ("num_layers", "moe.num_experts", ...).
    Plain classes here: this module is on every --dry-run's path."""

    def __init__(self, *, name: str, description: str, family, where: str, facts: dict, verified=None):
        self.name, self.description, self.family, self.where = name, description, family, where
        self.facts, self.verified = facts, verified

    def get(self, name: str, default=None):
        f = self.facts.get(name)
        return default if f is None or f.value is None else f.value

    def source(self, name: str) -> str:
        f = self.facts.get(name)
        return f.source if f else "unknown"

    def int(self, name: str):
        """An integer fact, or None (unknown, unset or not an integer)."""
        v = self.get(name)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    def cite(self, name: str) -> str:
        """A fact as the config key that sets it, its value and its source:
        'model.num_moe_experts=128 (models.toml nemotron-3-nano-30b-a3b [mb] [paper])',
        'model.num_moe_experts=24 (job config: cli)'."""
        return f"{KEY_OF.get(name, name)}={self.get(name)} ({self.source(name)})"

    def group(self, prefix: str) -> dict:
        """The values of one group of facts ("attention", "moe", ...) as a plain dict."""
        p = prefix + "."
        return {k[len(p) :]: f.value for k, f in self.facts.items() if k.startswith(p) and f.value is not None}

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "where": self.where,
            "family": self.family,
            "facts": {k: {"value": f.value, "source": f.source} for k, f in self.facts.items()},
        }

    def summary(self) -> str:
        """One line for --dry-run: the facts the rules use."""
        parts = []
        if self.int("num_layers") is not None:
            parts.append(f"{self.get('num_layers')} layers")
        if self.get("mtp_layers"):
            parts.append(f"{self.get('mtp_layers')} MTP")
        if self.int("attention.num_heads") is not None:
            g = self.get("attention.num_query_groups")
            parts.append(f"{self.get('attention.num_heads')} heads" + (f" / {g} query groups" if g else ""))
        if self.int("gdn.key_heads") is not None:
            parts.append(f"GDN {self.get('gdn.key_heads')}/{self.get('gdn.value_heads')} key/value heads")
        if self.int("mamba.num_heads") is not None:
            parts.append(f"Mamba {self.get('mamba.num_heads')} heads / {self.get('mamba.num_groups')} groups")
        if self.int("moe.num_experts") is not None:
            parts.append(
                f"{self.get('moe.num_experts')} experts (top-{self.get('moe.topk')}, FFN {self.get('moe.expert_ffn')})"
            )
        if self.int("hidden_size") is not None:
            parts.append(f"hidden {self.get('hidden_size')}")
        if self.int("vocab_size") is not None:
            parts.append(f"vocab {self.get('vocab_size')}")
        if self.int("vision.depth") is not None:
            parts.append(f"vision {self.get('vision.depth')} layers x {self.get('vision.hidden_size')}")
        overridden = sorted(
            {KEY_OF[k] for k, f in self.facts.items() if f.source.startswith("job config") and k in KEY_OF}
        )
        text = f"{self.name} ({self.where}): " + ", ".join(parts)
        return text + (f"; from the job: {', '.join(overridden)}" if overridden else "")


@lru_cache(maxsize=1)
def table() -> dict:
    return tomllib.loads((Path(__file__).parent / TABLE).read_text())


def _entry(name: str) -> dict:
    """A [models.NAME] entry with `extends` applied (facts and refs merged, the child winning)."""
    data = table()["models"][name]
    own = _tag(data.get("facts", {}), name)
    if "extends" not in data:
        return {
            **data,
            "facts": own,
            "refs": {t: (name, text) for t, text in data.get("refs", {}).items()},
            "lineage": [name],
        }
    base = _entry(data["extends"])
    merged = {**base, **{k: v for k, v in data.items() if k not in ("facts", "refs", "extends")}}
    merged["facts"] = _merge(base["facts"], own)
    merged["refs"] = {**base["refs"], **{t: (name, text) for t, text in data.get("refs", {}).items()}}
    merged["lineage"] = [name] + base["lineage"]
    return merged


def _tag(d: dict, name: str) -> dict:
    """A copy of a facts table with each fact marked with the entry that states it."""
    return {
        k: _tag(v, name) if isinstance(v, dict) and "value" not in v else {**v, "_from": name} for k, v in d.items()
    }


def _copy(d: dict) -> dict:
    return {k: _copy(v) if isinstance(v, dict) and "value" not in v else v for k, v in d.items()}


def _merge(base: dict, over: dict) -> dict:
    out = _copy(base)
    for k, v in over.items():
        if isinstance(v, dict) and "value" not in v:
            out[k] = _merge(out.get(k, {}), v)
        else:
            out[k] = v
    return out


def _flatten(facts: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in facts.items():
        if isinstance(v, dict) and "value" not in v:
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _cite(source: str, refs: dict, entry: str) -> tuple:
    """(short source, full citations): tags name refs of the entry that states the fact."""
    where = f"{TABLE} {entry}"
    tags = source.split()
    if tags and all(t in refs for t in tags):
        return where + " " + " ".join(f"[{t}]" for t in tags), tuple(refs[t][1] for t in tags)
    return f"{where}: {source}", ()


def entry_for(recipe: str, hf_model: str | None) -> str | None:
    """The models.toml entry a recipe uses: by recipe name, then by hf_model."""
    models = table()["models"]
    name = next((n for n, m in models.items() if recipe in m.get("recipes", [])), None)
    if name is None and hf_model:
        name = next((n for n, m in models.items() if hf_model in m.get("hf_ids", [])), None)
    return name


def entry_values(name: str) -> dict:
    """A [models.NAME] entry's facts as {"group.fact": value}, `extends` applied, and its hf_ids."""
    data = _entry(name)
    return {"hf_ids": list(data.get("hf_ids", [])), **{k: v.get("value") for k, v in _flatten(data["facts"]).items()}}


def lineage(name: str) -> list:
    """The entry and the entries it extends, nearest first."""
    return _entry(name)["lineage"]


def _int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def facts_for(job) -> ModelFacts | None:
    """The job's model: its models.toml entry (by recipe, then hf_model) with the job's own
    model.* values on top; for a recipe without an entry, the model.* values it sets (Megatron's
    TransformerConfig defaults filling in ffn, head dim and query groups); None when neither says
    anything about the model."""
    cfg = job.config
    prov = (getattr(job, "provenance", None) or {}).get("config", {})
    name = entry_for(job.recipe, job.hf_model)
    facts: dict = {}
    if name is not None:
        data = _entry(name)
        where = f"{TABLE} [models.{name}]"
        for k, v in _flatten(data["facts"]).items():
            src, refs = _cite(str(v.get("source", "")), data["refs"], v["_from"])
            facts[k] = Fact(v.get("value"), src, refs)
        mf = dict(
            name=name,
            description=data.get("description", ""),
            family=data.get("family"),
            where=where,
            verified=data.get("verified"),
        )
    elif any(k in cfg for k in CONFIG_KEYS):
        mf = dict(
            name="job config",
            description="the model.* values the job sets",
            family=None,
            where="model.* keys the job sets",
            verified=None,
        )
    else:
        return None
    for key, fact in CONFIG_KEYS.items():
        if key not in cfg:
            continue
        value = cfg[key]
        src = f"job config: {prov.get(key, 'job')}"
        if isinstance(value, str) and "${" in value:
            facts[fact] = Fact(None, f"job config: {prov.get(key, 'job')}, an interpolation resolved in the job")
        elif (
            value is None
            or (fact in _BOOL_FACTS and isinstance(value, bool))
            or (fact not in _BOOL_FACTS and _int(value))
        ):
            facts[fact] = Fact(value, src)

    # Megatron's defaults for what a plain config leaves out or sets to null (TransformerConfig.__post_init__)
    def unset(name_):
        return name_ not in facts or facts[name_].value is None

    h, a = facts.get("hidden_size"), facts.get("attention.num_heads")
    if h and _int(h.value) and unset("ffn") and (name is None or "ffn" in facts):
        facts["ffn"] = Fact(4 * h.value, f"{MCORE_DEFAULT}: ffn_hidden_size = 4 * hidden_size")
    if a and _int(a.value):
        if h and _int(h.value) and a.value > 0 and unset("attention.head_dim"):
            facts["attention.head_dim"] = Fact(
                h.value // a.value, f"{MCORE_DEFAULT}: kv_channels = hidden_size // num_attention_heads"
            )
        if unset("attention.num_query_groups"):
            facts["attention.num_query_groups"] = Fact(
                a.value, f"{MCORE_DEFAULT}: num_query_groups = num_attention_heads"
            )
    return ModelFacts(facts=facts, **mf)
