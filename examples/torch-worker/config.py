"""config.json of a Llama/Granite checkpoint, and its tensor-parallel split."""

import json
import math
import os

from safetensors_io import CheckpointError

SUPPORTED_TYPES = ("llama", "granite")


class ConfigError(CheckpointError):
    """A config.json this worker cannot run; the message names the field."""


def _get_int(cfg, path, key, default=None, minimum=1):
    v = cfg.get(key, default)
    if v is None or isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ConfigError("%s: %s must be an integer >= %d, got %r" % (path, key, minimum, v))
    return v


def _get_float(cfg, path, key, default, positive=True):
    v = cfg.get(key, default)
    if v is None:
        v = default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (positive and v <= 0):
        raise ConfigError("%s: %s must be a %snumber, got %r" % (path, key, "positive " if positive else "", v))
    return float(v)


def _refuse_unsupported(cfg, path):
    mt = cfg.get("model_type")
    if mt is not None and mt not in SUPPORTED_TYPES:
        raise ConfigError("%s: model_type %r is not supported (this worker runs %s)"
                          % (path, mt, ", ".join(SUPPORTED_TYPES)))
    if cfg.get("rope_scaling") is not None:
        raise ConfigError("%s: rope_scaling %r is not supported (only plain RoPE)" % (path, cfg["rope_scaling"]))
    for key in ("attention_bias", "mlp_bias"):
        if cfg.get(key):
            raise ConfigError("%s: %s is true; this worker supports bias-free Llama layers only" % (path, key))
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise ConfigError("%s: hidden_act %r is not supported (only silu)" % (path, act))


class ModelConfig:
    """The fields of config.json this worker uses (Llama defaults when absent)."""

    def __init__(self, cfg, path="config.json"):
        if not isinstance(cfg, dict):
            raise ConfigError("%s: not a JSON object" % path)
        _refuse_unsupported(cfg, path)
        self.vocab = _get_int(cfg, path, "vocab_size")
        self.hidden = _get_int(cfg, path, "hidden_size")
        self.layers = _get_int(cfg, path, "num_hidden_layers")
        self.heads = _get_int(cfg, path, "num_attention_heads")
        self.kv_heads = _get_int(cfg, path, "num_key_value_heads", self.heads)
        self.intermediate = _get_int(cfg, path, "intermediate_size")
        self.head_dim = _get_int(cfg, path, "head_dim", self.hidden // self.heads)
        if cfg.get("head_dim") is None and self.hidden % self.heads:
            raise ConfigError("%s: hidden_size %d is not a multiple of num_attention_heads %d"
                              % (path, self.hidden, self.heads))
        if self.head_dim % 2:
            raise ConfigError("%s: head_dim %d must be even for rotary embeddings" % (path, self.head_dim))
        if self.heads % self.kv_heads:
            raise ConfigError("%s: num_attention_heads %d is not a multiple of num_key_value_heads %d"
                              % (path, self.heads, self.kv_heads))
        self.eps = _get_float(cfg, path, "rms_norm_eps", 1e-6)
        self.rope_theta = _get_float(cfg, path, "rope_theta", 10000.0)
        self.tie = bool(cfg.get("tie_word_embeddings", False))
        self.eos = _eos(cfg, path)
        # The model's context, reported to the agent (0: the config has none).
        mpe = cfg.get("max_position_embeddings")
        self.max_model_len = 0 if mpe is None else _get_int(cfg, path, "max_position_embeddings", minimum=0)
        self.embedding_multiplier = _get_float(cfg, path, "embedding_multiplier", 1.0, positive=False)
        self.attention_scale = _get_float(cfg, path, "attention_multiplier", 1.0 / math.sqrt(self.head_dim))
        self.residual_multiplier = _get_float(cfg, path, "residual_multiplier", 1.0, positive=False)
        self.logits_scaling = _get_float(cfg, path, "logits_scaling", 1.0)

    @classmethod
    def load(cls, directory):
        """config.json of directory; generation_config.json's eos_token_id,
        if that file gives one, overrides config.json's (as Hugging Face's
        generate and tpcoord serve-model take it)."""
        path = os.path.join(directory, "config.json")
        mc = cls(_read_json(path), path)
        gen_path = os.path.join(directory, "generation_config.json")
        if os.path.exists(gen_path):
            gen = _read_json(gen_path)
            if not isinstance(gen, dict):
                raise ConfigError("%s: not a JSON object" % gen_path)
            eos = gen.get("eos_token_id")
            if eos is not None and eos != []:
                mc.eos = _eos(gen, gen_path)
        return mc


def _read_json(path):
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ConfigError("%s: %s" % (path, e)) from None


def _eos(cfg, path):
    eos = cfg.get("eos_token_id")
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    if eos is None:
        return -1
    if isinstance(eos, bool) or not isinstance(eos, int) or not -1 <= eos < 1 << 31:
        raise ConfigError("%s: eos_token_id %r is not a token id" % (path, cfg.get("eos_token_id")))
    return eos


class Layout:
    """Which part of every tensor rank `rank` of `world` holds (Megatron TP).

    Query heads and the MLP's intermediate size are split evenly. KV heads
    are split when world divides them, else replicated: each rank keeps the
    one KV head its query heads use. The vocab is split in contiguous ranges
    of ceil(vocab/world) (the last ranges may be short or empty)."""

    def __init__(self, cfg, rank, world):
        check_split(cfg, world)
        self.rank, self.world = rank, world
        self.heads = cfg.heads // world
        self.head0 = rank * self.heads
        self.kv_heads = max(cfg.kv_heads // world, 1)
        group = cfg.heads // cfg.kv_heads
        self.kv0 = self.head0 // group
        self.inter = cfg.intermediate // world
        self.inter0 = rank * self.inter
        self.vocab_chunk = -(-cfg.vocab // world)
        self.vocab0 = min(rank * self.vocab_chunk, cfg.vocab)
        self.vocab1 = min(self.vocab0 + self.vocab_chunk, cfg.vocab)


def check_split(cfg, world):
    """Refuse a TP size that does not split the model evenly, with the numbers."""
    if world < 1:
        raise ConfigError("world size %d is not positive" % world)
    if cfg.heads % world:
        raise ConfigError("tensor parallelism %d does not divide num_attention_heads %d" % (world, cfg.heads))
    if cfg.kv_heads % world and world % cfg.kv_heads:
        raise ConfigError("tensor parallelism %d and num_key_value_heads %d do not divide one another"
                          % (world, cfg.kv_heads))
    if cfg.intermediate % world:
        raise ConfigError("tensor parallelism %d does not divide intermediate_size %d"
                          % (world, cfg.intermediate))
