"""A reader of Hugging Face checkpoints in the safetensors format.

The format (https://huggingface.co/docs/safetensors): an 8-byte
little-endian u64 N, then N bytes of a JSON header mapping each tensor name
to {"dtype", "shape", "data_offsets": [begin, end]} (plus an optional
"__metadata__" entry), then the data buffer; offsets are relative to the
start of that buffer. Tensors are row-major and little-endian.

Files are memory-mapped and only the requested slice of a tensor is copied
out, so a tensor-parallel rank reads (and converts) only its own shard.
"""

import json
import mmap
import os
import struct

import numpy as np
import torch

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"

# The header of a valid file is at most 100 MB (the format's own limit).
MAX_HEADER = 100 << 20

# Element sizes of every dtype of the format, to validate any entry; only
# the floating-point ones in READABLE can be loaded as weights.
ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
            "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
            "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
# File dtype -> (numpy dtype of the stored little-endian bits, torch dtype).
READABLE = {"F32": ("<f4", torch.float32), "F16": ("<f2", torch.float16),
            "BF16": ("<u2", torch.bfloat16)}


class CheckpointError(Exception):
    """A checkpoint that cannot be loaded; the message names the file."""


class TensorInfo:
    __slots__ = ("name", "dtype", "shape", "begin", "end")

    def __init__(self, name, dtype, shape, begin, end):
        self.name, self.dtype, self.shape = name, dtype, tuple(shape)
        self.begin, self.end = begin, end


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _parse_entry(path, name, entry, data_size):
    """Validate one header entry; return its TensorInfo."""
    where = "tensor %s in %s" % (name, path)
    if not isinstance(entry, dict):
        raise CheckpointError("%s: header entry is not an object" % where)
    dtype, shape, offs = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in ITEMSIZE:
        raise CheckpointError("%s: unknown dtype %r" % (where, dtype))
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool)
                                              and d >= 0 for d in shape):
        raise CheckpointError("%s: bad shape %r" % (where, shape))
    if (not isinstance(offs, list) or len(offs) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offs)):
        raise CheckpointError("%s: bad data_offsets %r" % (where, offs))
    begin, end = offs
    if not 0 <= begin <= end:
        raise CheckpointError("%s: bad data_offsets [%d, %d]" % (where, begin, end))
    if end > data_size:
        raise CheckpointError("%s: data ends at byte %d of the data buffer, which holds only %d bytes "
                              "(truncated file?)" % (where, end, data_size))
    want = _numel(shape) * ITEMSIZE[dtype]
    if end - begin != want:
        raise CheckpointError("%s: data_offsets span %d bytes, but %s %s needs %d"
                              % (where, end - begin, dtype, shape, want))
    return TensorInfo(name, dtype, shape, begin, end)


def _read_header(f, path, size):
    """Read and parse the JSON header; return (header dict, data start)."""
    if size < 8:
        raise CheckpointError("%s: file of %d bytes is too short for a safetensors header" % (path, size))
    (n,) = struct.unpack("<Q", f.read(8))
    if n > size - 8 or n > MAX_HEADER:
        raise CheckpointError("%s: header length %d exceeds the file (%d bytes; truncated or not safetensors?)"
                              % (path, n, size))
    raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise CheckpointError("%s: header is not valid JSON: %s" % (path, e)) from None
    if not isinstance(header, dict):
        raise CheckpointError("%s: header is not a JSON object" % path)
    return header, 8 + n


