"""
beyond/: a library past the lesson, for when the lesson's files are understood.

The lesson is gpt.py (the model), speculative.py (the decoding loop), numpy_speculative.py
(exercise 3, in NumPy) and train.py, standing on lessonkit/; nothing there imports this
package (tests/test_layers.py, main guards included). The exercises and the studies use it;
it uses neither. Here, each on top of the lesson:

    fast_numpy.py   the same GPT forward pass in NumPy, folded for speed (NumpyGPT): every
                    NumPy forward of beyond/ (not in the student repository)
    backends.py     a trained GPT as torch or as NumpyGPT, by name
    ngram.py        drafters without a model: n-gram tables (of the text, or of the big model)
    early_exit.py   the big model's own first layers as the drafter, sharing its cache
    heads.py        extra heads on the big model's last hidden state (Medusa-style), trained
    adaptive.py     k that adapts while decoding
    batched.py      a batch decoded together, every row accepting its own number of guesses
    batch_curve.py  what batching buys, by batch size and k (exercise 5 and the batch study)
    tree.py         token trees: many guesses per position, one pass (tree_grow, tree_sampling)
    hf.py           to and from Hugging Face transformers
  the models:
    beyond/training.py     the presets' training loop: checkpoints, resuming, Muon, bfloat16, compile
    beyond/presets.py      the named models, their sizes, and the checkpoint cache
  the tools:
    registry.py     every drafter and backend by name (--draft, --target_backend)
    decode.py       the decoding command line (python speculative.py starts it)
    benchmark.py    plain against speculative decoding, every setup
    common.py       what the exercises and the studies share: flags, models, where they write
    report.py       their report's sections
"""
