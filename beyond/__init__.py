"""
beyond/: a library past the lesson, for when the lesson's files are understood: drafters (n-gram
tables, early exit, heads, an EAGLE-style draft), k that adapts, batches, trees, Hugging Face
transformers, the NumPy forward pass, and the tools the exercises and studies run with. No
lesson file imports it (tests/test_layers.py). Module by module: docs/DESIGN.md.
"""
