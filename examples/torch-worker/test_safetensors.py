"""The safetensors reader and the config checks, against checkpoints
written by scripts/make-checkpoint.py and corrupted copies of them."""

import json
import os
import shutil
import struct
import tempfile
import unittest

import torch

import testlib
from config import ConfigError, Layout, ModelConfig
from model import TPModel
from safetensors_io import Checkpoint, CheckpointError, SafetensorsFile


class ReaderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="st-test-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def ckpt_dir(self, name, **kw):
        d = os.path.join(self.tmp, name)
        cfg, weights = testlib.make_checkpoint(d, **kw)
        return d, cfg, weights

    def test_reads_every_dtype_exactly(self):
        for flag, dtype in (("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)):
            with self.subTest(dtype=flag):
                d, _, weights = self.ckpt_dir("all-" + flag, dtype=flag)
                ck = Checkpoint(d)
                for name, want in weights.items():
                    got = ck.read(name, want.shape)
                    self.assertEqual(got.dtype, dtype, name)
                    self.assertTrue(torch.equal(got.float(), want), name)
                ck.close()

    def test_sharded_with_index(self):
        d, _, weights = self.ckpt_dir("sharded", dtype="bf16", shards=3)
        with open(os.path.join(d, "model.safetensors.index.json")) as f:
            files = set(json.load(f)["weight_map"].values())
        self.assertEqual(len(files), 3)
        self.assertFalse(os.path.exists(os.path.join(d, "model.safetensors")))
        ck = Checkpoint(d)
        for name, want in weights.items():
            self.assertTrue(torch.equal(ck.read(name, want.shape).float(), want), name)
        ck.close()

    def test_slices(self):
        d, _, weights = self.ckpt_dir("slices", dtype="f16")
        ck = Checkpoint(d)
        name = "model.layers.1.self_attn.o_proj.weight"
        want = weights[name]
        self.assertTrue(torch.equal(ck.read(name, want.shape, rows=(8, 24)).float(), want[8:24]))
        self.assertTrue(torch.equal(ck.read(name, want.shape, cols=(16, 48)).float(), want[:, 16:48]))
        self.assertEqual(tuple(ck.read(name, want.shape, rows=(5, 5)).shape), (0, 64))
        ck.close()

    def test_generator_is_deterministic(self):
        a, _, _ = self.ckpt_dir("det-a", seed=7, dtype="bf16")
        b, _, _ = self.ckpt_dir("det-b", seed=7, dtype="bf16")
        c, _, _ = self.ckpt_dir("det-c", seed=8, dtype="bf16")
        def read(d):
            with open(os.path.join(d, "model.safetensors"), "rb") as f:
                return f.read()
        self.assertEqual(read(a), read(b))
        self.assertNotEqual(read(a), read(c))

    def test_greedy_decode_is_not_degenerate(self):
        d = os.path.join(self.tmp, "greedy")
        cfg, weights = testlib.make_checkpoint(d)
        ref = testlib.Reference(cfg, weights)
        outputs = []
        for prompt in ([5, 6, 7], [900, 3], [42]):
            seq = list(prompt)
            for _ in range(12):
                seq.append(int(ref.logits(seq).argmax()))
            outputs.append(seq[len(prompt):])
        for out in outputs:
            self.assertGreaterEqual(len(set(out)), 6, outputs)
        self.assertEqual(len({tuple(o) for o in outputs}), 3, outputs)


class CorruptTest(unittest.TestCase):
    """Bad files give errors that name the tensor and the file."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="st-corrupt-")
        cls.good = os.path.join(cls.tmp, "good")
        cls.cfg, cls.weights = testlib.make_checkpoint(cls.good, dtype="f16", shards=2)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def copy(self, name):
        d = os.path.join(self.tmp, name)
        shutil.copytree(self.good, d)
        return d

    def shard(self, d, i=2):
        return os.path.join(d, "model-%05d-of-00002.safetensors" % i)

    def load(self, d, world=1):
        ck = Checkpoint(d)
        try:
            TPModel(ModelConfig.load(d), ck, 0, world)
        finally:
            ck.close()

    def header(self, path):
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            return json.loads(f.read(n)), f.read()

    def rewrite(self, path, header, data):
        raw = json.dumps(header).encode()
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw + data)

    def test_truncated_file_names_tensor_and_file(self):
        d = self.copy("truncated")
        path = self.shard(d)
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            f.truncate(size - 10)
        with self.assertRaises(CheckpointError) as cm:
            self.load(d)
        msg = str(cm.exception)
        self.assertIn("lm_head.weight", msg)  # the last tensor of the last shard
        self.assertIn(path, msg)
        self.assertIn("truncated", msg)

    def test_header_length_beyond_file(self):
        d = self.copy("hdrlen")
        path = self.shard(d, 1)
        with open(path, "r+b") as f:
            f.write(struct.pack("<Q", 1 << 40))
        with self.assertRaises(CheckpointError) as cm:
            self.load(d)
        self.assertIn(path, str(cm.exception))
        self.assertIn("header length", str(cm.exception))

    def test_bad_offsets_and_dtype(self):
        name = "model.layers.1.mlp.up_proj.weight"
        cases = [("span", lambda e: e.update(data_offsets=[e["data_offsets"][0], e["data_offsets"][1] - 2]),
                  "needs"),
                 ("dtype", lambda e: e.update(dtype="F17"), "unknown dtype"),
                 ("past", lambda e: e.update(data_offsets=[1 << 40, (1 << 40) + 2 * 128 * 64]), "data ends")]
        for tag, mutate, want in cases:
            with self.subTest(tag):
                d = self.copy("bad-" + tag)
                path = self.shard(d)
                header, data = self.header(path)
                self.assertIn(name, header)
                mutate(header[name])
                self.rewrite(path, header, data)
                with self.assertRaises(CheckpointError) as cm:
                    self.load(d)
                msg = str(cm.exception)
                self.assertIn(name, msg)
                self.assertIn(path, msg)
                self.assertIn(want, msg)

    def test_missing_tensor_in_index_and_in_file(self):
        d = self.copy("missing-index")
        index = os.path.join(d, "model.safetensors.index.json")
        with open(index) as f:
            idx = json.load(f)
        del idx["weight_map"]["model.layers.0.mlp.down_proj.weight"]
        with open(index, "w") as f:
            json.dump(idx, f)
        with self.assertRaises(CheckpointError) as cm:
            self.load(d)
        self.assertIn("model.layers.0.mlp.down_proj.weight", str(cm.exception))
        self.assertIn(index, str(cm.exception))

        d = self.copy("missing-file")
        path = self.shard(d)
        header, data = self.header(path)
        del header["model.norm.weight"]
        self.rewrite(path, header, data)
        with self.assertRaises(CheckpointError) as cm:
            self.load(d)
        self.assertIn("model.norm.weight", str(cm.exception))
        self.assertIn(path, str(cm.exception))

    def test_wrong_shape(self):
        d = self.copy("shape")
        path = self.shard(d, 1)
        header, data = self.header(path)
        name = "model.layers.0.self_attn.k_proj.weight"
        header[name]["shape"] = [64, 32]  # same byte count, wrong shape
        self.rewrite(path, header, data)
        with self.assertRaises(CheckpointError) as cm:
            self.load(d)
        msg = str(cm.exception)
        self.assertIn(name, msg)
        self.assertIn(path, msg)
        self.assertIn("[64, 32]", msg)
        self.assertIn("[32, 64]", msg)

    def test_not_safetensors(self):
        path = os.path.join(self.tmp, "junk.safetensors")
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", 5) + b"{nope")
        with self.assertRaises(CheckpointError) as cm:
            SafetensorsFile(path)
        self.assertIn(path, str(cm.exception))
        self.assertIn("JSON", str(cm.exception))


class ConfigTest(unittest.TestCase):
    def cfg(self, **kw):
        base = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=128)
        base.update(kw)
        return ModelConfig(base, "config.json")

    def test_refusals_name_the_field(self):
        for kw, want in ((dict(rope_scaling={"type": "linear", "factor": 2.0}), "rope_scaling"),
                         (dict(attention_bias=True), "attention_bias"),
                         (dict(mlp_bias=True), "mlp_bias"),
                         (dict(model_type="gpt2"), "model_type"),
                         (dict(hidden_size="64"), "hidden_size"),
                         (dict(num_key_value_heads=3), "num_key_value_heads 3")):
            with self.subTest(want):
                with self.assertRaises(ConfigError) as cm:
                    self.cfg(**kw)
                self.assertIn(want, str(cm.exception))

    def test_defaults_and_eos(self):
        c = self.cfg(eos_token_id=[7, 9])
        self.assertEqual(c.eos, 7)
        self.assertEqual(self.cfg().eos, -1)
        self.assertAlmostEqual(c.attention_scale, 16 ** -0.5)
        self.assertEqual((c.rope_theta, c.embedding_multiplier, c.logits_scaling), (10000.0, 1.0, 1.0))

    def test_generation_config_eos(self):
        """generation_config.json's eos_token_id overrides config.json's, as
        tpcoord serve-model reads it; a null or none keeps config.json's."""
        with tempfile.TemporaryDirectory() as d:
            base = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, intermediate_size=128, eos_token_id=2)
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(base, f)
            self.assertEqual(ModelConfig.load(d).eos, 2)
            gen = os.path.join(d, "generation_config.json")
            for content, want in (({"eos_token_id": [5, 2]}, 5), ({"eos_token_id": 7}, 7),
                                  ({"eos_token_id": None}, 2), ({"temperature": 0.7}, 2)):
                with open(gen, "w") as f:
                    json.dump(content, f)
                self.assertEqual(ModelConfig.load(d).eos, want, content)
            for content in ('{"eos_token_id": "x"}', "[1]", "{"):
                with open(gen, "w") as f:
                    f.write(content)
                with self.assertRaises(ConfigError) as cm:
                    ModelConfig.load(d)
                self.assertIn("generation_config.json", str(cm.exception))

    def test_tp_split(self):
        c = self.cfg()
        for world, want in ((3, "tensor parallelism 3 does not divide num_attention_heads 4"),):
            with self.assertRaises(ConfigError) as cm:
                Layout(c, 0, world)
            self.assertIn(want, str(cm.exception))
        with self.assertRaises(ConfigError) as cm:
            Layout(self.cfg(num_attention_heads=12, num_key_value_heads=6, hidden_size=96), 0, 4)
        self.assertIn("tensor parallelism 4 and num_key_value_heads 6", str(cm.exception))
        with self.assertRaises(ConfigError) as cm:
            Layout(self.cfg(intermediate_size=130), 0, 4)
        self.assertIn("tensor parallelism 4 does not divide intermediate_size 130", str(cm.exception))
        # TP 4 over 2 KV heads: ranks 0,1 keep KV head 0; ranks 2,3 KV head 1.
        self.assertEqual([Layout(c, r, 4).kv0 for r in range(4)], [0, 0, 1, 1])
        odd = self.cfg(vocab_size=1001)
        self.assertEqual([(Layout(odd, r, 4).vocab0, Layout(odd, r, 4).vocab1) for r in range(4)],
                         [(0, 251), (251, 502), (502, 753), (753, 1001)])


if __name__ == "__main__":
    unittest.main()