class SafetensorsFile:
    """One memory-mapped .safetensors file with a validated header."""

    def __init__(self, path):
        self.path = path
        self.mm = None
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                header, self.data_start = _read_header(f, path, size)
                self.tensors = {name: _parse_entry(path, name, entry, size - self.data_start)
                                for name, entry in header.items() if name != "__metadata__"}
                self.mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            raise CheckpointError("%s: %s" % (path, e)) from None

    def close(self):
        if self.mm is not None:
            self.mm.close()
            self.mm = None

    def read(self, name, rows=None, cols=None):
        """Copy tensor `name` (or its [rows] x [cols] block of a 2-D tensor)
        out of the file, as a native-order torch tensor of the file's dtype."""
        info = self.tensors[name]
        if info.dtype not in READABLE:
            raise CheckpointError("tensor %s in %s: dtype %s is not a float type this worker loads "
                                  "(F32, F16, BF16)" % (name, self.path, info.dtype))
        np_dtype, torch_dtype = READABLE[info.dtype]
        shape = info.shape
        start = self.data_start + info.begin
        if rows is not None or cols is not None:
            if len(shape) != 2:
                raise CheckpointError("tensor %s in %s: cannot slice a %d-D tensor" % (name, self.path, len(shape)))
            r0, r1 = rows if rows is not None else (0, shape[0])
            start += r0 * shape[1] * ITEMSIZE[info.dtype]
            shape = (r1 - r0, shape[1])
        flat = np.frombuffer(self.mm, dtype=np_dtype, count=_numel(shape), offset=start) if _numel(shape) \
            else np.zeros(0, dtype=np_dtype)
        view = flat.reshape(shape)
        if cols is not None:
            view = view[:, cols[0]:cols[1]]
        # A copy in native byte order: the slice, and only it, leaves the map.
        arr = np.array(view, dtype=np.dtype(np_dtype).newbyteorder("="), copy=True)
        del flat, view
        if torch_dtype is torch.bfloat16:
            return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(arr)


class Checkpoint:
    """The safetensors files of a Hugging Face checkpoint directory:
    model.safetensors, or the shards named by model.safetensors.index.json."""

    def __init__(self, directory):
        self.dir = directory
        self.files = {}
        self.progress = None  # a progress.ShardProgress, told of every read
        index = os.path.join(directory, INDEX_NAME)
        single = os.path.join(directory, SINGLE_NAME)
        if os.path.exists(index):
            self.index_path = index
            self.weight_map = _read_index(index)
        elif os.path.exists(single):
            self.index_path = None
            self.weight_map = None
        else:
            raise CheckpointError("%s: neither %s nor %s found" % (directory, SINGLE_NAME, INDEX_NAME))

    def close(self):
        for f in self.files.values():
            f.close()
        self.files = {}

    def _file(self, fname):
        if fname not in self.files:
            self.files[fname] = SafetensorsFile(os.path.join(self.dir, fname))
        return self.files[fname]

    def locate(self, name):
        """(file, TensorInfo) of tensor `name`, or CheckpointError naming
        the tensor and the file (or index) where it should have been."""
        if self.weight_map is None:
            f = self._file(SINGLE_NAME)
        else:
            fname = self.weight_map.get(name)
            if fname is None:
                raise CheckpointError("tensor %s is missing: not in the weight_map of %s" % (name, self.index_path))
            f = self._file(fname)
        info = f.tensors.get(name)
        if info is None:
            raise CheckpointError("tensor %s is missing from %s" % (name, f.path))
        return f, info

    def shards(self):
        """[(file name, number of tensors it holds)], in file name order."""
        if self.weight_map is None:
            return [(SINGLE_NAME, len(self._file(SINGLE_NAME).tensors))]
        counts = {}
        for fname in self.weight_map.values():
            counts[fname] = counts.get(fname, 0) + 1
        return sorted(counts.items())

    def has(self, name):
        if self.weight_map is not None:
            return name in self.weight_map
        return name in self._file(SINGLE_NAME).tensors

    def read(self, name, shape, rows=None, cols=None):
        """Read tensor `name`, which must have `shape`, or its slice."""
        f, info = self.locate(name)
        if info.shape != tuple(shape):
            raise CheckpointError("tensor %s in %s has shape %s, the config needs %s"
                                  % (name, f.path, list(info.shape), list(shape)))
        t = f.read(name, rows, cols)
        if self.progress is not None:
            self.progress.read(f.path, t.numel() * t.element_size())
        return t


def _read_index(path):
    try:
        with open(path, "rb") as f:
            index = json.loads(f.read().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise CheckpointError("%s: %s" % (path, e)) from None
    wm = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wm, dict):
        raise CheckpointError("%s: no weight_map object" % path)
    for name, fname in wm.items():
        # Shards live in the checkpoint directory itself.
        if (not isinstance(fname, str) or not fname or "/" in fname or "\\" in fname
                or fname in (".", "..")):
            raise CheckpointError("%s: weight_map entry %s names a bad file %r" % (path, name, fname))
    return wm
