"""
classroom/worker.py: the process in which a student's code runs, serving the grader's calls.

    python -m classroom.worker FD [numpy]        (started by sandbox.Sandbox.start)

FD is one end of a socket (wire.py). A worker serves one part of one submission, fresh: never
an output path, the seed, the fixtures' expected values or the checks. `numpy`: exercise 3's
and 8b's worker, with NumPy alone (where no sandbox keeps torch out, importing it fails here).
"""

import importlib
import importlib.abc
import os
import socket
import sys
from pathlib import Path

from classroom import helpers, wire
from lessonkit import parts

BLOCKED = {"torch": "this part runs with NumPy alone: do not import torch",   # 3a-3c, 8b
           "speculative": "this part is yours to build in NumPy: do not use the project's "
                          "decoding (speculative.py)",
           "beyond": "this part is yours to build in NumPy: do not use the rest of beyond/ (its "
                     "fast NumPy forward)",
           "gpt": "this part runs with NumPy alone: do not import gpt.py (exercise 3 reads its "
                  "weights from .npz files)"}
MODULES = {p.file: p.file[:-3].replace("/", ".") for p in parts.PARTS}  # file -> module name
ALLOWED = {"beyond"} | {MODULES[file] for file in parts.NUMPY_ONLY}   # 8b's file too


class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED and name not in ALLOWED:
            raise ImportError(f"import {name}: {BLOCKED[name.split('.')[0]]}")
        return None


def describe(root):
    def one_line(error):
        if isinstance(error, NotImplementedError):         # "not started": its message alone
            return str(error) or "not written yet"
        if isinstance(error, ModuleNotFoundError) and (error.name or "").split(".")[0] in BLOCKED:
            return f"import {error.name}: {BLOCKED[error.name.split('.')[0]]}"
        if isinstance(error, MemoryError):
            return "MemoryError: the code asked for more memory than a check allows"
        return helpers.describe(error, helpers.student_frame(error.__traceback__, root,
                                                             parts.STUDENT_FILES))
    return one_line


class Worker:
    """What the grader may ask of the worker (object #1 on its side of the socket)."""

    def __init__(self):
        self.references, self.gpu = {}, None

    def use_references(self, references):
        """{(module, function): the grader's callable}: applied at every import from now on."""
        self.references = {tuple(key): value for key, value in references}
        self._apply()

    def _apply(self):
        loaded = {m: sys.modules[m] for m in MODULES.values() if m in sys.modules}
        helpers.use_references(loaded, self.references)

    def module(self, name):
        if name not in MODULES.values():
            raise ValueError(f"{name} is not a student module")
        module = importlib.import_module(name)
        self._apply()
        return module

    def model(self, params, config, vocab):
        return self.module("numpy_speculative").Model(params, config, vocab)

    def standin(self, config, vocab, logits_of, memo=False):
        return helpers.standin(self.module("numpy_speculative"), config, vocab, logits_of, memo)

    def helper(self, name, module, function, *args):
        return getattr(helpers, name)(getattr(self.module(module), function), *args)

    def use_gpu(self, gpu):
        """torch.cuda, for this check, is `gpu`: the grader's simulated GPU (helpers.FakeGPU),
        until restore_gpu()."""
        real = helpers.use_gpu(gpu)
        self.gpu = self.gpu or real

    def restore_gpu(self):
        if self.gpu is not None:
            helpers.restore_gpu(self.gpu)
            self.gpu = None


def main(argv):
    if argv[1:] == ["numpy"]:
        sys.meta_path.insert(0, Blocker())     # said at once, sandbox or not
    else:
        import torch                           # noqa: F401 (before anything of the student's:
        torch.set_num_threads(1)               # a worker started ahead pays its import then)
    sock = socket.socket(fileno=int(argv[0]))
    peer = wire.Peer(sock, lends_anything=True)
    peer.describe = describe(Path.cwd().resolve())
    peer.lend(Worker())                                  # #1
    peer.serve_forever()
    sys.stdout.flush()
    os._exit(0)                                          # threads a submission left: ignored
