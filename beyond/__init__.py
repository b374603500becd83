"""
beyond/: a library past the lesson, for when the lesson's files are understood: drafters (n-gram
tables, early exit, heads, an EAGLE-style draft), k that adapts, batches, trees, Hugging Face
transformers, the NumPy forward pass, and the presets the models are trained to with their
training loop. No lesson file imports it, and it imports nothing of harness/
(tests/test_layers.py). Module by module: docs/DESIGN.md.
"""
