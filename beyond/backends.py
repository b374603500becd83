"""
beyond/backends.py: a trained gpt.GPT in either backend, by name: "torch" (the model itself)
or "numpy" (beyond/fast_numpy.py's NumpyGPT: the same logits with a fraction of torch's
per-call overhead, for cheap drafts and targets on a CPU).

    big = with_backend(presets.load_trained("big"), "numpy")

The student repository leaves beyond/fast_numpy.py out (its forward pass would answer
exercise 3a; classroom/project.py's TEACHERS_ONLY): there the numpy backend is the torch
model itself, and the lesson's experiments run the same, only slower.
"""

from gpt import GPT

try:
    from beyond.fast_numpy import NumpyGPT
except ModuleNotFoundError as missing:    # the student repository (see above)
    if missing.name != "beyond.fast_numpy":
        raise
    NumpyGPT = None

BACKENDS = ("torch", "numpy")


def check_backend(backend):
    if backend not in BACKENDS:
        raise ValueError(f"a backend is torch or numpy, not {backend!r}")


def with_backend(model, backend):
    """The same trained model as a torch module or as a NumpyGPT; anything but a gpt.GPT (a
    drafter that is not a GPT, such as the n-gram table, or a NumpyGPT already) comes back as
    it is, and so does every model where NumpyGPT is left out."""
    check_backend(backend)
    if backend == "torch" or NumpyGPT is None or not isinstance(model, GPT):
        return model
    return NumpyGPT(model)


def is_numpy(model):
    """Is `model` a NumpyGPT?"""
    return NumpyGPT is not None and isinstance(model, NumpyGPT)
