"""The lesson's exercises: run one with `python -m exercises.ex3_build`, all with `python -m exercises`."""
