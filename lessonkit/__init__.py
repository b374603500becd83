"""lessonkit: what the lesson's files stand on, none of it about speculative decoding itself.

corpus       the texts, the shared character vocabulary, encode/decode and batches
machine      devices, threads, a busy machine, timing
waiting      honest waiting: durations, a pace from the first steps, one progress line
checkpoint   checkpoint files, written atomically and read back safely
results_file a run's results file: its command, machine and date beside the numbers
cli          command-line flags from dataclasses, and the decoding arguments' checks
scorer       a model's next-token distributions over a moving window (NumPy, no torch)
stats        what a speculative run counts, round by round
parts        the course's graded parts: their files, points, notebook cells and stubs

Nothing here imports the lesson's files (gpt.py, speculative.py, numpy_speculative.py, train.py).
"""
